"""Client overhead and shared-memory benefit, measured in one run against a real tritonserver.

1. `clients.Client.infer` against the bare tritonclient call it replaces (InferInput +
   set_data_from_numpy + InferRequestedOutput + infer + as_numpy), on `simple` at batch 1, per
   protocol, through the same tritonclient client. The two run in alternating blocks (shuffled
   order); the overhead is the median over blocks of the ratio of block medians, so drift on a
   shared machine cancels out (the pooled medians are recorded too). Target: at most 5 %.
2. A 16 MiB FP32 input sent through system shared memory against plain gRPC (and HTTP), on a
   Python-backend model that only sums its input (so transport dominates). The ratio is recorded.
3. An image (FP32 [1, 3, 224, 224], 602 KB) to the zoo's served `resnet18` over gRPC at
   concurrency 1: `Client.infer` (its requests written as bytes, `clients/wire.py`) against the
   bare tritonclient call, in alternating blocks as in 1, with the client process's CPU per call.
   On a host whose cores the server shares, the client's CPU is taken from the model.

    .venv/bin/python bench/client_overhead.py [--repo model_repository] [--iterations 2000]

Writes bench/results/client_overhead.json and prints a table.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402
from builder.pipeline import build  # noqa: E402
from builder.records import BuildOptions  # noqa: E402
from builder.server import TritonServer  # noqa: E402
from clients import Client  # noqa: E402
from clients.protocol import module  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "client_overhead.json"
SHM_BYTES = 16 << 20
IMAGE_MODEL = "resnet18"

SUM_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "SUM", np.array([pb_utils.get_input_tensor_by_name(r, "DATA").as_numpy().sum()], np.float32))])
            for r in requests]
"""


def write_sum_model(repo: Path) -> None:
    """`checksum`: DATA FP32 [-1] -> SUM FP32 [1], no batching; the request's transport dominates."""
    config = mc.ModelConfig(name="checksum", backend="python", max_batch_size=0)
    config.input.append(mc.ModelInput(name="DATA", data_type=mc.TYPE_FP32, dims=[-1]))
    config.output.append(mc.ModelOutput(name="SUM", data_type=mc.TYPE_FP32, dims=[1]))
    config.instance_group.append(mc.ModelInstanceGroup(kind=mc.ModelInstanceGroup.KIND_CPU, count=1))
    (repo / "checksum" / "1").mkdir(parents=True)
    (repo / "checksum" / "1" / "model.py").write_text(SUM_MODEL)
    (repo / "checksum" / "config.pbtxt").write_text(text_format.MessageToString(config))


def zoo_repository(path: Path | None, scratch: Path) -> Path:
    if path is not None and (path / "simple" / "config.pbtxt").is_file():
        return path
    repo = scratch / "zoo"
    build(BuildOptions(spec_file=ROOT / "models.yaml", repo=repo, target="local", log=lambda _: None))
    return repo


def bare_call(
    raw: Any, mod: Any, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...], datatype: str
) -> Callable[[], dict[str, np.ndarray]]:
    """What a user writes with tritonclient alone, per call."""

    def call() -> dict[str, np.ndarray]:
        tensors = []
        for name, array in inputs.items():
            tensor = mod.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        result = raw.infer(model, tensors, outputs=[mod.InferRequestedOutput(n) for n in outputs])
        return {n: result.as_numpy(n) for n in outputs}

    return call


def cpu_counted(fn: Callable[[], Any], spent: list[float]) -> Callable[[], Any]:
    """``fn``, adding the process's CPU seconds of each call to ``spent[0]``."""

    def call() -> Any:
        start = time.process_time()
        try:
            return fn()
        finally:
            spent[0] += time.process_time() - start

    return call


def interleaved(
    calls: dict[str, Callable[[], Any]], iterations: int, block: int = 50
) -> tuple[dict[str, list[float]], list[dict[str, float]]]:
    """Per-call latencies (s) of each callable, run in rounds of one block of `block` calls each, in
    a shuffled order per round; also each round's median per callable (for paired ratios)."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    rounds: list[dict[str, float]] = []
    order = list(calls)
    for _ in range(max(1, iterations // block)):
        random.shuffle(order)
        medians = {}
        for name in order:
            fn, samples = calls[name], []
            for _ in range(block):
                start = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - start)
            times[name] += samples
            medians[name] = statistics.median(samples)
        rounds.append(medians)
    return times, rounds


def paired_ratio(rounds: list[dict[str, float]], num: str, den: str) -> float:
    """Median over rounds of the ratio of the two callables' block medians (drift cancels out)."""
    return statistics.median(r[num] / r[den] for r in rounds)


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": statistics.median(ordered) * 1e6,
        "mean_us": statistics.fmean(ordered) * 1e6,
        "p90_us": ordered[int(0.9 * (len(ordered) - 1))] * 1e6,
        "n": len(ordered),
    }


def overhead(server: TritonServer, protocol: str, iterations: int) -> dict[str, Any]:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    inputs = {"INPUT0": np.arange(16, dtype=np.int32)[None], "INPUT1": np.ones((1, 16), np.int32)}
    client = Client(url, protocol, shm=False)
    mod = module(client.protocol)
    bare = bare_call(client.triton, mod, "simple", inputs, ("OUTPUT0", "OUTPUT1"), "INT32")  # same connection
    ours = lambda: client.infer("simple", inputs)  # noqa: E731
    for name, out in bare().items():  # same answers before timing
        np.testing.assert_array_equal(out, ours()[name])
    interleaved({"bare": bare, "client": ours}, 200)  # warm-up
    times, rounds = interleaved({"bare": bare, "client": ours}, iterations)
    client.close()
    result: dict[str, Any] = {name: summary(samples) for name, samples in times.items()}
    result["overhead_pct"] = 100 * (paired_ratio(rounds, "client", "bare") - 1)
    result["overhead_pooled_median_pct"] = 100 * (
        result["client"]["median_us"] / result["bare"]["median_us"] - 1
    )
    return result


