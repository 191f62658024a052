"""Configs of stateful models: Triton's sequence batcher on every target, implicit state where the
backend keeps it (cpu, gpu), the states handed to the onnx_sequence model on local."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelSequenceBatching

from builder.configs import read_config, write_config
from builder.python_models import model_sources
from builder.records import ModelBuild, VerificationReport
from builder.server import TritonServer
from builder.spec import ModelSpec, Precision, Variant
from builder.targets import get
from builder.targets.gpu import GpuTarget
from builder.targets.local import ONNX_SEQUENCE
from tests.builder.fixtures.recurrent import entries

FP32 = DataType.Value("TYPE_FP32")
START = ModelSequenceBatching.Control.Kind.Value("CONTROL_SEQUENCE_START")


def model(name: str, **changes: object) -> ModelSpec:
    return ModelSpec.model_validate({**next(e for e in entries() if e["name"] == name), **changes})


def configs(target: str, spec: ModelSpec) -> list[ModelConfig]:
    chosen = get(target)
    cfgs = [chosen.core_config(spec, spec.name, Precision.FP32)]
    if isinstance(chosen, GpuTarget):
        cfgs.append(chosen.fallback_config(spec))
    return cfgs


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_container_targets_keep_the_state_in_triton(target: str, tmp_path: Path) -> None:
    for cfg in configs(target, model("rnn")):
        cfg = read_config(write_config(cfg, tmp_path / cfg.name))  # the text parses back strictly
        sb = cfg.sequence_batching
        assert not cfg.HasField("dynamic_batching") and sb.max_sequence_idle_microseconds == 60_000_000
        assert sb.WhichOneof("strategy_choice") == "oldest" and sb.oldest.max_candidate_sequences == 64
        [state] = sb.state
        assert (state.input_name, state.output_name, state.data_type, list(state.dims)) == (
            "h",
            "hN",
            FP32,
            [8],
        )
        [initial] = state.initial_state
        assert initial.zero_data and list(initial.dims) == [8] and initial.data_type == FP32
        [control] = sb.control_input
        assert control.name == "START" and control.control[0].kind == START
        assert list(control.control[0].int32_false_true) == [0, 1]
        assert [i.name for i in cfg.input] == ["x"] and [o.name for o in cfg.output] == ["y"]


def test_unbatched_states_keep_their_full_dims() -> None:
    [cfg] = configs("cpu", model("vad"))
    assert cfg.max_batch_size == 0 and list(cfg.sequence_batching.state[0].dims) == [2, 1, 8]
    assert not cfg.sequence_batching.control_input  # its graph reads no control


def test_direct_strategy_and_float_controls() -> None:
    seq = {**entries()[1]["sequence"], "strategy": "direct", "controls": {"start": "START", "dtype": "FP32"}}
    [cfg] = configs("cpu", model("rnn", sequence=seq))
    assert cfg.sequence_batching.WhichOneof("strategy_choice") == "direct"
    assert list(cfg.sequence_batching.control_input[0].control[0].fp32_false_true) == [0.0, 1.0]


def test_local_runs_the_sequence_model_which_keeps_the_states() -> None:
    spec = model("vad")
    fp32 = Variant(Precision.FP32)
    build = ModelBuild(spec, {fp32: Path("model.onnx")}, served=fp32)
    build.reports[fp32] = VerificationReport(fp32, True, {}, [])
    [entry] = get("local").core_models(build, None)
    assert entry.sources == model_sources(ONNX_SEQUENCE.parent)  # its runtimes/ too
    assert {"model.py", "contract.py", "runtimes/onnxruntime.py"} <= set(entry.sources)
    sb = entry.config.sequence_batching
    assert not sb.state  # the 2.51 Python backend has no implicit state
    assert sb.WhichOneof("strategy_choice") == "oldest" and sb.oldest.max_candidate_sequences == 64
    states = json.loads(entry.config.parameters["sequence_state"].string_value)
    assert states == [{"input": "state", "output": "stateN", "dtype": "FP32", "dims": [2, 1, 8]}]


def test_a_stateless_model_gets_no_sequence_batcher() -> None:
    plain = {k: v for k, v in entries()[1].items() if k != "sequence"}
    cfg = get("cpu").core_config(ModelSpec.model_validate(plain), "rnn", Precision.FP32)
    assert not cfg.HasField("sequence_batching") and cfg.HasField("dynamic_batching")


def serve_once(repo: Path, log: Path) -> str:
    with pytest.raises(Exception, match="exited"):
        TritonServer(repo, log_path=log).start(timeout=60)
    return log.read_text()


@pytest.mark.integration
@pytest.mark.parametrize(("target", "backend"), [("cpu", "onnxruntime"), ("gpu", "tensorrt")])
def test_real_server_accepts_stateful_configs(target: str, backend: str, tmp_path: Path) -> None:
    """The pip server validates the sequence batcher and its states before it looks for the backend."""
    repo = tmp_path / "repo"
    for name in ("vad", "rnn"):
        for cfg in configs(target, model(name)):
            (write_config(cfg, repo / cfg.name).parent / "1").mkdir()
    text = serve_once(repo, tmp_path / "server.log")
    assert f"unable to find backend library for backend '{backend}'" in text


@pytest.mark.integration
def test_real_server_rejects_an_inconsistent_control(tmp_path: Path) -> None:
    """Control for the test above: a START control without its false/true values fails Triton's check."""
    [cfg] = configs("cpu", model("rnn"))
    cfg.sequence_batching.control_input[0].control[0].ClearField("int32_false_true")
    repo = tmp_path / "repo"
    (write_config(cfg, repo / cfg.name).parent / "1").mkdir()
    text = serve_once(repo, tmp_path / "server.log")
    assert "must specify either 'int32_false_true'" in text
    assert "unable to find backend library" not in text
