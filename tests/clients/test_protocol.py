"""clients.protocol: URLs, tritonclient modules, request objects (no server)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient

from clients.protocol import as_json, is_local, make_inputs, make_outputs, module, parse_url


@pytest.mark.parametrize(
    ("url", "protocol", "want"),
    [
        ("127.0.0.1:8001", None, ("127.0.0.1:8001", "grpc")),
        ("grpc://host:8001", None, ("host:8001", "grpc")),
        ("http://host:8000/", None, ("host:8000", "http")),
        ("https://host:8000", None, ("host:8000", "http")),
        ("host:8000", "http", ("host:8000", "http")),
        ("http://host:8001", "grpc", ("host:8001", "grpc")),
    ],
)
def test_parse_url(url: str, protocol: str | None, want: tuple[str, str]) -> None:
    assert parse_url(url, protocol) == want


def test_parse_url_refuses_an_unknown_protocol() -> None:
    with pytest.raises(ValueError, match=r"protocol must be one of \('grpc', 'http'\), got 'ws'"):
        parse_url("host:1", "ws")


@pytest.mark.parametrize(
    ("address", "local"),
    [("127.0.0.1:8001", True), ("localhost:8000", True), ("[::1]:8001", True), ("10.0.0.2:8001", False)],
)
def test_is_local(address: str, local: bool) -> None:
    assert is_local(address) is local


def test_module_picks_tritonclient_modules() -> None:
    assert module("grpc") is grpcclient and module("http") is httpclient
    assert module("grpc", aio=True) is grpcaio


def test_make_inputs_carries_data_except_skipped() -> None:
    arrays = {"A": np.arange(6, dtype=np.int32).reshape(2, 3), "B": np.ones((2, 1), np.float32)}
    a, b = make_inputs(httpclient, {"A": "INT32", "B": "FP32"}, arrays, skip={"B"})
    assert a._get_tensor() == {
        "name": "A",
        "shape": [2, 3],
        "datatype": "INT32",
        "parameters": {"binary_data_size": 24},
    }
    assert b._get_tensor() == {
        "name": "B",
        "shape": [2, 1],
        "datatype": "FP32",
    }  # no data: shared memory later
    assert b._get_binary_data() is None


def test_make_outputs_asks_for_classes() -> None:
    plain, classes = make_outputs(grpcclient, ["Y"], 0)[0], make_outputs(grpcclient, ["Y"], 3)[0]
    assert plain.name() == "Y" and "classification" not in plain._get_tensor().parameters
    assert classes._get_tensor().parameters["classification"].int64_param == 3


def test_as_json_only_for_grpc() -> None:
    assert as_json("grpc") == {"as_json": True} and as_json("http") == {}
