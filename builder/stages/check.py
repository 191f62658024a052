"""The check stage: check the exported graph, hold it against the spec, simplify it.

The graph is the authority: where the spec disagrees with it (names, dtypes, ranks, static dims, a
fixed batch dim), the spec is wrong and the error names the spec field to fix.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx

from builder.errors import SpecError
from builder.spec import ModelSpec, OmitsUnset, Profile, TensorSpec
from builder.spec.sequence import SequenceSpec
from builder.stages.base import GRAPH, Info, ModelJob, Stage, StageInputs, artifact
from builder.stages.export import EXPORT
from builder.stages.graph_tensors import tensor_problem
from builder.stages.quantized import quantized_ops
from builder.stages.sequence import compare_states

log = logging.getLogger(__name__)


class CheckInputs(StageInputs, OmitsUnset):
    STAGE = "check"
    TOOLS = ("onnx", "onnxsim", "onnxruntime")
    CODE = ("builder.stages.check",)
    exported_sha256: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    max_batch_size: int
    simplify: bool
    profiles: list[Profile]
    sequence: SequenceSpec | None = None  # a stateful model's states, checked against the graph

    OMITTED_WHILE_UNSET = ("sequence",)


class Check(Stage):
    """The exported graph checked; the record counts its opset and what makes it quantized already
    (its quantized operators and weights), so that a rebuild with nothing changed reads no graph."""

    name = CheckInputs.STAGE

    def inputs(self, job: ModelJob) -> CheckInputs:
        m = job.model
        return CheckInputs(
            exported_sha256=job.sha256(EXPORT.name), inputs=m.inputs, outputs=m.outputs,
            max_batch_size=m.max_batch_size, simplify=m.simplify, profiles=m.profiles, sequence=m.sequence,
        )  # fmt: skip

    def run(self, job: ModelJob, out: Path) -> Info:
        exported = job.graph(EXPORT.name)
        # Read before simplifying, which would fold weights dequantized from constants (int8 through
        # Cast and Mul, DequantizeLinear) into float ones: a quantized graph is kept as it comes.
        quantized = quantized_ops(exported)
        checked = check(job.model, exported, out / GRAPH, spec_file=job.ctx.spec_file, simplify=not quantized)
        return artifact(checked) | {"opset": graph_opset(checked), "quantized": quantized}


CHECK = Check()


FREE_INITIALIZERS_IR = 4


def check(model: ModelSpec, onnx_in: Path, out: Path, *, spec_file: Path, simplify: bool = True) -> Path:
    """Check ``onnx_in`` against ONNX and the spec, simplify it unless ``simplify: false`` (or
    ``simplify`` False: a graph quantized already), save ``out``."""
    graph = onnx.shape_inference.infer_shapes(name_negative_dims(_checked_graph(onnx_in, model, spec_file)))
    compare(model, graph, spec_file=spec_file)
    if model.simplify and simplify:
        graph = _simplified(model, graph, spec_file=spec_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(graph, out)
    return out


def _checked_graph(onnx_in: Path, model: ModelSpec, spec_file: Path) -> onnx.ModelProto:
    """The graph, once the ONNX checker passes it. IR 3 wants every initializer listed as a graph
    input too, which its exporters often did not do (ONNX Runtime runs such files anyway): such a
    graph is read as IR 4, which lets initializers stand alone."""
    try:
        _run_checker(onnx_in, model, spec_file=spec_file)  # the file, so that over 2 GB works too
        return onnx.load(onnx_in)
    except SpecError:
        try:
            graph = onnx.load(onnx_in)
        except Exception:  # protobuf's DecodeError: not an ONNX file; the checker's line says so
            graph = None
        if graph is None or graph.ir_version >= FREE_INITIALIZERS_IR:
            raise
    graph.ir_version = FREE_INITIALIZERS_IR
    _run_checker(graph, model, spec_file=spec_file)
    return graph


def compare(model: ModelSpec, graph: onnx.ModelProto, *, spec_file: Path) -> None:
    """Raise SpecError at the first spec field the graph's inputs or outputs contradict."""
    weights = {init.name for init in graph.graph.initializer}
    seq = model.sequence
    hidden = set(seq.hidden_inputs() + seq.hidden_outputs()) if seq else set()  # fed by the server
    if seq is not None:  # first: a misnamed state would otherwise read as an unknown tensor
        compare_states(model, graph, spec_file=spec_file)
    inputs = [v for v in graph.graph.input if v.name not in weights | hidden]
    _compare_side("inputs", model, model.inputs, inputs, spec_file)
    outputs = [v for v in graph.graph.output if v.name not in hidden]
    _compare_side("outputs", model, model.outputs, outputs, spec_file)


def graph_opset(path: Path) -> int:
    """The default-domain opset a graph imports."""
    imports = onnx.load(str(path), load_external_data=False).opset_import
    return max((o.version for o in imports if o.domain in ("", "ai.onnx")), default=0)


def name_negative_dims(graph: onnx.ModelProto) -> onnx.ModelProto:
    """Give every ``dim_value: -1`` of the graph's inputs and outputs (an exporter's way of saying
    dynamic) a ``dim_param``, which is how ONNX Runtime, TensorRT and onnxsim read a dynamic dim."""
    for value in [*graph.graph.input, *graph.graph.output]:
        if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.dim_param = f"{value.name}_{axis}"
    return graph


def _run_checker(target: Path | onnx.ModelProto, model: ModelSpec, *, spec_file: Path) -> None:
    try:
        # A path, not a proto, so that models over 2 GB can be checked too.
        onnx.checker.check_model(str(target) if isinstance(target, Path) else target, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = (str(exc).strip().splitlines() or ["invalid model"])[0]
        raise SpecError(f"ONNX checker: {first}", file=spec_file, model=model.name, field="source") from None


def _simplified(model: ModelSpec, graph: onnx.ModelProto, *, spec_file: Path) -> onnx.ModelProto:
    """onnxsim's graph, if it simplifies, still passes the checker and still matches the spec."""
    import onnxsim

    try:
        simple: onnx.ModelProto
        simple, ok = onnxsim.simplify(graph)
        if not ok:
            raise ValueError("onnxsim's own check failed")
        _run_checker(simple, model, spec_file=spec_file)
        compare(model, simple, spec_file=spec_file)
    except Exception as exc:  # onnxsim raises anything; the checked graph is still good
        log.warning("model '%s': simplification skipped: %s", model.name, str(exc).splitlines()[0][:200])
        return graph
    return simple


def _compare_side(
    kind: str, model: ModelSpec, specs: list[TensorSpec], values: list[onnx.ValueInfoProto], spec_file: Path
) -> None:
    by_name = {v.name: v for v in values}
    wanted = {t.name for t in specs}
    for i, t in enumerate(specs):
        if t.name not in by_name:
            raise SpecError(
                f"graph has no {kind[:-1]} '{t.name}' (graph {kind}: {sorted(by_name)})",
                file=spec_file,
                model=model.name,
                field=f"{kind}[{i}].name",
            )
    for name in by_name:
        if name not in wanted:
            raise SpecError(
                f"graph {kind[:-1]} '{name}' is not in the spec", file=spec_file, model=model.name, field=kind
            )
    for i, t in enumerate(specs):
        problem = tensor_problem(model, t, by_name[t.name])
        if problem:
            field, message = problem
            where = field if field == "max_batch_size" else f"{kind}[{i}].{field}"
            raise SpecError(message, file=spec_file, model=model.name, field=where)
