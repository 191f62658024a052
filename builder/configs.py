"""Triton ``config.pbtxt`` building blocks, as protobuf from the spec.

Nothing here is a string template: each config is a ``ModelConfig`` message
written with ``text_format``, and read back strictly, so a field Triton does
not know is an error here rather than at load time. What differs between
targets (backend, platform, instance kind, queue-policy rule) is decided by the
target objects in ``builder.targets``; this module only assembles messages.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import (
    DataType,
    ModelConfig,
    ModelDynamicBatching,
    ModelInput,
    ModelInstanceGroup,
    ModelOutput,
    ModelQueuePolicy,
    ModelSequenceBatching,
    ModelTensorReshape,
    ModelWarmup,
)

from builder.dtypes import triton_type
from builder.python_models.shared import onnx_contract as runner
from builder.spec import (
    FACTORY_PATTERN,
    Batching,
    DType,
    EnsembleSpec,
    ModelSpec,
    PythonModelSpec,
    QueuePolicy,
    Spec,
    TensorSpec,
    TimeoutAction,
)
from builder.spec.sequence import Controls, SequenceSpec, Strategy

CONFIG_FILE = "config.pbtxt"
ONNX_FILE = runner.ONNX_FILE  # every target's name for a variant's graph (the onnxruntime backend's too)
KIND_CPU = "KIND_CPU"
KIND_GPU = "KIND_GPU"
# Triton has no rank-0 tensors in a request: a model's scalar is sent as [1] and reshaped to [].
RANK_0 = ModelTensorReshape(shape=[])


def io_config(
    name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], max_batch_size: int
) -> ModelConfig:
    """Name, batch size, inputs and outputs (labels files by their basename)."""
    cfg = ModelConfig(name=name, max_batch_size=max_batch_size)
    for t in inputs:
        cfg.input.append(
            ModelInput(name=t.name, data_type=_dtype(t), dims=request_dims(t), optional=t.optional)
        )
        if t.format is not None:
            cfg.input[-1].format = ModelInput.Format.Value(f"FORMAT_{t.format.value}")
        if not t.dims:
            cfg.input[-1].reshape.CopyFrom(RANK_0)
    for t in outputs:
        out = ModelOutput(name=t.name, data_type=_dtype(t), dims=request_dims(t))
        if not t.dims:
            out.reshape.CopyFrom(RANK_0)
        if t.labels:
            out.label_filename = label_file_name(t.labels)
        cfg.output.append(out)
    return cfg


def request_dims(t: TensorSpec) -> list[int]:
    """A tensor's dims as a request carries them: a scalar as [1] (``reshape`` makes it rank 0)."""
    return t.dims or [1]


def model_io_config(model: ModelSpec, name: str | None = None) -> ModelConfig:
    return io_config(name or model.name, model.inputs, model.outputs, model.max_batch_size)


def python_config(pm: PythonModelSpec, *, queue_policy: bool) -> ModelConfig:
    """A pre/post-processing model; it runs on the CPU on every target."""
    cfg = io_config(pm.name, pm.inputs, pm.outputs, pm.max_batch_size)
    cfg.backend = "python"
    set_parameters(cfg, {k: param_str(v) for k, v in pm.parameters.items()})
    set_batching(cfg, pm.batching, pm.max_batch_size, queue_policy=queue_policy)
    set_instances(cfg, pm.instances.count, KIND_CPU)
    return cfg


def ensemble_config(ens: EnsembleSpec, spec: Spec) -> ModelConfig:
    """An ensemble; step model names are the spec names (the core keeps its name on every target)."""
    known = {m.name for m in spec.all_models()}
    cfg = io_config(ens.name, ens.inputs, ens.outputs, ens.max_batch_size)
    cfg.platform = "ensemble"
    for step in ens.steps:
        if step.model not in known:
            raise ValueError(f"ensemble '{ens.name}': unknown step model '{step.model}'")
        pb = cfg.ensemble_scheduling.step.add(model_name=step.model, model_version=-1)
        pb.input_map.update(step.inputs)
        pb.output_map.update(step.outputs)
    return cfg


def write_config(cfg: ModelConfig, model_dir: Path) -> Path:
    """Write ``model_dir/config.pbtxt`` (creating the folder) and return its path."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / CONFIG_FILE
    path.write_text(text_format.MessageToString(cfg), encoding="utf-8")
    return path


def read_config(path: Path) -> ModelConfig:
    """Parse a config.pbtxt strictly: unknown fields and bad enum values raise ParseError."""
    return text_format.Parse(path.read_text(encoding="utf-8"), ModelConfig())


def label_file_name(labels: str) -> str:
    """The basename a labels file has inside the model folder: a file's own, or for a factory
    (package.module:function returning the labels) the function's name with ``.txt``."""
    if FACTORY_PATTERN.match(labels):
        return labels.rpartition(":")[2] + ".txt"
    return PurePosixPath(labels.replace("\\", "/")).name


