"""The local-target LLM entry: model.json from EngineArgs, the decoupled config, the model folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from builder.llm.serving import (
    Device,
    EngineArgs,
    Lane,
    SchedulingPolicy,
    ServingSettings,
    local_config,
    model_json,
)
from builder.targets.vllm_python import write_local_model


def test_model_json_on_cpu_sets_kv_bytes_and_no_gpu_share() -> None:
    args = EngineArgs(model="checkpoint", max_model_len=1024, max_num_seqs=4, kv_cache_space_gib=1.5,
                      scheduling_policy=SchedulingPolicy.PRIORITY)  # fmt: skip
    out = model_json(args)
    assert out["model"] == "checkpoint" and out["max_model_len"] == 1024 and out["max_num_seqs"] == 4
    assert out["kv_cache_memory_bytes"] == int(1.5 * (1 << 30))
    assert out["scheduling_policy"] == "priority" and out["disable_log_stats"] is True
    assert "gpu_memory_utilization" not in out and "max_num_batched_tokens" not in out
    json.dumps(out)  # plain JSON types only


def test_model_json_on_gpu_sets_the_memory_share() -> None:
    out = model_json(
        EngineArgs(model="/m", device=Device.GPU, gpu_memory_utilization=0.5, max_num_batched_tokens=512)
    )
    assert out["gpu_memory_utilization"] == 0.5 and out["max_num_batched_tokens"] == 512
    assert "kv_cache_memory_bytes" not in out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs must be at least 1, got 0"),
        ({"max_model_len": -1}, "max_model_len must be at least 1"),
        ({"kv_cache_space_gib": 0}, "kv_cache_space_gib must be > 0"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in"),
        ({"model": ""}, "model"),
    ],
)
def test_bad_engine_args_name_the_field(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"model": "m", **kwargs}
    with pytest.raises(ValueError, match=message):
        EngineArgs(**fields)  # type: ignore[arg-type]


def test_local_config_is_decoupled_python_without_triton_batching() -> None:
    cfg = local_config(
        "chat", ServingSettings(max_waiting=12, execution_env="$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    )
    assert cfg.backend == "python" and cfg.max_batch_size == 0
    assert cfg.model_transaction_policy.decoupled
    assert [g.kind for g in cfg.instance_group] == [ModelInstanceGroup.KIND_CPU] and cfg.instance_group[
        0
    ].count == 1
    names = [i.name for i in cfg.input]
    assert names[:1] == ["text_input"] and {
        "stream",
        "sampling_parameters",
        "exclude_input_in_output",
    } <= set(names)
    assert [o.name for o in cfg.output] == [
        "text_output",
        "finish_reason",
        "cumulative_logprob",
        "logprobs",
        "num_input_tokens",
        "num_output_tokens",
    ]
    assert cfg.parameters["max_waiting_requests"].string_value == "12"
    assert cfg.parameters["EXECUTION_ENV_PATH"].string_value.endswith("env.tar.gz")
    # The text form parses back strictly into the same message.
    assert text_format.Parse(text_format.MessageToString(cfg), ModelConfig()) == cfg


def test_local_config_without_settings_has_only_the_health_check() -> None:
    parameters = local_config("chat").parameters
    assert dict(parameters) == {"ENABLE_VLLM_HEALTH_CHECK": parameters["ENABLE_VLLM_HEALTH_CHECK"]}
    assert parameters["ENABLE_VLLM_HEALTH_CHECK"].string_value == "true"


def test_serving_settings_refuse_a_negative_bound() -> None:
    with pytest.raises(ValueError, match="max_waiting must be >= 0, got -1"):
        ServingSettings(max_waiting=-1)


def test_write_local_model_lays_out_the_folder(tmp_path: Path) -> None:
    version = write_local_model(
        tmp_path / "chat", EngineArgs(model="checkpoint"), ServingSettings(max_waiting=3)
    )
    assert version == tmp_path / "chat" / "1"
    assert (version / "model.py").read_text().startswith('"""Triton Python-backend model (decoupled)')
    assert json.loads((version / "model.json").read_text())["model"] == "checkpoint"
    cfg = text_format.Parse((tmp_path / "chat" / "config.pbtxt").read_text(), ModelConfig())
    assert cfg.name == "chat" and cfg.parameters["max_waiting_requests"].string_value == "3"


