"""The /dev/shm size and memory request come from the spec's Python-backend models."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.deploy import sizing
from builder.errors import UserError
from builder.spec import PythonModelSpec, Spec, load_spec

ROOT = Path(__file__).resolve().parents[3]
MIB = sizing.MIB


def spec_with(python_models: list[dict]) -> Spec:
    core = load_spec(ROOT / "models.yaml").model_dump(mode="json")
    core["python_models"], core["ensembles"] = python_models, []
    return Spec.model_validate(core)


def pre(count: int = 1, kind: str = "cpu", batch: int = 32) -> dict:
    return {
        "name": "pre",
        "path": "x",
        "inputs": [{"name": "IMAGE", "dtype": "STRING", "dims": [1]}],
        "outputs": [{"name": "PIXELS", "dtype": "FP32", "dims": [3, 224, 224]}],
        "max_batch_size": batch,
        "instances": {"count": count, "kind": kind},
    }


def test_one_instance_is_a_batch_of_inputs_and_outputs_twice_plus_the_stub_region() -> None:
    model = PythonModelSpec.model_validate(pre())
    io = sizing.STRING_ELEMENT_BYTES + 3 * 224 * 224 * 4
    assert sizing.python_instance_shm(model) == sizing.STUB_REGION_BYTES + 2 * 32 * io


def test_small_specs_get_the_floor() -> None:
    assert sizing.shm_bytes(spec_with([]), gpus=1) == sizing.SHM_FLOOR_BYTES
    assert sizing.shm_bytes(spec_with([pre(batch=1)]), gpus=1) == sizing.SHM_FLOOR_BYTES


def test_more_instances_need_more_shm_rounded_to_64_mib() -> None:
    total = sizing.shm_bytes(spec_with([pre(count=4)]), gpus=1)
    one = sizing.python_instance_shm(PythonModelSpec.model_validate(pre()))
    assert total >= 4 * one > sizing.SHM_FLOOR_BYTES
    assert total % (64 * MIB) == 0 and total - 4 * one < 64 * MIB


def test_gpu_instances_count_once_per_gpu() -> None:
    cpu = sizing.shm_bytes(spec_with([pre(count=2, kind="cpu")]), gpus=4)
    gpu = sizing.shm_bytes(spec_with([pre(count=2, kind="gpu")]), gpus=4)
    assert gpu > cpu


def test_memory_request_adds_shm_and_a_built_repository(tmp_path: Path) -> None:
    spec = spec_with([])
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"0" * (3 * MIB))
    without = sizing.sizing(spec, 0).memory_request_bytes
    assert without == sizing.BASE_MEMORY_BYTES + sizing.SHM_FLOOR_BYTES
    assert sizing.sizing(spec, 0, tmp_path).memory_request_bytes == without + 3 * MIB


def test_a_gpu_pod_has_room_for_the_cuda_context_and_the_plan_build(tmp_path: Path) -> None:
    # The entrypoint builds plans before serving: TensorRT's builder holds the parsed network,
    # its copies and the serialized plan of the largest model, beside a CUDA context.
    spec = spec_with([])
    cpu = sizing.sizing(spec, 0).memory_request_bytes
    assert sizing.sizing(spec, 1).memory_request_bytes == (
        cpu + sizing.CUDA_CONTEXT_BYTES + sizing.PLAN_BUILD_FLOOR_BYTES
    )
    for name, size in (("a", 100), ("b", 700)):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.onnx").write_bytes(b"0" * (size * MIB))
    built = sizing.sizing(spec, 1, tmp_path).memory_request_bytes
    assert built == cpu + 800 * MIB + sizing.CUDA_CONTEXT_BYTES + sizing.PLAN_BUILD_FACTOR * 700 * MIB
    assert sizing.sizing(spec, 1).memory_request_bytes > 2304 * MIB  # the CPU-derived size before


@pytest.mark.parametrize("url", ["s3://bucket/models", "gs://bucket", "s3://host:9000/bucket/path"])
def test_object_store_urls_pass(url: str) -> None:
    assert sizing.check_repository_url(url) == url


@pytest.mark.parametrize("url", ["http://bucket/models", "/models", "s3://", "gcs://bucket"])
def test_other_repository_urls_name_the_option(url: str) -> None:
    with pytest.raises(UserError, match="--repository-url"):
        sizing.check_repository_url(url)
