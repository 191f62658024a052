"""The declarative spec, ``models.yaml``, validated with pydantic.

The spec is the single source every derived number comes from: the Triton
config, the optimization profiles, the perf_analyzer shapes and the TensorRT
profiles all read the same fields, so they cannot disagree. Every error names
the file, the model and the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from builder.errors import SpecError
from builder.spec.checkpoint import TaskName, expand
from builder.spec.detection import TASK as DETECTION_TASK
from builder.spec.detection import Detection, DetectionTolerance, dense_defaults, expand_dense
from builder.spec.dtype import DType as DType  # re-exported: the spec's tensors are typed with it
from builder.spec.engine import EngineOptions
from builder.spec.graph import fill_from_graph
from builder.spec.kinds import FACTORY_PATTERN as FACTORY_PATTERN  # re-exported: readers' and factories' form
from builder.spec.kinds import ModelSourceKind as ModelSourceKind  # re-exported: source_kind is typed with it
from builder.spec.kinds import model_source_kind
from builder.spec.llm import LLMSpec
from builder.spec.sequence import SequenceSpec, check_sequence
from builder.spec.variant import ONNXRUNTIME as ONNXRUNTIME
from builder.spec.variant import Precision as Precision  # re-exported: the spec's precisions
from builder.spec.variant import RuntimeName as RuntimeName
from builder.spec.variant import Variant as Variant
from builder.spec.variant import as_variant as as_variant
from builder.spec.variant import runs_on, runtime_names, variants_of

NAME_PATTERN = r"^[A-Za-z0-9_-]+$"

Name = Annotated[str, Field(pattern=NAME_PATTERN, min_length=1, max_length=128)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OmitsUnset(BaseModel):
    """The fields named in ``OMITTED_WHILE_UNSET`` (added after stage and repository keys existed)
    are left out of the dump while unset, so that the keys of specs that do not use them stay what
    they were."""

    OMITTED_WHILE_UNSET: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unset_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in self.OMITTED_WHILE_UNSET:
            if getattr(self, name) is None:
                data.pop(name, None)
        return data


class ImageFormat(str, Enum):
    """An image input's layout (Triton's ModelInput.format), without the batch dimension."""

    NCHW = "NCHW"  # channels first: dims [C, H, W]
    NHWC = "NHWC"  # channels last: dims [H, W, C]


class TensorSpec(Strict, OmitsUnset):
    """One input or output; ``dims`` never include the batch dimension."""

    name: Annotated[str, Field(min_length=1)]
    dtype: DType
    dims: list[int]
    labels: str | None = None  # outputs only: a labels file for the classification extension
    optional: bool = False
    format: ImageFormat | None = None  # inputs only: what Triton's image clients read

    OMITTED_WHILE_UNSET = ("format",)

    @model_validator(mode="after")
    def _layout_matches_dims(self) -> TensorSpec:
        if self.format is None:
            return self
        nchw = self.format is ImageFormat.NCHW
        if len(self.dims) != 3 or self.dims[0 if nchw else 2] not in (1, 3):
            where = "first" if nchw else "last"
            raise ValueError(
                f"format {self.format.value} needs dims of 3 with 1 or 3 channels {where}, got {self.dims}"
            )
        return self

    @field_validator("dims")
    @classmethod
    def _dims_positive_or_dynamic(cls, dims: list[int]) -> list[int]:
        for d in dims:
            if d == 0 or d < -1:
                raise ValueError(f"dims {dims}: each dim is a positive size or -1 (dynamic)")
        return dims

    @property
    def dynamic(self) -> bool:
        return -1 in self.dims


class TimeoutAction(str, Enum):
    REJECT = "reject"
    DELAY = "delay"


class QueuePolicy(Strict):
    """Triton's ModelQueuePolicy: a bounded queue fails fast instead of timing out."""

    max_queue_size: Annotated[int, Field(ge=0)] = 0  # 0 = unbounded
    default_timeout_us: Annotated[int, Field(ge=0)] = 0
    timeout_action: TimeoutAction = TimeoutAction.REJECT
    allow_timeout_override: bool = True


