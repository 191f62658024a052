"""LoRA adapters served as Triton's vLLM backend serves them, on a real tritonserver: the zoo's LLM
built with a PEFT adapter (``lora:`` in its spec entry) through the build's own stages, and each
answer held against transformers + peft's greedy decoding of the same chat.

One small server of its own: ``enable_lora`` wraps every linear layer of the engine (measured
here: the same greedy tokens without an adapter, about 9 % slower for 64 tokens), so the session's
shared LLM server, whose speed other tests measure, stays without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from builder.cache import StageCache
from builder.llm.build import build_llm
from builder.python_models.vllm_engine.contract import MULTI_LORA_FILE
from builder.records import BuildContext, LLMBuild
from builder.repository import Repository, write_and_publish
from builder.server import TritonServer
from builder.spec import load_spec
from builder.spec.llm import LLMSpec
from builder.targets import TARGETS
from clients.errors import InvalidInput
from clients.generator import Generator
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine
from tests.conftest import ROOT, test_cache_dir
from tests.integration.fixtures.llm_repo import MODEL, START_TIMEOUT, checkpoint
from tests.integration.fixtures.lora_adapter import RANK, make_adapter

pytestmark = pytest.mark.integration

ADAPTER = "sea"
CHAT = [{"role": "user", "content": "Write one sentence about the sea."}]
TOKENS = 16


@pytest.fixture(scope="module")
def adapter() -> Path:
    return make_adapter(checkpoint(), test_cache_dir() / "lora" / f"{MODEL}-{ADAPTER}-r{RANK}")


@pytest.fixture(scope="module")
def built(adapter: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LLMBuild]:
    """The zoo's LLM with the adapter, built by the build's stages (the zoo's cached ones and
    the LoRA check) into a local-target repository."""
    spec_file = ROOT / "models.yaml"
    spec = load_spec(spec_file)
    zoo = next(m for m in spec.llms if m.name == MODEL)
    # float32, the dtype of the reference below: equal greedy tokens need the same arithmetic.
    lora = {"adapters": {ADAPTER: str(adapter)}, "max_lora_rank": RANK}
    llm = LLMSpec.model_validate(zoo.model_dump(mode="json") | {"dtype": "float32", "lora": lora})
    spec = spec.model_copy(update={"models": [], "python_models": [], "ensembles": [], "llms": [llm]})
    ctx = BuildContext(spec, spec_file, ROOT, StageCache(test_cache_dir(), lambda _: None), lambda _: None)
    build = build_llm(llm, ctx)
    repo = tmp_path_factory.mktemp("lora") / "model_repository"
    write_and_publish(Repository([], ctx, TARGETS["local"], None, [build]), repo)
    return repo, build


@pytest.fixture(scope="module")
def server(built: tuple[Path, LLMBuild]) -> Iterator[TritonServer]:
    repo, _ = built
    triton = TritonServer(repo, log_path=repo.parent / "server.log", exit_timeout_s=15)
    triton.start(timeout=START_TIMEOUT)
    try:
        yield triton
    finally:
        triton.stop()


@pytest.fixture(scope="module")
def reference(built: tuple[Path, LLMBuild], adapter: Path) -> dict[str, str]:
    """transformers' greedy answers to CHAT, of the base model and with the adapter (peft)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = str(built[1].checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)

    def greedy(m: torch.nn.Module) -> str:
        out = m.generate(input_ids=ids, max_new_tokens=TOKENS, do_sample=False)  # type: ignore[operator]
        return str(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))

    base = greedy(model)
    return {"base": base, ADAPTER: greedy(PeftModel.from_pretrained(model, str(adapter)))}


def test_the_repository_has_the_adapter_as_triton_vllm_backend_reads_it(built: tuple[Path, LLMBuild]) -> None:
    repo, build = built
    version = repo / MODEL / "1"
    assert (version / MULTI_LORA_FILE).read_text().strip().startswith("{")
    assert (version / "loras" / ADAPTER / "adapter_config.json").is_file()
    assert [s.name for s in build.stages] == ["llm-export", "llm-check", "llm-lora", "llm-verify"]


def test_lora_name_applies_the_adapter_and_matches_peft(
    server: TritonServer, reference: dict[str, str]
) -> None:
    assert reference[ADAPTER] != reference["base"]  # the adapter changes the greedy answer
    with Generator(server.grpc_url, MODEL) as gen:
        tuned = gen.generate(CHAT, max_tokens=TOKENS, lora_name=ADAPTER)
        base = gen.generate(CHAT, max_tokens=TOKENS)
    assert tuned.text == reference[ADAPTER]
    assert base.text == reference["base"]


def test_lora_name_over_http_and_streamed_too(server: TritonServer, reference: dict[str, str]) -> None:
    with Generator(server.http_url, MODEL) as gen:
        assert gen.generate(CHAT, max_tokens=TOKENS, lora_name=ADAPTER).text == reference[ADAPTER]
    with Generator(server.grpc_url, MODEL) as gen:
        assert "".join(gen.stream(CHAT, max_tokens=TOKENS, lora_name=ADAPTER)) == reference[ADAPTER]


def test_lora_name_to_a_model_without_adapters_is_refused(llm_triton: TritonServer) -> None:
    """The session's shared LLM server has no adapters (enable_lora off)."""
    with Generator(llm_triton.grpc_url, MODEL) as gen, pytest.raises(InvalidInput) as caught:
        gen.generate(CHAT, max_tokens=4, lora_name=ADAPTER)
    assert str(caught.value).endswith("LoRA feature is not enabled.")


def test_an_unknown_lora_name_is_refused_naming_the_adapters(server: TritonServer) -> None:
    with Generator(server.grpc_url, MODEL) as gen, pytest.raises(InvalidInput) as caught:
        gen.generate(CHAT, max_tokens=TOKENS, lora_name="nope")
    assert str(caught.value).endswith(f"LoRA nope is not supported, we currently support ['{ADAPTER}']")


def test_openai_sdk_reaches_the_adapter_by_its_model_name(
    server: TritonServer, reference: dict[str, str]
) -> None:
    with OpenAIServer(Settings(), TritonEngine(server.grpc_url), port=0) as endpoint:
        client = openai.OpenAI(base_url=endpoint.url, api_key="unused", max_retries=0, timeout=120)
        listed = {m.id: m.model_dump() for m in client.models.list()}
        reply = client.chat.completions.create(
            model=ADAPTER, messages=CHAT, max_tokens=TOKENS, temperature=0,  # type: ignore[arg-type]
        )  # fmt: skip
    assert set(listed) == {MODEL, ADAPTER} and listed[ADAPTER]["parent"] == MODEL
    assert reply.model == ADAPTER and reply.choices[0].message.content == reference[ADAPTER]
