"""Real prompts for an LLM load: chat prompts rendered with the model's template, lengths shaped.

The prompt file is a JSON list of ``{"messages": [{"role", "content"}, ...]}`` (as under
``calibration/<llm>/``). With the checkpoint's tokenizer each chat is rendered with its chat
template (without the BOS the server's encoding adds; lengths counted as the server counts them),
and ``input_tokens`` trims the last user message or pads it in front with the other prompts' text
until the rendered prompt has that many tokens (within a token or two: decoding and re-encoding can
merge tokens at the cut). Without a tokenizer the user messages are sent as they are.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clients.perf.errors import PerfError

Chat = list[dict[str, str]]


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int  # rendered length in tokens; -1 without a tokenizer


def load_chats(path: Path) -> list[Chat]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PerfError(f"{path}: cannot read the prompts ({exc})") from exc
    if not isinstance(raw, list) or not raw:
        raise PerfError(f'{path}: expected a non-empty JSON list of {{"messages": [...]}}')
    chats = []
    for i, entry in enumerate(raw):
        messages = entry.get("messages") if isinstance(entry, dict) else None
        if not _is_chat(messages):
            raise PerfError(f"{path}: entry {i}: messages must be a list of {{role, content}} ending "
                            "with a user message")  # fmt: skip
        assert isinstance(messages, list)
        chats.append([dict(m) for m in messages])
    return chats


def _is_chat(messages: Any) -> bool:
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
        and messages[-1]["role"] == "user"
    )


def shape(chats: list[Chat], tokenizer_dir: Path | None, input_tokens: int | None) -> list[Prompt]:
    if tokenizer_dir is None:
        if input_tokens is not None:
            raise PerfError(
                "--input-tokens needs the model's tokenizer: give --checkpoint (the LLM's folder)"
            )
        return [Prompt(chat[-1]["content"], -1) for chat in chats]
    tokenizer = _tokenizer(tokenizer_dir)
    filler = " ".join(chat[-1]["content"] for chat in chats).split()
    return [_render(tokenizer, chat, input_tokens, filler) for chat in chats]


def _tokenizer(folder: Path) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise PerfError("shaping prompts needs transformers in this interpreter") from exc
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise PerfError(f"{folder}: cannot load the tokenizer ({exc})") from exc


def _length(tokenizer: Any, chat: Chat) -> tuple[str, int]:
    """The prompt as sent and its length as the server counts it: the server encodes ``text_input``
    with the tokenizer's special tokens, so a BOS the tokenizer adds itself is left out of the text
    (the template writes one too: sent as rendered, the prompt would start with two)."""
    text = str(tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and tokenizer("")["input_ids"][:1] == [tokenizer.bos_token_id]:
        text = text[len(bos) :]
    return text, len(tokenizer(text)["input_ids"])


def _render(tokenizer: Any, chat: Chat, target: int | None, filler: list[str]) -> Prompt:
    text, n = _length(tokenizer, chat)
    if target is None or n == target:
        return Prompt(text, n)
    content = chat[-1]["content"]
    if n < target:  # pad in front with real text, enough words to overshoot, then trim
        words = filler * math.ceil(2 * (target - n) / max(len(filler), 1) + 1)
        content = " ".join(words[: 2 * (target - n)]) + "\n\n" + content
    ids = tokenizer(content, add_special_tokens=False)["input_ids"]
    overhead = _length(tokenizer, [*chat[:-1], {"role": "user", "content": ""}])[1]
    keep = max(target - overhead, 1)
    cut = [*chat[:-1], {"role": "user", "content": tokenizer.decode(ids[-keep:])}]
    return Prompt(*_length(tokenizer, cut))


def input_data(prompts: list[Prompt], output_tokens: int) -> dict[str, Any]:
    """perf_analyzer ``--input-data``: one entry per prompt, streaming, ``ignore_eos``, greedy."""
    sampling = json.dumps({"max_tokens": output_tokens, "ignore_eos": True, "temperature": 0})
    return {"data": [{"text_input": [p.text], "stream": [True], "sampling_parameters": [sampling],
                      "exclude_input_in_output": [True], "return_num_output_tokens": [True]}
                     for p in prompts]}  # fmt: skip


def openai_input_data(prompts: list[Prompt], output_tokens: int, model: str) -> dict[str, Any]:
    """The same requests for an OpenAI-compatible server (perf_analyzer ``--service-kind openai``,
    ``v1/completions``): the rendered prompt as is, and a running token count in every chunk."""
    return {"data": [{"payload": [{
        "model": model, "prompt": p.text, "max_tokens": output_tokens, "ignore_eos": True,
        "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }]} for p in prompts]}  # fmt: skip
