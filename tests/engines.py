"""Where `make test` runs vLLM engines, and how many are up at once.

`make test` runs the tests in three processes (pytest-xdist, ``--dist loadgroup``). Each module is an
xdist group of its own, so its module fixtures start once, except the tests that may start a vLLM
engine (GiBs each): they form one group, ENGINE_GROUP, run in one process one after another.
xdist 3.8's loadgroup tells the scheduler each test's group by renaming the test (``item._nodeid``),
which pytest 9.2 no longer reads (a node's id is ``item._id``): the workers write the groups to the
file GROUPS_ENV names, and GroupScheduling, xdist's loadgroup scheduler, reads them there. A test
is in it when it uses a fixture that starts an engine (ENGINE_FIXTURES), when its module takes from
the LLM repository helpers (LLM_REPO), when its module says so itself
(``pytestmark = pytest.mark.xdist_group(ENGINE_GROUP)``), or when it builds models.yaml (marker
``llm_build``): a cold stage cache verifies its LLM on two engines. `make test` builds the zoo into
the tests' stage cache before its processes start (``--build-zoo-first``, which sets
ZOO_BUILT_ENV), and then those builds, and the readers of ``zoo_repo``, start no engine and run in
any process.

That process keeps at most ENGINES_AT_ONCE engines up. The session's shared servers (the zoo's,
``triton``, and the shared LLM server, ``llm_triton``; one engine each) stay up while a module holds
them and after, and each is stopped before a test whose module does not ask for it, to start again
when a later module asks (SharedServers). The group runs its modules in the order that starts each shared
server once (``phase``): the zoo's users, then those of both, then the LLM server's, then the
modules with engines of their own (a server's two lanes, a build verifying two dtypes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from builder.server import TritonServer

ENGINE_GROUP = "engines"
ENGINES_AT_ONCE = 2
ZOO, LLM = "triton", "llm_triton"  # the shared servers, by their fixtures' names
ENGINE_FIXTURES = frozenset({"zoo_repo", ZOO, LLM})
LLM_REPO = "tests.integration.fixtures.llm_repo"
GROUPS_ENV = "TRITONFORGE_TEST_GROUPS"  # the file the workers write each test's group to
ZOO_BUILT_ENV = "TRITONFORGE_TEST_ZOO_BUILT"  # set once the zoo's stages are in the test cache


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def starts_engine(item: pytest.Item) -> bool:
    """Whether the test uses a fixture that starts an engine, or its module takes from the helpers
    that write and serve an LLM repository. ``zoo_repo`` builds the zoo, whose LLM it verifies on
    two engines, unless the zoo was built first: then its readers start none."""
    fixtures = ENGINE_FIXTURES - {"zoo_repo"} if ZOO_BUILT_ENV in os.environ else ENGINE_FIXTURES
    if fixtures & set(getattr(item, "fixturenames", ())):
        return True
    names = getattr(getattr(item, "module", None), "__dict__", {}).values()
    return any(getattr(value, "__module__", None) == LLM_REPO for value in names)


def group_of(item: pytest.Item) -> str:
    """The item's xdist group: its mark (its module's own, or assign_groups'), else its own_group."""
    marked = item.get_closest_marker("xdist_group")
    if marked is not None:
        return str(marked.args[0] if marked.args else marked.kwargs.get("name", "default"))
    return own_group(item)


def own_group(item: pytest.Item) -> str:
    """ENGINE_GROUP for a test that may start an engine, else its module."""
    if starts_engine(item) or (item.get_closest_marker("llm_build") and ZOO_BUILT_ENV not in os.environ):
        return ENGINE_GROUP
    return module_of(item.nodeid)


def assign_groups(items: list[pytest.Item]) -> dict[str, frozenset[str]]:
    """Mark every item with its module's group (the engine group where any of its tests is in it),
    and order the engine group's modules by phase (a stable sort: every process collects the same
    order, as xdist requires). Returns the shared servers each module asks for (module_asks)."""
    engines = {module_of(item.nodeid) for item in items if group_of(item) == ENGINE_GROUP}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = module_of(item.nodeid)
            item.add_marker(pytest.mark.xdist_group(ENGINE_GROUP if module in engines else module))
    asked = module_asks(items)
    items.sort(key=lambda item: order(item, engines, asked))
    return asked


def module_asks(items: list[pytest.Item]) -> dict[str, frozenset[str]]:
    """The shared servers each module's tests ask for, together."""
    asked: dict[str, frozenset[str]] = {}
    for item in items:
        module = module_of(item.nodeid)
        asked[module] = asked.get(module, frozenset()) | shared_asked(item)
    return asked


def order(item: pytest.Item, engines: set[str], asked: dict[str, frozenset[str]]) -> tuple[int, int]:
    """The engine group first (the longest, by phase), then the builds of models.yaml (minutes
    each), then the rest in collection order: with ``--no-loadscope-reorder`` xdist hands the groups
    out in this order, so the other process starts on the long builds while the first runs engines."""
    module = module_of(item.nodeid)
    if module in engines:
        return 0, PHASES[asked[module]]
    return (1, 0) if item.get_closest_marker("llm_build") else (2, 0)


def shared_asked(item: pytest.Item) -> frozenset[str]:
    """The shared servers the test asks for, by their fixtures' names."""
    return frozenset({ZOO, LLM} & set(getattr(item, "fixturenames", ())))


# A module's phase in the engine group, from the shared servers its tests ask for: the zoo's only,
# both, the LLM server's only, neither (those start engines of their own).
PHASES = {frozenset({ZOO}): 0, frozenset({ZOO, LLM}): 1, frozenset({LLM}): 2, frozenset(): 3}


def write_groups(items: list[pytest.Item], path: Path) -> None:
    """Each test's group, written whole at once: every worker writes the same."""
    scratch = path.with_name(f"{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps({item.nodeid: group_of(item) for item in items}))
    scratch.replace(path)


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's ``--dist loadgroup``, each test's group read from the workers' file. The scheduler
    asks first when every worker has collected, so has written it."""

    def __init__(self, config: pytest.Config, log: Any = None, groups: Path | None = None) -> None:
        super().__init__(config, log)
        self.groups_file, self.groups = groups, dict[str, str]()

    def _split_scope(self, nodeid: str) -> str:
        if not self.groups and self.groups_file is not None:
            self.groups = json.loads(self.groups_file.read_text())
        return self.groups[nodeid]  # a test the workers did not write is a mismatch: fail, not guess


@dataclass
class Shared:
    """One shared server: the running one, and how many modules hold it."""

    server: TritonServer | None = None
    holders: int = 0


class SharedServers:
    """The engine group's shared servers, started when a module first holds one and stopped before a
    test whose module does not ask for it (``make_room``) or when the session ends."""

    def __init__(self) -> None:
        self._servers: dict[str, Shared] = {}

    @contextmanager
    def hold(self, name: str, start: Callable[[], TritonServer]) -> Iterator[TritonServer]:
        shared = self._servers.setdefault(name, Shared())
        if shared.server is None:
            shared.server = start()
        shared.holders += 1
        try:
            yield shared.server
        finally:
            shared.holders -= 1

    def make_room(self, keep: set[str]) -> None:
        """Stop every shared server no module holds, except those named in ``keep``."""
        for name, shared in self._servers.items():
            if shared.server is not None and shared.holders == 0 and name not in keep:
                shared.server.stop()
                shared.server = None

    def running(self) -> list[TritonServer]:
        return [s.server for s in self._servers.values() if s.server is not None]

    def stop_all(self) -> None:
        self.make_room(keep=set())
