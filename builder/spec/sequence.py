"""A stateful model's ``sequence:`` section: state tensors kept by the server between requests.

Each state pairs a graph input with the graph output that becomes its next value. The server
keeps the states per sequence (correlation id) with Triton's sequence batcher; clients send only
the model's other inputs, one chunk per request, with a sequence id and start / end flags.
``dims`` follow the model's rule for every tensor: without the batch dimension when
``max_batch_size`` > 0 (the state's batch is then its first axis), the full shape otherwise, which
is how a state whose batch is on another axis (``[2, B, 128]``) is served: ``max_batch_size: 0``
and ``dims: [2, 1, 128]``, one stream per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from builder.spec.dtype import DType

TensorName = Annotated[str, Field(min_length=1)]
CONTROL_DTYPES = (DType.BOOL, DType.INT32, DType.FP32)  # the types Triton's start/end/ready controls take


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StateSpec(_Strict):
    """One state: the graph input it is read from and the graph output it is updated from."""

    input: TensorName
    output: TensorName
    dtype: DType
    dims: Annotated[list[int], Field(min_length=1)]
    initial: Literal["zeros"] = "zeros"  # the value at the start of every sequence

    @field_validator("dims")
    @classmethod
    def _fixed(cls, dims: list[int]) -> list[int]:
        if any(d < 1 for d in dims):
            raise ValueError(f"dims {dims}: a state keeps one shape through a sequence; give each size")
        return dims

    @field_validator("dtype")
    @classmethod
    def _numeric(cls, dtype: DType) -> DType:
        if dtype is DType.STRING:
            raise ValueError("a state is a numeric tensor, not STRING")
        return dtype


class Controls(_Strict):
    """Graph inputs that take the sequence batcher's flags (only for graphs that read them):
    ``start`` is 1 on a sequence's first request, ``end`` on its last, ``ready`` on every real one."""

    start: TensorName | None = None
    end: TensorName | None = None
    ready: TensorName | None = None
    dtype: DType = DType.INT32

    @field_validator("dtype")
    @classmethod
    def _control_type(cls, dtype: DType) -> DType:
        if dtype not in CONTROL_DTYPES:
            raise ValueError(f"controls are {', '.join(d.value for d in CONTROL_DTYPES)}, not {dtype.value}")
        return dtype

    def names(self) -> dict[str, str]:
        """Kind (start / end / ready) -> graph input, for the controls given."""
        given = {"start": self.start, "end": self.end, "ready": self.ready}
        return {kind: name for kind, name in given.items() if name is not None}


class Strategy(str, Enum):
    """How the sequence batcher schedules sequences: ``oldest`` batches the oldest requests of up
    to ``max_candidate_sequences`` sequences; ``direct`` gives each sequence a batch slot of its
    own until it ends (with ``max_batch_size: 0`` one sequence per instance at a time)."""

    OLDEST = "oldest"
    DIRECT = "direct"


class SequenceSpec(_Strict):
    state: Annotated[list[StateSpec], Field(min_length=1)]
    max_sequence_idle_us: Annotated[int, Field(ge=1)] = 5_000_000  # a silent sequence is dropped after this
    strategy: Strategy = Strategy.OLDEST
    # Sequences live at once per instance (oldest only); a new one beyond waits for one to end. Triton's
    # own default is max_batch_size (1 without batching), where interleaved sequences would wait.
    max_candidate_sequences: Annotated[int, Field(ge=1)] = 64
    controls: Controls = Controls()

    @model_validator(mode="after")
    def _consistent(self) -> SequenceSpec:
        names: list[str] = []
        for s in self.state:
            names += [s.input, s.output]
        names += list(self.controls.names().values())
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"'{name}' is named twice among the states and controls")
        if "max_candidate_sequences" in self.model_fields_set and self.strategy is not Strategy.OLDEST:
            raise ValueError("max_candidate_sequences is for strategy 'oldest' only")
        return self

    def hidden_inputs(self) -> list[str]:
        """Graph inputs the server feeds itself (states and controls): never a client's."""
        return [s.input for s in self.state] + list(self.controls.names().values())

    def hidden_outputs(self) -> list[str]:
        return [s.output for s in self.state]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Valued(Protocol):
    @property
    def value(self) -> str: ...


class StatefulModel(Protocol):
    """What ``check_sequence`` reads of a model: a ``ModelSpec``, which imports this module."""

    @property
    def sequence(self) -> SequenceSpec | None: ...
    @property
    def batching(self) -> BaseModel: ...
    @property
    def warmup(self) -> object | None: ...
    @property
    def precisions(self) -> Sequence[_Valued]: ...
    @property
    def inputs(self) -> Sequence[_Named]: ...
    @property
    def outputs(self) -> Sequence[_Named]: ...


def check_sequence(model: StatefulModel) -> None:
    """What a stateful model cannot also have; each refusal names its field."""
    seq = model.sequence
    if seq is None:
        return
    if model.batching != type(model.batching)():
        raise ValueError(
            "batching: a stateful model is scheduled by the sequence batcher, which excludes "
            "dynamic batching on the same model; remove batching (sequence.strategy says how sequences batch)"
        )
    if model.warmup is not None:
        raise ValueError("warmup: every request to a stateful model belongs to a sequence; remove warmup")
    if any(p.value == "int8" for p in model.precisions):
        raise ValueError(
            "precisions: int8 calibrates on samples without the states; use int8_dynamic, fp16 or fp32"
        )
    _check_hidden(seq, {t.name for t in model.inputs}, {t.name for t in model.outputs})


def _check_hidden(seq: SequenceSpec, inputs: set[str], outputs: set[str]) -> None:
    """States and controls are fed by the server: a client never sends or receives them."""
    for i, s in enumerate(seq.state):
        if s.input in inputs:
            raise ValueError(f"sequence.state[{i}].input: '{s.input}' is a state; leave it out of inputs")
        if s.output in outputs:
            raise ValueError(f"sequence.state[{i}].output: '{s.output}' is a state; leave it out of outputs")
    for kind, name in seq.controls.names().items():
        if name in inputs:
            raise ValueError(f"sequence.controls.{kind}: '{name}' is a control; leave it out of inputs")
