"""Shared pieces of the benchmarks: scratch repositories built by the real builder from spec
copies, the in-process ONNX Runtime limit, perf_analyzer sweeps, the machine header."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import importlib.metadata
import json
import os
import platform
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from builder.estimate.rss import children
from builder.host import cpu_flags as builder_cpu_flags
from builder.pipeline import build
from builder.records import BuildOptions
from builder.spec import FACTORY_PATTERN

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(
    os.environ.get("TRITONFORGE_RESULTS_DIR") or ROOT / "bench" / "results"
)  # see bench.reliability
WORK = RESULTS / "work"  # scratch specs, repositories, perf_analyzer files (git-ignored)
CACHE = ROOT / ".tritonforge" / "cache"  # the project's stage cache: unchanged stages are reused


@dataclass
class Options:
    quick: bool = False

    @property
    def window_s(self) -> float:
        """Seconds of traffic per perf_analyzer count window (sets --measurement-request-count)."""
        return 1.0 if self.quick else 1.5

    @property
    def max_trials(self) -> int:
        return 6 if self.quick else 10


# ---------------------------------------------------------------- machine header


CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_flags() -> list[str]:
    """The CPU features INT8 and BF16 speed depends on, read as the builder reads them."""
    present = builder_cpu_flags()
    return [f for f in CPU_FLAGS if f in present]


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {}
    for dist in ("onnxruntime", "nvidia-pytriton", "tritonclient", "torch", "numpy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "python": platform.python_version(),
        "tritonserver": "2.51.0 (nvidia-pytriton bundle)",
        "versions": versions,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


# ---------------------------------------------------------------- scratch repositories


def zoo_models() -> dict[str, dict[str, Any]]:
    raw = yaml.safe_load((ROOT / "models.yaml").read_text())
    return {m["name"]: m for m in raw["models"]}


def _abs(path: str) -> str:
    return path if FACTORY_PATTERN.match(path) or Path(path).is_absolute() else str(ROOT / path)


def absolutize(model: dict[str, Any]) -> dict[str, Any]:
    """A zoo entry whose file paths still resolve from a spec written under bench/results/work."""
    m = copy.deepcopy(model)
    if str(m.get("source", "")).endswith(".onnx"):
        m["source"] = _abs(m["source"])
    for t in m.get("outputs", []):
        if t.get("labels"):
            t["labels"] = _abs(t["labels"])
    for section in ("calibration", "evaluation"):
        if m.get(section, {}).get("data"):
            m[section]["data"] = _abs(m[section]["data"])
    if "path" in m:
        m["path"] = _abs(m["path"])
    if "files" in m:
        m["files"] = [_abs(f) for f in m["files"]]
    return m


def light_model(**changes: Any) -> dict[str, Any]:
    """The light model's spec entry (a small CNN, ~1 ms per image on two threads)."""
    spec: dict[str, Any] = {
        "name": "light_cnn",
        "source": "bench.light_model:build",
        "inputs": [{"name": "input", "dtype": "FP32", "dims": [3, 32, 32]}],
        "outputs": [{"name": "logits", "dtype": "FP32", "dims": [10]}],
        "max_batch_size": 32,
        "batching": {"queue": {"max_queue_size": 256}},
        "profiles": [{"opt_batch": 8}],
        "precisions": ["fp32"],
        "evaluation": {"reader": "bench.light_model:evaluation_samples"},
        "tolerances": {"fp32": {"min_cosine": 0.9999}},
        "warmup": {"batch_sizes": [1, 8]},
        "serve": {"threads": 2},
    }
    spec.update(changes)
    return spec


def build_repo(
    name: str,
    models: Sequence[dict[str, Any]],
    python_models: Sequence[dict[str, Any]] = (),
    ensembles: Sequence[dict[str, Any]] = (),
) -> Path:
    """Write a spec with these entries and build it (local target) through the real builder."""
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / ".gitignore").write_text("*\n")  # scratch: never committed
    spec_file = WORK / f"{name}.yaml"
    body: dict[str, Any] = {"models": [absolutize(m) for m in models]}
    if python_models:
        body["python_models"] = [absolutize(p) for p in python_models]
    if ensembles:
        body["ensembles"] = [absolutize(e) for e in ensembles]
    spec_file.write_text(yaml.safe_dump(body, sort_keys=False))
    repo = WORK / f"repo_{name}"
    build(BuildOptions(spec_file=spec_file, repo=repo, target="local", cache_dir=CACHE, log=lambda _: None))
    return repo


