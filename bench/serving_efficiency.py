"""1. Serving efficiency: served throughput (local target, gRPC, perf_analyzer, best concurrency)
over in-process ONNX Runtime throughput of the same ONNX file (best batch of the profile's sizes,
same intra-op threads). The in-process limit is timed right before and right after each served
sweep, in the same run; the larger of the two is the limit. While the server is measured, the cores
each side uses are counted (perf_analyzer, tritonserver, the model's Python-backend stub): in
process, ONNX Runtime has all of them."""

from __future__ import annotations

from typing import Any

from bench.common import (
    Options,
    Row,
    Workload,
    best,
    build_repo,
    cpu_use,
    in_process,
    light_feed,
    light_model,
    minilm_feed,
    resnet_feed,
    serving,
    sweep,
    workload,
    zoo_models,
)

NAME = "serving_efficiency"


def cases(opts: Options) -> tuple[Any, list[tuple[str, str, dict[str, Any], Any, float]]]:
    zoo = zoo_models()
    # resnet18 served as INT8 (pinned), its FP32 variant published beside it as resnet18_fp32.
    resnet = {
        **zoo["resnet18"],
        "targets": {**zoo["resnet18"].get("targets", {}), "local": {"serve": "int8"}},
    }
    repo = build_repo(NAME, [resnet, zoo["minilm_encoder"], light_model()])
    # (label, served model, spec entry, feed, target)
    return repo, [
        ("resnet18 FP32", "resnet18_fp32", zoo["resnet18"], resnet_feed, 0.90),
        ("resnet18 INT8", "resnet18", zoo["resnet18"], resnet_feed, 0.90),
        ("minilm_encoder (int8_dynamic, 128 tokens)", "minilm_encoder", zoo["minilm_encoder"], minilm_feed,
         0.90),
        ("light_cnn (~1 ms, FP32)", "light_cnn", light_model(), light_feed, 0.85),
    ]  # fmt: skip


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    repo, todo = cases(opts)
    concurrency = (16,) if opts.quick else (4, 16)
    seconds = 1.0 if opts.quick else 2.0
    results: dict[str, Any] = {"concurrency": concurrency, "models": {}}
    rows = []
    with serving(repo, NAME) as server:
        for label, served, spec, feed, target in todo:
            w: Workload = workload(repo, served, spec, feed)
            before = in_process(w, seconds)
            with cpu_use(server.pid, served) as cores:
                points = sweep(server.grpc_url, w, concurrency, opts, rate_hint=before["throughput"],
                               tag=f"{NAME}_{served}", metrics_url=server.metrics_url)  # fmt: skip
            after = in_process(w, seconds)
            limit = max(before["throughput"], after["throughput"])
            top = best(points)
            at = after if after["throughput"] >= before["throughput"] else before
            ratio = top["throughput"] / limit
            results["models"][label] = {
                "served_model": served, "threads": w.threads, "in_process_before": before,
                "in_process_after": after, "limit": limit, "served": points, "best": top, "ratio": ratio,
                "cores_used": cores,
            }  # fmt: skip
            rows.append(Row(
                f"1. serving efficiency: {label}",
                f"{ratio:.2f} ({top['throughput']:.0f} inf/s @ c{top['concurrency']} / "
                f"{limit:.0f} in-process @ b{at['best_batch']}; cores used by clients "
                f"{cores['perf_analyzer']:.2f}, server {cores['tritonserver']:.2f}, model "
                f"{cores['python_stubs']:.2f}, other work {cores['other_work']:.2f})",
                f">= {target:.2f}", ratio >= target,
            ))  # fmt: skip
    return results, rows
