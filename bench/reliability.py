"""Overload and fault figures against a real tritonserver on loopback: sent / succeeded / rejected / lost.

The integration tests that load or break the server (``tests/integration/test_overload.py``,
``test_faults.py``, ``test_queue_bound.py``, ``test_build_kill.py``, ``test_bad_requests.py``) record
their figures section by section with :func:`record`, each section with the machine it ran on. In
the test suite they go to ``$TRITONFORGE_RESULTS_DIR`` (``.tritonforge/test-results``, ignored);
``python -m bench.reliability`` runs those same tests with the tracked
``bench/results/reliability.json`` as the target, and is the only writer of that file.

Every load is bounded: a fixed number of requests, each with its own deadline.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder.cache import exclusive
from clients import NO_RETRY, Client, RequestRejected, TritonClientError
from clients.errors import translate

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "tests" / "integration" / "fixtures" / "reliability" / "models.yaml"
# The tracked figures come from `python -m bench.reliability`; the test suite points
# TRITONFORGE_RESULTS_DIR at an ignored folder so that a test run leaves the tree as it found it.
RESULTS_DIR = Path(os.environ.get("TRITONFORGE_RESULTS_DIR") or ROOT / "bench" / "results")
RESULTS = RESULTS_DIR / "reliability.json"
MODEL = "sleep"  # Y = X after sleep_ms per batch (fixture model of known capacity)
HIGH, LOW = 1, 2  # priority levels of the sleep model (1 is served first)


@dataclass
class Outcome:
    index: int
    priority: int
    seconds: float
    result: str  # "ok", "rejected", "wrong" (a result that is not the right answer) or the error's type
    message: str = ""


@dataclass
class LoadReport:
    sent: int
    succeeded: int
    rejected: int
    lost: int  # every request that ended neither in a correct result nor in an explicit rejection
    concurrency: int
    wall_seconds: float
    max_seconds: float  # the slowest request, whatever its end
    served_per_s: float = 0.0
    rejected_by: dict[str, int] = field(default_factory=dict)  # "queue full" / "queue timeout"
    errors: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # per class of accepted requests
    health_failures: int = 0  # failed live/ready probes while the load ran

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def percentiles(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"count": 0}
    ms = np.asarray(seconds) * 1000.0
    return {
        "count": len(seconds),
        "p50": round(float(np.percentile(ms, 50)), 1),
        "p90": round(float(np.percentile(ms, 90)), 1),
        "p99": round(float(np.percentile(ms, 99)), 1),
        "max": round(float(ms.max()), 1),
    }


def _sender(client: Client, model: str, timeout: float) -> Callable[[np.ndarray, int], np.ndarray]:
    """One request: the client library for the default level; with a priority, tritonclient's own
    `priority` argument (Client.infer has none) with the library's error mapping."""
    import tritonclient.grpc as grpcclient

    def send(x: np.ndarray, priority: int) -> np.ndarray:
        if not priority:
            return client.infer(model, {"X": x}, timeout=timeout)["Y"]
        tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        try:
            result = client.triton.infer(model, [tensor], priority=priority, client_timeout=timeout)
        except Exception as exc:
            raise translate(exc) from exc
        return result.as_numpy("Y")

    return send


