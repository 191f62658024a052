"""The memory plan of each LLM: weights + KV cache (``builder.llm.memory``) + the engine's own
overhead, per dtype, on the CPU (the spec's ``kv_cache_space_gib``) and on a GPU of a given size
(``gpu_memory_utilization`` of it, minus the weights, is the KV space vLLM takes).

Sizes come from the exported checkpoint's ``config.json`` (``<llm>/1/checkpoint/`` in the
built repository). The plan holds the spec's limits when the KV space takes
``max_model_len × max_num_seqs`` tokens; when it does not, vLLM still serves (it queues or
preempts sequences), so that is a warning with the cuts that would make it hold. What must fit
is the engine's whole footprint in the device's memory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.llm.memory import GIB, Cut, Lever, MemoryPlan, ModelSizes, plan
from builder.spec.llm import LLMDType, LLMSpec

MIB = 1 << 20
KIB = 1 << 10
CHECKPOINT = Path("1") / "checkpoint"
# Host memory the CPU engine holds beside weights and KV space: tritonserver (~35 MiB), the
# Python-backend stub (~850 MiB: torch, vLLM and the tokenizer imported), vLLM's engine-core and
# worker processes (~750 and ~1000 MiB beyond weights and KV: torch, vLLM, a
# max_num_batched_tokens step's activations). RSS summed, so the shared torch libraries count once
# per process. Measured here (smollm2 float32, vLLM 0.32 CPU, 16 x 256-token streams): tree RSS
# 4202 MiB minus 513 MiB weights minus 1024 MiB KV space. A constant, not per parameter: one
# 135 M-parameter model cannot separate the two.
CPU_ENGINE_BASE = 2650 * MIB


@dataclass
class LLMRow:
    llm: str
    dtype: str
    device: str  # cpu | gpu
    parameters: int
    weights: int
    kv_bytes_per_token: int
    max_model_len: int
    max_num_seqs: int
    kv_at_limits: int  # max_model_len × max_num_seqs tokens
    kv_space: int  # what the engine is configured to take for the KV cache
    sequences_that_fit: int  # full-length sequences the KV space holds
    overhead: int  # the engine's own memory (cpu: CPU_ENGINE_BASE; gpu: not counted)
    total: int  # weights + KV space + overhead: what the device must hold
    cuts: list[str] = field(default_factory=list)  # what to cut first, when the limits do not fit

    @property
    def limits_fit(self) -> bool:
        return self.kv_at_limits <= self.kv_space

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "limits_fit": self.limits_fit}


def checkpoint_sizes(repo: Path, llm: LLMSpec) -> ModelSizes:
    """The sizes of the checkpoint the build exported for ``llm``."""
    folder = repo / llm.name / CHECKPOINT
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{llm.name}: no {folder / 'config.json'} in the built repository")
    return ModelSizes.from_checkpoint(folder)


def llm_rows(llm: LLMSpec, sizes: ModelSizes, gpu_memory: int | None = None) -> list[LLMRow]:
    """The CPU row (the spec's dtype, auto's widest candidate, and KV space) and, given a GPU size,
    the GPU section's row."""
    cpu = plan(
        sizes,
        dtype_bytes=llm.widest_dtype.bytes,
        max_model_len=llm.max_model_len,
        max_num_seqs=llm.max_num_seqs,
        kv_space_bytes=int(llm.kv_cache_space_gib * GIB),
    )
    rows = [_row(llm, llm.widest_dtype, "cpu", cpu, CPU_ENGINE_BASE)]
    if gpu_memory is not None:
        weights = sizes.parameters * llm.gpu.dtype.bytes
        gpu = plan(
            sizes,
            dtype_bytes=llm.gpu.dtype.bytes,
            max_model_len=llm.max_model_len,
            max_num_seqs=llm.gpu_max_num_seqs,
            kv_space_bytes=max(0, int(llm.gpu.gpu_memory_utilization * gpu_memory) - weights),
        )
        rows.append(_row(llm, llm.gpu.dtype, "gpu", gpu, 0, gpu_memory))
    return rows


