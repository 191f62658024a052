"""Numbers the manifests take from the spec: /dev/shm size and memory requests.

The Python backend moves every tensor of a Python-backend model through
shared memory (``/dev/shm``). Docker and Kubernetes give a container 64 MiB by
default, which a batch of decoded images overflows. The size here is the sum,
over Python-backend instances, of one full batch of inputs and outputs, doubled
(a request and a response in flight), plus the backend's own 1 MiB region per
instance; the total never goes below ``SHM_FLOOR_BYTES`` and is rounded up to
whole 64 MiB.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from builder.errors import UserError
from builder.spec import InstanceKind, PythonModelSpec, Spec, TensorSpec

MIB = 1024**2
SHM_FLOOR_BYTES = 256 * MIB  # room for ensemble hand-offs and small models
SHM_ROUND_BYTES = 64 * MIB
STUB_REGION_BYTES = 1 * MIB  # the Python backend's shm-default-byte-size
STRING_ELEMENT_BYTES = 1 * MIB  # assumed size of one STRING element (an encoded image, a text)
DYNAMIC_DIM = 512  # a -1 dim of a Python-backend tensor counts as this many elements
BASE_MEMORY_BYTES = 2048 * MIB  # tritonserver, backends and the Python stubs, without models
# A GPU pod builds its plans before serving (the entrypoint): host memory for a CUDA context
# with TensorRT, cuBLAS and cuDNN loaded, and for the builder, which holds the parsed network's
# weights, their copies while it times tactics and the serialized plan of the largest model.
CUDA_CONTEXT_BYTES = 1536 * MIB
PLAN_BUILD_FACTOR = 4  # times the largest ONNX file
PLAN_BUILD_FLOOR_BYTES = 1024 * MIB  # when no built repository is at hand to measure

DTYPE_BYTES = {
    "BOOL": 1,
    "UINT8": 1,
    "INT8": 1,
    "INT16": 2,
    "INT32": 4,
    "INT64": 8,
    "FP16": 2,
    "FP32": 4,
    "FP64": 8,
    "STRING": STRING_ELEMENT_BYTES,
}

OBJECT_STORE = re.compile(r"^(s3|gs)://[^/\s]+(/\S*)?$")


@dataclass(frozen=True)
class Sizing:
    shm_bytes: int
    memory_request_bytes: int
    python_instances: int


def tensor_bytes(tensor: TensorSpec) -> int:
    elements = math.prod(DYNAMIC_DIM if d == -1 else d for d in tensor.dims)
    return elements * DTYPE_BYTES[tensor.dtype.value]


def instance_count(model: PythonModelSpec, gpus: int) -> int:
    """Triton starts ``count`` instances per GPU for KIND_GPU (auto = GPU on the gpu target)."""
    per_device = gpus if model.instances.kind is not InstanceKind.CPU else 1
    return model.instances.count * max(per_device, 1)


def python_instance_shm(model: PythonModelSpec) -> int:
    batch = max(model.max_batch_size, 1)
    io_bytes = sum(tensor_bytes(t) for t in [*model.inputs, *model.outputs])
    return STUB_REGION_BYTES + 2 * batch * io_bytes


def shm_bytes(spec: Spec, gpus: int) -> int:
    total = sum(instance_count(m, gpus) * python_instance_shm(m) for m in spec.python_models)
    total = max(total, SHM_FLOOR_BYTES)
    return math.ceil(total / SHM_ROUND_BYTES) * SHM_ROUND_BYTES


def repository_bytes(repo: Path | None) -> int:
    """Bytes of model files in a built repository (0 when none is given or built)."""
    if repo is None or not repo.is_dir():
        return 0
    return sum(p.stat().st_size for p in repo.rglob("*") if p.is_file())


def plan_build_bytes(repo: Path | None) -> int:
    """Host memory TensorRT's builder needs beyond the CUDA context for the largest model."""
    if repo is None or not repo.is_dir():
        return PLAN_BUILD_FLOOR_BYTES
    largest = max((p.stat().st_size for p in repo.rglob("*.onnx") if p.is_file()), default=0)
    return max(PLAN_BUILD_FLOOR_BYTES, PLAN_BUILD_FACTOR * largest)


def sizing(spec: Spec, gpus: int, repo: Path | None = None) -> Sizing:
    """The memory request is the base plus /dev/shm (it counts against the pod's memory)
    plus the built repository's size, when one exists here to measure; with GPUs, plus what
    building the plans takes (:data:`CUDA_CONTEXT_BYTES`, :func:`plan_build_bytes`)."""
    shm = shm_bytes(spec, gpus)
    memory = BASE_MEMORY_BYTES + shm + repository_bytes(repo)
    if gpus:
        memory += CUDA_CONTEXT_BYTES + plan_build_bytes(repo)
    instances = sum(instance_count(m, gpus) for m in spec.python_models)
    return Sizing(shm_bytes=shm, memory_request_bytes=memory, python_instances=instances)


def mebibytes(n: int) -> str:
    """A Kubernetes quantity in whole MiB, rounded up."""
    return f"{math.ceil(n / MIB)}Mi"


def check_repository_url(url: str | None) -> str | None:
    if url is not None and not OBJECT_STORE.match(url):
        raise UserError(
            f"'{url}' is not an object store URL Triton reads (s3://bucket/path or gs://bucket/path)",
            field="--repository-url",
        )
    return url