class Batching(Strict):
    """Dynamic batching; ``max_queue_delay_us: 0`` never makes a lone request wait."""

    enabled: bool = True
    preferred_batch_sizes: list[Annotated[int, Field(ge=1)]] = []
    max_queue_delay_us: Annotated[int, Field(ge=0)] = 0
    preserve_ordering: bool = False
    queue: QueuePolicy = QueuePolicy()
    priority_levels: Annotated[int, Field(ge=0)] = 0
    default_priority_level: Annotated[int, Field(ge=0)] = 0
    priority_queues: dict[int, QueuePolicy] = {}

    @model_validator(mode="before")
    @classmethod
    def _moved_to_the_local_target(cls, data: Any) -> Any:
        if isinstance(data, dict) and "local_queue_policy" in data:
            raise ValueError("local_queue_policy moved to targets.local.queue_policy (a local target option)")
        return data

    @model_validator(mode="after")
    def _priorities_consistent(self) -> Batching:
        if self.priority_levels and not (1 <= self.default_priority_level <= self.priority_levels):
            raise ValueError(
                f"default_priority_level {self.default_priority_level} must be within "
                f"1..priority_levels ({self.priority_levels})"
            )
        if self.preserve_ordering and self.priority_levels > 1:
            raise ValueError("preserve_ordering allows only one priority level (Triton refuses more)")
        for level in self.priority_queues:
            if not 1 <= level <= self.priority_levels:
                raise ValueError(f"priority_queues level {level} is outside 1..{self.priority_levels}")
        return self


class InstanceKind(str, Enum):
    AUTO = "auto"  # CPU on the local and cpu targets, GPU on the gpu target
    CPU = "cpu"
    GPU = "gpu"


class Instances(Strict):
    count: Annotated[int, Field(ge=1, le=64)] = 1
    kind: InstanceKind = InstanceKind.AUTO


class ShapeRange(Strict):
    """min / opt / max for one input's non-batch dims (static dims repeat their size)."""

    min: list[Annotated[int, Field(ge=1)]]
    opt: list[Annotated[int, Field(ge=1)]]
    max: list[Annotated[int, Field(ge=1)]]

    @model_validator(mode="after")
    def _ordered(self) -> ShapeRange:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise ValueError("min, opt and max must have the same rank")
        for lo, mid, hi in zip(self.min, self.opt, self.max, strict=True):
            if not lo <= mid <= hi:
                raise ValueError(f"need min <= opt <= max, got {self.min} / {self.opt} / {self.max}")
        return self


class Profile(Strict):
    """One optimization profile. Its max batch is the model's ``max_batch_size``."""

    opt_batch: Annotated[int, Field(ge=1)] = 1
    shapes: dict[str, ShapeRange] = {}


class CalibrationMethod(str, Enum):
    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"


class DataSpec(Strict):
    """Where samples come from: an ``.npz`` (arrays named after the inputs, first
    axis = samples) or anything a ``reader`` factory (``pkg.mod:fn(path)``) turns
    into such arrays."""

    data: str | None = None
    reader: str | None = None
    max_samples: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _has_source(self) -> DataSpec:
        if self.data is None and self.reader is None:
            raise ValueError("give 'data' (a path), 'reader' (pkg.module:function), or both")
        if self.reader is not None and not FACTORY_PATTERN.match(self.reader):
            raise ValueError(f"reader '{self.reader}' is not of the form package.module:function")
        return self


class Smoothing(Strict):
    """SmoothQuant-style outlier smoothing folded into the FP32 graph before quantization:
    ``X @ W = (X / s) @ (diag(s) W)``, with ``s`` from the calibration samples."""

    alpha: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    nodes: list[str] = []  # glob patterns on MatMul node names; empty = every MatMul with a constant weight


class Search(Strict):
    """How far the INT8 search may go (docs/quantization.md): the calibration methods tried, then the
    fewest layers kept in float, each trial verified against the reference; ``max_trials: 0`` makes
    the one graph of ``method`` without a trial (the verify stage alone judges it)."""

    max_trials: Annotated[int, Field(ge=0, le=1000)] = 24
    max_seconds: Annotated[float, Field(gt=0.0)] = 120.0


class Calibration(DataSpec):
    method: CalibrationMethod = CalibrationMethod.MINMAX  # the method tried first
    search: Search = Search()
    smooth: Smoothing | None = None  # applied before static Q/DQ
    percentile: Annotated[float, Field(gt=90.0, le=100.0)] = 99.999
    per_channel: bool = True
    exclude_nodes: list[str] = []  # node names left in float (outlier-heavy layers)
    exclude_op_types: list[str] = []
    op_types: list[str] = []  # quantize only these op types (default: ORT's choice)


