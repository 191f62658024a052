"""The endpoint's uvicorn thread: it listens, reports a taken port, and stops."""

from __future__ import annotations

import errno
import socket
import urllib.error
import urllib.request

import pytest

from builder.server import find_free_port
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine

SETTINGS = Settings()
NOWHERE = f"127.0.0.1:{find_free_port()}"  # no tritonserver there


def test_port_0_listens_on_a_free_port_until_stopped() -> None:
    with OpenAIServer(SETTINGS, TritonEngine(NOWHERE), port=0) as server:
        assert server.port > 0 and server.is_running()
        with pytest.raises(urllib.error.HTTPError) as caught:  # no tritonserver there: 503
            urllib.request.urlopen(f"{server.url}/models", timeout=30)
        assert caught.value.code == 503
    assert not server.is_running()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def test_a_taken_port_is_an_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"could not listen on 127.0.0.1:{port}") as caught:
            OpenAIServer(SETTINGS, TritonEngine(NOWHERE), port=port).start()
    assert caught.value.errno == errno.EADDRINUSE  # the bind's own: the host's fault, named so
