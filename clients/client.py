"""The synchronous client: the I/O of `core`'s calls over tritonclient's gRPC or HTTP client."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from . import regions, retry, wire
from .core import Call, InferOptions, Part, Probe, Readiness, prepare
from .errors import InferenceTimeout
from .model import Arrays, ModelInfo
from .protocol import as_json, module
from .sequence import SequenceId, SequenceState, check_sequence_id, new_sequence_id
from .settings import SHM_THRESHOLD, Options, Settings

if TYPE_CHECKING:
    from typing import Unpack

__all__ = ["SHM_THRESHOLD", "Client", "Sequence"]


class Client:
    """`Client("127.0.0.1:8001").infer("simple", {"INPUT0": a, "INPUT1": b})` -> {"OUTPUT0": ..., ...}.

    Options (`timeout`, `retry_policy`, `shm`, `shm_threshold`, `concurrency` (default 4), `verbose`)
    are those of `Settings`. `triton` is the underlying tritonclient client, for everything this
    class does not wrap.
    """

    def __init__(self, url: str, protocol: str | None = None, **options: Unpack[Options]) -> None:
        self.settings = Settings.from_url(url, protocol, options, concurrency=4)
        self.address, self.protocol = self.settings.address, self.settings.protocol
        self._mod = module(self.protocol)
        self._owner = threading.get_ident()
        # HTTP: the socket timeout bounds each attempt; a gevent timer is armed only for shorter budgets.
        timeout = self.settings.timeout
        self._network_timeout = 60.0 if timeout is None else max(timeout, 1.0)
        self._raw = self._connect()
        self._wire = wire.Sender(self._raw) if self.protocol == "grpc" else None
        self._local = threading.local()
        self._extra: list[Any] = []  # per-thread HTTP clients, closed with this one
        self._models: dict[tuple[str, str], ModelInfo] = {}
        self._pending: set[str] = set()  # regions the server did not let go of yet
        self._pool: ThreadPoolExecutor | None = None

    @property
    def triton(self) -> Any:
        return self._raw

    def _connect(self) -> Any:
        verbose = self.settings.verbose
        if self.protocol == "grpc":
            return self._mod.InferenceServerClient(self.address, verbose=verbose)
        network = self._network_timeout
        return self._mod.InferenceServerClient(
            self.address, verbose=verbose, network_timeout=network, connection_timeout=network
        )

    def _thread_raw(self) -> Any:
        """gRPC clients are thread-safe; HTTP (gevent) clients get one per thread."""
        if self.protocol == "grpc" or threading.get_ident() == self._owner:
            return self._raw
        raw = getattr(self._local, "raw", None)
        if raw is None:
            raw = self._local.raw = self._connect()
            self._extra.append(raw)
        return raw

    def _reset_thread_raw(self) -> None:
        """Replace this thread's HTTP client after an interrupted request (its connection is unusable)."""
        old = self._thread_raw()
        new = self._connect()
        if old is self._raw:
            self._raw = new
        else:
            self._local.raw = new
            self._extra.append(new)
        with contextlib.suppress(Exception):
            old.close()

    # -- health, metadata, config --------------------------------------------------------------

    def is_ready(self, model: str | None = None, version: str = "") -> bool:
        return self._probe(model, version).ready

    def wait_until_ready(self, timeout: float = 60.0, model: str | None = None, version: str = "") -> None:
        """Block until the server (and `model`, if given) is ready; ServerUnavailable / ModelNotReady
        after `timeout` seconds."""
        wait = Readiness(self.address, model, timeout)
        while not wait.done(self._probe(model, version)):
            time.sleep(wait.delay())

    def _probe(self, model: str | None, version: str) -> Probe:
        server: bool | None = None
        try:
            raw = self._thread_raw()
            server = bool(raw.is_server_ready())
            return Probe(server, server and (model is None or bool(raw.is_model_ready(model, version))))
        except Exception as exc:
            return Probe.failed(server, exc)

    def model(self, name: str, version: str = "", refresh: bool = False) -> ModelInfo:
        """The model's signature, metadata and config (cached; `refresh` re-reads them)."""
        key = (name, version)
        if refresh or key not in self._models:
            fetch = lambda t: self._fetch(name, version, t)  # noqa: E731
            self._models[key] = retry.call(fetch, self.settings.retry_policy, self.settings.deadline())
        return self._models[key]

    def metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return self.model(name, version).metadata

    def config(self, name: str, version: str = "") -> dict[str, Any]:
        return self.model(name, version).config

    def _fetch(self, name: str, version: str, timeout: float | None) -> ModelInfo:
        extra: dict[str, Any] = as_json(self.protocol)
        if self.protocol == "grpc":
            extra["client_timeout"] = timeout
        raw = self._thread_raw()
        metadata = raw.get_model_metadata(name, version, **extra)
        return ModelInfo.from_triton(metadata, raw.get_model_config(name, version, **extra))

    # -- inference -----------------------------------------------------------------------------

    def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Iterable[str] | None = None,
        **options: Unpack[InferOptions],
    ) -> Arrays:
        """{output name: array}. Inputs are checked against the model first (InvalidInput); batches
        larger than max_batch_size are split, sent concurrently and joined in order. Options:
        `timeout`, `version`, `shm`, `class_count` (see `core.InferOptions`)."""
        deadline = self.settings.deadline(options.get("timeout"))
        info = self.model(model, options.get("version", ""))
        call = prepare(self.settings, info, inputs, outputs, deadline, options)
        if len(call.parts) == 1:  # the common path, kept short
            return self._send(call, call.parts[0])
        return call.join(list(self._executor().map(lambda p: self._send(call, p), call.parts)))

    def infer_many(
        self,
        model: str,
        requests: Iterable[Mapping[str, Any]],
        outputs: Iterable[str] | None = None,
        **options: Unpack[InferOptions],
    ) -> list[Arrays]:
        """Many requests, at most `concurrency` in flight, results in order."""
        outs = None if outputs is None else list(outputs)
        self.model(model, options.get("version", ""))  # read once, not by every thread
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="tritonforge-many") as pool:
            return list(pool.map(lambda r: self.infer(model, r, outs, **options), list(requests)))

    def sequence(self, model: str, sequence_id: SequenceId | None = None) -> Sequence:
        """A sequence of a stateful model, whose state the server keeps between its requests:
        `with client.sequence("vad") as seq: seq.infer(chunk); ...; seq.infer(last, end=True)`.
        `sequence_id` (default: a random one) must not be in use by another live sequence."""
        chosen = new_sequence_id() if sequence_id is None else check_sequence_id(sequence_id)
        return Sequence(self, SequenceState(model, chosen))

    def _step(
        self,
        state: SequenceState,
        inputs: Mapping[str, Any],
        outputs: Iterable[str] | None,
        end: bool,
        options: InferOptions,
    ) -> Arrays:
        """One request of a sequence, sent once (see `clients.sequence`)."""
        deadline = self.settings.deadline(options.get("timeout"))
        info = self.model(state.model, options.get("version", ""))
        step = state.step(info, end)
        call = prepare(self.settings, info, inputs, outputs, deadline, options, step)
        result = retry.call(lambda t: self._attempt(call, call.parts[0], t), retry.NO_RETRY, deadline)
        state.answered(step)
        return result

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            size = self.settings.concurrency
            self._pool = ThreadPoolExecutor(size, thread_name_prefix="tritonforge-client")
        return self._pool

    def _send(self, call: Call, part: Part) -> Arrays:
        return retry.call(lambda t: self._attempt(call, part, t), self.settings.retry_policy, call.deadline)

    def _attempt(self, call: Call, part: Part, timeout: float | None) -> Arrays:
        plan = call.shm_plan(part)
        with regions.registered(self._thread_raw(), plan, part.arrays, self._pending) as shared:
            if self._wire is not None:
                response = self._wire.infer(call.request(self._mod, part, plan), timeout)
            else:
                response = self._infer_http(call, *call.tensors(self._mod, part, plan), timeout)
            return call.result(part, response, shared.outputs())

    def _infer_http(self, call: Call, inputs: list[Any], outputs: list[Any], timeout: float | None) -> Any:
        raw, name, version = self._thread_raw(), call.info.name, call.version
        seq = call.arguments()
        if timeout is None or timeout >= 0.95 * self._network_timeout:
            return raw.infer(name, inputs, model_version=version, outputs=outputs, **seq)
        import gevent  # tritonclient's HTTP transport runs on gevent

        try:
            with gevent.Timeout(timeout):
                return raw.infer(name, inputs, model_version=version, outputs=outputs, **seq)
        except gevent.Timeout as exc:
            self._reset_thread_raw()
            raise InferenceTimeout(f"no response from {name} within {timeout:.3g}s") from exc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        regions.release(self._raw, self._pending, regions.CLOSE_WAIT_S)
        for raw in [self._raw, *self._extra]:
            with contextlib.suppress(Exception):
                raw.close()
        self._extra.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sequence:
    """One sequence of a stateful model (`Client.sequence`): each `infer` is the sequence's next
    request, the first one starting it; `end=True` (or `end(...)`) sends its last request, after
    which the server frees its state. Leaving the `with` block sends nothing (a request needs
    inputs): a sequence left without its end is dropped by the server once idle."""

    def __init__(self, client: Client, state: SequenceState) -> None:
        self._client, self._state = client, state

    @property
    def sequence_id(self) -> SequenceId:
        return self._state.sequence_id

    @property
    def ended(self) -> bool:
        return self._state.ended

    def infer(
        self,
        inputs: Mapping[str, Any],
        outputs: Iterable[str] | None = None,
        *,
        end: bool = False,
        **options: Unpack[InferOptions],
    ) -> Arrays:
        """The outputs of the sequence's next chunk (options as for `Client.infer`)."""
        return self._client._step(self._state, inputs, outputs, end, options)

    def end(
        self, inputs: Mapping[str, Any], outputs: Iterable[str] | None = None, **options: Unpack[InferOptions]
    ) -> Arrays:
        """The sequence's last chunk: its outputs, and the server frees the sequence's state."""
        return self.infer(inputs, outputs, end=True, **options)

    def __enter__(self) -> Sequence:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