class DynamicInt8(Strict):
    """Options of the ``int8_dynamic`` variant (ONNX Runtime's dynamic quantization)."""

    smooth: Smoothing | None = None  # uses the calibration samples to find outlier channels


class TopK(Strict):
    """Top-k agreement: the mean share of the reference's ``k`` best classes (the last axis) that are
    among the candidate's ``k`` best, at least ``min``."""

    k: Annotated[int, Field(ge=2)]
    min: Annotated[float, Field(ge=0.0, le=1.0)]


class UserMetric(Strict):
    """The user's own metric: ``function`` (``package.module:function``, imported as a factory is)
    takes the reference's and the candidate's outputs (two dicts, output name -> array with the
    samples first) and returns a float that must be at least ``min`` or at most ``max``."""

    function: str
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> UserMetric:
        if not FACTORY_PATTERN.match(self.function):
            raise ValueError(f"function '{self.function}' is not of the form package.module:function")
        if (self.min is None) == (self.max is None):
            raise ValueError("a metric takes one bound: min (higher is better) or max (lower is better)")
        return self

    @property
    def bound(self) -> float:
        return self.min if self.min is not None else float(self.max or 0.0)


class Tolerance(Strict, OmitsUnset):
    """Thresholds a variant must meet against the source model, on every float output
    (or only on ``outputs`` when given). Unset thresholds are not checked. ``detection``: an object
    detector's boxes, decoded as served, matched against the reference's."""

    min_cosine: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None
    mean_cosine: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None
    max_abs: Annotated[float, Field(ge=0.0)] | None = None
    top1: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    topk: TopK | None = None
    metric: UserMetric | None = None  # on the whole outputs: a detector's matched boxes, say
    exact: bool = False  # integer outputs: must be identical
    outputs: list[str] = []
    detection: DetectionTolerance | None = None

    OMITTED_WHILE_UNSET = ("topk", "metric", "detection")

    @model_validator(mode="after")
    def _something_checked(self) -> Tolerance:
        checks = (self.min_cosine, self.mean_cosine, self.max_abs, self.top1, self.topk, self.metric)
        if not self.exact and all(v is None for v in (*checks, self.detection)):
            raise ValueError(
                "a tolerance must set min_cosine, mean_cosine, max_abs, top1, topk, metric, exact "
                "or detection"
            )
        return self


class Warmup(Strict):
    """Requests Triton sends at load time, so the first user request is not slow."""

    batch_sizes: list[Annotated[int, Field(ge=1)]] = [1]
    count: Annotated[int, Field(ge=1)] = 1


class Serve(Strict, OmitsUnset):
    """How every target serves the model: each session's threads, and the runtime it serves on
    (unset: the fastest verified). What one target alone takes is under ``targets.<name>``."""

    threads: Annotated[int, Field(ge=0)] = 0  # intra-op threads of either runtime (0 = its default)
    runtime: RuntimeName | None = None  # the runtime every target serves on; unset = the fastest verified

    OMITTED_WHILE_UNSET = ("runtime",)

    @model_validator(mode="before")
    @classmethod
    def _target_options_moved(cls, data: Any) -> Any:
        """The keys that were target options before ``targets:`` held them say where they went."""
        if not isinstance(data, dict):
            return data
        if "spinning" in data:
            raise ValueError("spinning moved to targets.local.spinning (a local target option)")
        moved = sorted(set(data) - set(cls.model_fields))
        if moved:
            name = moved[0]
            raise ValueError(f"{name}: the precisions a target serves moved to targets.{name}.serve")
        return data


class TargetScoped(BaseModel):
    """A model's ``targets:``: each target's own options (``serve``, the precisions it may serve;
    the local target's ``spinning`` and ``queue_policy``), read and checked by that target before
    any stage runs (docs/targets.md)."""

    targets: dict[Name, dict[str, Any]] | None = None

    def target_options(self, target: str) -> dict[str, Any]:
        """What ``targets.<target>`` says, as written (the target reads it)."""
        return dict((self.targets or {}).get(target, {}))


