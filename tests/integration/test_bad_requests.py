"""Bad requests never hurt the server: each gets an error response and the server keeps serving.

They are sent with tritonclient directly (clients.Client would refuse most of them before they left),
against the default zoo served by the session's ``triton`` fixture; errors are mapped with the
client library's ``translate``.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from bench.reliability import record
from builder.server import TritonServer
from clients import InvalidInput, ServerUnavailable, TritonClientError
from clients.errors import translate

pytestmark = pytest.mark.integration

TEXT_MODEL = "minilm_embed"  # joins the zoo with a STRING text input; covered when present
DEADLINE = 60.0  # seconds any one bad request may take to be answered


@pytest.fixture(scope="module")
def raw(triton: TritonServer) -> Any:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    yield client
    client.close()


def tensor(name: str, array: np.ndarray, datatype: str | None = None) -> Any:
    t = grpcclient.InferInput(name, list(array.shape), datatype or _datatype(array))
    t.set_data_from_numpy(array)
    return t


def _datatype(array: np.ndarray) -> str:
    return "BYTES" if array.dtype == object else grpcclient.np_to_triton_dtype(array.dtype)


def strings(*items: bytes) -> np.ndarray:
    return np.array([[item] for item in items], dtype=object)


def png(size: int = 32) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), 128, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def ints(*shape: int) -> np.ndarray:
    return np.ones(shape, np.int32)


def send(raw: Any, model: str, inputs: list[Any]) -> tuple[Any, TritonClientError | None, float]:
    start = time.monotonic()
    try:
        result = raw.infer(model, inputs, client_timeout=DEADLINE)
        return result, None, time.monotonic() - start
    except InferenceServerException as exc:
        return None, translate(exc), time.monotonic() - start


def assert_serving(triton: TritonServer, raw: Any) -> None:
    """Live, ready, every model ready, and a good request to `simple` answered correctly."""
    assert triton.is_running() and raw.is_server_live() and raw.is_server_ready()
    for entry in raw.get_model_repository_index(as_json=True).get("models", []):
        assert entry.get("state") == "READY", entry
    a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.ones((1, 16), np.int32)
    result = raw.infer("simple", [tensor("INPUT0", a), tensor("INPUT1", b)])
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)


def simple(a: np.ndarray, b: np.ndarray | None = None, **extra: np.ndarray) -> list[Any]:
    tensors = [tensor("INPUT0", a)] + ([tensor("INPUT1", b)] if b is not None else [])
    return tensors + [tensor(name, array) for name, array in extra.items()]


def image(data: bytes) -> list[Any]:
    return [tensor("IMAGE", strings(data))]


Case = tuple[str, Callable[[], list[Any]], type[TritonClientError]]
BAD: dict[str, Case] = {
    "wrong dtype": ("simple", lambda: simple(np.ones((1, 16), np.float32), ints(1, 16)), InvalidInput),
    "wrong shape": ("simple", lambda: simple(ints(1, 15), ints(1, 15)), InvalidInput),
    "missing input": ("simple", lambda: simple(ints(1, 16)), InvalidInput),
    "unknown input": ("simple", lambda: simple(ints(1, 16), ints(1, 16), EXTRA=ints(1, 16)), InvalidInput),
    "oversized batch": ("simple", lambda: simple(ints(9, 16), ints(9, 16)), InvalidInput),
    "malformed image bytes": (
        "resnet18_image",
        lambda: image(b"\x89PNG\r\n\x1a\n" + b"\0" * 64),
        TritonClientError,
    ),
    "invalid UTF-8": ("resnet18_image", lambda: image(b"\xff\xfe\xc3\x28 \xa0\xa1"), TritonClientError),
    "64 MiB string": ("resnet18_image", lambda: image(b"\xff" * (64 << 20)), TritonClientError),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_request_gets_an_error_and_the_server_keeps_serving(
    triton: TritonServer, raw: Any, case: str
) -> None:
    model, make_inputs, expected = BAD[case]
    result, error, seconds = send(raw, model, make_inputs())
    assert result is None, f"{case}: the server answered a bad request as if it were good"
    assert isinstance(error, expected) and not isinstance(error, ServerUnavailable), (type(error), error)
    assert str(error), "an error response without a message"
    assert seconds < DEADLINE
    assert_serving(triton, raw)


def test_the_image_ensemble_still_classifies_after_bad_images(triton: TritonServer, raw: Any) -> None:
    result, error, _ = send(raw, "resnet18_image", [tensor("IMAGE", strings(png()))])
    assert error is None, error
    assert result.as_numpy("LOGITS").shape == (1, 1000)


def text_input(raw: Any) -> str:
    assert raw.is_model_ready(TEXT_MODEL), f"{TEXT_MODEL} is in the default zoo and must be served"
    meta = raw.get_model_metadata(TEXT_MODEL, as_json=True)
    names = [i["name"] for i in meta["inputs"] if i["datatype"] == "BYTES"]
    assert names, f"{TEXT_MODEL} has no STRING input"
    return str(names[0])


def test_text_model_refuses_invalid_utf8(triton: TritonServer, raw: Any) -> None:
    name = text_input(raw)
    result, error, _ = send(raw, TEXT_MODEL, [tensor(name, strings(b"caf\xc3 \xff\xfe"))])
    assert result is None and isinstance(error, TritonClientError), "invalid UTF-8 was accepted"
    assert not isinstance(error, ServerUnavailable)
    assert_serving(triton, raw)


def test_text_model_survives_a_64_mib_string(triton: TritonServer, raw: Any) -> None:
    """Either a clear error or a well-formed embedding (a tokenizer may truncate); never a crash."""
    name = text_input(raw)
    result, error, _ = send(raw, TEXT_MODEL, [tensor(name, strings(b"word " * (64 << 20 // 5)))])
    if error is not None:
        assert not isinstance(error, ServerUnavailable), error
    else:
        outputs = raw.get_model_metadata(TEXT_MODEL, as_json=True)["outputs"]
        assert result.as_numpy(outputs[0]["name"]).shape[0] == 1
    assert_serving(triton, raw)


# -- a short fuzz run: random requests against every zoo model, fixed seed, bounded count and time


FUZZ_SEED = 20261130
FUZZ_PER_MODEL = 12
FUZZ_BUDGET = 60.0  # seconds for the whole run
MAX_ELEMENTS = 1 << 20  # per tensor, so a random shape never asks for gigabytes

NUMPY = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "FP16": np.float16, "FP64": np.float64,
         "UINT8": np.uint8, "INT8": np.int8, "BOOL": np.bool_}  # fmt: skip


def random_array(rng: np.random.Generator, datatype: str, shape: list[int]) -> np.ndarray:
    if datatype == "BYTES":
        items = [rng.bytes(int(rng.integers(0, 256))) for _ in range(int(np.prod(shape)))]
        return np.array(items, dtype=object).reshape(shape)
    dtype = NUMPY.get(datatype, np.float32)
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -(1 << 20)), min(info.max, 1 << 20), size=shape, dtype=dtype)
    with np.errstate(over="ignore"):  # float16 overflows to inf: an input the server must take too
        return (rng.standard_normal(size=shape) * 10.0 ** rng.integers(-3, 6)).astype(dtype)


def fuzz_request(rng: np.random.Generator, meta: dict[str, Any], max_batch: int) -> tuple[str, list[Any]]:
    """One random request: well-formed or broken in one way (dtype, shape, rank, batch, inputs)."""
    kind = str(rng.choice(["valid", "dtype", "shape", "rank", "batch", "missing", "extra", "empty"]))
    batch = int(rng.integers(1, min(max_batch, 4) + 1)) if max_batch > 0 else 0
    if kind == "batch" and max_batch > 0:
        batch = max_batch + int(rng.integers(1, 4))
    inputs = []
    for i, spec in enumerate(meta["inputs"]):
        dims = [int(d) for d in spec["shape"]][1 if max_batch > 0 else 0 :]
        dims = [int(rng.integers(1, 8)) if d == -1 else d for d in dims]
        if kind == "shape":
            dims = [max(1, d + int(rng.integers(-2, 3))) for d in dims]
        if kind == "rank":
            dims = [*dims, int(rng.integers(1, 4))]
        if kind == "empty":
            dims = [0 for _ in dims]
        shape = ([batch] if max_batch > 0 else []) + dims
        if int(np.prod(shape)) > MAX_ELEMENTS:
            shape = [1] * len(shape)
        datatype = spec["datatype"]
        if kind == "dtype":
            datatype = str(rng.choice([t for t in ("FP32", "INT64", "BYTES", "FP16") if t != datatype]))
        if kind == "missing" and i == 0:
            continue
        array = random_array(rng, datatype, shape)
        inputs.append(tensor(spec["name"], array, datatype))
    if kind == "extra":
        inputs.append(tensor("FUZZ_EXTRA", rng.standard_normal((1, 3)).astype(np.float32)))
    return kind, inputs


def test_fuzz_every_zoo_model(triton: TritonServer, raw: Any) -> None:
    rng = np.random.default_rng(FUZZ_SEED)
    models = sorted(m["name"] for m in raw.get_model_repository_index(as_json=True)["models"])
    assert "simple" in models and "resnet18_image" in models
    end = time.monotonic() + FUZZ_BUDGET
    outcomes: Counter[str] = Counter()
    for name in models:
        meta = raw.get_model_metadata(name, as_json=True)
        max_batch = int(raw.get_model_config(name, as_json=True)["config"].get("max_batch_size", 0))
        for _ in range(FUZZ_PER_MODEL):
            if time.monotonic() > end:
                break
            kind, inputs = fuzz_request(rng, meta, max_batch)
            _, error, seconds = send(raw, name, inputs)
            assert seconds < DEADLINE, f"{name}: a {kind} request took {seconds:.1f} s"
            assert not isinstance(error, ServerUnavailable), f"{name}: {kind} request: {error}"
            outcomes[f"{kind}:{'ok' if error is None else 'error'}"] += 1
            if kind in ("dtype", "missing", "extra", "batch", "rank"):
                assert error is not None, f"{name}: a {kind} request was answered as good"
        assert raw.is_server_live() and raw.is_server_ready(), f"server down after fuzzing {name}"
    assert sum(outcomes.values()) >= len(models) * 4, outcomes
    assert_serving(triton, raw)
    record(
        "fuzz",
        {"seed": FUZZ_SEED, "models": models, "requests": sum(outcomes.values()), "outcomes": dict(outcomes)},
    )
