"""What the sync and asyncio clients decide, without any I/O: an inference checked against the
model and cut into requests (`Call`), the tensors of each request and the check of its answer,
and the policy of the readiness loop (`Readiness`). `client` and `aio` only send and wait.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple, TypedDict

from . import shm, wire
from .errors import InvalidInput, ModelNotReady, ServerUnavailable, translate
from .model import Arrays, ModelInfo, check_outputs, join, split
from .protocol import make_inputs, make_outputs
from .retry import Deadline
from .sequence import Step, check_batch
from .settings import Settings, reject_unknown


class InferOptions(TypedDict, total=False):
    """The keyword arguments of `infer`: `timeout` (s, this call, retries included), the model
    `version`, `shm` (this call's shared-memory choice), `class_count` (Triton's classification
    extension: the top classes of each output), `parameters` (Triton's request parameters, which
    the model reads: a detector's `threshold`)."""

    timeout: float | None
    version: str
    shm: bool | None
    class_count: int
    parameters: Mapping[str, str | int | float | bool]


class Part(NamedTuple):
    """One request of a call: a slice of the batch (`batch` 0 when the model does not batch)."""

    arrays: Arrays
    batch: int


@dataclass(slots=True)  # not frozen: made once per call on the hot path, and never changed
class Call:
    """One inference, checked and cut into requests of at most `max_batch_size`."""

    info: ModelInfo
    version: str
    parts: list[Part]
    outputs: list[str]
    class_count: int
    use_shm: bool
    deadline: Deadline
    step: Step | None = None  # a request of a sequence: its flags
    parameters: Mapping[str, str | int | float | bool] | None = None  # the request's own

    def sequence_arguments(self) -> dict[str, Any]:
        """The sequence keyword arguments of tritonclient's `infer` (none outside a sequence)."""
        return self.step.arguments() if self.step is not None else {}

    def arguments(self) -> dict[str, Any]:
        """Every keyword argument of tritonclient's `infer` beyond the tensors: the sequence's
        flags, the request's parameters."""
        extra = self.sequence_arguments()
        if self.parameters:
            extra["parameters"] = dict(self.parameters)
        return extra

    def shm_plan(self, part: Part) -> shm.Plan | None:
        """The part's shared-memory plan, or None when it travels in the request."""
        if not self.use_shm:
            return None
        return shm.plan(self.info, part.arrays, self.outputs, part.batch, self.class_count)

    def tensors(
        self, mod: ModuleType, part: Part, plan: shm.Plan | None, data: bool = True
    ) -> tuple[list[Any], list[Any]]:
        """The tritonclient InferInputs and InferRequestedOutputs of a part (`mod`: tritonclient.grpc
        or .http); the inputs carry their arrays unless they are in shared memory or ``data`` is
        False (`request` writes the arrays itself)."""
        in_shm = plan.input_names() if plan else ()
        skip = in_shm if data else part.arrays.keys()
        inputs = make_inputs(mod, self.info.datatypes, part.arrays, skip=skip)
        requested = make_outputs(mod, self.outputs, self.class_count)
        if plan is not None:
            shm.attach(plan, inputs, requested)
        return inputs, requested

    def request(self, mod: ModuleType, part: Part, plan: shm.Plan | None) -> bytes:
        """The part's gRPC ``ModelInfer`` request as bytes, each tensor copied once (`wire`; `mod`:
        tritonclient.grpc or its .aio)."""
        inputs, requested = self.tensors(mod, part, plan, data=False)
        tensors = wire.contents(self.info.datatypes, part.arrays, skip=plan.input_names() if plan else ())
        return wire.request(self.info.name, self.version, inputs, requested, tensors, self.arguments())

    def result(self, part: Part, response: Any, shared: Arrays) -> Arrays:
        """The part's outputs from the response (and the outputs read from shared memory), checked
        against the model's declared shapes (InvalidResponse)."""
        if shared:
            out = {n: shared[n] if n in shared else response.as_numpy(n) for n in self.outputs}
        else:
            out = {n: response.as_numpy(n) for n in self.outputs}
        return out if self.class_count else check_outputs(self.info, out, part.batch)

    def join(self, results: list[Arrays]) -> Arrays:
        """The outputs of the parts, concatenated in order."""
        return join(results)


def prepare(
    settings: Settings,
    info: ModelInfo,
    inputs: Mapping[str, Any],
    outputs: Iterable[str] | None,
    deadline: Deadline,
    options: InferOptions,
    step: Step | None = None,
) -> Call:
    """The call for `inputs` (with `step`, one request of a sequence, never split); raises
    InvalidInput (naming the input or output) before anything is sent."""
    reject_unknown(options, InferOptions.__optional_keys__, "infer")
    arrays, batch = info.check(inputs)
    names = output_names(info, outputs)
    limit = info.max_batch_size
    if step is not None:
        check_batch(info, batch)
    if 0 < limit < batch:
        parts = [Part(p, len(next(iter(p.values())))) for p in split(arrays, limit)]
    else:
        parts = [Part(arrays, batch)]
    use_shm = settings.use_shm(options.get("shm"), arrays)
    version, class_count = options.get("version", ""), options.get("class_count", 0)
    return Call(info, version, parts, names, class_count, use_shm, deadline, step, options.get("parameters"))


def output_names(info: ModelInfo, outputs: Iterable[str] | None) -> list[str]:
    """The outputs to ask for (all by default); InvalidInput for a name the model does not have."""
    names = list(info.outputs) if outputs is None else list(outputs)
    unknown = [n for n in names if n not in info.outputs]
    if unknown:
        raise InvalidInput(
            f"model '{info.name}' has no output(s) {', '.join(unknown)} (outputs: {', '.join(info.outputs)})"
        )
    return names


@dataclass(frozen=True)
class Probe:
    """One look at the server: `server` None when the look failed without saying whether it is up."""

    server: bool | None
    model: bool = False

    @property
    def ready(self) -> bool:
        return bool(self.server and self.model)

    @classmethod
    def failed(cls, server: bool | None, exc: BaseException) -> Probe:
        """The probe after `exc`; `server` is what was seen before it (None: nothing)."""
        if isinstance(translate(exc), ServerUnavailable):
            return cls(False)
        return cls(server)


@dataclass
class Readiness:
    """The policy of `wait_until_ready`: probe, then wait (growing from `first_delay` to
    `max_delay`, never past the deadline) until ready; after `timeout` seconds raise ModelNotReady
    if the server was seen up, else ServerUnavailable."""

    address: str
    model: str | None
    timeout: float
    first_delay: float = 0.02
    max_delay: float = 0.25
    end: float = field(init=False)
    _delay: float = field(init=False)
    _server_up: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.end = time.monotonic() + self.timeout
        self._delay = self.first_delay

    def done(self, probe: Probe) -> bool:
        """Whether the probe shows readiness; raises once the deadline has passed."""
        if probe.ready:
            return True
        if probe.server is not None:
            self._server_up = probe.server
        if time.monotonic() >= self.end:
            if self._server_up:
                raise ModelNotReady(f"model '{self.model}' not ready after {self.timeout}s")
            raise ServerUnavailable(f"server at {self.address} not ready after {self.timeout}s")
        return False

    def delay(self) -> float:
        """The wait before the next probe."""
        delay, self._delay = self._delay, min(self.max_delay, self._delay * 2)
        return max(0.0, min(delay, self.end - time.monotonic()))
