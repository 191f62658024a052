"""The local target (builder/targets/local.py): every runtime served by the onnx_runner with the
parameters its runtime writes; ONNX Runtime's variants published beside the served one; its own
options, ``spinning`` and ``queue_policy``."""

from __future__ import annotations

from pathlib import Path

from builder.python_models import model_sources
from builder.python_models.shared.runtimes import Knobs
from builder.spec import Variant
from builder.targets import get
from builder.targets.local import ONNX_RUNNER
from tests.builder.targets.builds import BF16, FP16, FP32, INT8, OV, built, loaded

LOCAL = get("local")


def params(cfg: object) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}  # type: ignore[attr-defined]


def test_it_serves_the_fastest_verified_variant_on_any_runtime(tmp_path: Path) -> None:
    b = built(loaded(tmp_path), {Variant(FP32): 10.0, Variant(FP32, OV): 8.0, Variant(BF16, OV): 2.0})
    assert all(LOCAL.serves(v) for v in b.variants)
    assert LOCAL.choose_served(b, tmp_path / "models.yaml") == Variant(BF16, OV)


def test_onnx_runtimes_variants_are_published_beside_the_served_one(tmp_path: Path) -> None:
    spec = loaded(tmp_path, precisions=["fp32", "fp16", "int8", "bf16"])
    timings = {Variant(FP32): 5.0, Variant(FP16): 6.0, Variant(INT8): None, Variant(BF16, OV): 1.0}
    b = built(spec, timings)
    b.served = LOCAL.choose_served(b, tmp_path / "models.yaml")
    assert LOCAL.published(b) == {"m": Variant(BF16, OV), "m_fp32": Variant(FP32), "m_fp16": Variant(FP16)}
    entries = LOCAL.core_models(b, None)
    assert [e.name for e in entries] == ["m", "m_fp32", "m_fp16"]
    assert all(e.sources == model_sources(ONNX_RUNNER.parent) for e in entries)


def test_each_variant_gets_its_runtimes_own_parameters(tmp_path: Path) -> None:
    spec = loaded(tmp_path, serve={"threads": 2})
    openvino = params(LOCAL.core_config(spec, "m_bf16_openvino", Variant(BF16, OV)))
    assert openvino == {"onnx_file": "model.onnx", "precision": "bf16", "runtime": "openvino",
                        "intra_op_threads": "2", "openvino_cache": "openvino_cache"}  # fmt: skip
    assert params(LOCAL.core_config(spec, "m", Variant(FP32))) == {
        "onnx_file": "model.onnx", "precision": "fp32", "intra_op_threads": "2"
    }  # fmt: skip


def test_spinning_is_a_knob_of_its_own(tmp_path: Path) -> None:
    spec = loaded(tmp_path, serve={"threads": 1}, targets={"local": {"spinning": False}})
    assert LOCAL.knobs(spec) == Knobs(threads=1, spinning=False) and LOCAL.serves_spinning
    assert params(LOCAL.core_config(spec, "m", Variant(FP32)))["allow_spinning"] == "0"
    assert get("cpu").knobs(spec) == Knobs(threads=1) and not get("cpu").serves_spinning


def test_the_queue_policy_is_written_only_where_asked(tmp_path: Path) -> None:
    queue = {"queue": {"max_queue_size": 8}}
    own = LOCAL.core_config(loaded(tmp_path, batching=queue), "m", Variant(FP32))
    assert not own.dynamic_batching.HasField("default_queue_policy") and params(own)["max_queue_size"] == "8"
    asked = loaded(tmp_path, batching=queue, targets={"local": {"queue_policy": True}})
    triton = LOCAL.core_config(asked, "m", Variant(FP32))
    assert (
        triton.dynamic_batching.default_queue_policy.max_queue_size == 8
        and "max_queue_size" not in params(triton)
    )