def shared_memory(server: TritonServer, protocol: str, repeats: int) -> dict[str, Any]:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    data = {"DATA": np.random.default_rng(0).random(SHM_BYTES // 4, dtype=np.float32)}
    client = Client(url, protocol)
    plain = lambda: client.infer("checksum", data, shm=False)  # noqa: E731
    shared = lambda: client.infer("checksum", data, shm=True)  # noqa: E731
    np.testing.assert_allclose(plain()["SUM"], shared()["SUM"], rtol=1e-6)
    times, rounds = interleaved({"plain": plain, "shm": shared}, repeats, block=2)
    client.close()
    result: dict[str, Any] = {name: summary(samples) for name, samples in times.items()}
    result["shm_over_plain"] = paired_ratio(rounds, "shm", "plain")
    result["shm_over_plain_pooled_median"] = result["shm"]["median_us"] / result["plain"]["median_us"]
    return result


def image(server: TritonServer, iterations: int) -> dict[str, Any]:
    x = {"input": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)}
    client = Client(server.grpc_url, shm=False)
    output = next(iter(client.model(IMAGE_MODEL).outputs))
    bare = bare_call(client.triton, module("grpc"), IMAGE_MODEL, x, (output,), "FP32")
    ours = lambda: client.infer(IMAGE_MODEL, x)  # noqa: E731
    np.testing.assert_array_equal(bare()[output], ours()[output])
    interleaved({"bare": bare, "client": ours}, 100, block=20)  # warm-up
    cpu = {"bare": [0.0], "client": [0.0]}
    calls = {"bare": cpu_counted(bare, cpu["bare"]), "client": cpu_counted(ours, cpu["client"])}
    times, rounds = interleaved(calls, iterations, block=20)
    client.close()
    result: dict[str, Any] = {name: summary(samples) for name, samples in times.items()}
    for name in calls:
        result[name]["cpu_us_per_call"] = 1e6 * cpu[name][0] / len(times[name])
    result["client_over_bare"] = paired_ratio(rounds, "client", "bare")
    result["model"] = IMAGE_MODEL
    return result


def table(report: dict[str, Any]) -> str:
    lines = [f"{'measurement':<34}{'median µs':>12}{'mean µs':>12}{'p90 µs':>12}", "-" * 70]
    for protocol, res in report["overhead_batch1"].items():
        for name in ("bare", "client"):
            s = res[name]
            label = f"simple b=1 {protocol} {name}"
            lines.append(f"{label:<34}{s['median_us']:>12.0f}{s['mean_us']:>12.0f}{s['p90_us']:>12.0f}")
        paired, pooled = res["overhead_pct"], res["overhead_pooled_median_pct"]
        lines.append(f"{'  overhead (paired / pooled median)':<34}{paired:>11.1f}%{pooled:>11.1f}%")
    for protocol, res in report["shm_16MiB"].items():
        for name in ("plain", "shm"):
            s = res[name]
            label = f"checksum 16 MiB {protocol} {name}"
            lines.append(f"{label:<34}{s['median_us']:>12.0f}{s['mean_us']:>12.0f}{s['p90_us']:>12.0f}")
        paired, pooled = res["shm_over_plain"], res["shm_over_plain_pooled_median"]
        lines.append(f"{'  shm / plain (paired / pooled)':<34}{paired:>12.2f}{pooled:>12.2f}")
    res = report["image_c1"]
    for name in ("bare", "client"):
        s = res[name]
        label = f"{res['model']} 602 KB grpc {name}"
        lines.append(f"{label:<34}{s['median_us']:>12.0f}{s['mean_us']:>12.0f}{s['p90_us']:>12.0f}"
                     f"   client CPU {s['cpu_us_per_call']:.0f} µs/call")  # fmt: skip
    lines.append(f"{'  client / bare (paired)':<34}{res['client_over_bare']:>12.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repository", help="a built local zoo")
    parser.add_argument("--iterations", type=int, default=2000, help="timed calls per variant at batch 1")
    parser.add_argument("--repeats", type=int, default=20, help="timed 16 MiB calls per variant")
    parser.add_argument("--image-iterations", type=int, default=600, help="timed image calls per variant")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = machine()  # before the run: its load average is the load it met
    with tempfile.TemporaryDirectory(prefix="client-bench-") as tmp:
        scratch = Path(tmp)
        write_sum_model(scratch / "extra")
        repo = zoo_repository(args.repo, scratch)
        extra = [f"--model-repository={scratch / 'extra'}"]
        with TritonServer(repo, model_control="explicit", load_models=["simple", "checksum", IMAGE_MODEL],
                          extra_args=extra, log_path=scratch / "server.log") as server:  # fmt: skip
            # The image first, as a fresh client process meets it: after the 16 MiB calls glibc's
            # malloc keeps large blocks on its heap (its mmap threshold grows to the largest block
            # freed), and copies no longer fault their pages in.
            report = {"image_c1": image(server, args.image_iterations)}
            report["overhead_batch1"] = {p: overhead(server, p, args.iterations) for p in ("grpc", "http")}
            report["shm_16MiB"] = {p: shared_memory(server, p, args.repeats) for p in ("grpc", "http")}
            server.stop(timeout=5)
    report["machine"] = started
    report["environment"] = {
        "python": platform.python_version(),
        "tritonclient": importlib.metadata.version("tritonclient"),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "iterations": args.iterations,
        "repeats": args.repeats,
        "image_iterations": args.image_iterations,
        "note": "client, server and model share this machine's cores",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(f"\nwritten {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
