"""A client's settings, one typed record for the sync and asyncio clients."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypedDict

from .protocol import is_local, parse_url
from .retry import Deadline, RetryPolicy

SHM_THRESHOLD = 4 << 20  # bytes of fixed-size inputs above which shared memory is used automatically


class Options(TypedDict, total=False):
    """The keyword arguments of `Client(...)` and `AsyncClient(...)` after the URL and protocol."""

    timeout: float | None
    retry_policy: RetryPolicy | None
    shm: bool | None
    shm_threshold: int
    concurrency: int
    verbose: bool


def reject_unknown(options: Mapping[str, object], known: AbstractSet[str], what: str) -> None:
    """TypeError naming the keyword arguments that are not `known` options."""
    if not options or options.keys() <= known:
        return
    unknown = sorted(set(options) - set(known))
    if unknown:
        names = ", ".join(sorted(known))
        raise TypeError(f"unknown {what} option(s) {', '.join(unknown)} (options: {names})")


@dataclass(frozen=True)
class Settings:
    """`timeout` (s) bounds each call, retries included (None: no deadline; retries still stop after
    `retry_policy.total` s); `shm=None` uses system shared memory automatically for inputs of at
    least `shm_threshold` bytes to a server on this host, `True`/`False` force it on/off;
    `concurrency` bounds the requests in flight for `infer_many` and the slices of a split batch."""

    address: str  # host:port
    protocol: str  # "grpc" or "http"
    timeout: float | None = None
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    shm: bool | None = None
    shm_threshold: int = SHM_THRESHOLD
    concurrency: int = 4
    verbose: bool = False

    @classmethod
    def from_url(cls, url: str, protocol: str | None, options: Options, concurrency: int) -> Settings:
        """The settings for `url` (`host:port`, `grpc://...`, `http://...`); `concurrency` is the
        client's default when `options` do not set it."""
        reject_unknown(options, Options.__optional_keys__, "client")
        address, protocol = parse_url(url, protocol)
        given: dict[str, Any] = {"concurrency": concurrency, **options}
        if given.get("retry_policy") is None:
            given.pop("retry_policy", None)
        if given["concurrency"] < 1:
            raise ValueError(f"concurrency must be at least 1, got {given['concurrency']}")
        return cls(address, protocol, **given)

    @cached_property
    def shm_possible(self) -> bool:
        """Whether the server shares this host's /dev/shm (automatic shared memory only then)."""
        return is_local(self.address)

    def use_shm(self, flag: bool | None, arrays: Mapping[str, Any]) -> bool:
        """Shared memory for one request: the call's flag, else the client's, else automatically
        when the server is on this host and the inputs reach the threshold."""
        if flag is not None or self.shm is not None:
            return bool(self.shm if flag is None else flag)
        return self.shm_possible and sum(a.nbytes for a in arrays.values()) >= self.shm_threshold

    def deadline(self, timeout: float | None = None) -> Deadline:
        """One call's budget: the call's `timeout`, else the client's."""
        return Deadline(self.timeout if timeout is None else timeout)
