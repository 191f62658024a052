"""What Triton's own OpenAI-frontend client tests expect (their ``conftest.py`` fixtures), pointed
at this project's endpoint over the session's shared LLM server.

Their fixtures: ``server`` (``get_client()``, ``get_async_client()``), ``backend`` ("vllm": the
engine is vLLM), ``model``, ``prompt`` and ``messages`` (their values); their ``openai`` and
``asyncio`` marks, with the ``async def`` tests run on one event loop for the module (their
clients are class-scoped, and an ``AsyncOpenAI`` client keeps its connections on one loop).
Tests that fail only for the reasons in ``EXPECTED`` are marked xfail there (docs/llm_serving.md).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from builder.server import TritonServer
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine
from tests.integration.fixtures.llm_repo import MODEL

HERE = Path(__file__).parent
STOPPING = (
    "the model's own stopping choice: without max_tokens the answer may run to the context's end, as on "
    "vLLM's server, and SmolLM2-135M still rambles there on this prompt (max_model_len 512 here), so "
    "finish_reason is 'length' where the test wants 'stop' (its chat twin stops)"
)
# test name (class::function, without parameters) -> (why, strict, the exception it fails with)
EXPECTED: dict[str, tuple[str, bool, type[BaseException] | None]] = {
    f"{cls}::test_openai_client_completion": (STOPPING, False, AssertionError)
    for cls in ("TestOpenAIClient", "TestAsyncOpenAIClient")
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "openai: Triton's OpenAI-frontend tests (an OpenAI server)")
    config.addinivalue_line("markers", "asyncio: an async test, run on the module's event loop")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in Path(str(item.path)).parents:
            continue
        item.add_marker(pytest.mark.integration)
        key = "::".join(item.nodeid.split("[", 1)[0].split("::")[1:3])
        if key in EXPECTED:
            reason, strict, raises = EXPECTED[key]
            item.add_marker(pytest.mark.xfail(reason=reason, strict=strict, raises=raises))


_LOOP: list[asyncio.AbstractEventLoop] = []


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs an ``async def`` test to completion on the one loop (pytest-asyncio is not needed)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    if not _LOOP:
        _LOOP.append(asyncio.new_event_loop())
    names = pyfuncitem._fixtureinfo.argnames
    _LOOP[0].run_until_complete(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
    return True


def pytest_unconfigure() -> None:
    while _LOOP:
        _LOOP.pop().close()


@dataclass(frozen=True)
class Endpoint:
    """Their ``OpenAIServer``'s client side: clients of the endpoint at ``url`` (…/v1)."""

    url: str

    def get_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key="EMPTY", max_retries=0, timeout=120)

    def get_async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url, api_key="EMPTY", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def server(llm_triton: TritonServer) -> Iterator[Endpoint]:
    with OpenAIServer(Settings(), TritonEngine(llm_triton.grpc_url), port=0) as endpoint:
        yield Endpoint(endpoint.url)


@pytest.fixture(scope="session")
def backend() -> str:
    return "vllm"


@pytest.fixture(scope="session")
def model() -> str:
    return MODEL


@pytest.fixture(scope="session")
def prompt() -> str:
    return "What is machine learning?"


@pytest.fixture(scope="session")
def messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]
