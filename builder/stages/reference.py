"""The reference stage: the evaluation inputs and the source model's own outputs on them, the truth
every variant is verified against. A PyTorch source (a factory's module, a checkpoint) is run
itself; a source that is a graph (an .onnx file, a stateful model's loop) is run on ONNX Runtime
as exported. Without evaluation data, seeded random samples at the profile's opt shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from builder.data import load_samples, synthetic_samples
from builder.spec import ModelSpec, OmitsUnset, Variant
from builder.spec.sequence import SequenceSpec
from builder.stages.base import Info, ModelJob, Samples, Stage, StageInputs
from builder.stages.export import EXPORT
from builder.stages.fingerprints import data_fingerprint
from builder.stages.runtimes import open_variant, run_model

INPUTS_FILE = "inputs.npz"
REFERENCE_FILE = "reference.npz"
LOG_FILE = "reference.log"  # what loading and running the source model print


class ReferenceInputs(StageInputs, OmitsUnset):
    STAGE = "reference"
    TOOLS = ("torch", "onnxruntime", "numpy", "transformers")
    CODE = ("builder.stages.reference", "builder.sources")  # and every source kind, which runs the model
    exported_sha256: str
    source_fingerprint: str
    evaluation: str  # fingerprint of the evaluation data and its reader
    sequence: SequenceSpec | None = None  # a stateful model's reference is a loop, states carried

    OMITTED_WHILE_UNSET = ("sequence",)


class Reference(Stage):
    name = ReferenceInputs.STAGE

    def inputs(self, job: ModelJob) -> ReferenceInputs:
        return ReferenceInputs(
            exported_sha256=job.sha256(EXPORT.name), source_fingerprint=job.source_fingerprint(),
            evaluation=_evaluation(job), sequence=job.model.sequence,
        )  # fmt: skip

    def run(self, job: ModelJob, out: Path) -> Info:
        model, ctx = job.model, job.ctx
        exported = job.graph(EXPORT.name)
        if model.evaluation is None:
            inputs = synthetic_samples(model, spec_dir=ctx.spec_dir, graph=exported, log=ctx.log)
        else:
            inputs = load_samples(
                model.evaluation, model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, section="evaluation"
            )
        reference = None
        if model.sequence is None:  # a stateful one is checked against the ONNX loop
            reference = job.source.reference(
                model, inputs, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, log=out / LOG_FILE
            )
        against = "pytorch" if reference is not None else "onnx"
        if reference is None:
            reference = run_model(open_variant(Variant.parse("fp32"), exported), model, inputs)
        np.savez(out / INPUTS_FILE, **inputs)
        np.savez(out / REFERENCE_FILE, **reference)
        return {"samples": len(next(iter(inputs.values()))), "against": against}


def _evaluation(job: ModelJob) -> str:
    """The reference's data in its key: the evaluation data, or synthetic samples at the opt shapes."""
    model: ModelSpec = job.model
    if model.evaluation is not None:
        return data_fingerprint(model.evaluation, job.ctx.spec_dir)
    return f"synthetic:{[model.shape_range(t).opt for t in model.inputs]}"


def load_reference(folder: Path) -> tuple[Samples, Samples]:
    """The evaluation inputs and the reference outputs the stage wrote into ``folder``."""
    inputs = dict(np.load(folder / INPUTS_FILE, allow_pickle=False))
    return inputs, dict(np.load(folder / REFERENCE_FILE, allow_pickle=False))


REFERENCE = Reference()