def run_load(
    url: str,
    *,
    requests: int,
    concurrency: int,
    timeout: float = 10.0,
    priority_of: Callable[[int], int] = lambda _: 0,
    rate: float = 240.0,
    model: str = MODEL,
    health_url: str | None = None,
    budget: float = 120.0,
) -> tuple[LoadReport, list[Outcome]]:
    """`requests` requests from `concurrency` clients offering `rate` requests/s in all: each client
    sends one request every `concurrency / rate` seconds, or as soon as its previous one ends when that
    takes longer (a rejection does not make a client hammer the server). Request i sends X = i, so a
    mixed-up answer is caught, at priority `priority_of(i)` (0 = the model's default level)."""
    client = Client(url, timeout=timeout, retry_policy=NO_RETRY)
    client.model(model)  # metadata once, before the clock starts
    send = _sender(client, model, timeout)
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    next_index = iter(range(requests))
    end = time.monotonic() + budget

    interval = concurrency / rate

    def worker(k: int) -> None:
        due = time.monotonic() + interval * k / concurrency  # clients staggered over one interval
        while time.monotonic() < end:
            time.sleep(max(0.0, due - time.monotonic()))
            due = max(due + interval, time.monotonic())
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            x = np.full((1, 4), float(i), dtype=np.float32)
            priority = priority_of(i)
            start = time.perf_counter()
            try:
                y = send(x, priority)
                result, message = ("ok", "") if np.array_equal(y, x) else ("wrong", f"got {y!r}")
            except RequestRejected as exc:
                result, message = "rejected", str(exc)
            except TritonClientError as exc:
                result, message = type(exc).__name__, str(exc)
            except Exception as exc:  # anything the library failed to type is lost too
                result, message = f"untyped {type(exc).__name__}", str(exc)
            outcome = Outcome(i, priority, time.perf_counter() - start, result, message[:300])
            with lock:
                outcomes.append(outcome)

    stop = threading.Event()
    failures = [0]

    def probe() -> None:
        import tritonclient.http as httpclient

        address = (health_url or "").removeprefix("http://")
        health = httpclient.InferenceServerClient(address, connection_timeout=5, network_timeout=5)
        while not stop.wait(0.2):
            try:
                ok = health.is_server_live() and health.is_server_ready() and health.is_model_ready(model)
            except Exception:
                ok = False
            failures[0] += not ok
        health.close()

    prober = threading.Thread(target=probe, daemon=True) if health_url else None
    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(concurrency)]
    start = time.perf_counter()
    if prober:
        prober.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, end - time.monotonic()) + timeout + 5)
    wall = time.perf_counter() - start
    stop.set()
    if prober:
        prober.join(10)
    client.close()
    return summarize(outcomes, requests, concurrency, wall, failures[0]), outcomes


def summarize(
    outcomes: list[Outcome], sent: int, concurrency: int, wall: float, health_failures: int = 0
) -> LoadReport:
    counts = Counter(o.result for o in outcomes)
    succeeded, rejected = counts.pop("ok", 0), counts.pop("rejected", 0)
    classes = sorted({o.priority for o in outcomes})
    latency = {"all": percentiles([o.seconds for o in outcomes if o.result == "ok"])}
    if classes != [0]:
        for p in classes:
            name = {HIGH: "high", LOW: "low"}.get(p, f"priority_{p}")
            latency[name] = percentiles([o.seconds for o in outcomes if o.result == "ok" and o.priority == p])
    return LoadReport(
        sent=sent,
        succeeded=succeeded,
        rejected=rejected,
        lost=sent - succeeded - rejected,
        concurrency=concurrency,
        wall_seconds=round(wall, 2),
        max_seconds=round(max((o.seconds for o in outcomes), default=0.0), 3),
        served_per_s=round(succeeded / wall, 1) if wall > 0 else 0.0,
        rejected_by=dict(Counter(_reason(o.message) for o in outcomes if o.result == "rejected")),
        errors=dict(counts),
        latency_ms=latency,
        health_failures=health_failures,
    )


def _reason(message: str) -> str:
    text = message.lower()
    if "queue size" in text:
        return "queue full"
    return "queue timeout" if "timeout" in text else "other"


def record(section: str, data: dict[str, Any], path: Path = RESULTS) -> None:
    """Merge one section into the results file (written whole, then renamed), one process at a
    time: the tests record from two."""
    from bench.common import machine  # deferred: it imports the build pipeline

    here = machine()
    recorded = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(path.parent):  # the folder itself: no lock file beside the results
        try:
            results = json.loads(path.read_text())
        except (OSError, ValueError):
            results = {}
        results[section] = {**data, "recorded": recorded, "machine": here}
        results["machine"] = here
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


def overload(url: str, health_url: str) -> LoadReport:
    """600 requests from 32 clients at the default (low) priority: ~3x the sleep model's capacity."""
    report, _ = run_load(url, requests=600, concurrency=32, health_url=health_url)
    return report


def priorities(url: str, health_url: str) -> LoadReport:
    """The same overload, one request in five at the high priority (from their own clients)."""
    report, _ = run_load(
        url,
        requests=600,
        concurrency=30,
        priority_of=lambda i: HIGH if i % 5 == 0 else LOW,
        health_url=health_url,
    )
    return report


RECORDING_TESTS = ("test_overload.py", "test_faults.py", "test_queue_bound.py", "test_build_kill.py",
                   "test_bad_requests.py")  # fmt: skip


def main() -> int:
    """Run the tests that record reliability figures, writing the tracked results file."""
    import subprocess
    import sys

    tests = [str(ROOT / "tests" / "integration" / name) for name in RECORDING_TESTS]
    env = {**os.environ, "TRITONFORGE_RESULTS_DIR": str(ROOT / "bench" / "results")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=ROOT, env=env, check=False).returncode  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
