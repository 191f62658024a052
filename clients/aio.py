"""The asyncio client: the I/O of `core`'s calls over tritonclient.grpc.aio / tritonclient.http.aio."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import regions, retry, shm, wire
from .core import Call, InferOptions, Part, Probe, Readiness, prepare
from .model import Arrays, ModelInfo
from .protocol import as_json, module
from .sequence import SequenceId, SequenceState, check_sequence_id, new_sequence_id
from .settings import Options, Settings

if TYPE_CHECKING:
    from typing import Unpack


class AsyncClient:
    """`async with AsyncClient(url) as c: out = await c.infer("simple", {...})`.

    The options of `Client` (`concurrency` defaults to 8 here); `concurrency` bounds the requests
    in flight for `infer_many` and for the slices of a split batch.
    """

    def __init__(self, url: str, protocol: str | None = None, **options: Unpack[Options]) -> None:
        self.settings = Settings.from_url(url, protocol, options, concurrency=8)
        self.address, self.protocol = self.settings.address, self.settings.protocol
        self._mod = module(self.protocol)
        aio = module(self.protocol, aio=True)
        self._raw = aio.InferenceServerClient(self.address, verbose=self.settings.verbose)
        self._wire = wire.AsyncSender(self._raw) if self.protocol == "grpc" else None
        self._models: dict[tuple[str, str], ModelInfo] = {}
        self._pending: set[str] = set()  # regions the server did not let go of yet

    @property
    def triton(self) -> Any:
        return self._raw

    async def is_ready(self, model: str | None = None, version: str = "") -> bool:
        return (await self._probe(model, version)).ready

    async def wait_until_ready(
        self, timeout: float = 60.0, model: str | None = None, version: str = ""
    ) -> None:
        """As `Client.wait_until_ready`."""
        wait = Readiness(self.address, model, timeout)
        while not wait.done(await self._probe(model, version)):
            await asyncio.sleep(wait.delay())

    async def _probe(self, model: str | None, version: str) -> Probe:
        server: bool | None = None
        try:
            server = bool(await self._raw.is_server_ready())
            ready = model is None or bool(await self._raw.is_model_ready(model, version))
            return Probe(server, server and ready)
        except Exception as exc:
            return Probe.failed(server, exc)

    async def model(self, name: str, version: str = "", refresh: bool = False) -> ModelInfo:
        key = (name, version)
        if refresh or key not in self._models:
            fetch = lambda t: self._fetch(name, version, t)  # noqa: E731
            self._models[key] = await retry.acall(fetch, self.settings.retry_policy, self.settings.deadline())
        return self._models[key]

    async def metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return (await self.model(name, version)).metadata

    async def config(self, name: str, version: str = "") -> dict[str, Any]:
        return (await self.model(name, version)).config

    async def _fetch(self, name: str, version: str, timeout: float | None) -> ModelInfo:
        extra = as_json(self.protocol)
        metadata = await asyncio.wait_for(self._raw.get_model_metadata(name, version, **extra), timeout)
        config = await asyncio.wait_for(self._raw.get_model_config(name, version, **extra), timeout)
        return ModelInfo.from_triton(metadata, config)

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Iterable[str] | None = None,
        **options: Unpack[InferOptions],
    ) -> Arrays:
        """As `Client.infer`; the slices of a split batch run concurrently (at most `concurrency`)."""
        limit = asyncio.Semaphore(self.settings.concurrency)
        return await self._bounded(model, inputs, outputs, limit, options)

    async def infer_many(
        self,
        model: str,
        requests: Iterable[Mapping[str, Any]],
        outputs: Iterable[str] | None = None,
        **options: Unpack[InferOptions],
    ) -> list[Arrays]:
        """Many requests, at most `concurrency` in flight, results in order."""
        limit = asyncio.Semaphore(self.settings.concurrency)
        outs = None if outputs is None else list(outputs)
        await self.model(model, options.get("version", ""))  # read once, not by every request
        calls = (self._bounded(model, r, outs, limit, options) for r in requests)
        return list(await asyncio.gather(*calls))

    async def _bounded(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Iterable[str] | None,
        limit: asyncio.Semaphore,
        options: InferOptions,
    ) -> Arrays:
        deadline = self.settings.deadline(options.get("timeout"))
        info = await self.model(model, options.get("version", ""))
        call = prepare(self.settings, info, inputs, outputs, deadline, options)
        return call.join(list(await asyncio.gather(*(self._send(call, p, limit) for p in call.parts))))

    def sequence(self, model: str, sequence_id: SequenceId | None = None) -> AsyncSequence:
        """As `Client.sequence`: `async with client.sequence("vad") as seq: await seq.infer(chunk)`."""
        chosen = new_sequence_id() if sequence_id is None else check_sequence_id(sequence_id)
        return AsyncSequence(self, SequenceState(model, chosen))

    async def _step(
        self,
        state: SequenceState,
        inputs: Mapping[str, Any],
        outputs: Iterable[str] | None,
        end: bool,
        options: InferOptions,
    ) -> Arrays:
        """One request of a sequence, sent once (see `clients.sequence`)."""
        deadline = self.settings.deadline(options.get("timeout"))
        info = await self.model(state.model, options.get("version", ""))
        step = state.step(info, end)
        call = prepare(self.settings, info, inputs, outputs, deadline, options, step)
        attempt = lambda t: self._attempt(call, call.parts[0], t)  # noqa: E731
        result = await retry.acall(attempt, retry.NO_RETRY, deadline)
        state.answered(step)
        return result

    async def _send(self, call: Call, part: Part, limit: asyncio.Semaphore) -> Arrays:
        async with limit:
            attempt = lambda t: self._attempt(call, part, t)  # noqa: E731
            return await retry.acall(attempt, self.settings.retry_policy, call.deadline)

    async def _attempt(self, call: Call, part: Part, timeout: float | None) -> Arrays:
        plan = call.shm_plan(part)
        async with regions.aregistered(self._raw, plan, part.arrays, self._pending) as shared:
            response = await self._infer(call, part, plan, timeout)
            return call.result(part, response, shared.outputs())

    async def _infer(self, call: Call, part: Part, plan: shm.Plan | None, timeout: float | None) -> Any:
        if self._wire is not None:
            sent = self._wire.infer(call.request(self._mod, part, plan), timeout)
            return await asyncio.wait_for(sent, timeout)
        inputs, outputs = call.tensors(self._mod, part, plan)
        name, version = call.info.name, call.version
        request = self._raw.infer(name, inputs, model_version=version, outputs=outputs, **call.arguments())
        return await asyncio.wait_for(request, timeout)

    async def close(self) -> None:
        await regions.arelease(self._raw, self._pending, regions.CLOSE_WAIT_S)
        await self._raw.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncSequence:
    """The asyncio twin of `client.Sequence`."""

    def __init__(self, client: AsyncClient, state: SequenceState) -> None:
        self._client, self._state = client, state

    @property
    def sequence_id(self) -> SequenceId:
        return self._state.sequence_id

    @property
    def ended(self) -> bool:
        return self._state.ended

    async def infer(
        self,
        inputs: Mapping[str, Any],
        outputs: Iterable[str] | None = None,
        *,
        end: bool = False,
        **options: Unpack[InferOptions],
    ) -> Arrays:
        return await self._client._step(self._state, inputs, outputs, end, options)

    async def end(
        self, inputs: Mapping[str, Any], outputs: Iterable[str] | None = None, **options: Unpack[InferOptions]
    ) -> Arrays:
        return await self.infer(inputs, outputs, end=True, **options)

    async def __aenter__(self) -> AsyncSequence:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None