class ModelSpec(Strict, TargetScoped, OmitsUnset):
    """A core model built from ONNX: exported, checked, quantized, verified, served."""

    name: Name
    task: TaskName | None = None  # a Hugging Face checkpoint's task (builder/tasks/); source: its folder
    source: Annotated[str, Field(min_length=1)]
    inputs: Annotated[list[TensorSpec], Field(min_length=1)]
    outputs: Annotated[list[TensorSpec], Field(min_length=1)]
    max_batch_size: Annotated[int, Field(ge=0)] = 0
    batching: Batching = Batching()
    instances: Instances = Instances()
    profiles: list[Profile] = []
    precisions: Annotated[list[Precision], Field(min_length=1)] = [Precision.FP32]
    # The runtimes each precision is verified and timed on; unset: every runtime (a runtime that
    # cannot be had on the building host is left out there, saying why).
    runtimes: Annotated[list[RuntimeName], Field(min_length=1)] | None = None
    calibration: Calibration | None = None
    int8_dynamic: DynamicInt8 = DynamicInt8()
    evaluation: DataSpec | None = None  # unset: seeded random samples at the profile's opt shapes
    tolerances: dict[Precision, Tolerance] = {}
    warmup: Warmup | None = None
    serve: Serve = Serve()
    opset: Annotated[int, Field(ge=11, le=23)] = 17
    simplify: bool = True
    engine: EngineOptions = EngineOptions()  # TensorRT build options (gpu target)
    sequence: SequenceSpec | None = None  # a stateful model: states kept by the server per sequence
    detection: Detection | None = None  # an object detector: how its outputs become boxes

    OMITTED_WHILE_UNSET = ("sequence", "task", "runtimes", "targets", "detection")
    _source_kind: ModelSourceKind = PrivateAttr()

    @field_validator("source")
    @classmethod
    def _source_form(cls, source: str, info: ValidationInfo) -> str:
        """Only the forms a kind takes (``builder/spec/kinds.py``, where a new kind's form goes)."""
        if model_source_kind(source, checkpoint=info.data.get("task") is not None) is None:
            raise ValueError(f"'{source}' is neither a factory (package.module:function) nor an .onnx file")
        return source

    @model_validator(mode="before")
    @classmethod
    def _scalars_as_vectors(cls, data: Any) -> Any:
        """``dims: []`` (a graph's rank-0 tensor) in a model that does not batch is served as [1]:
        Triton has no rank-0 tensor there, and the export reshapes (``builder.stages.scalars``),
        as for a scalar whose dims the graph gave."""
        if not isinstance(data, dict) or data.get("max_batch_size", 0) != 0:
            return data
        out = dict(data)
        for side in ("inputs", "outputs"):
            tensors = out.get(side)
            if isinstance(tensors, list):
                out[side] = [
                    {**t, "dims": [1]} if isinstance(t, dict) and t.get("dims") == [] else t for t in tensors
                ]
        return out

    @property
    def source_kind(self) -> ModelSourceKind:
        """Recorded when the entry was validated (builder/spec/kinds.py)."""
        return self._source_kind

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        kind = model_source_kind(self.source, checkpoint=self.task is not None)
        assert kind is not None  # _source_form lets through only the forms a kind takes
        self._source_kind = kind
        self._check_task(kind)
        _check_unique("inputs", [t.name for t in self.inputs])
        _check_unique("outputs", [t.name for t in self.outputs])
        _check_no_output_format(self.outputs)
        _check_unique("precisions", [p.value for p in self.precisions])
        self._check_batching()
        self._check_profiles()
        self._check_precisions()
        check_sequence(self)
        return self

    def _check_task(self, kind: ModelSourceKind) -> None:
        """A graph source names no task but object detection, whose boxes need a detection block
        (the checkpoint task and ``expand_dense`` write it); detection with no detector is a mistake."""
        graph = kind is not ModelSourceKind.CHECKPOINT
        if graph and self.task is not None and self.task != DETECTION_TASK:
            raise ValueError(
                f"task: {self.task} takes a checkpoint folder; a graph source's task is {DETECTION_TASK}"
            )
        if self.detection is not None and self.task != DETECTION_TASK:
            raise ValueError(f"detection: needs task: {DETECTION_TASK}")
        if self.task == DETECTION_TASK and self.detection is None:
            raise ValueError(f"detection: task {DETECTION_TASK} needs its detection block")
        detectors = [p.value for p, t in self.tolerances.items() if t.detection is not None]
        if detectors and self.detection is None:
            raise ValueError(
                f"tolerances.{detectors[0]}.detection: only an object detector's boxes can be matched"
            )

    def _check_batching(self) -> None:
        for size in self.batching.preferred_batch_sizes:
            if size > self.max_batch_size:
                raise ValueError(
                    f"batching.preferred_batch_sizes: {size} is above max_batch_size {self.max_batch_size}"
                )
        if not self.batched and self.batching.enabled and self.batching.preferred_batch_sizes:
            raise ValueError("batching: a model with max_batch_size 0 cannot batch")
        if self.warmup:
            for size in self.warmup.batch_sizes:
                if size > max(self.max_batch_size, 1):
                    raise ValueError(
                        f"warmup.batch_sizes: {size} is above max_batch_size {self.max_batch_size}"
                    )

    def _check_profiles(self) -> None:
        inputs = {t.name: t for t in self.inputs}
        dynamic = {t.name for t in self.inputs if t.dynamic}
        if dynamic and not self.profiles:
            raise ValueError(
                f"profiles: inputs {sorted(dynamic)} have dynamic dims (-1) and need an "
                "optimization profile (min/opt/max)"
            )
        for i, profile in enumerate(self.profiles):
            where = f"profiles[{i}]"
            if profile.opt_batch > max(self.max_batch_size, 1):
                raise ValueError(
                    f"{where}.opt_batch: {profile.opt_batch} is above max_batch_size "
                    f"{self.max_batch_size} (the profile's max batch is max_batch_size)"
                )
            for name, rng in profile.shapes.items():
                if name not in inputs:
                    raise ValueError(f"{where}.shapes: '{name}' is not an input")
                dims = inputs[name].dims
                if len(rng.min) != len(dims):
                    raise ValueError(
                        f"{where}.shapes.{name}: rank {len(rng.min)} differs from dims {dims} "
                        "(profile shapes exclude the batch dimension)"
                    )
                for axis, d in enumerate(dims):
                    if d != -1 and not rng.min[axis] == rng.opt[axis] == rng.max[axis] == d:
                        raise ValueError(f"{where}.shapes.{name}: axis {axis} is static ({d}) in dims")
            missing = dynamic - set(profile.shapes)
            if missing:
                raise ValueError(f"{where}.shapes: no min/opt/max for dynamic inputs {sorted(missing)}")

    def _check_precisions(self) -> None:
        reduced = [p for p in self.precisions if p is not Precision.FP32]
        if reduced and not any(t.dtype.is_float for t in self.inputs + self.outputs):
            raise ValueError(
                f"precisions: {[p.value for p in reduced]} need float tensors; this model has none"
            )
        if Precision.INT8 in self.precisions and self.calibration is None:
            raise ValueError("calibration: int8 is wanted, so calibration data is required")
        if self.int8_dynamic.smooth is not None and self.calibration is None:
            raise ValueError("int8_dynamic.smooth: smoothing needs calibration data (a calibration section)")
        for precision in self.precisions:
            if precision not in self.tolerances:
                raise ValueError(f"tolerances: no tolerance for precision '{precision.value}'")
        self._check_runtimes()

    def _check_runtimes(self) -> None:
        """Each precision needs a runtime that runs it, and a pinned runtime must be wanted."""
        _check_unique("runtimes", self.wanted_runtimes)
        made = {v.precision for v in self.variants()}
        for precision in self.precisions:
            if precision not in made:
                runs = runs_on(precision)
                where = "a stateful model runs on onnxruntime only" if self.sequence else f"runtimes: {runs}"
                raise ValueError(f"precisions: {precision.value} needs a runtime that runs it ({where})")
        pinned = self.serve.runtime
        if pinned is not None and pinned not in self.wanted_runtimes:
            raise ValueError(f"serve.runtime: '{pinned}' is not in runtimes")

    @property
    def wanted_runtimes(self) -> list[str]:
        return list(self.runtimes) if self.runtimes is not None else runtime_names()

    def variants(self) -> list[Variant]:
        """Every variant the build makes: each precision on each wanted runtime that runs it."""
        return variants_of(self.precisions, self.wanted_runtimes, stateful=self.sequence is not None)

    # Derived values: one place for the numbers configs, profiles and perf use.

    def shape_range(self, tensor: TensorSpec, profile: int = 0) -> ShapeRange:
        """min / opt / max of a tensor's non-batch dims under a profile."""
        if self.profiles and tensor.name in self.profiles[profile].shapes:
            return self.profiles[profile].shapes[tensor.name]
        dims = [max(d, 1) for d in tensor.dims]
        return ShapeRange(min=dims, opt=dims, max=dims)

    @property
    def batched(self) -> bool:
        """Whether the model's tensors carry a batch dimension in front (``max_batch_size > 0``):
        Triton batches its requests, and its dims leave the batch out."""
        return self.max_batch_size > 0

    def opt_batch(self, profile: int = 0) -> int:
        if self.profiles:
            return self.profiles[profile].opt_batch
        return max(1, min(self.max_batch_size, 8))


