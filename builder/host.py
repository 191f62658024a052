"""Facts of the building host that decide what a build makes: the CPU's instruction-set flags.

INT8 and bf16 kernels, and so a variant's accuracy and speed, depend on them: ONNX Runtime's INT8
saturates without VNNI, bfloat16 is emulated without AVX-512 BF16 or AMX. The verify stages key on
``kernel_flags`` (another CPU verifies and times every variant again); the INT8 recipe and the
LLM's dtype read the rest.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from builder.python_models.shared.runtimes.base import BF16_FLAGS as BF16_FLAGS  # re-exported

# The CPU features that decide which kernels a runtime runs.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", *BF16_FLAGS, "amx_int8")


@cache
def cpu_flags() -> frozenset[str]:
    """The first CPU's flags in /proc/cpuinfo (none where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(
        next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    )


def cpu_has_vnni() -> bool:
    """AVX-512 VNNI or AVX-VNNI: ONNX Runtime's INT8 dot products do not saturate there."""
    return bool({"avx512_vnni", "avx_vnni"} & cpu_flags())


def cpu_has_native_bf16() -> bool:
    """AVX-512 BF16 or AMX BF16: bfloat16 arithmetic runs natively; elsewhere vLLM's CPU kernels
    emulate it (2.6x fewer tokens/s than float32 at 16 streams, bench/results/llm_serving.json)."""
    return bool(set(BF16_FLAGS) & cpu_flags())


def kernel_flags() -> list[str]:
    return sorted(set(KERNEL_FLAGS) & cpu_flags())
