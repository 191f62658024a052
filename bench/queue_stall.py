"""What makes tritonserver 2.51's dynamic batcher hold a request for up to 500 ms: `simple` on the
local target at concurrency 1 (perf_analyzer, gRPC), one queue setting at a time, side by side
on one server. Writes ``bench/results/queue_stall.json`` and prints a table.

    .venv/bin/python -m bench.queue_stall [--quick]

Why (triton-inference-server/core, r24.10): the priority queue supports prefetching only when
the model has no priority levels and its default policy has no ``max_queue_size``, no
``default_timeout_microseconds`` and no ``allow_timeout_override``. Without prefetching,
``Enqueue`` wakes the batcher thread only if a model instance is at that moment waiting for a
payload (``RateLimiter::PayloadSlotAvailable`` -> ``WaitingConsumerCount() > 0``). An instance
that has just sent its response is still on its way back to that wait when a closed-loop client's
next request arrives, so that request sits in the queue until the batcher's idle wait (500 ms,
``default_wait_microseconds``) ends. Nothing else wakes it: a queue delay, preferred sizes or
ordering do not change the wake test. A spare instance (one always waiting) avoids it at
concurrency 1 only; the onnx_runner model's own bounded line (execute queues the requests and
returns at once, a worker answers through the response sender) keeps its instance waiting, so
nothing is lost at any concurrency.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.common import RESULTS, WORK, Options, Row, build_repo, machine, serving, zoo_models

OUT = RESULTS / "queue_stall.json"
NO_OVERRIDE = {"allow_timeout_override": False}  # the spec's default is true, itself a policy field


@dataclass(frozen=True)
class Candidate:
    name: str
    what: str
    batching: dict[str, Any]
    instances: int = 1
    via_ensemble: bool = False  # measured through a one-step ensemble in front of the model
    queue_policy: bool = True  # Triton's queue policy written on local (targets.local.queue_policy)


SIZE = {"max_queue_size": 256, **NO_OVERRIDE}
# On the probe (bench/queue_probe: answers, then stays busy 5 ms), one setting at a time.
PROBES = [
    Candidate("none", "no queue policy (baseline)", {}, queue_policy=False),
    Candidate("empty_policy", "policy written, every field zero/false", {"queue": NO_OVERRIDE}),
    Candidate(
        "override_only", "allow_timeout_override: true only", {"queue": {"allow_timeout_override": True}}
    ),
    Candidate("size_only", "max_queue_size: 256 only", {"queue": SIZE}),
    Candidate(
        "timeout_only",
        "default_timeout 5 s only",
        {"queue": {"default_timeout_us": 5_000_000, **NO_OVERRIDE}},
    ),
    Candidate(
        "priority_only",
        "priority_levels: 2 only",
        {"priority_levels": 2, "default_priority_level": 1, "queue": NO_OVERRIDE},
    ),
    Candidate("size_delay_0", "max_queue_size, max_queue_delay 0", {"queue": SIZE, "max_queue_delay_us": 0}),
    Candidate(
        "size_delay_100us",
        "max_queue_size, max_queue_delay 100 us",
        {"queue": SIZE, "max_queue_delay_us": 100},
    ),
    Candidate(
        "size_preferred_1",
        "max_queue_size, preferred_batch_size [1]",
        {"queue": SIZE, "preferred_batch_sizes": [1]},
    ),
    Candidate(
        "size_ordering", "max_queue_size, preserve_ordering", {"queue": SIZE, "preserve_ordering": True}
    ),
    Candidate("size_2_instances", "max_queue_size, 2 instances", {"queue": SIZE}, instances=2),
    Candidate("size_ensemble", "max_queue_size, through an ensemble", {"queue": SIZE}, via_ensemble=True),
]
# `simple` itself (the onnx_runner model), as served on `local`.
SIMPLE = [
    Candidate("none", "no queue policy", {}, queue_policy=False),
    Candidate("triton_size", "Triton's max_queue_size: 256", {"queue": SIZE}),
    Candidate("runner_bound", "onnx_runner's own bound (256, 5 s): the local default",
              {"queue": {"max_queue_size": 256, "default_timeout_us": 5_000_000}}, queue_policy=False),
]  # fmt: skip
STALL_MS = 100.0  # a request this slow at concurrency 1 on a ~1 ms model waited for the batcher


@dataclass
class Measured:
    group: str  # "probe" or "simple"
    name: str
    what: str
    served: str  # the model perf_analyzer drove
    triton_policy: bool  # the served config has a default_queue_policy or priority levels
    runner_bound: dict[str, str] = field(default_factory=dict)  # onnx_runner parameters, if any
    throughput: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    requests: int = 0  # every request perf_analyzer sent (its profile export)
    stalled: int = 0  # of those, how many took >= STALL_MS
    max_ms: float | None = None
    error: str = ""


def _probe_entry(c: Candidate) -> dict[str, Any]:
    return {
        "name": f"probe_{c.name}", "path": "bench/queue_probe", "max_batch_size": 8,
        "inputs": [{"name": "X", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "Y", "dtype": "FP32", "dims": [4]}],
        "batching": {"enabled": True, **c.batching}, "targets": {"local": {"queue_policy": c.queue_policy}},
        "instances": {"count": c.instances, "kind": "cpu"}, "parameters": {"linger_ms": 5},
    }  # fmt: skip


def spec_entries(
    base: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    models = []
    for c in SIMPLE:
        m = copy.deepcopy(base)
        m.update(
            name=f"simple_{c.name}", batching=c.batching, targets={"local": {"queue_policy": c.queue_policy}}
        )
        models.append(m)
    probes = [_probe_entry(c) for c in PROBES]
    ensembles = [_ensemble(p) for c, p in zip(PROBES, probes, strict=True) if c.via_ensemble]
    return models, probes, ensembles


def _tensors(ts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: t[k] for k in ("name", "dtype", "dims")} for t in ts]


def _ensemble(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": f"{m['name']}_ens",
        "max_batch_size": m["max_batch_size"],
        "inputs": _tensors(m["inputs"]),
        "outputs": _tensors(m["outputs"]),
        "steps": [{
            "model": m["name"],
            "inputs": {t["name"]: t["name"] for t in m["inputs"]},
            "outputs": {t["name"]: t["name"] for t in m["outputs"]},
        }],
    }  # fmt: skip


def measure(url: str, group: str, c: Candidate, config: dict[str, Any], opts: Options) -> Measured:
    from clients.perf import run_perf
    from clients.perf.runner import Measurement

    db = config.get("dynamic_batching", {})
    params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
    bound = {k: params[k] for k in ("max_queue_size", "queue_timeout_us") if k in params}
    served = f"{config['name']}_ens" if c.via_ensemble else config["name"]
    out = Measured(
        group, c.name, c.what, served, "default_queue_policy" in db or "priority_levels" in db, bound
    )
    profile = WORK / "perf" / "queue_stall" / f"{group}_{c.name}_requests.json"
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.unlink(missing_ok=True)
    # A stalled probe serves ~2 requests/s: small windows keep each to seconds; the effect is 100x.
    count = 10 if group == "probe" else (100 if opts.quick else 200)
    settings = Measurement(
        request_count=count, stability_percentage=50, max_trials=4 if opts.quick else 6, retries=1,
        protocol="grpc", timeout_s=300, extra_args=("--profile-export-file", str(profile)),
    )  # fmt: skip
    try:
        report = run_perf(url, served, concurrency=[1], out_dir=WORK / "perf" / "queue_stall",
                          settings=settings, stem=f"{group}_{c.name}")  # fmt: skip
        p = report.points[0]
        out.throughput, out.p50_ms, out.p99_ms = (
            round(p.throughput, 1),
            round(p.p50_ms, 2),
            round(p.p99_ms, 2),
        )
    except Exception as exc:  # an unstable stalled model is a result too: its requests say why
        out.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    latencies = request_latencies_ms(profile)
    out.requests, out.stalled = len(latencies), sum(ms >= STALL_MS for ms in latencies)
    out.max_ms = round(max(latencies), 1) if latencies else None
    return out


def request_latencies_ms(profile: Any) -> list[float]:
    """Every request's latency from perf_analyzer's --profile-export-file (outputs are raw bytes)."""
    try:
        raw = json.loads(profile.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return []
    return [
        (r["response_timestamps"][-1] - r["timestamp"]) / 1e6
        for exp in raw.get("experiments", [])
        for r in exp.get("requests", [])
        if r.get("response_timestamps")
    ]


def table(rows: list[Measured]) -> str:
    head = (f"{'group':<6} {'candidate':<17} {'policy':>6} {'bound':>5} {'infer/s':>8} {'x none':>7} "
            f"{'p99 ms':>8} {'stalled':>9} {'max ms':>7}  what")  # fmt: skip
    lines = [head]
    base = {r.group: r.throughput for r in rows if r.name == "none"}
    for r in rows:
        b = base.get(r.group)
        ratio = f"{r.throughput / b:.3f}" if r.throughput and b else "-"
        policy, bound = "yes" if r.triton_policy else "no", "yes" if r.runner_bound else "no"
        stalled, what = f"{r.stalled}/{r.requests}", r.what + (" [unstable]" if r.error else "")
        lines.append(
            f"{r.group:<6} {r.name:<17} {policy:>6} {bound:>5} {r.throughput or 0:>8.1f} {ratio:>7} "
            f"{r.p99_ms or 0:>8.1f} {stalled:>9} {r.max_ms or 0:>7.0f}  {what}"
        )
    return "\n".join(lines)


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    from clients import Client

    models, probes, ensembles = spec_entries(zoo_models()["simple"])
    repo = build_repo("queue_stall", models, probes, ensembles)
    rows: list[Measured] = []
    with serving(repo, "queue_stall") as server, Client(server.grpc_url) as client:
        for group, cands in (("simple", SIMPLE), ("probe", PROBES)):
            for c in cands:
                r = measure(server.grpc_url, group, c, client.config(f"{group}_{c.name}"), opts)
                rows.append(r)
                print(
                    f"  {group} {c.name}: {r.throughput} infer/s, stalled {r.stalled}/{r.requests}",
                    flush=True,
                )
    results = {"machine": machine(), "concurrency": 1, "stall_ms": STALL_MS, "protocol": "grpc",
               "candidates": [asdict(r) for r in rows], "table": table(rows)}  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    print(results["table"])
    by = {(r.group, r.name): r for r in rows}
    size, none, bound = by["probe", "size_only"], by["probe", "none"], by["simple", "runner_bound"]
    got = [
        Row("queue stall, probe c=1: Triton max_queue_size", _stalled(size), "(the stall)", None),
        Row("queue stall, probe c=1: no policy", _stalled(none), "0", none.stalled == 0),
        Row("queue stall, simple c=1: onnx_runner bound", _stalled(bound), "0", bound.stalled == 0),
    ]
    return results, got


def _stalled(r: Measured) -> str:
    return f"{r.stalled}/{r.requests} requests >= {STALL_MS:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_stall", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    run(Options(quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