class PythonModelSpec(Strict, TargetScoped, OmitsUnset):
    """A Python-backend model (pre/post-processing), copied from ``path``."""

    name: Name
    path: Annotated[str, Field(min_length=1)]  # folder with model.py, relative to the spec
    inputs: Annotated[list[TensorSpec], Field(min_length=1)]
    outputs: Annotated[list[TensorSpec], Field(min_length=1)]
    max_batch_size: Annotated[int, Field(ge=0)] = 0
    batching: Batching = Batching(enabled=False)
    instances: Instances = Instances(kind=InstanceKind.CPU)
    parameters: dict[str, str | int | float | bool] = {}
    # Extra files copied beside model.py: paths relative to the spec, or a factory
    # (package.module:function) returning the path of a file a package ships.
    files: list[str] = []

    OMITTED_WHILE_UNSET = ("targets",)

    @model_validator(mode="after")
    def _consistent(self) -> PythonModelSpec:
        _check_unique("inputs", [t.name for t in self.inputs])
        _check_unique("outputs", [t.name for t in self.outputs])
        for size in self.batching.preferred_batch_sizes:
            if size > self.max_batch_size:
                raise ValueError(
                    f"batching.preferred_batch_sizes: {size} is above max_batch_size {self.max_batch_size}"
                )
        return self


