"""The local target's bounded queue on resnet18: refusals under overload, and its cost at
concurrency 1. Writes ``bench/results/queue_bound.json`` and the ``queue_bound`` section of
``bench/results/reliability.json``.

    .venv/bin/python -m bench.queue_bound [--quick]

Overload: 3000 gRPC requests from 200 closed-loop clients (no pacing) to the zoo's resnet18, as
``make engines`` builds it. Cost: perf_analyzer at concurrency 1 on two copies of resnet18 in one
server, the zoo's bound and none at all, measured alternately (A B A B) in one run.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CACHE, RESULTS, WORK, Options, Row, build_repo, machine, serving, zoo_models
from bench.reliability import LoadReport, Outcome, record, summarize
from builder.pipeline import build
from builder.records import BuildOptions

OUT = RESULTS / "queue_bound.json"
MODEL = "resnet18"


def queue_timeout_s(model: str = MODEL) -> float:
    """The queue timeout models.yaml states for the model (default_timeout_us)."""
    return float(zoo_models()[model]["batching"]["queue"]["default_timeout_us"]) / 1e6


def overload(url: str, *, requests: int = 3000, concurrency: int = 200, deadline_s: float = 30.0,
             model: str = MODEL) -> LoadReport:  # fmt: skip
    """`requests` requests of one fixed image from `concurrency` clients, each sending its next as
    soon as its last ended; an answer must equal the first one (same input, same logits)."""
    from clients import NO_RETRY, Client, RequestRejected, TritonClientError

    client = Client(url, timeout=deadline_s, retry_policy=NO_RETRY)
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    expected = client.infer(model, {"input": x}, shm=False)["logits"]
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    next_index = iter(range(requests))

    def worker() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            start = time.perf_counter()
            try:
                y = client.infer(model, {"input": x}, shm=False)["logits"]
                ok = np.allclose(y, expected, rtol=1e-3, atol=1e-3)
                result, message = ("ok", "") if ok else ("wrong", "logits differ")
            except RequestRejected as exc:
                result, message = "rejected", str(exc)
            except TritonClientError as exc:
                result, message = type(exc).__name__, str(exc)
            except Exception as exc:  # anything the library failed to type is lost too
                result, message = f"untyped {type(exc).__name__}", str(exc)
            with lock:
                outcomes.append(Outcome(i, 0, time.perf_counter() - start, result, message[:300]))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    wall = time.perf_counter() - start
    client.close()
    return summarize(outcomes, requests, concurrency, wall)


def bound_and_none() -> tuple[dict[str, Any], dict[str, Any]]:
    """resnet18 as in the zoo (bounded) and a copy without any bound; FP32 only, to build fast."""
    zoo = zoo_models()[MODEL]
    bounded = copy.deepcopy(zoo)
    bounded.update(name=f"{MODEL}_bounded", precisions=["fp32"])
    bounded.pop("calibration", None)
    bounded["tolerances"] = {"fp32": zoo["tolerances"]["fp32"]}
    unbounded = copy.deepcopy(bounded)
    unbounded.update(name=f"{MODEL}_unbounded", batching={"queue": {"max_queue_size": 0}})
    return bounded, unbounded


def c1_ratio(opts: Options, rounds: int = 2) -> dict[str, Any]:
    """perf_analyzer at concurrency 1 on both copies, alternately; the ratio of the summed rates."""
    from clients import Client
    from clients.perf import run_perf
    from clients.perf.runner import Measurement

    bounded, unbounded = bound_and_none()
    repo = build_repo("queue_bound", [bounded, unbounded])
    settings = Measurement(request_count=60 if opts.quick else 150, stability_percentage=50,
                           max_trials=opts.max_trials, retries=1, protocol="grpc", timeout_s=300)  # fmt: skip
    runs: dict[str, list[float]] = {bounded["name"]: [], unbounded["name"]: []}
    with serving(repo, "queue_bound") as server:
        with Client(server.grpc_url) as client:
            params = client.config(bounded["name"]).get("parameters", {})
        for k in range(rounds):
            for name in runs:
                report = run_perf(server.grpc_url, name, concurrency=[1], settings=settings,
                                  out_dir=WORK / "perf" / "queue_bound", stem=f"{name}_{k}")  # fmt: skip
                runs[name].append(round(report.points[0].throughput, 2))
    b, u = sum(runs[bounded["name"]]), sum(runs[unbounded["name"]])
    return {"bounded_parameters": {k: v["string_value"] for k, v in params.items()},
            "throughput": runs, "ratio": round(b / u, 3)}  # fmt: skip


def zoo_overload(opts: Options) -> LoadReport:
    repo = WORK / "repo_zoo"
    build(BuildOptions(spec_file=Path("models.yaml").resolve(), repo=repo, target="local", cache_dir=CACHE,
                       log=lambda _: None))  # fmt: skip
    with serving(repo, "queue_bound_zoo") as server:
        return overload(server.grpc_url, requests=1000 if opts.quick else 3000)


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    timeout_s = queue_timeout_s()
    load = zoo_overload(opts).to_json()
    ratio = c1_ratio(opts)
    results = {"machine": machine(), "queue_timeout_s": timeout_s, "overload": load, "concurrency_1": ratio}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    record("queue_bound", {"overload": load, "concurrency_1": ratio, "queue_timeout_s": timeout_s})
    p99 = load["latency_ms"]["all"].get("p99", 0.0)
    got = [
        Row(f"resnet18 overload ({load['sent']} from {load['concurrency']} clients): refused / lost",
            f"{load['rejected']} / {load['lost']}", "> 0 / 0", load["rejected"] > 0 and load["lost"] == 0),
        Row("resnet18 overload: accepted p99", f"{p99:.0f} ms", f"<= {timeout_s * 1000:.0f} ms (timeout)",
            0 < p99 <= timeout_s * 1000),
        Row("resnet18 c=1: bounded / no bound (perf_analyzer)", f"{ratio['ratio']:.3f}", ">= 0.95",
            ratio["ratio"] >= 0.95),
    ]  # fmt: skip
    print(json.dumps(results, indent=1))
    return results, got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_bound", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    run(Options(quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