def set_parameters(cfg: ModelConfig, params: dict[str, str]) -> None:
    for key, value in params.items():
        cfg.parameters[key].string_value = value


def set_batching(cfg: ModelConfig, batching: Batching, max_batch_size: int, *, queue_policy: bool) -> None:
    """Dynamic batching; the queue policy and priority levels only where ``queue_policy``."""
    if not batching.enabled or max_batch_size <= 0:
        return
    db = ModelDynamicBatching(
        preferred_batch_size=batching.preferred_batch_sizes,
        max_queue_delay_microseconds=batching.max_queue_delay_us,
        preserve_ordering=batching.preserve_ordering,
    )
    if queue_policy:
        db.priority_levels = batching.priority_levels
        db.default_priority_level = batching.default_priority_level
        db.default_queue_policy.CopyFrom(_queue_policy(batching.queue))
        for level, policy in batching.priority_queues.items():
            db.priority_queue_policy[level].CopyFrom(_queue_policy(policy))
    cfg.dynamic_batching.CopyFrom(db)


def set_sequence_batching(cfg: ModelConfig, seq: SequenceSpec, *, implicit_state: bool) -> None:
    """Triton's sequence batcher; with ``implicit_state`` it also keeps the states (each starting as
    zeros), else the model keeps them itself (the local target's Python model)."""
    sb = ModelSequenceBatching(max_sequence_idle_microseconds=seq.max_sequence_idle_us)
    if seq.strategy is Strategy.DIRECT:
        sb.direct.SetInParent()
    else:
        sb.oldest.max_candidate_sequences = seq.max_candidate_sequences
    for kind, name in seq.controls.names().items():
        sb.control_input.append(_control_input(seq.controls, kind, name))
    if implicit_state:
        for s in seq.state:
            dtype = int(DataType.Value(triton_type(s.dtype)))
            state = sb.state.add(input_name=s.input, output_name=s.output, data_type=dtype, dims=s.dims)
            initial = state.initial_state.add(name=f"{s.input}_{s.initial}", data_type=dtype, dims=s.dims)
            initial.zero_data = True
    cfg.sequence_batching.CopyFrom(sb)


def _control_input(controls: Controls, kind: str, name: str) -> ModelSequenceBatching.ControlInput:
    control = ModelSequenceBatching.Control(
        kind=ModelSequenceBatching.Control.Kind.Value(f"CONTROL_SEQUENCE_{kind.upper()}")
    )
    if controls.dtype is DType.FP32:
        control.fp32_false_true.extend([0.0, 1.0])
    elif controls.dtype is DType.BOOL:
        control.bool_false_true.extend([False, True])
    else:
        control.int32_false_true.extend([0, 1])
    return ModelSequenceBatching.ControlInput(name=name, control=[control])


def set_instances(cfg: ModelConfig, count: int, kind: str) -> None:
    cfg.instance_group.append(ModelInstanceGroup(count=count, kind=ModelInstanceGroup.Kind.Value(kind)))


def set_warmup(cfg: ModelConfig, model: ModelSpec) -> None:
    """One warm-up sample per batch size; dynamic dims take the first profile's opt shape."""
    if model.warmup is None:
        return
    for size in model.warmup.batch_sizes:
        sample = ModelWarmup(name=f"warmup_batch_{size}", batch_size=size if model.batched else 1)
        sample.count = model.warmup.count
        for t in model.inputs:
            entry = sample.inputs[t.name]
            entry.data_type = _dtype(t)
            entry.dims.extend(model.shape_range(t).opt or request_dims(t))
            # Random floats exercise real kernels; integer inputs are often indices, so zeros.
            if t.dtype.is_float:
                entry.random_data = True
            else:
                entry.zero_data = True
        cfg.model_warmup.append(sample)


def _dtype(t: TensorSpec) -> int:
    return int(DataType.Value(triton_type(t.dtype)))


def param_str(value: str | int | float | bool) -> str:
    """A parameter's string value as Triton's configs write it (``true``/``false`` for a bool)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _queue_policy(policy: QueuePolicy) -> ModelQueuePolicy:
    action = "REJECT" if policy.timeout_action is TimeoutAction.REJECT else "DELAY"
    return ModelQueuePolicy(
        timeout_action=ModelQueuePolicy.TimeoutAction.Value(action),
        default_timeout_microseconds=policy.default_timeout_us,
        allow_timeout_override=policy.allow_timeout_override,
        max_queue_size=policy.max_queue_size,
    )
