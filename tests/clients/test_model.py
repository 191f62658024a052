"""clients.model: signatures from Triton's metadata and config, request and response checks (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from clients import InvalidInput, InvalidResponse
from clients.model import ModelInfo, check_outputs, join, split, triton_dtype
from tests.clients._helpers import simple_info, simple_inputs, tensor, text_info


def test_from_grpc_json_unwraps_config_and_reads_string_dims() -> None:
    metadata = {
        "name": "m",
        "versions": ["1", "3"],
        "inputs": [tensor("X", "FP32", ["-1", "3"])],  # type: ignore[list-item]
        "outputs": [tensor("Y", "FP32", ["-1", "2"])],  # type: ignore[list-item]
    }
    info = ModelInfo.from_triton(metadata, {"config": {"name": "m", "max_batch_size": "4"}})
    assert (info.name, info.version, info.max_batch_size) == ("m", "3", 4)
    assert info.inputs["X"].shape == (-1, 3) and info.outputs["Y"].shape == (-1, 2)
    assert info.datatypes == {"X": "FP32"}


def test_optional_inputs_and_labelled_outputs_come_from_the_config() -> None:
    info = text_info()
    assert info.inputs["SCALE"].optional and not info.inputs["TEXT"].optional
    assert info.outputs["LABEL"].labels and not info.outputs["TOKENS"].labels


def test_check_returns_arrays_and_batch_size() -> None:
    arrays, batch = simple_info().check(simple_inputs(5))
    assert batch == 5 and set(arrays) == {"INPUT0", "INPUT1"}
    _, unbatched = simple_info(0).check({"INPUT0": np.zeros(16, np.int32), "INPUT1": np.ones(16, np.int32)})
    assert unbatched == 0


def test_strings_become_object_arrays_and_optional_inputs_may_be_left_out() -> None:
    arrays, batch = text_info().check({"TEXT": np.array([["a"], ["bc"]])})
    assert batch == 2 and arrays["TEXT"].dtype == object and arrays["TEXT"][1, 0] == "bc"


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"INPUT0": np.zeros((1, 16), np.int32)}, r"model 'simple' needs input\(s\) INPUT1"),
        ({**simple_inputs(1), "EXTRA": np.zeros(1)}, r"no input 'EXTRA' \(inputs: INPUT0, INPUT1\)"),
        (
            {**simple_inputs(1), "INPUT1": np.zeros((1, 16), np.float32)},
            r"input 'INPUT1' of model 'simple' is INT32 \(int32\), got dtype float32",
        ),
        (
            {**simple_inputs(1), "INPUT0": np.zeros((1, 15), np.int32)},
            r"'INPUT0'.*shape \[-1, 16\], got \[1, 15\]",
        ),
        ({**simple_inputs(1), "INPUT0": np.zeros(16, np.int32)}, r"'INPUT0'.*got \[16\]"),
        ({**simple_inputs(2), "INPUT1": np.zeros((3, 16), np.int32)}, "differ in batch size"),
        ({"INPUT0": np.zeros((0, 16), np.int32), "INPUT1": np.zeros((0, 16), np.int32)}, "empty batch"),
    ],
)
def test_bad_requests_name_the_input(inputs: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        simple_info().check(inputs)


def test_bytes_input_refuses_numbers() -> None:
    with pytest.raises(InvalidInput, match=r"'TEXT' of model 'text' is BYTES \(str/bytes\), got dtype int64"):
        text_info().check({"TEXT": np.zeros((1, 1), np.int64)})


def test_output_shape_fills_in_the_batch_and_gives_up_on_dynamic_dims() -> None:
    assert simple_info().output_shape("OUTPUT0", 3) == (3, 16)
    assert simple_info(0).output_shape("OUTPUT0", 0) == (16,)
    assert text_info().output_shape("TOKENS", 2) is None


def test_check_outputs_refuses_a_shape_other_than_declared() -> None:
    info = simple_info()
    good = {"OUTPUT0": np.zeros((3, 16), np.int32)}
    assert check_outputs(info, good, 3) is good
    with pytest.raises(InvalidResponse, match=r"output 'OUTPUT0' of shape \[2, 16\], declared \[3, 16\]"):
        check_outputs(info, {"OUTPUT0": np.zeros((2, 16), np.int32)}, 3)
    check_outputs(text_info(), {"TOKENS": np.zeros((2, 7), np.int64)}, 2)  # dynamic: not checked


def test_split_and_join_keep_the_order() -> None:
    inputs = simple_inputs(20)
    parts = split(inputs, 8)
    assert [p["INPUT0"].shape[0] for p in parts] == [8, 8, 4]
    joined = join(parts)
    for name, array in inputs.items():
        np.testing.assert_array_equal(joined[name], array)
    assert join(parts[:1]) is parts[0]


def test_triton_dtype_names() -> None:
    assert triton_dtype(np.dtype(np.float16)) == "FP16"
    assert triton_dtype(np.dtype(np.int64)) == "INT64"
    assert triton_dtype(np.dtype(object)) == triton_dtype(np.dtype("U3")) == "BYTES"
