"""The synchronous client: one call per inference over tritonclient's gRPC or HTTP client."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import retry, shm
from .errors import InferenceTimeout, InvalidInput, ModelNotReady, ServerUnavailable, translate
from .model import Arrays, ModelInfo, check_outputs, join, split
from .protocol import as_arrays, as_json, is_local, make_inputs, make_outputs, module, parse_url
from .retry import Deadline, RetryPolicy

SHM_THRESHOLD = 4 << 20  # bytes of fixed-size inputs above which shared memory is used automatically


class Client:
    """`Client("127.0.0.1:8001").infer("simple", {"INPUT0": a, "INPUT1": b})` -> {"OUTPUT0": ..., ...}.

    `timeout` (s) bounds each call, retries included (None: no deadline, as in tritonclient; retries
    still stop after `retry_policy.total` s); `shm=None` uses system shared memory automatically
    for large inputs to a server on this host, `True`/`False` force it on/off. `triton` is the
    underlying tritonclient client, for everything this class does not wrap.
    """

    def __init__(
        self,
        url: str,
        protocol: str | None = None,
        *,
        timeout: float | None = None,
        retry_policy: RetryPolicy | None = None,
        shm: bool | None = None,
        shm_threshold: int = SHM_THRESHOLD,
        concurrency: int = 4,
        verbose: bool = False,
    ) -> None:
        self.address, self.protocol = parse_url(url, protocol)
        self.timeout, self.retry = timeout, retry_policy or RetryPolicy()
        self.shm, self.shm_threshold, self.concurrency = shm, shm_threshold, concurrency
        self._shm_possible = is_local(self.address)  # automatic shared memory only on this host
        self._mod, self._verbose = module(self.protocol), verbose
        self._owner = threading.get_ident()
        # HTTP: the socket timeout bounds each attempt; a gevent timer is armed only for shorter budgets.
        self._network_timeout = 60.0 if timeout is None else max(timeout, 1.0)
        self._raw = self._connect()
        self._local = threading.local()
        self._extra: list[Any] = []  # per-thread HTTP clients, closed with this one
        self._models: dict[tuple[str, str], ModelInfo] = {}
        self._pool: ThreadPoolExecutor | None = None

    @property
    def triton(self) -> Any:
        return self._raw

    def _connect(self) -> Any:
        if self.protocol == "grpc":
            return self._mod.InferenceServerClient(self.address, verbose=self._verbose)
        network = self._network_timeout
        return self._mod.InferenceServerClient(
            self.address, verbose=self._verbose, network_timeout=network, connection_timeout=network
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
        try:
            raw = self._thread_raw()
            return bool(raw.is_server_ready() and (model is None or raw.is_model_ready(model, version)))
        except Exception:
            return False

    def wait_until_ready(self, timeout: float = 60.0, model: str | None = None, version: str = "") -> None:
        """Block until the server (and `model`, if given) is ready; ServerUnavailable / ModelNotReady
        after `timeout` seconds."""
        end, server_up = time.monotonic() + timeout, False
        while True:
            try:
                raw = self._thread_raw()
                server_up = bool(raw.is_server_ready())
                if server_up and (model is None or raw.is_model_ready(model, version)):
                    return
            except Exception as exc:
                server_up = server_up and not isinstance(translate(exc), ServerUnavailable)
            if time.monotonic() >= end:
                if server_up:
                    raise ModelNotReady(f"model '{model}' not ready after {timeout}s")
                raise ServerUnavailable(f"server at {self.address} not ready after {timeout}s")
            time.sleep(0.1)

    def model(self, name: str, version: str = "", refresh: bool = False) -> ModelInfo:
        """The model's signature, metadata and config (cached; `refresh` re-reads them)."""
        key = (name, version)
        if refresh or key not in self._models:
            self._models[key] = retry.call(
                lambda t: self._fetch(name, version, t), self.retry, Deadline(self.timeout)
            )
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
        *,
        timeout: float | None = None,
        version: str = "",
        shm: bool | None = None,
        class_count: int = 0,
    ) -> Arrays:
        """{output name: array}. Inputs are checked against the model first (InvalidInput); batches
        larger than max_batch_size are split, sent concurrently and joined in order. `class_count`
        asks for the top classes of the outputs (Triton's classification extension)."""
        deadline = Deadline(self.timeout if timeout is None else timeout)
        info = self.model(model, version)
        arrays, batch = info.check(inputs)
        names = _output_names(info, outputs)
        use_shm = self._use_shm(shm, arrays)
        limit = info.max_batch_size
        if batch <= limit or limit <= 0:
            return self._send(info, version, arrays, names, batch, class_count, use_shm, deadline)
        parts = split(arrays, limit)
        pool = self._executor()
        results = pool.map(
            lambda p: self._send(
                info, version, p, names, len(next(iter(p.values()))), class_count, use_shm, deadline
            ),
            parts,
        )
        return join(list(results))

    def infer_many(
        self,
        model: str,
        requests: Iterable[Mapping[str, Any]],
        outputs: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> list[Arrays]:
        """Many requests, at most `concurrency` in flight, results in order."""
        outs = None if outputs is None else list(outputs)
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="tritonforge-many") as pool:
            return list(pool.map(lambda r: self.infer(model, r, outs, **kwargs), list(requests)))

    def _use_shm(self, flag: bool | None, arrays: Arrays) -> bool:
        return shm.wanted(flag, self.shm, self._shm_possible, arrays, self.shm_threshold)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tritonforge-client")
        return self._pool

    def _send(
        self,
        info: ModelInfo,
        version: str,
        arrays: Arrays,
        names: list[str],
        batch: int,
        class_count: int,
        use_shm: bool,
        deadline: Deadline,
    ) -> Arrays:
        def attempt(timeout: float | None) -> Arrays:
            if not use_shm:
                out = self._request(info, version, arrays, names, class_count, timeout, None)
            else:
                plan = shm.plan(info, arrays, names, batch, class_count)
                with shm.registered(self._thread_raw(), plan, arrays):
                    out = self._request(info, version, arrays, names, class_count, timeout, plan)
            return out if class_count else check_outputs(info, out, batch)

        return retry.call(attempt, self.retry, deadline)

    def _request(
        self,
        info: ModelInfo,
        version: str,
        arrays: Arrays,
        names: list[str],
        class_count: int,
        timeout: float | None,
        plan: shm.Plan | None,
    ) -> Arrays:
        if plan is None:  # the common path, kept short
            inputs = make_inputs(self._mod, info.datatypes, arrays, skip=())
            result = self._call(
                info.name, version, inputs, make_outputs(self._mod, names, class_count), timeout
            )
            return {n: result.as_numpy(n) for n in names}
        inputs = make_inputs(self._mod, info.datatypes, arrays, skip={s.name for s in plan.inputs})
        requested = make_outputs(self._mod, names, class_count)
        shm.attach(plan, inputs, requested)
        result = self._call(info.name, version, inputs, requested, timeout)
        out = shm.read_outputs(plan)
        out.update(as_arrays(result, names, skip=set(out)))
        return {n: out[n] for n in names}

    def _call(
        self, model: str, version: str, inputs: list[Any], outputs: list[Any], timeout: float | None
    ) -> Any:
        raw = self._thread_raw()
        if self.protocol == "grpc":
            return raw.infer(model, inputs, model_version=version, outputs=outputs, client_timeout=timeout)
        if timeout is None or timeout >= 0.95 * self._network_timeout:
            return raw.infer(model, inputs, model_version=version, outputs=outputs)
        import gevent  # tritonclient's HTTP transport runs on gevent

        try:
            with gevent.Timeout(timeout):
                return raw.infer(model, inputs, model_version=version, outputs=outputs)
        except gevent.Timeout as exc:
            self._reset_thread_raw()
            raise InferenceTimeout(f"no response from {model} within {timeout:.3g}s") from exc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for raw in [self._raw, *self._extra]:
            with contextlib.suppress(Exception):
                raw.close()
        self._extra.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _output_names(info: ModelInfo, outputs: Iterable[str] | None) -> list[str]:
    names = list(info.outputs) if outputs is None else list(outputs)
    unknown = [n for n in names if n not in info.outputs]
    if unknown:
        raise InvalidInput(
            f"model '{info.name}' has no output(s) {', '.join(unknown)} (outputs: {', '.join(info.outputs)})"
        )
    return names
