"""Every row its own answer: every published variant of every zoo model, on the real tritonserver,
gives a row the same answer alone, first or last in a request of other rows, and while other
clients' requests run beside it (Triton's batcher may join them into one run), within float
rounding (BATCH_INVARIANCE). A variant whose rows move with their mates (ONNX Runtime's dynamic
INT8) runs every row on its own there (``run_alone``)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from builder.dtypes import to_numpy
from builder.records import BATCH_INVARIANCE, VerificationReport
from builder.server import TritonServer
from builder.spec import ModelSpec, load_spec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
ROWS = 4  # the rows of a request: the row under test first or last, three others beside it
SEQUENCE = 24  # the length of a dynamic axis (token ids)
BESIDE = 3  # other clients, each sending requests of one to three other rows while the test's run
REPEATS = 3  # each row sent alone this many times while they do


def _rows(model: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """ROWS different rows for each input: floats of different magnitudes, token ids, attention
    masks that pad the middle rows (a request of sentences of different lengths)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for tensor in model.inputs:
        dims = [SEQUENCE if d < 0 else d for d in tensor.dims]
        dtype = to_numpy(tensor.dtype)
        if tensor.dtype.is_float:
            scale = np.array([1.0, 10.0, 0.1, 3.0]).reshape(ROWS, *[1] * len(dims))
            feeds[tensor.name] = (rng.standard_normal((ROWS, *dims)) * scale).astype(dtype)
        elif "mask" in tensor.name:
            mask = np.ones((ROWS, *dims), dtype)
            mask[1, ..., dims[-1] // 2 :] = 0
            mask[2, ..., dims[-1] // 3 :] = 0
            feeds[tensor.name] = mask
        elif "ids" in tensor.name:
            feeds[tensor.name] = rng.integers(1000, 20000, (ROWS, *dims)).astype(dtype)
        else:
            feeds[tensor.name] = rng.integers(-1000, 1000, (ROWS, *dims)).astype(dtype)
    return feeds


def _infer(
    client: grpcclient.InferenceServerClient, name: str, feeds: dict[str, np.ndarray], outputs: list[str]
) -> list[np.ndarray]:
    inputs = []
    for key, array in feeds.items():
        tensor = grpcclient.InferInput(key, list(array.shape), grpcclient.np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(name, inputs, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return [result.as_numpy(o) for o in outputs]


def _take(feeds: dict[str, np.ndarray], rows: list[int]) -> dict[str, np.ndarray]:
    return {k: np.ascontiguousarray(v[rows]) for k, v in feeds.items()}


def _moved(alone: list[np.ndarray], got: list[np.ndarray]) -> float:
    """The largest change of a row's outputs from its answer alone, relative to its largest value
    (an integer output must be equal)."""
    worst = 0.0
    for a, b in zip(alone, got, strict=True):
        if a.dtype.kind not in "fc":
            worst = max(worst, 0.0 if np.array_equal(a, b) else float("inf"))
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        scale = max(float(np.max(np.abs(a64))), 1e-12)
        worst = max(worst, float(np.max(np.abs(a64 - b64))) / scale)
    return worst


class Beside:
    """Other clients sending requests of other rows until stopped; what failed, if anything."""

    def __init__(self, url: str, name: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> None:
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.sent = 0
        self.threads = [
            threading.Thread(target=self._send, args=(url, name, feeds, outputs, seed), daemon=True)
            for seed in range(BESIDE)
        ]

    def _send(self, url: str, name: str, feeds: dict[str, np.ndarray], outputs: list[str], seed: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        rng = np.random.default_rng(seed)
        try:
            while not self.stop.is_set():
                rows = sorted(rng.choice([1, 2], size=int(rng.integers(1, 3)), replace=False).tolist())
                _infer(client, name, _take(feeds, rows), outputs)
                self.sent += 1
        except Exception as exc:  # reported by the test, not lost in the thread
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            client.close()

    def __enter__(self) -> Beside:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def _published(zoo_repo: Path) -> list[tuple[ModelSpec, str, str]]:
    """Every published variant of every core model: its spec, its model name and its variant."""
    manifest = json.loads((zoo_repo / "manifest.json").read_text())["models"]
    spec = load_spec(ROOT / "models.yaml")
    return [
        (model, name, variant)
        for model in spec.models
        for name, variant in manifest[model.name]["published"].items()
    ]


def test_every_published_variant_gives_a_row_its_answer_alone_among_rows_and_beside_requests(
    triton: TritonServer, zoo_repo: Path
) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    manifest = json.loads((zoo_repo / "manifest.json").read_text())["models"]
    moved: dict[str, float] = {}
    for i, (model, name, variant) in enumerate(_published(zoo_repo)):
        outputs = [o.name for o in model.outputs]
        feeds = _rows(model, seed=i)
        report = VerificationReport.from_json(manifest[model.name]["verification"][variant])
        config = (zoo_repo / name / "config.pbtxt").read_text()
        assert ('"run_alone"' in config) is not report.batch_invariant, name
        alone = {row: _infer(client, name, _take(feeds, [row]), outputs) for row in (0, ROWS - 1)}
        together = _infer(client, name, feeds, outputs)
        worst = max(_moved(alone[row], [o[row : row + 1] for o in together]) for row in alone)
        with Beside(triton.grpc_url, name, feeds, outputs) as beside:
            for _ in range(REPEATS):
                for row in alone:
                    worst = max(worst, _moved(alone[row], _infer(client, name, _take(feeds, [row]), outputs)))
                again = _infer(client, name, feeds, outputs)
                worst = max(worst, *(_moved(alone[r], [o[r : r + 1] for o in again]) for r in alone))
        assert not beside.errors, (name, beside.errors[:3])
        assert beside.sent > 0, name
        moved[name] = worst
    assert not {name: m for name, m in moved.items() if m > BATCH_INVARIANCE}, moved