def test_lanes_go_to_a_json_parameter_the_model_reads() -> None:
    from builder.python_models.vllm_engine.model import LaneRule, parse_lanes

    lanes = (Lane("long", min_tokens=256, max_num_seqs=2, cpus="1"),)
    cfg = local_config("chat", ServingSettings(lanes=lanes))
    rules = parse_lanes(cfg.parameters["lanes"].string_value)
    assert rules == [LaneRule("default"), LaneRule("long", 256, 2, None, "1")]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Lane("default", 10), "not 'default'"),
        (lambda: Lane("long", 0), "lane 'long': min_tokens must be at least 1, got 0"),
        (lambda: Lane("long", 10, max_num_seqs=0), "lane 'long': max_num_seqs must be at least 1"),
        (lambda: ServingSettings(lanes=(Lane("a", 1), Lane("a", 2))), "lane names must be unique"),
    ],
)
def test_bad_lanes_name_the_lane(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_the_specs_sampling_defaults_reach_requests_that_omit_them() -> None:
    from google.protobuf.json_format import MessageToDict

    from builder.python_models.vllm_engine import model as m
    from builder.spec.llm import Sampling, parse_llm
    from builder.targets.vllm_python import serving_settings
    from tests.builder.llm.test_llm_spec import entry

    spec = parse_llm(entry(sampling={"temperature": 0.2, "top_p": 0.9, "max_tokens": 100}), file="m.yaml")
    assert serving_settings(spec).sampling == Sampling(temperature=0.2, top_p=0.9, max_tokens=100)
    # The model reads its config as tritonserver hands it over: JSON with proto field names.
    config = MessageToDict(local_config("chat", serving_settings(spec)), preserving_proto_field_name=True)
    known = {"temperature", "top_p", "max_tokens", "seed"}
    defaults = m.parse_defaults(m.config_parameter(config, "sampling_defaults", ""), known)
    assert defaults == {"temperature": 0.2, "top_p": 0.9, "max_tokens": 100}
    sent = {"text_input": "Hi", "sampling_parameters": json.dumps({"temperature": 1.0, "max_tokens": None})}
    get = {k: np.array([v], dtype=object) for k, v in sent.items()}.get
    parsed = m.parse_request(get, "", known, defaults)
    assert parsed.sampling == {"temperature": 1.0, "top_p": 0.9, "max_tokens": 100}  # null: the spec's
    assert m.parse_request(get, "", known).sampling == {"temperature": 1.0}  # no defaults: vLLM's


def test_bad_sampling_defaults_name_the_parameter() -> None:
    from builder.python_models.vllm_engine import model as m

    with pytest.raises(ValueError, match=r"parameter sampling_defaults: .*unknown key\(s\) colour"):
        m.parse_defaults('{"colour": 1}', {"temperature"})


def test_local_config_has_the_official_backends_logprob_tensors() -> None:
    from tritonclient.grpc.model_config_pb2 import DataType

    from builder.llm.interface import BACKEND_INPUTS, BACKEND_OUTPUTS

    cfg = local_config("chat")
    inputs = {i.name: (i.data_type, tuple(i.dims), i.optional) for i in cfg.input}
    outputs = {o.name: (o.data_type, tuple(o.dims)) for o in cfg.output}
    for t in BACKEND_INPUTS[1:]:  # text_input is optional here (messages may stand in)
        assert inputs[t.name] == (DataType.Value(t.dtype), t.dims, True)
    for t in BACKEND_OUTPUTS:
        assert outputs[t.name] == (DataType.Value(t.dtype), t.dims)


def test_the_specs_long_lane_reaches_the_model_with_both_thresholds_and_its_kv_size() -> None:
    from google.protobuf.json_format import MessageToDict

    from builder.python_models.vllm_engine import model as m
    from builder.python_models.vllm_engine.utils.lanes import lane_engine_args
    from builder.spec.llm import parse_llm
    from builder.targets.vllm_python import serving_settings
    from tests.builder.llm.test_llm_spec import entry

    lanes = {"min_max_tokens": 300, "min_prompt_tokens": 500, "max_num_seqs": 2, "kv_cache_space_gib": 0.5}
    spec = parse_llm(entry(lanes=lanes), file="m.yaml")
    config = MessageToDict(local_config("chat", serving_settings(spec)), preserving_proto_field_name=True)
    default, long = m.parse_lanes(m.config_parameter(config, "lanes", ""))
    assert (long.min_max_tokens, long.min_prompt_tokens, long.max_num_seqs) == (300, 500, 2)
    engine = lane_engine_args({"max_num_seqs": 8, "kv_cache_memory_bytes": 1 << 30}, long)
    assert engine == {"max_num_seqs": 2, "kv_cache_memory_bytes": 1 << 29}  # the lane's own KV size
    assert lane_engine_args({"max_num_seqs": 8, "kv_cache_memory_bytes": 1 << 30}, default) == {
        "max_num_seqs": 8,
        "kv_cache_memory_bytes": 1 << 30,
    }


def test_model_json_carries_stream_interval_only_off_vllms_default() -> None:
    assert model_json(EngineArgs(model="/m", stream_interval=4))["stream_interval"] == 4
    assert "stream_interval" not in model_json(EngineArgs(model="/m", stream_interval=1))
    assert "stream_interval" not in model_json(EngineArgs(model="/m"))  # the model coalesces instead
    with pytest.raises(ValueError, match="stream_interval"):
        EngineArgs(model="/m", stream_interval=0)


def test_the_specs_streaming_gap_reaches_the_model_as_a_config_parameter() -> None:
    from google.protobuf.json_format import MessageToDict

    from builder.python_models.vllm_engine import model as m
    from builder.spec.llm import STREAM_MIN_GAP_MS, parse_llm
    from builder.targets.vllm_python import serving_settings
    from tests.builder.llm.test_llm_spec import entry

    for raw, seconds in ((entry(), STREAM_MIN_GAP_MS / 1000), (entry(streaming={"min_gap_ms": 30}), 0.03)):
        settings = serving_settings(parse_llm(raw, file="m.yaml"))
        config = MessageToDict(local_config("chat", settings), preserving_proto_field_name=True)
        assert m.parse_min_gap(m.config_parameter(config, "stream_min_gap_ms", "0")) == pytest.approx(seconds)
    assert "stream_min_gap_ms" not in local_config("chat").parameters  # the model's own: 0
    assert "stream_min_gap_ms" not in local_config("chat", ServingSettings(stream_min_gap_ms=0)).parameters
    with pytest.raises(ValueError, match="stream_min_gap_ms must be from 0 to 1000, got 1001"):
        ServingSettings(stream_min_gap_ms=1001)


def test_the_specs_response_budget_reaches_the_model_as_a_config_parameter() -> None:
    from google.protobuf.json_format import MessageToDict

    from builder.python_models.vllm_engine import model as m
    from builder.spec.llm import parse_llm
    from builder.targets.vllm_python import serving_settings
    from tests.builder.llm.test_llm_spec import entry

    for given, rate in ((None, 77.0), (0, 0.0), (400, 400.0)):  # unset: the model's default (77 here)
        raw = entry() if given is None else entry(streaming={"max_responses_per_s": given})
        settings = serving_settings(parse_llm(raw, file="m.yaml"))
        config = MessageToDict(local_config("chat", settings), preserving_proto_field_name=True)
        assert m.parse_max_rate(m.config_parameter(config, "stream_max_responses_per_s", ""), 77.0) == rate
    with pytest.raises(ValueError, match="stream_max_responses_per_s must be >= 0, got -1"):
        ServingSettings(stream_max_responses_per_s=-1)
