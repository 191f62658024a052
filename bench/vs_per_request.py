"""4. Against a hand-written Python-backend model running the same ONNX file once per request,
without batching (bench/per_request/model.py, its config written by the builder from a spec
entry). Both are served by one tritonserver and measured alternately at concurrency 1 and 16. For
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
    results: dict[str, Any] = {}
    rows = []
    with serving(repo, NAME) as server:
        for i, c in enumerate((1, 16)):
            order = [("tritonforge", ours), ("per_request", theirs)]
            got = {}
            for key, w in order if i % 2 == 0 else order[::-1]:
                with cpu_use(server.pid, w.model) as cores:
                    got[key] = sweep(server.grpc_url, w, (c,), opts, rate_hint=hint, tag=f"{NAME}_{key}_c{c}",
                                     metrics_url=server.metrics_url)[0]  # fmt: skip
                got[key]["cpu_us_per_inference"] = per_inference(cores, got[key]["throughput"])
            ratio = got["tritonforge"]["throughput"] / got["per_request"]["throughput"]
            results[c] = {**got, "ratio": ratio}
            mine, naive = got["tritonforge"], got["per_request"]
            rows.append(Row(
                f"4. vs per-request Python model: light_cnn c{c}",
                f"{ratio:.2f}x ({mine['throughput']:.0f} / {naive['throughput']:.0f} inf/s; p99 "
                f"{mine['p99_ms']:.1f} / {naive['p99_ms']:.1f} ms; CPU us per inference {cpu(mine)} / "
                f"{cpu(naive)})",
                "recorded", None,
            ))  # fmt: skip
    return results, rows


def per_inference(cores: dict[str, float], throughput: float) -> dict[str, float]:
    """CPU microseconds each side spent per inference (cores used over inferences per second)."""
    sides = ("perf_analyzer", "tritonserver", "python_stubs")
    return {k: round(cores[k] / throughput * 1e6, 1) for k in sides} if throughput else {}


def cpu(point: dict[str, Any]) -> str:
    """clients + server + model (the Python-backend stub) CPU microseconds per inference."""
    us = point["cpu_us_per_inference"]
    return f"{us['perf_analyzer']:.0f}+{us['tritonserver']:.0f}+{us['python_stubs']:.0f}" if us else "-"
