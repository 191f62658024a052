"""The endpoint's guard and its errors before any model answers (no LLM needed: the Triton
address has nothing listening, so what reaches Triton is refused as unavailable)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from builder.openai_frontend.app import Settings, create_app
from builder.server import find_free_port

KEY = "k3y"
LIMIT = 1024


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(f"127.0.0.1:{find_free_port()}", api_key=KEY, max_body_bytes=LIMIT)
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


def _error(reply: object) -> dict[str, object]:
    body = reply.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Bearer {KEY}x", KEY])
def test_without_the_key_every_path_is_401(client: TestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header else {"Authorization": ""}
    reply = client.get("/v1/models", headers=headers)
    assert reply.status_code == 401 and _error(reply)["code"] == "invalid_api_key"
    assert reply.headers["www-authenticate"] == "Bearer"


def test_a_body_over_the_limit_is_413_declared_or_streamed(client: TestClient) -> None:
    big = b"{" + b" " * LIMIT + b"}"
    reply = client.post("/v1/completions", content=big)
    assert reply.status_code == 413 and _error(reply)["code"] == "request_too_large"
    chunked = client.post("/v1/completions", content=iter([big[:600], big[600:]]))  # no Content-Length
    assert chunked.status_code == 413


def test_bad_json_is_400_before_triton_is_asked(client: TestClient) -> None:
    reply = client.post("/v1/chat/completions", content=b"{not json")
    assert reply.status_code == 400 and _error(reply)["type"] == "invalid_request_error"
    reply = client.post("/v1/chat/completions", json={"model": "m", "messages": [], "n": 3})
    assert reply.status_code == 400


def test_triton_unreachable_is_503(client: TestClient) -> None:
    reply = client.get("/v1/models")
    assert reply.status_code == 503 and _error(reply)["type"] == "server_error"
    reply = client.post("/v1/completions", json={"model": "m", "prompt": "p"})
    assert reply.status_code == 503
