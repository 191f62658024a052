"""GPU-host entries for Triton's vLLM backend: the config round-trips through text_format, the
engine arguments are the CPU engine's with the spec's gpu section and vLLM's own, and the real
tritonserver accepts the entry the gpu target writes (it stops only at the missing 'vllm' backend,
which a CPU machine does not have)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from builder.llm.gpu import DEFAULT_MOUNT, gpu_config, gpu_engine_args
from builder.llm.serving import Device, engine_args, model_json
from builder.python_models.vllm_engine.contract import ENGINE_ARGS_FILE
from builder.records import LLMBuild, LLMVerdict
from builder.spec.llm import LLMDType, LLMSpec, parse_llm
from builder.targets import TARGETS
from builder.targets.writer import write_entry
from tests.builder.llm.needs import NEEDS_VLLM


def spec() -> LLMSpec:
    return parse_llm(
        {
            "name": "smollm2",
            "source": "zoo.smollm2:gguf",
            "max_model_len": 4096,
            "max_num_seqs": 8,
            "dtype": "bfloat16",
            "scheduling_policy": "priority",
            "evaluation": {
                "prompts": "calibration/smollm2/eval.json",
                "tolerances": {
                    "bfloat16": {"min_agreement": 0.5, "max_logprob_gap": 0.5},
                    "float16": {"min_agreement": 0.5, "max_logprob_gap": 0.5},
                },
            },
            "gpu": {
                "dtype": "float16",
                "tensor_parallel_size": 2,
                "gpu_memory_utilization": 0.85,
                "max_num_seqs": 64,
            },
        },
        file="models.yaml",
    )


def test_config_round_trips_through_text_format() -> None:
    cfg = gpu_config(spec())
    parsed = text_format.Parse(text_format.MessageToString(cfg), ModelConfig())
    assert parsed == cfg
    assert parsed.backend == "vllm" and parsed.max_batch_size == 0
    assert parsed.model_transaction_policy.decoupled
    assert [g.kind for g in parsed.instance_group] == [ModelInstanceGroup.KIND_MODEL]
    inputs = {i.name: i for i in parsed.input}
    assert not inputs["text_input"].optional and inputs["stream"].optional
    assert {"sampling_parameters", "exclude_input_in_output", "return_num_output_tokens"} <= set(inputs)
    assert {o.name for o in parsed.output} >= {"text_output", "finish_reason", "num_input_tokens"}
    assert parsed.parameters["REPORT_CUSTOM_METRICS"].string_value == "true"
    assert parsed.parameters["ENABLE_VLLM_HEALTH_CHECK"].string_value == "true"  # dead engine: unloaded


def gpu_model_json(spec: LLMSpec) -> dict[str, object]:
    return model_json(gpu_engine_args(spec))


def test_model_json_takes_the_gpu_section() -> None:
    args = gpu_model_json(spec())
    assert args["model"] == f"{DEFAULT_MOUNT}/smollm2/1/checkpoint"
    assert (args["dtype"], args["tensor_parallel_size"], args["gpu_memory_utilization"]) == (
        "float16",
        2,
        0.85,
    )
    assert (args["max_model_len"], args["max_num_seqs"], args["scheduling_policy"]) == (4096, 64, "priority")
    assert args["disable_log_stats"] is False  # the backend's custom metrics need vLLM's stats
    assert "enforce_eager" not in args and "seed" not in args  # vLLM's own: CUDA graphs on a GPU
    assert "kv_cache_memory_bytes" not in args  # the GPU's share instead


def test_the_gpu_engine_is_the_cpu_engine_with_the_gpu_section() -> None:
    cpu, gpu = engine_args(spec(), LLMDType.FLOAT16), gpu_engine_args(spec())
    assert gpu.device is Device.GPU and cpu.device is Device.CPU
    same = {"model", "device", "max_num_seqs", "gpu_memory_utilization", "tensor_parallel_size",
            "enforce_eager", "seed", "disable_log_stats"}  # fmt: skip
    for field in dataclasses.fields(cpu):
        if field.name not in same:
            assert getattr(gpu, field.name) == getattr(cpu, field.name), field.name


@NEEDS_VLLM
def test_model_json_keys_are_vllm_engine_arguments() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    assert set(gpu_model_json(spec())) <= fields


def write_gpu_entry(repo: Path) -> Path:
    """The gpu target's entry for ``spec()``, written as the repository writes it; its folder."""
    checkpoint = repo.parent / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    verdict = LLMVerdict(LLMDType.BFLOAT16, True, 1.0, 0.0, ())
    (entry,) = TARGETS["gpu"].llm_models(LLMBuild(spec(), checkpoint, verdict, []))
    write_entry(entry, repo)
    return repo / entry.name


def test_the_gpu_targets_entry_as_written(tmp_path: Path) -> None:
    entry = write_gpu_entry(tmp_path / "repo")
    assert text_format.Parse((entry / "config.pbtxt").read_text(), ModelConfig()) == gpu_config(spec())
    args = json.loads((entry / "1" / ENGINE_ARGS_FILE).read_text())
    assert args == gpu_model_json(spec())
    assert (entry / "1" / "checkpoint" / "config.json").is_file()
    assert sorted(p.name for p in (entry / "1").iterdir()) == ["checkpoint", ENGINE_ARGS_FILE]  # no code


@pytest.mark.integration
def test_real_server_accepts_the_config(tmp_path: Path) -> None:
    from builder.server import TritonServer

    write_gpu_entry(tmp_path / "repo")
    server = TritonServer(tmp_path / "repo", extra_args=["--exit-on-error=false", "--strict-readiness=false"])
    with server:
        request = urllib.request.Request(f"{server.http_url}/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            index = {m["name"]: m for m in json.load(response)}
    assert index["smollm2"]["state"] == "UNAVAILABLE", index
    assert "unable to find backend library for backend 'vllm'" in index["smollm2"]["reason"], index


def test_gpu_dtype_defaults_to_float16_which_every_supported_gpu_runs() -> None:
    # vLLM refuses bfloat16 below compute capability 8.0 and the serving image claims 7.5+.
    raw = {
        "name": "smollm2",
        "source": "zoo.smollm2:gguf",
        "dtype": "bfloat16",
        "evaluation": {
            "prompts": "calibration/smollm2/eval.json",
            "tolerances": {
                "bfloat16": {"min_agreement": 0.5, "max_logprob_gap": 0.5},
                "float16": {"min_agreement": 0.5, "max_logprob_gap": 0.5},
            },
        },
    }
    assert gpu_model_json(parse_llm(raw, file="models.yaml"))["dtype"] == "float16"