@contextlib.contextmanager
def serving(repo: Path, tag: str, **options: Any) -> Iterator[Any]:
    """A tritonserver on loopback, free ports (``options``: TritonServer's, e.g. the models to
    load); always stopped."""
    from builder.server import TritonServer

    server = TritonServer(repo, log_path=WORK / f"server_{tag}.log", **options)
    server.start(timeout=180)
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------- where the cores went

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (its own threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def machine_cpu() -> tuple[float, float]:
    """CPU seconds the whole machine spent busy (any process) and stolen by the hypervisor."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def stub_of(pid: int, model: str | None) -> bool:
    """Whether a child of the server is the Python-backend stub of ``model`` (any when None):
    its first argument is the model's ``<repository>/<model>/<version>/model.py``."""
    if model is None:
        return True
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return len(args) > 1 and Path(args[1].decode()).parent.parent.name == model


def _cpu_now(server_pid: int, model: str | None) -> dict[str, float]:
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)  # children waited for: perf_analyzer runs
    busy, steal = machine_cpu()
    return {
        "wall": time.perf_counter(),
        "machine_busy": busy,
        "stolen": steal,
        "perf_analyzer": ended.ru_utime + ended.ru_stime,
        "tritonserver": cpu_seconds(server_pid),
        "python_stubs": sum(cpu_seconds(c) for c in children(server_pid) if stub_of(c, model)),
        "this_process": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
    }


@contextlib.contextmanager
def cpu_use(server_pid: int, model: str | None = None) -> Iterator[dict[str, float]]:
    """Cores used, on average, by each side while the block runs, filled in when it ends:
    perf_analyzer (the clients), tritonserver (gRPC, batcher, responses), its Python-backend stubs
    (the model's Python and ONNX Runtime; with ``model``, that model's only), ``other_work`` (all
    other processes) and ``stolen`` (given by the hypervisor to other guests)."""
    start = _cpu_now(server_pid, model)
    used: dict[str, float] = {}
    yield used
    end = _cpu_now(server_pid, model)
    wall = end.pop("wall") - start.pop("wall")
    for key, value in end.items():
        used[key] = round((value - start[key]) / wall, 3)
    ours = ("perf_analyzer", "tritonserver", "python_stubs", "this_process")
    used["other_work"] = round(max(0.0, used.pop("machine_busy") - sum(used[k] for k in ours)), 3)
    used["wall_s"] = round(wall, 2)


# ---------------------------------------------------------------- workloads


@dataclass
class Workload:
    """One served model and how to feed it, in-process and through perf_analyzer."""

    model: str  # served name
    onnx: Path
    threads: int
    batches: Sequence[int]  # in-process batch sizes to try (the profile's sizes)
    feed: Callable[[int], dict[str, np.ndarray]]
    shapes: dict[str, list[int]] = field(default_factory=dict)
    perf_args: tuple[str, ...] = ()


def resnet_feed(b: int) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(0).random((b, 3, 224, 224), dtype=np.float32)}


def minilm_feed(b: int, seq: int = 128) -> dict[str, np.ndarray]:
    # The same zeros perf_analyzer sends (--input-data zero): compute does not depend on the ids.
    z = np.zeros((b, seq), np.int64)
    return {"input_ids": z, "attention_mask": z}


def light_feed(b: int) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(0).standard_normal((b, 3, 32, 32), dtype=np.float32)}


def profile_batches(model: dict[str, Any]) -> list[int]:
    mbs = int(model.get("max_batch_size", 0))
    opt = (model.get("profiles") or [{}])[0].get("opt_batch", min(mbs, 8))
    return sorted({1, 4, int(opt), 16, mbs} & set(range(1, mbs + 1)))


