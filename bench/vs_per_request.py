"""4. Against a hand-written Python-backend model running the same ONNX file once per request,
without batching (bench/per_request/model.py, its config written by the builder from a spec
entry). Both are served by one tritonserver and measured in turn at concurrency 1 and 16, three
rounds with the order reversed each round; the ratio is of the rounds' sums. For
each point the CPU time per inference of the clients (perf_analyzer), tritonserver and the model's
stub is kept: on two shared cores, what each request costs them is what bounds throughput."""

from __future__ import annotations

from typing import Any

from bench.common import (
    ROOT,
    Options,
    Row,
    build_repo,
    cpu_use,
    in_process,
    light_feed,
    light_model,
    serving,
    sweep,
    workload,
)

NAME = "vs_per_request"


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    spec = light_model()
    core_repo = build_repo(f"{NAME}_core", [spec])
    per_request = {
        "name": "light_cnn_per_request",
        "path": str(ROOT / "bench" / "per_request"),
        "inputs": spec["inputs"],
        "outputs": spec["outputs"],
        "max_batch_size": spec["max_batch_size"],
        "batching": {"enabled": False},
        "parameters": {"intra_op_threads": spec["serve"]["threads"]},
        "files": [str(core_repo / "light_cnn" / "1" / "model.onnx")],
    }
    repo = build_repo(NAME, [spec], [per_request])
    ours = workload(repo, "light_cnn", spec, light_feed)
    theirs = workload(repo, "light_cnn_per_request", spec, light_feed)
    hint = in_process(ours, 1.0)["throughput"]
    results: dict[str, Any] = {"rounds": rounds(opts)}
    rows = []
    with serving(repo, NAME) as server:
        for c, target in TARGETS.items():
            got: dict[str, list[dict[str, Any]]] = {"tritonforge": [], "per_request": []}
            for r in range(rounds(opts)):
                order = [("tritonforge", ours), ("per_request", theirs)]
                for key, w in order if r % 2 == 0 else order[::-1]:
                    tag = f"{NAME}_{key}_c{c}"
                    with cpu_use(server.pid, w.model) as cores:
                        point = sweep(server.grpc_url, w, (c,), opts, rate_hint=hint, tag=tag,
                                      metrics_url=server.metrics_url)[0]  # fmt: skip
                    point["cpu_us_per_inference"] = per_inference(cores, point["throughput"])
                    got[key].append(point)
            results[c] = summary(got)
            rows.append(row(c, target, results[c]))
    return results, rows


# The targets: at least as fast as the naive model alone, clearly faster under load.
TARGETS = {1: 1.0, 16: 1.3}


def rounds(opts: Options) -> int:
    """Both models measured in turn, the order reversed each round (drift hits both alike)."""
    return 1 if opts.quick else 3


def summary(got: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    mine, naive = got["tritonforge"], got["per_request"]
    per_round = [m["throughput"] / n["throughput"] for m, n in zip(mine, naive, strict=True)]
    return {
        **got,
        "ratio": sum(m["throughput"] for m in mine) / sum(n["throughput"] for n in naive),
        "round_ratios": per_round,
    }


def row(c: int, target: float, result: dict[str, Any]) -> Row:
    mine, naive = result["tritonforge"], result["per_request"]
    spread = f"rounds {min(result['round_ratios']):.2f}-{max(result['round_ratios']):.2f}"
    return Row(
        f"4. vs per-request Python model: light_cnn c{c}",
        f"{result['ratio']:.2f}x ({spread}; {mean(mine, 'throughput'):.0f} / {mean(naive, 'throughput'):.0f} "
        f"inf/s; p99 {mean(mine, 'p99_ms'):.1f} / {mean(naive, 'p99_ms'):.1f} ms; CPU us per inference "
        f"{cpu(mine)} / {cpu(naive)})",
        f">= {target:.1f}x", result["ratio"] >= target,
    )  # fmt: skip


def mean(points: list[dict[str, Any]], key: str) -> float:
    return sum(p[key] for p in points) / len(points)


def per_inference(cores: dict[str, float], throughput: float) -> dict[str, float]:
    """CPU microseconds each side spent per inference (cores used over inferences per second)."""
    sides = ("perf_analyzer", "tritonserver", "python_stubs")
    return {k: round(cores[k] / throughput * 1e6, 1) for k in sides} if throughput else {}


def cpu(points: list[dict[str, Any]]) -> str:
    """clients + server + model (the Python-backend stub) CPU microseconds per inference, mean of
    the rounds."""
    us = [p["cpu_us_per_inference"] for p in points if p["cpu_us_per_inference"]]
    if not us:
        return "-"
    sides = ("perf_analyzer", "tritonserver", "python_stubs")
    return "+".join(f"{sum(u[k] for u in us) / len(us):.0f}" for k in sides)
