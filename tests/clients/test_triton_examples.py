"""The conventions of Triton's standard example clients for ``simple``, using tritonclient alone.

Triton's examples (``simple_{grpc,http}_infer_client.py``, ``simple_{grpc,http}_shm_client.py``)
call a model named ``simple`` with INT32 ``INPUT0`` / ``INPUT1`` of shape [1, 16], read
``OUTPUT0`` = sum and ``OUTPUT1`` = difference, and the shared-memory variants pass all four
tensors through registered system shared-memory regions. These tests make the same calls, so a
repository that passes them serves those examples unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.clients._helpers import assert_no_regions

pytestmark = pytest.mark.integration

PROTOCOLS = {"grpc": grpcclient, "http": httpclient}


def connect(triton: Any, protocol: str) -> Any:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(triton.grpc_url)
    return httpclient.InferenceServerClient(triton.http_url.split("://", 1)[-1])


def example_inputs() -> tuple[np.ndarray, np.ndarray]:
    return np.arange(16, dtype=np.int32).reshape(1, 16), np.ones((1, 16), dtype=np.int32)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_infer_example(triton: Any, protocol: str) -> None:
    lib, client = PROTOCOLS[protocol], connect(triton, protocol)
    in0, in1 = example_inputs()
    inputs = [lib.InferInput("INPUT0", [1, 16], "INT32"), lib.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(in0)
    inputs[1].set_data_from_numpy(in1)
    outputs = [lib.InferRequestedOutput("OUTPUT0"), lib.InferRequestedOutput("OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), in0 + in1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), in0 - in1)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_system_shared_memory_example(triton: Any, protocol: str) -> None:
    lib, client = PROTOCOLS[protocol], connect(triton, protocol)
    in0, in1 = example_inputs()
    size = in0.nbytes
    tag = f"simple_example_{protocol}"
    out_handle = shm.create_shared_memory_region(f"{tag}_out", f"/{tag}_out", size * 2)
    in_handle = shm.create_shared_memory_region(f"{tag}_in", f"/{tag}_in", size * 2)
    try:
        client.register_system_shared_memory(f"{tag}_out", f"/{tag}_out", size * 2)
        client.register_system_shared_memory(f"{tag}_in", f"/{tag}_in", size * 2)
        shm.set_shared_memory_region(in_handle, [in0])
        shm.set_shared_memory_region(in_handle, [in1], offset=size)
        inputs = [lib.InferInput("INPUT0", [1, 16], "INT32"), lib.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory(f"{tag}_in", size)
        inputs[1].set_shared_memory(f"{tag}_in", size, offset=size)
        outputs = [lib.InferRequestedOutput("OUTPUT0"), lib.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory(f"{tag}_out", size)
        outputs[1].set_shared_memory(f"{tag}_out", size, offset=size)
        client.infer("simple", inputs, outputs=outputs)
        out0 = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
        out1 = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=size)
        np.testing.assert_array_equal(out0, in0 + in1)
        np.testing.assert_array_equal(out1, in0 - in1)
    finally:
        client.unregister_system_shared_memory(f"{tag}_out")
        client.unregister_system_shared_memory(f"{tag}_in")
        shm.destroy_shared_memory_region(out_handle)
        shm.destroy_shared_memory_region(in_handle)
    assert_no_regions(triton)