class EnsembleStep(Strict):
    model: Name
    inputs: dict[str, str]  # step model's input name -> ensemble tensor
    outputs: dict[str, str]  # step model's output name -> ensemble tensor


class EnsembleSpec(Strict):
    """A Triton ensemble; its inputs and outputs are declared and checked against steps."""

    name: Name
    inputs: Annotated[list[TensorSpec], Field(min_length=1)]
    outputs: Annotated[list[TensorSpec], Field(min_length=1)]
    max_batch_size: Annotated[int, Field(ge=0)] = 0
    steps: Annotated[list[EnsembleStep], Field(min_length=1)]


class Spec(Strict):
    models: list[ModelSpec] = []
    python_models: list[PythonModelSpec] = []
    ensembles: list[EnsembleSpec] = []
    llms: list[LLMSpec] = []  # generative models served by vLLM (builder/spec/llm.py)

    @model_validator(mode="after")
    def _cross_checks(self) -> Spec:
        if not self.models and not self.llms:
            raise ValueError("the spec needs at least one entry in 'models' or 'llms'")
        names = [m.name for m in self.all_models()] + [m.name for m in self.llms]
        _check_unique("model names", names)
        _check_adapter_names(self.llms, set(names))
        known = {m.name: m for m in self.all_models()}
        for ens in self.ensembles:
            _check_ensemble(ens, known)
        return self

    def all_models(self) -> Iterator[ModelSpec | PythonModelSpec | EnsembleSpec]:
        yield from self.models
        yield from self.python_models
        yield from self.ensembles

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)


def _check_no_output_format(outputs: list[TensorSpec]) -> None:
    for i, t in enumerate(outputs):
        if t.format is not None:
            raise ValueError(f"outputs[{i}] '{t.name}': format is for image inputs only")


def _check_unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"{what}: '{n}' appears twice")
        seen.add(n)


