"""What an LLM with LoRA adapters becomes on each target: the adapters in the version folder,
``multi_lora.json`` as Triton's vLLM backend reads it (relative for the local model, which
resolves it against the version folder; absolute under the mount for that backend, which hands
the paths to vLLM as they are), LoRA engine arguments, and the ``lora_names`` parameter; and
nothing of it without adapters."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from builder.llm.gpu import DEFAULT_MOUNT
from builder.python_models.vllm_engine.contract import ENGINE_ARGS_FILE, LORA_NAMES, MULTI_LORA_FILE
from builder.records import LLMBuild, LLMVerdict
from builder.spec.llm import LLMDType, LLMSpec, parse_llm
from builder.targets import TARGETS
from builder.targets.writer import write_entry

TOLERANCE = {"min_agreement": 0.5, "max_logprob_gap": 1.0}


def spec(lora: dict[str, object] | None) -> LLMSpec:
    tolerances = {"bfloat16": TOLERANCE, "float16": TOLERANCE}
    raw: dict[str, object] = {
        "name": "tiny_llm", "source": "ckpt", "dtype": "bfloat16", "gpu": {"dtype": "float16"},
        "evaluation": {"prompts": "calibration/p.json", "tolerances": tolerances},
    }  # fmt: skip
    if lora is not None:
        raw["lora"] = lora
    return parse_llm(raw, file="models.yaml")


def build(tmp_path: Path, lora: dict[str, object] | None) -> LLMBuild:
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    adapters = {}
    for name in (lora or {}).get("adapters", {}):  # type: ignore[attr-defined]
        folder = tmp_path / "cache" / name
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
        adapters[name] = folder
    verdict = LLMVerdict(LLMDType.BFLOAT16, True, 1.0, 0.0, ())
    return LLMBuild(spec(lora), checkpoint, verdict, [], adapters)


LORA = {"adapters": {"sky": "a/sky", "sea": "a/sea"}, "max_lora_rank": 32}


@pytest.mark.parametrize("target", ["local", "cpu"])
def test_the_vllm_engine_model_gets_relative_adapter_folders(tmp_path: Path, target: str) -> None:
    (entry,) = TARGETS[target].llm_models(build(tmp_path, LORA))
    assert json.loads(entry.texts[MULTI_LORA_FILE]) == {"sea": "loras/sea", "sky": "loras/sky"}
    assert (
        entry.artifacts["loras/sea/adapter_config.json"] == tmp_path / "cache" / "sea" / "adapter_config.json"
    )
    args = json.loads(entry.texts[ENGINE_ARGS_FILE])
    assert (args["enable_lora"], args["max_lora_rank"], args["max_loras"]) == (True, 32, 2)
    assert json.loads(entry.config.parameters[LORA_NAMES].string_value) == ["sea", "sky"]


def test_triton_vllm_backend_gets_absolute_adapter_folders_under_the_mount(tmp_path: Path) -> None:
    (entry,) = TARGETS["gpu"].llm_models(build(tmp_path, {**LORA, "max_loras": 1}))
    version = DEFAULT_MOUNT / "tiny_llm" / "1"
    assert json.loads(entry.texts[MULTI_LORA_FILE]) == {
        "sea": str(version / "loras" / "sea"), "sky": str(version / "loras" / "sky")
    }  # fmt: skip
    assert "loras/sky/adapter_config.json" in entry.artifacts
    args = json.loads(entry.texts[ENGINE_ARGS_FILE])
    assert (args["enable_lora"], args["max_lora_rank"], args["max_loras"]) == (True, 32, 1)
    assert entry.config.backend == "vllm" and LORA_NAMES in entry.config.parameters
    # Requests name the adapter in sampling_parameters, as that backend reads it: no new input.
    assert "lora_name" not in {i.name for i in entry.config.input}


@pytest.mark.parametrize("target", ["local", "cpu", "gpu"])
def test_without_adapters_nothing_of_lora_is_written(tmp_path: Path, target: str) -> None:
    (entry,) = TARGETS[target].llm_models(build(tmp_path, None))
    assert MULTI_LORA_FILE not in entry.texts and LORA_NAMES not in entry.config.parameters
    assert "enable_lora" not in json.loads(entry.texts[ENGINE_ARGS_FILE])
    assert not any(name.startswith("loras/") for name in entry.artifacts)


@pytest.mark.integration
def test_the_gpu_entry_as_written_holds_the_adapters_and_the_real_server_accepts_its_config(
    tmp_path: Path,
) -> None:
    from builder.server import TritonServer

    repo = tmp_path / "repo"
    (entry,) = TARGETS["gpu"].llm_models(build(tmp_path, LORA))
    version = write_entry(entry, repo)  # as builder/repository.py writes it
    assert (version / "loras" / "sea" / "adapter_config.json").is_file()
    assert json.loads((version / MULTI_LORA_FILE).read_text())["sky"] == str(
        DEFAULT_MOUNT / "tiny_llm/1/loras/sky"
    )
    server = TritonServer(repo, extra_args=["--exit-on-error=false", "--strict-readiness=false"])
    with server:
        request = urllib.request.Request(f"{server.http_url}/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            index = {m["name"]: m for m in json.load(response)}
    # Triton's own checks pass; it stops only at the 'vllm' backend this machine does not have.
    assert "unable to find backend library for backend 'vllm'" in index["tiny_llm"]["reason"], index