def _row(
    llm: LLMSpec, dtype: LLMDType, device: str, p: MemoryPlan, overhead: int, gpu_memory: int = 0
) -> LLMRow:
    return LLMRow(
        llm=llm.name, dtype=dtype.value, device=device, parameters=p.parameters, weights=p.weights_bytes,
        kv_bytes_per_token=p.kv_bytes_per_token, max_model_len=p.max_model_len,
        max_num_seqs=p.max_num_seqs, kv_at_limits=p.kv_bytes_at_limits, kv_space=p.kv_space_bytes,
        sequences_that_fit=p.sequences_that_fit, overhead=overhead,
        total=p.weights_bytes + p.kv_space_bytes + overhead,
        cuts=[_cut_text(llm, dtype, device, p, c, gpu_memory) for c in p.cuts],
    )  # fmt: skip


def _cut_text(llm: LLMSpec, dtype: LLMDType, device: str, p: MemoryPlan, cut: Cut, gpu_memory: int) -> str:
    lever, value, note = cut.lever, cut.value, cut.note
    if lever is Lever.MAX_MODEL_LEN:
        return f"max_model_len {p.max_model_len} -> {value} ({note})"
    if lever is Lever.MAX_NUM_SEQS:
        return f"max_num_seqs {p.max_num_seqs} -> {value} ({note})"
    if lever is Lever.DTYPE:
        return f"dtype {dtype.value} -> {value} ({note})"
    if device == "gpu":  # the GPU's KV space is set through the share of its memory vLLM takes
        need = p.weights_bytes + p.kv_bytes_at_limits
        if need <= gpu_memory:
            share = f"{llm.gpu.gpu_memory_utilization} -> {need / gpu_memory:.2f}"
            return f"gpu.gpu_memory_utilization {share} (holds the limits)"
        return f"a GPU of {need / GIB / 0.9:.1f} GiB at 0.9 utilization (holds the limits)"
    return f"kv_cache_space_gib {llm.kv_cache_space_gib} -> {value} ({note})"


def advise_llms(rows: list[LLMRow], host: int) -> list[str]:
    """One verdict per row (the footprint against the device), then the limits against the KV space."""
    out = []
    for r in rows:
        head = f"{r.llm} {r.dtype} {r.device}:"
        if r.device == "cpu":
            fits = r.total <= host
            where = f"plan {r.total / GIB:.2f} GiB of host {host / GIB:.2f} GiB"
            over = f"DOES NOT FIT (over by {(r.total - host) / GIB:.2f} GiB)"
            line = f"{head} {where} - " + ("fits" if fits else over)
            room = (host - r.weights - r.overhead) / GIB
            if not fits:
                line += f"; cut first: kv_cache_space_gib -> {room:.2f}" if room > 0 else "; cut first: dtype"
        else:
            fits = r.kv_space > 0 and r.sequences_that_fit >= 1
            line = f"{head} KV space {r.kv_space / GIB:.2f} GiB (weights {r.weights / GIB:.2f} GiB) - " + (
                "fits" if fits else "DOES NOT FIT (not one full-length sequence)"
            )
        out.append(line)
        limits = f"{r.max_model_len} x {r.max_num_seqs} tokens need {r.kv_at_limits / GIB:.3f} GiB of KV"
        if r.limits_fit:
            out.append(f"  {limits}: held ({r.sequences_that_fit} full-length sequences fit)")
        else:
            out.append(
                f"  {limits}: only {r.sequences_that_fit} of {r.max_num_seqs} full-length sequences fit "
                "(vLLM queues or preempts the rest); cut first:"
            )
            out += [f"    - {c}" for c in r.cuts]
    return out


def llm_table(rows: list[LLMRow]) -> str:
    head = ["llm", "dtype", "device", "params", "weights MiB", "KV KiB/token", "KV at limits MiB",
            "KV space MiB", "full-length seqs fit", "overhead MiB", "total MiB"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.llm} | {r.dtype} | {r.device} | {r.parameters:,} | {r.weights / MIB:.1f} | "
            f"{r.kv_bytes_per_token / KIB:.1f} | {r.kv_at_limits / MIB:.1f} ({r.max_model_len} x "
            f"{r.max_num_seqs}) | {r.kv_space / MIB:.1f} | {r.sequences_that_fit} of {r.max_num_seqs} | "
            f"{r.overhead / MIB:.0f} | {r.total / MIB:.1f} |"
        )
    return "\n".join(lines) + "\n"