def _check_adapter_names(llms: list[LLMSpec], models: set[str]) -> None:
    """An adapter's name is a model name on the OpenAI endpoint: unique, and no model's."""
    owner: dict[str, str] = {}
    for llm in llms:
        for name in llm.lora.adapters if llm.lora is not None else ():
            if name in models:
                raise ValueError(f"llm '{llm.name}' lora.adapters: '{name}' is also a model's name")
            if name in owner:
                raise ValueError(
                    f"llm '{llm.name}' lora.adapters: '{name}' is also an adapter of '{owner[name]}'"
                )
            owner[name] = llm.name


def _check_ensemble(ens: EnsembleSpec, known: dict[str, Any]) -> None:
    produced = {t.name for t in ens.inputs}
    for i, step in enumerate(ens.steps):
        if step.model not in known or step.model == ens.name:
            raise ValueError(f"ensemble '{ens.name}' steps[{i}]: unknown model '{step.model}'")
        target = known[step.model]
        if isinstance(target, EnsembleSpec):
            raise ValueError(f"ensemble '{ens.name}' steps[{i}]: nested ensembles are not supported")
        if target.max_batch_size < ens.max_batch_size:
            raise ValueError(
                f"ensemble '{ens.name}' steps[{i}]: '{step.model}' has max_batch_size "
                f"{target.max_batch_size}, below the ensemble's {ens.max_batch_size}"
            )
        step_inputs = {t.name for t in target.inputs}
        step_outputs = {t.name for t in target.outputs}
        for name, tensor in step.inputs.items():
            if name not in step_inputs:
                raise ValueError(
                    f"ensemble '{ens.name}' steps[{i}].inputs: '{step.model}' has no input '{name}'"
                )
            if tensor not in produced:
                raise ValueError(
                    f"ensemble '{ens.name}' steps[{i}].inputs: tensor '{tensor}' is not produced "
                    "by an earlier step or an ensemble input"
                )
        for name, tensor in step.outputs.items():
            if name not in step_outputs:
                raise ValueError(
                    f"ensemble '{ens.name}' steps[{i}].outputs: '{step.model}' has no output '{name}'"
                )
            produced.add(tensor)
    for out in ens.outputs:
        if out.name not in produced:
            raise ValueError(f"ensemble '{ens.name}' outputs: no step produces '{out.name}'")


def load_spec(path: str | Path) -> Spec:
    """Read and validate ``models.yaml``; raise SpecError naming file, model and field."""
    path = Path(path)
    if not path.is_file():
        raise SpecError("spec file not found", file=path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "yaml"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"invalid YAML: {problem}", file=path, field=where) from None
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text", file=path) from None
    if not isinstance(raw, dict):
        raise SpecError("the top level must be a mapping with a 'models' list", file=path)
    raw = expand(raw, path.parent, spec_file=path)  # Hugging Face checkpoints: tensors, pre/post models
    if isinstance(raw.get("models"), list):
        raw["models"] = [
            fill_from_graph(dense_defaults(e), path.parent, spec_file=path) if isinstance(e, dict) else e
            for e in raw["models"]
        ]
    raw = expand_dense(raw, path.parent, spec_file=path)  # YOLO-style graphs: letterbox, box decoder
    try:
        return Spec.model_validate(raw)
    except ValidationError as exc:
        raise _spec_error(path, raw, exc) from None


SECTIONS = ("models", "python_models", "ensembles", "llms")


def _spec_error(path: Path, raw: dict[str, Any], exc: ValidationError) -> SpecError:
    """Turn pydantic's first error into one line: file, model and dotted field."""
    err = exc.errors()[0]
    loc = list(err["loc"])
    model = None
    if (
        len(loc) >= 2
        and loc[0] in ("models", "python_models", "ensembles", "llms")
        and isinstance(loc[1], int)
    ):
        entries = raw.get(loc[0]) or []
        entry = entries[loc[1]] if loc[1] < len(entries) else None
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            model = entry["name"]
        else:
            model = f"{loc[0]}[{loc[1]}]"
        loc = loc[2:]
    field = _dotted(loc) or None
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    elif err["type"] == "missing":
        message = "required field is missing"
    message = message.removeprefix("Value error, ")
    value = err.get("input")
    if err["type"] not in ("missing", "extra_forbidden", "value_error") and _short(value):
        message = f"{message} (got {value!r})"
    return SpecError(message, file=path, model=model, field=field)


def _dotted(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-after", "function-before")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def _short(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and len(repr(value)) < 60
