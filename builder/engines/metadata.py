"""What each plan was built with and for, and whether it still fits this machine.

A plan loads only under the TensorRT version that built it, and (unless built
hardware-compatible) only on the GPU model that built it. The metadata file
beside the plan records both, and the hashes of the ONNX and the build options (with the
code that builds the plan and Polygraphy's version), so a plan that no longer matches is
rebuilt instead of being served.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from builder.cache import arrays_hash
from builder.engines.detect import TensorRTAvailability
from builder.engines.request import BuildRequest
from builder.stages.base import tool_version
from builder.stages.code import code_fingerprint

FORMAT = 1
ENGINE_CODE = ("builder.engines.worker",)  # the build process: it builds, runs and times the plan


@dataclass(frozen=True)
class Fingerprint:
    onnx_sha256: str
    options_sha256: str
    verification_sha256: str = ""  # the tolerance and evaluation data the plan was verified with


@dataclass
class PlanMetadata:
    model: str
    precision: str
    tensorrt_version: str
    gpu_name: str
    compute_capability: str
    hardware_compatibility: str  # HardwareCompatibilityLevel member name
    onnx_sha256: str
    options_sha256: str
    plan_sha256: str
    built_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    verification: dict[str, Any] = field(default_factory=dict)
    profiles_verified: list[int] = field(default_factory=list)  # profiles the evaluation set ran on
    verification_sha256: str = ""
    # the mean over profiles of the time per sample at each one's opt shape, on this GPU
    # (verification["timing"] has each profile's)
    ms_per_sample: float | None = None
    tensorrt_cuda: str = ""  # "cu12" / "cu13": builds of one TensorRT version for two CUDA majors
    profile_count: int = 0  # optimization profiles in the plan (the config lists each)
    format: int = FORMAT


def metadata_path(plan: Path) -> Path:
    return plan.with_name(plan.name + ".json")


def fingerprint(req: BuildRequest) -> Fingerprint:
    """Hashes of the model file and of every option that changes the plan, the code that builds it
    and Polygraphy's version among them."""
    options = {
        "strongly_typed": req.strongly_typed,
        "builder_flags": sorted(req.builder_flags),
        "profiles": [[asdict(r) for r in p] for p in req.profiles],
        "workspace_mib": req.workspace_mib,
        "optimization_level": req.optimization_level,
        "hardware_compatibility": req.hardware_compatibility,
        "calibration_table": sha256(Path(req.calibration_table)) if req.calibration_table else None,
        "format": FORMAT,
        "code": code_fingerprint(ENGINE_CODE),
        "polygraphy": tool_version("polygraphy"),
    }
    blob = json.dumps(options, sort_keys=True, default=list).encode()
    return Fingerprint(sha256(Path(req.onnx)), hashlib.sha256(blob).hexdigest())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_metadata(plan: Path, meta: PlanMetadata) -> Path:
    path = metadata_path(plan)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(meta), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_metadata(plan: Path) -> PlanMetadata | None:
    try:
        raw = json.loads(metadata_path(plan).read_text(encoding="utf-8"))
        return PlanMetadata(**raw)
    except (OSError, ValueError, TypeError):
        return None


def stale_reason(
    plan: Path, availability: TensorRTAvailability, expected: Fingerprint | None = None
) -> str | None:
    """Why ``plan`` must not be served here (None: it fits). Without TensorRT and a GPU
    nothing can be checked, so every plan counts as stale."""
    if not plan.is_file():
        return "no plan"
    meta = read_metadata(plan)
    if meta is None or meta.format != FORMAT:
        return "no readable metadata"
    if meta.plan_sha256 != sha256(plan):
        return "the plan differs from the one its metadata describes"
    if not availability.available or availability.gpu is None:
        return f"cannot check it here: {availability.reason}"
    if meta.tensorrt_version != availability.version:
        return f"built with TensorRT {meta.tensorrt_version}, this machine has {availability.version}"
    if meta.tensorrt_cuda != availability.cuda:
        built, here = meta.tensorrt_cuda or "an unknown CUDA", availability.cuda or "an unknown CUDA"
        return f"built with TensorRT {meta.tensorrt_version} for {built}, this machine's is for {here}"
    hardware = _hardware_mismatch(meta, availability.gpu.name, availability.gpu.compute_capability)
    if hardware:
        return hardware
    if expected is not None and meta.onnx_sha256 != expected.onnx_sha256:
        return "the ONNX model changed"
    if expected is not None and meta.options_sha256 != expected.options_sha256:
        return "the build options changed"
    if expected is not None and expected.verification_sha256 != meta.verification_sha256:
        return "the tolerance or the evaluation data changed: verified again"
    return None


def verification_key(tolerance: object, arrays: Mapping[str, NDArray[Any]]) -> str:
    """Hash of what a plan is verified with: the tolerance (as JSON) and the evaluation arrays."""
    return arrays_hash(arrays, seed=json.dumps(tolerance, sort_keys=True, default=str).encode())


def is_stale(plan: Path, availability: TensorRTAvailability, expected: Fingerprint | None = None) -> bool:
    return stale_reason(plan, availability, expected) is not None


def _hardware_mismatch(meta: PlanMetadata, gpu: str, cc: str) -> str | None:
    built = f"built on {meta.gpu_name} (sm {meta.compute_capability})"
    if meta.hardware_compatibility == "AMPERE_PLUS":
        return None if _cc(cc) >= (8, 0) else f"{built} for Ampere or newer; this GPU is sm {cc}"
    if meta.compute_capability != cc:
        return f"{built}; this GPU is {gpu} (sm {cc})"
    if meta.hardware_compatibility == "NONE" and meta.gpu_name != gpu:
        return f"{built}; this GPU is {gpu}"
    return None


def _cc(value: str) -> tuple[int, int]:
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)
