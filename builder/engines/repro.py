"""The equivalent ``trtexec`` command, written beside each plan."""

from __future__ import annotations

import shlex
from pathlib import Path

from builder.engines.profiles import shapes_arg
from builder.engines.request import BuildRequest

_HW_COMPAT = {"NONE": "none", "AMPERE_PLUS": "ampere+", "SAME_COMPUTE_CAPABILITY": "sameComputeCapability"}


def trtexec_command(req: BuildRequest, plan: Path) -> list[str]:
    cmd = ["trtexec", f"--onnx={req.onnx}", f"--saveEngine={plan}"]
    if req.strongly_typed:
        cmd.append("--stronglyTyped")
    cmd += [f"--{flag.lower()}" for flag in req.builder_flags]
    if req.calibration_table:
        cmd.append(f"--calib={req.calibration_table}")
    for shapes in req.profiles:  # one --min/opt/maxShapes group per optimization profile
        cmd += [f"--{which}Shapes={shapes_arg(shapes, which)}" for which in ("min", "opt", "max")]
    if req.workspace_mib is not None:
        cmd.append(f"--memPoolSize=workspace:{req.workspace_mib}M")
    cmd.append(f"--builderOptimizationLevel={req.optimization_level}")
    cmd.append(f"--hardwareCompatibilityLevel={_HW_COMPAT[req.hardware_compatibility]}")
    cmd.append(f"--timingCacheFile={req.timing_cache}")
    return cmd


def write_repro(req: BuildRequest, plan: Path, note: str) -> Path:
    path = plan.with_name(plan.name + ".repro.sh")
    body = " \\\n    ".join(shlex.quote(part) for part in trtexec_command(req, plan))
    path.write_text(f"#!/bin/sh\n# {note}\nset -e\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return path
