"""The export stage: what a model's source loads as (``builder.sources``: an .onnx file, a factory,
a Hugging Face checkpoint) written as one self-contained .onnx file; and running a PyTorch source
for the reference.

A source loads as a ``torch.nn.Module`` (exported here), an ``onnx.ModelProto`` (saved) or the path of
an .onnx file (copied). Torch is imported only when a source hands back a module.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx.external_data_helper import uses_external_data

from builder.dtypes import to_numpy
from builder.errors import DataError, SpecError
from builder.progress import quiet
from builder.spec import DType, ModelSpec, Profile, TensorSpec
from builder.stages.base import GRAPH, Info, ModelJob, Stage, StageInputs, artifact

BATCH_AXIS = "batch"
LOG_FILE = "export.log"  # third-party output of the export, in the stage folder
DUMMY_SEED = 0


class ExportInputs(StageInputs):
    STAGE = "export"
    TOOLS = ("torch", "onnx", "transformers")  # transformers: a checkpoint source's model
    CODE = ("builder.stages.export", "builder.sources")  # and every source kind, which loads the model
    source: str
    source_fingerprint: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    max_batch_size: int
    profiles: list[Profile]
    opset: int


class Export(Stage):
    name = ExportInputs.STAGE

    def inputs(self, job: ModelJob) -> ExportInputs:
        m = job.model
        return ExportInputs(
            source=m.source, source_fingerprint=job.source_fingerprint(), inputs=m.inputs, outputs=m.outputs,
            max_batch_size=m.max_batch_size, profiles=m.profiles, opset=m.opset,
        )  # fmt: skip

    def run(self, job: ModelJob, out: Path) -> Info:
        model, ctx = job.model, job.ctx
        load = lambda: job.source.load(model, ctx.spec_dir, ctx.spec_file)  # noqa: E731
        return artifact(write_onnx(model, load, spec_file=ctx.spec_file, out=out / GRAPH))


EXPORT = Export()


def write_onnx(model: ModelSpec, load: Callable[[], object], *, spec_file: Path, out: Path) -> Path:
    """Write what ``load()`` returns (a ``torch.nn.Module``, exported; an ``onnx.ModelProto``, saved;
    the ``Path`` of an .onnx file, copied) as one .onnx file (weights embedded) at ``out``; what
    loading and the exporter print (TracerWarning, weight-loading bars) goes to ``export.log``
    beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with quiet(out.parent / LOG_FILE):
        source = load()
        if isinstance(source, onnx.ModelProto):
            onnx.save(source, out)
        elif isinstance(source, Path):
            _copy_onnx(source, out)
        else:
            _export_torch(model, source, out, spec_file=spec_file)
    _scalars_as_vectors(model, out)
    return out


def _scalars_as_vectors(model: ModelSpec, out: Path) -> None:
    """A model without a batch dimension serves a rank-0 tensor as [1] (``builder.stages.scalars``)."""
    if model.batched:
        return
    from builder.stages.scalars import as_vectors, scalar_names

    graph = onnx.load(out)
    names = scalar_names(model, graph)
    if names:
        onnx.save(as_vectors(graph, names), out)


def torch_reference(
    model: ModelSpec, source: object, inputs: dict[str, NDArray[Any]]
) -> dict[str, NDArray[Any]] | None:
    """Outputs of the PyTorch module by spec output name; None when ``source`` is not a module."""
    if not is_torch_module(source):
        return None
    import torch

    arrays = _ordered_inputs(model, inputs)
    count = len(arrays[0])
    step = model.max_batch_size or count
    module: Any = source
    module.eval()
    chunks: list[list[NDArray[Any]]] = []
    with torch.inference_mode():
        for start in range(0, count, step):
            batch = [torch.from_numpy(np.ascontiguousarray(a[start : start + step])) for a in arrays]
            chunks.append(_as_arrays(model, module(*batch)))
    return {t.name: np.concatenate([c[i] for c in chunks]) for i, t in enumerate(model.outputs)}


def is_torch_module(obj: object) -> bool:
    torch = sys.modules.get("torch")  # a module can only exist if torch was imported
    return torch is not None and isinstance(obj, torch.nn.Module)


def _copy_onnx(src: Path, out: Path) -> None:
    """Copy; a model with external data is loaded whole and saved as one file."""
    header = onnx.load(src, load_external_data=False)
    if any(uses_external_data(t) for t in header.graph.initializer):
        onnx.save(onnx.load(src), out)
    else:
        shutil.copyfile(src, out)


def _export_torch(model: ModelSpec, module: Any, out: Path, *, spec_file: Path) -> None:
    import torch

    module.eval()
    args = tuple(torch.from_numpy(a) for a in _dummy_inputs(model, spec_file=spec_file))
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter is deprecated but still shipped; it needs no onnxscript and names
        # dynamic axes exactly as asked.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        torch.onnx.export(
            module,
            args,
            str(out),
            input_names=[t.name for t in model.inputs],
            output_names=[t.name for t in model.outputs],
            opset_version=model.opset,
            dynamic_axes=dynamic_axes(model),
            do_constant_folding=True,
            dynamo=False,
        )


def dynamic_axes(model: ModelSpec) -> dict[str, dict[int, str]]:
    """Named dynamic axes: ``batch`` when the model batches, ``<tensor>_<axis>`` for every -1 dim."""
    offset = 1 if model.batched else 0
    axes: dict[str, dict[int, str]] = {}
    for t in [*model.inputs, *model.outputs]:
        named = {i + offset: f"{t.name}_{i + offset}" for i, d in enumerate(t.dims) if d == -1}
        if offset:
            named[0] = BATCH_AXIS
        if named:
            axes[t.name] = dict(sorted(named.items()))
    return axes


def _dummy_inputs(model: ModelSpec, *, spec_file: Path) -> list[NDArray[Any]]:
    """Inputs at the first profile's opt shape (opt batch first when the model batches)."""
    rng = np.random.default_rng(DUMMY_SEED)
    batch = [model.opt_batch()] if model.batched else []
    arrays = []
    for i, t in enumerate(model.inputs):
        if t.dtype is DType.STRING:
            raise SpecError(
                "a torch module cannot take STRING tensors",
                file=spec_file,
                model=model.name,
                field=f"inputs[{i}].dtype",
            )
        shape = batch + model.shape_range(t).opt
        arrays.append(_dummy(t, shape, rng))
    return arrays


def _dummy(t: TensorSpec, shape: list[int], rng: np.random.Generator) -> NDArray[Any]:
    if t.dtype.is_float:
        return rng.standard_normal(shape).astype(to_numpy(t.dtype))
    return np.zeros(shape, dtype=to_numpy(t.dtype))


def _ordered_inputs(model: ModelSpec, inputs: dict[str, NDArray[Any]]) -> list[NDArray[Any]]:
    missing = [t.name for t in model.inputs if t.name not in inputs]
    if missing:
        raise DataError(f"no samples for inputs {missing}", model=model.name, field="inputs")
    return [np.asarray(inputs[t.name], dtype=to_numpy(t.dtype)) for t in model.inputs]


def _as_arrays(model: ModelSpec, result: Any) -> list[NDArray[Any]]:
    """The module's outputs (a tensor, a sequence or a mapping) in spec output order."""
    if isinstance(result, dict):
        result = [result[t.name] for t in model.outputs]
    elif not isinstance(result, (list, tuple)):
        result = [result]
    if len(result) != len(model.outputs):
        raise SpecError(
            f"the module returns {len(result)} outputs, the spec declares {len(model.outputs)}",
            model=model.name,
            field="outputs",
        )
    return [r.detach().cpu().numpy() for r in result]
