"""Perf prompts are the token sequences the server will run: a chat template's BOS is not doubled
by the server's own encoding of ``text_input``, and the lengths are counted as the server counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.cache import DONE
from clients.perf.llm_prompts import shape
from tests.conftest import test_cache_dir

CHATS = [[{"role": "user", "content": "what is the capital of france"}], [{"role": "user", "content": "hi"}]]


def bos_adding_tokenizer(folder: Path) -> Path:
    """A tokenizer that adds a BOS when encoding, as Llama's does, with a template that writes one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "<s>", "user", ":", "assistant", "what", "is", "the", "capital", "of", "france", "hi"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="[UNK]")
    fast.chat_template = (
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}assistant :"
    )
    fast.save_pretrained(str(folder))
    return folder


def zoo_tokenizer() -> Path | None:
    found = sorted(test_cache_dir().glob("smollm2/llm-export/*/checkpoint/tokenizer_config.json"))
    done = [f for f in found if (f.parents[1] / DONE).is_file()]  # not another build's export in progress
    return done[0].parent if done else None


@pytest.mark.parametrize("source", ["made here", "zoo"])
def test_the_server_encodes_each_prompt_with_one_bos_and_the_counted_length(
    source: str, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    folder = bos_adding_tokenizer(tmp_path / "tok") if source == "made here" else zoo_tokenizer()
    if folder is None:
        pytest.skip("the zoo's checkpoint is not built under .tritonforge")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    bos = tokenizer.bos_token_id
    for chat, prompt in zip(CHATS, shape(CHATS, folder, None), strict=True):
        rendered = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        template_ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        server_ids = tokenizer(prompt.text)["input_ids"]  # as the server encodes text_input
        assert server_ids == template_ids and prompt.tokens == len(server_ids)
    for prompt in shape(CHATS, folder, 12):
        server_ids = tokenizer(prompt.text)["input_ids"]
        assert server_ids[:2] != [bos, bos] and prompt.tokens == len(server_ids)
