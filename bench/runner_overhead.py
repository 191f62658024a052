"""Where the onnx_runner model's time goes on the ~1 ms light_cnn, and which serving settings win.

    .venv/bin/python -m bench.runner_overhead [--rounds N] [--variants a,b,...] [--runner-from REV]
        [--busy-cores N]

Copies of light_cnn's local-target model folder, each with one setting changed (or the runner
from another git revision), are served by one tritonserver beside the hand-written per-request
model, and measured alternately (the order reversed every round) at concurrency 1 and 16. Each
point keeps perf_analyzer's figures, the server's split per request (queue, compute input /
infer / output) and, from the runner's opt-in timings (TRITONFORGE_RUNNER_TIMINGS), the
microseconds per execute spent reading inputs, concatenating, in ONNX Runtime, splitting and
making the responses. ``--busy-cores N`` keeps N cores busy with a spinning process of its own
meanwhile (a serving machine with other work). Writes bench/results/<--out>.json (runner_overhead.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from bench.common import (
    ROOT,
    WORK,
    Options,
    build_repo,
    in_process,
    light_feed,
    light_model,
    machine,
    save,
    sweep,
    workload,
)
from builder.configs import read_config, write_config

NAME = "runner_overhead"
RUNNER = ROOT / "builder" / "python_models" / "onnx_runner" / "model.py"
Edit = Callable[[ModelConfig], None]


def _param(key: str, value: str) -> Edit:
    def edit(cfg: ModelConfig) -> None:
        cfg.parameters[key].string_value = value

    return edit


def _no_batching(cfg: ModelConfig) -> None:
    cfg.ClearField("dynamic_batching")


def _unbounded(cfg: ModelConfig) -> None:
    """No line of the runner's own: Triton's batcher hands requests to a synchronous execute."""
    for key in ("max_queue_size", "queue_timeout_us", "allow_timeout_override"):
        cfg.parameters.pop(key, None)


def _instances(count: int) -> Edit:
    def edit(cfg: ModelConfig) -> None:
        cfg.instance_group[0].count = count

    return edit


def _priority_max(cfg: ModelConfig) -> None:
    """Triton's scheduler threads (the batcher, the instance's) at nice 0 instead of its default 5."""
    cfg.optimization.priority = cfg.optimization.PRIORITY_MAX


_SPIN_STOP = [_param("allow_spinning", "1"), _param("stop_spinning", "1")]

# name: (config edits, runner from the git revision given, else this tree's)
VARIANTS: dict[str, tuple[list[Edit], bool]] = {
    "before": ([], True),  # the runner and config as they were
    "default": ([], False),  # this tree's runner and config
    "unbounded": ([_unbounded], False),
    "no_batching": ([_no_batching], False),
    "off": ([_no_batching, _unbounded], False),  # the spec's batching.enabled: false
    "off_no_spin": ([_no_batching, _unbounded, _param("allow_spinning", "0")], False),
    "no_spin": ([_param("allow_spinning", "0")], False),
    "spin": ([_param("allow_spinning", "1")], False),
    # ORT's workers spin while a run goes on and stop as it returns (session.force_spinning_stop)
    "spin_stop": (_SPIN_STOP, False),
    "off_spin_stop": ([_no_batching, _unbounded, *_SPIN_STOP], False),
    "priority_max": ([_priority_max], False),
    "off_priority_max": ([_no_batching, _unbounded, _priority_max], False),
    "threads1": ([_param("intra_op_threads", "1")], False),
    "inst2_threads1": ([_instances(2), _param("intra_op_threads", "1")], False),
}


def make_repo(core: Path, per_request: Path, variants: list[str], runner_from: str) -> Path:
    repo = WORK / f"repo_{NAME}"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    shutil.copytree(per_request, repo / per_request.name)
    old_runner = subprocess.run(
        ["git", "show", f"{runner_from}:{RUNNER.relative_to(ROOT)}"], cwd=ROOT, check=True,
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    for name in variants:
        edits, old = VARIANTS[name]
        folder = repo / f"light_cnn_{name}"
        shutil.copytree(core, folder)
        cfg = read_config(folder / "config.pbtxt")
        cfg.name = folder.name
        for edit in edits:
            edit(cfg)
        write_config(cfg, folder)
        if old:
            (folder / "1" / "model.py").write_text(old_runner)
    return repo


def _timings(folder: Path, model: str, seen: dict[Path, int]) -> dict[str, float] | None:
    """Mean microseconds per execute over the lines written since the last call."""
    rows = []
    for path in sorted(folder.glob(f"{model}.*.jsonl")):
        lines = path.read_text().splitlines()
        rows += [json.loads(x) for x in lines[seen.get(path, 0) :]]
        seen[path] = len(lines)
    if not rows:
        return None
    keys = sorted({k for r in rows for k in r})
    out = {k: sum(r.get(k, 0) for r in rows) / len(rows) / (1 if k == "requests" else 1000) for k in keys}
    out["executes"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.runner_overhead", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--runner-from", default="main", help="git revision of the 'before' runner")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--no-timings", action="store_true", help="do not time the runner's phases")
    parser.add_argument("--out", default=NAME, help="results file name under bench/results")
    parser.add_argument("--busy-cores", type=int, default=0,
                        help="keep this many cores busy with other work while measuring")  # fmt: skip
    parser.add_argument("--summarize", type=Path, help="print the summary of a results file and stop")
    args = parser.parse_args(argv)
    if args.summarize:
        data = json.loads(args.summarize.read_text())
        for line in _summary(data["points"], [int(c) for c in data["args"]["concurrency"].split(",")])[
            "lines"
        ]:
            print(line)
        return 0
    variants = args.variants.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    spec = light_model()
    core_repo = build_repo("vs_per_request_core", [spec])
    per_request = {
        "name": "light_cnn_per_request", "path": str(ROOT / "bench" / "per_request"),
        "inputs": spec["inputs"], "outputs": spec["outputs"], "max_batch_size": spec["max_batch_size"],
        "batching": {"enabled": False}, "parameters": {"intra_op_threads": spec["serve"]["threads"]},
        "files": [str(core_repo / "light_cnn" / "1" / "model.onnx")],
    }  # fmt: skip
    built = build_repo("vs_per_request", [spec], [per_request])  # the pair bench/vs_per_request.py serves
    repo = make_repo(built / "light_cnn", built / "light_cnn_per_request", variants, args.runner_from)
    timings = WORK / f"{NAME}_timings"
    shutil.rmtree(timings, ignore_errors=True)
    opts = Options()
    info = machine()
    served = [f"light_cnn_{v}" for v in variants] + ["light_cnn_per_request"]
    loads = {m: workload(repo, m, spec, light_feed) for m in served}
    hint = in_process(loads[served[0]], 1.0)["throughput"]
    from builder.server import TritonServer

    env = {} if args.no_timings else {"TRITONFORGE_RUNNER_TIMINGS": str(timings)}
    server = TritonServer(repo, log_path=WORK / f"server_{NAME}.log", env=env)
    server.start(timeout=300)
    points: list[dict[str, Any]] = []
    seen: dict[Path, int] = {}
    busy: list[subprocess.Popen[bytes]] = []
    try:
        busy += [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy_cores)]
        for r in range(args.rounds):
            for c in levels:
                order = served if (r + levels.index(c)) % 2 == 0 else served[::-1]
                for m in order:
                    _timings(timings, m, seen)  # skip what an earlier point left
                    got = sweep(server.grpc_url, loads[m], (c,), opts, rate_hint=hint,
                                tag=f"{NAME}_{m}_c{c}_r{r}", metrics_url=server.metrics_url)[0]  # fmt: skip
                    got.update(model=m, round=r, load_avg=os.getloadavg()[0],
                               execute_us=_timings(timings, m, seen))  # fmt: skip
                    points.append(got)
                    split = got["server_split_us"] or {}
                    print(f"r{r} c{c} {m:28s} {got['throughput']:7.0f} inf/s p99 {got['p99_ms']:5.1f} ms "
                          f"batch {got['server_avg_batch'] or 0:4.1f} split "
                          + " ".join(f"{k[:-3]}={v:.0f}" for k, v in split.items() if v is not None)
                          + (f" | exec {got['execute_us']}" if got["execute_us"] else ""),
                          flush=True)  # fmt: skip
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
        server.stop()
    info["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = _summary(points, levels)
    for line in summary["lines"]:
        print(line)
    save(args.out, {"machine": info, "time": time.strftime("%H:%M:%S"), "args": vars(args),
                "summary": summary, "points": points})  # fmt: skip
    return 0


def _summary(points: list[dict[str, Any]], levels: list[int]) -> dict[str, Any]:
    """Per model and concurrency: throughput per round and summed over rounds, the ratio to the
    per-request model and to 'before' (when measured) from those sums (each round measured all),
    and the server's split and the runner's phases averaged over the rounds (us)."""
    by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in points:
        by.setdefault((p["model"], p["concurrency"]), []).append(p)
    total = {k: sum(p["throughput"] for p in ps) for k, ps in by.items()}
    lines, models = [], {}
    for c in levels:
        ref = total.get(("light_cnn_per_request", c))
        before = total.get(("light_cnn_before", c))
        for (m, cc), ps in sorted(by.items()):
            if cc != c:
                continue
            row = {
                "throughput": [round(p["throughput"]) for p in ps],
                "p99_ms": [p["p99_ms"] for p in ps],
                "avg_batch": _mean([p["server_avg_batch"] for p in ps]),
                "vs_per_request": total[(m, c)] / ref if ref else None,
                "vs_before": total[(m, c)] / before if before else None,
                "server_split_us": _means([p["server_split_us"] for p in ps]),
                "execute_us": _means([p["execute_us"] for p in ps]),
            }
            models[f"{m}_c{c}"] = row
            split = " ".join(f"{k[:-3]} {v:.0f}" for k, v in row["server_split_us"].items())
            phases = " ".join(f"{k} {v:.0f}" for k, v in row["execute_us"].items() if k != "executes")
            ratios = (
                f"vs per-request {row['vs_per_request'] or 0:.2f}x  vs before {row['vs_before'] or 0:.2f}x"
            )
            lines.append(f"c{c} {m:26s} {row['throughput']} inf/s  {ratios} | {split} | {phases}")
    return {"models": models, "lines": lines}


def _mean(values: list[Any]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _means(rows: list[dict[str, float] | None]) -> dict[str, float]:
    keys = sorted({k for r in rows if r for k in r})
    return {k: v for k in keys if (v := _mean([r.get(k) for r in rows if r])) is not None}


if __name__ == "__main__":
    raise SystemExit(main())
