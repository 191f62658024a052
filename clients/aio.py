"""The asyncio client: the surface of `Client`, over tritonclient.grpc.aio / tritonclient.http.aio."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from . import retry, shm
from .client import SHM_THRESHOLD, _output_names
from .errors import ModelNotReady, ServerUnavailable, translate
from .model import Arrays, ModelInfo, check_outputs, join, split
from .protocol import as_arrays, as_json, is_local, make_inputs, make_outputs, module, parse_url
from .retry import Deadline, RetryPolicy


class AsyncClient:
    """`async with AsyncClient(url) as c: out = await c.infer("simple", {...})`.

    `concurrency` bounds the requests in flight for `infer_many` and for the slices of a split batch.
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
        concurrency: int = 8,
        verbose: bool = False,
    ) -> None:
        self.address, self.protocol = parse_url(url, protocol)
        self.timeout, self.retry = timeout, retry_policy or RetryPolicy()
        self.shm, self.shm_threshold, self.concurrency = shm, shm_threshold, concurrency
        self._shm_possible = is_local(self.address)  # automatic shared memory only on this host
        self._mod = module(self.protocol)
        self._raw = module(self.protocol, aio=True).InferenceServerClient(self.address, verbose=verbose)
        self._models: dict[tuple[str, str], ModelInfo] = {}

    @property
    def triton(self) -> Any:
        return self._raw

    async def is_ready(self, model: str | None = None, version: str = "") -> bool:
        try:
            ok = await self._raw.is_server_ready()
            return bool(ok and (model is None or await self._raw.is_model_ready(model, version)))
        except Exception:
            return False

    async def wait_until_ready(
        self, timeout: float = 60.0, model: str | None = None, version: str = ""
    ) -> None:
        loop = asyncio.get_running_loop()
        end, server_up = loop.time() + timeout, False
        while True:
            try:
                server_up = bool(await self._raw.is_server_ready())
                if server_up and (model is None or await self._raw.is_model_ready(model, version)):
                    return
            except Exception as exc:
                server_up = server_up and not isinstance(translate(exc), ServerUnavailable)
            if loop.time() >= end:
                if server_up:
                    raise ModelNotReady(f"model '{model}' not ready after {timeout}s")
                raise ServerUnavailable(f"server at {self.address} not ready after {timeout}s")
            await asyncio.sleep(0.1)

    async def model(self, name: str, version: str = "", refresh: bool = False) -> ModelInfo:
        key = (name, version)
        if refresh or key not in self._models:
            self._models[key] = await retry.acall(
                lambda t: self._fetch(name, version, t), self.retry, Deadline(self.timeout)
            )
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
        *,
        timeout: float | None = None,
        version: str = "",
        shm: bool | None = None,
        class_count: int = 0,
        _limit: asyncio.Semaphore | None = None,
    ) -> Arrays:
        """As `Client.infer`; the slices of a split batch run concurrently (at most `concurrency`)."""
        deadline = Deadline(self.timeout if timeout is None else timeout)
        info = await self.model(model, version)
        arrays, batch = info.check(inputs)
        names = _output_names(info, outputs)
        use_shm = self._use_shm(shm, arrays)
        limit = _limit or asyncio.Semaphore(self.concurrency)
        size = info.max_batch_size
        parts = split(arrays, size) if 0 < size < batch else [arrays]
        sends = [self._send(info, version, p, names, class_count, use_shm, deadline, limit) for p in parts]
        return join(list(await asyncio.gather(*sends)))

    async def infer_many(
        self,
        model: str,
        requests: Iterable[Mapping[str, Any]],
        outputs: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> list[Arrays]:
        """Many requests, at most `concurrency` in flight, results in order."""
        limit = asyncio.Semaphore(self.concurrency)
        outs = None if outputs is None else list(outputs)
        return list(
            await asyncio.gather(*(self.infer(model, r, outs, _limit=limit, **kwargs) for r in requests))
        )

    def _use_shm(self, flag: bool | None, arrays: Arrays) -> bool:
        return shm.wanted(flag, self.shm, self._shm_possible, arrays, self.shm_threshold)

    async def _send(
        self,
        info: ModelInfo,
        version: str,
        arrays: Arrays,
        names: list[str],
        class_count: int,
        use_shm: bool,
        deadline: Deadline,
        limit: asyncio.Semaphore,
    ) -> Arrays:
        batch = next(iter(arrays.values())).shape[0] if info.max_batch_size > 0 and arrays else 0

        async def attempt(timeout: float | None) -> Arrays:
            if not use_shm:
                out = await self._request(info, version, arrays, names, class_count, timeout, None)
            else:
                plan = shm.plan(info, arrays, names, batch, class_count)
                async with shm.aregistered(self._raw, plan, arrays):
                    out = await self._request(info, version, arrays, names, class_count, timeout, plan)
            return out if class_count else check_outputs(info, out, batch)

        async with limit:
            return await retry.acall(attempt, self.retry, deadline)

    async def _request(
        self,
        info: ModelInfo,
        version: str,
        arrays: Arrays,
        names: list[str],
        class_count: int,
        timeout: float | None,
        plan: shm.Plan | None,
    ) -> Arrays:
        in_shm = {s.name for s in plan.inputs} if plan else set()
        inputs = make_inputs(self._mod, info.datatypes, arrays, skip=in_shm)
        requested = make_outputs(self._mod, names, class_count)
        if plan:
            shm.attach(plan, inputs, requested)
        extra = {"client_timeout": timeout} if self.protocol == "grpc" else {}
        call = self._raw.infer(info.name, inputs, model_version=version, outputs=requested, **extra)
        result = await asyncio.wait_for(call, timeout)
        out = shm.read_outputs(plan) if plan else {}
        out.update(as_arrays(result, names, skip=set(out)))
        return {n: out[n] for n in names}

    async def close(self) -> None:
        await self._raw.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