def workload(repo: Path, served: str, spec: dict[str, Any], feed: Callable[[int], Any]) -> Workload:
    threads = int(spec.get("serve", {}).get("threads", 0))
    shapes: dict[str, list[int]] = {}
    args: tuple[str, ...] = ()
    for t in spec["inputs"]:
        if -1 in t["dims"]:
            shapes[t["name"]] = [128]
            args = ("--input-data", "zero")
    return Workload(
        served, repo / served / "1" / "model.onnx", threads, profile_batches(spec), feed, shapes, args
    )


# ---------------------------------------------------------------- in-process limit


def ort_session(path: Path, threads: int) -> Any:
    """The session the onnx_runner model opens (its runtime's own ``open``, the same intra-op thread
    count), but with ONNX Runtime's default spinning workers: alone on the machine they are its
    fastest."""
    from builder.python_models.shared.runtimes import DEFAULT, runtime
    from builder.python_models.shared.runtimes.base import INTRA_OP_THREADS
    from builder.python_models.shared.runtimes.onnxruntime import ALLOW_SPINNING

    return runtime(DEFAULT).open(path, "fp32", {INTRA_OP_THREADS: str(threads), ALLOW_SPINNING: "1"})


def in_process(w: Workload, seconds: float) -> dict[str, Any]:
    """Inferences per second at each batch size; ``best`` is the limit."""
    session = ort_session(w.onnx, w.threads)
    per_batch: dict[int, float] = {}
    for b in w.batches:
        feed = w.feed(b)
        session.run(None, feed)
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds or n < 3 * b:
            session.run(None, feed)
            n += b
        per_batch[b] = n / elapsed
    best = max(per_batch, key=lambda k: per_batch[k])
    return {"per_batch": per_batch, "best_batch": best, "throughput": per_batch[best]}


# ---------------------------------------------------------------- served


def sweep(
    url: str,
    w: Workload,
    concurrency: Sequence[int],
    opts: Options,
    *,
    rate_hint: float,
    tag: str,
    metrics_url: str | None = None,
) -> list[dict[str, Any]]:
    """perf_analyzer over gRPC at each concurrency; count windows sized to ~window_s of traffic."""
    from clients.perf import run_perf
    from clients.perf.runner import Measurement

    count = int(min(800, max(40, rate_hint * opts.window_s)))
    settings = Measurement(
        request_count=count, stability_percentage=50, max_trials=opts.max_trials, retries=1,
        protocol="grpc", timeout_s=300, extra_args=w.perf_args,
    )  # fmt: skip
    report = run_perf(
        url, w.model, shapes=w.shapes or None, concurrency=concurrency, out_dir=WORK / "perf" / tag,
        metrics_url=metrics_url, settings=settings, stem=tag,
    )  # fmt: skip
    return [_point(p, w.model) for p in report.points]


def _point(p: Any, model: str) -> dict[str, Any]:
    keep = ("value", "throughput", "p50_ms", "p99_ms", "server_queue_ms", "server_compute_ms",
            "server_avg_batch", "request_count")  # fmt: skip
    out = {k: getattr(p, k) for k in keep}
    out["concurrency"] = int(out.pop("value"))
    # The server's own split per request for the measured model (Prometheus counters, us).
    own = (p.models or {}).get(model, {})
    out["server_split_us"] = {k: own.get(k) for k in SPLIT} if own else None
    return _clean(out)


# The server-side phases of one request, as Triton's counters split it.
SPLIT = ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us")


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return None if isinstance(value, float) and np.isnan(value) else value


def best(points: list[dict[str, Any]]) -> dict[str, Any]:
    return max(points, key=lambda p: p["throughput"])


# ---------------------------------------------------------------- results


@dataclass
class Row:
    benchmark: str
    measured: str
    target: str
    met: bool | None  # None: recorded, no target

    def cells(self) -> list[str]:
        met = "-" if self.met is None else ("yes" if self.met else "**no**")
        return [self.benchmark, self.measured, self.target, met]


def save(name: str, data: dict[str, Any]) -> Path:
    """``data`` as ``bench/results/<name>.json`` (a ``name`` given with its ``.json`` keeps it)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name.removesuffix('.json')}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path
