"""Client against the real tritonserver serving the zoo, over gRPC and HTTP."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from tritonclient._plugin import InferenceServerClientPlugin

from clients import NO_RETRY, Client, InferenceTimeout, InvalidInput, ModelNotFound, TritonClientError
from tests.clients._helpers import assert_no_regions, expected, request_count, simple_inputs
from tests.clients.held import MODEL as HELD
from tests.clients.held import HeldServer, held_inputs

pytestmark = pytest.mark.integration


@pytest.fixture
def client(url: str, protocol: str) -> Any:
    with Client(url, protocol) as c:
        yield c


def test_infer_simple(client: Client) -> None:
    inputs = simple_inputs(1)
    out = client.infer("simple", inputs)
    assert set(out) == {"OUTPUT0", "OUTPUT1"}
    for name, want in expected(inputs).items():
        np.testing.assert_array_equal(out[name], want)
    only = client.infer("simple", inputs, outputs=["OUTPUT1"])
    assert list(only) == ["OUTPUT1"]


def test_split_batch_reassembled_in_order(client: Client, triton: Any) -> None:
    limit = client.model("simple").max_batch_size
    assert limit > 0
    inputs = simple_inputs(3 * limit + 1)
    before = request_count(triton)
    out = client.infer("simple", inputs)
    for name, want in expected(inputs).items():
        np.testing.assert_array_equal(out[name], want)
    assert request_count(triton, expect=before + 4) == before + 4  # 3 full slices and one of 1


@pytest.mark.parametrize("batch", [1, 5, 17])
def test_shared_memory_on_and_off_identical(client: Client, triton: Any, batch: int) -> None:
    inputs = simple_inputs(batch)
    plain = client.infer("simple", inputs, shm=False)
    shared = client.infer("simple", inputs, shm=True)
    assert plain.keys() == shared.keys()
    for name in plain:
        np.testing.assert_array_equal(plain[name], shared[name])
    client.close()  # the server lets go of a request's regions just after its response
    assert_no_regions(triton)


def test_shared_memory_automatic_above_threshold(url: str, protocol: str, triton: Any) -> None:
    with Client(url, protocol, shm_threshold=1) as c:
        assert c.settings.use_shm(None, simple_inputs(1))
        out = c.infer("simple", simple_inputs(2))
    np.testing.assert_array_equal(out["OUTPUT0"], expected(simple_inputs(2))["OUTPUT0"])
    assert_no_regions(triton)


def test_wrong_dtype_rejected_before_sending(client: Client, triton: Any) -> None:
    inputs = simple_inputs(2)
    inputs["INPUT1"] = inputs["INPUT1"].astype(np.float32)
    before = request_count(triton)
    with pytest.raises(InvalidInput, match=r"INPUT1.*INT32.*float32"):
        client.infer("simple", inputs, shm=True)
    assert request_count(triton) == before
    assert_no_regions(triton)


def test_wrong_input_name_rejected_before_sending(client: Client, triton: Any) -> None:
    inputs = simple_inputs(2)
    inputs["INPUT_2"] = inputs.pop("INPUT1")
    before = request_count(triton)
    with pytest.raises(InvalidInput, match="no input 'INPUT_2'"):
        client.infer("simple", inputs)
    assert request_count(triton) == before


def test_wrong_shape_and_missing_input_rejected(client: Client) -> None:
    with pytest.raises(InvalidInput, match=r"INPUT0.*shape"):
        client.infer("simple", {"INPUT0": np.zeros((2, 15), np.int32), "INPUT1": np.zeros((2, 16), np.int32)})
    with pytest.raises(InvalidInput, match=r"needs input.*INPUT1"):
        client.infer("simple", {"INPUT0": np.zeros((2, 16), np.int32)})
    with pytest.raises(InvalidInput, match="no output"):
        client.infer("simple", simple_inputs(1), outputs=["OUTPUT9"])


def test_unknown_model(client: Client) -> None:
    with pytest.raises(ModelNotFound, match="nope"):
        client.infer("nope", {})


def test_timeout_is_typed(held: HeldServer, protocol: str) -> None:
    with Client(held.url(protocol), protocol, retry_policy=NO_RETRY) as c:
        c.model(HELD)
        with held.shut(), pytest.raises(InferenceTimeout):
            c.infer(HELD, held_inputs(), timeout=0.05)
        # the client stays usable after a timeout
        np.testing.assert_array_equal(c.infer(HELD, held_inputs())["Y"], held_inputs()["X"])


def test_health_metadata_config(client: Client) -> None:
    client.wait_until_ready(timeout=10, model="simple")
    assert client.is_ready() and client.is_ready("simple")
    assert not client.is_ready("nope")
    meta = client.metadata("simple")
    assert [t["name"] for t in meta["inputs"]] == ["INPUT0", "INPUT1"]
    config = client.config("simple")
    assert config["name"] == "simple" and int(config["max_batch_size"]) == 8
    info = client.model("simple")
    assert info.inputs["INPUT0"].datatype == "INT32" and info.inputs["INPUT0"].shape == (-1, 16)
    assert client.model("simple") is info  # cached
    assert client.triton is not None


def test_infer_many_in_order(client: Client, triton: Any) -> None:
    requests = [simple_inputs(b) for b in (1, 3, 9, 2)]
    results = client.infer_many("simple", requests)
    for inputs, out in zip(requests, results, strict=True):
        np.testing.assert_array_equal(out["OUTPUT1"], expected(inputs)["OUTPUT1"])
    client.close()
    assert_no_regions(triton)


def test_regions_of_a_timed_out_request_are_released_later(held: HeldServer, protocol: str) -> None:
    """The server refuses to unregister regions a request still uses: the client unregisters them at
    a later request, once the server has let go of them."""
    with Client(held.url(protocol), protocol, retry_policy=NO_RETRY) as c:
        c.model(HELD)
        with held.shut():
            with pytest.raises(InferenceTimeout):
                c.infer(HELD, held_inputs(), timeout=0.05, shm=True)
            assert len(c._pending) == 2  # the input and output regions, still in use by the server
        # The gate is open: the held request is answered, and the server lets go of its regions
        # just after that response, on a thread of its own. Each later request (answered after
        # the held one, by the model's one instance) tries the release again, until it succeeds.
        end = time.monotonic() + 60
        while c._pending and time.monotonic() < end:
            np.testing.assert_array_equal(c.infer(HELD, held_inputs())["Y"], held_inputs()["X"])
        assert not c._pending
    assert_no_regions(held.server)


class Recorder(InferenceServerClientPlugin):
    """A tritonclient plugin (as `BasicAuth` is one) that adds a header and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: Any) -> None:
        self.calls += 1
        request.headers["authorization"] = "Bearer test"


def test_inference_goes_as_tritonclient_sends_it(
    url: str, protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Over either protocol, inference carries the headers of the plugins registered on
    `client.triton`, prints what tritonclient prints when verbose, and fails once the client is
    closed (the gRPC requests written by `clients.wire` go on tritonclient's own channel)."""
    with Client(url, protocol) as plain:
        plugin = Recorder()
        plain.triton.register_plugin(plugin)
        plain.model("simple")
        calls = plugin.calls
        plain.infer("simple", simple_inputs(1))
        assert plugin.calls == calls + 1
    with pytest.raises(TritonClientError):
        plain.infer("simple", simple_inputs(1))
    with Client(url, protocol, verbose=True) as verbose:
        verbose.model("simple")
        capsys.readouterr()
        verbose.infer("simple", simple_inputs(1))
        assert "simple" in capsys.readouterr().out
