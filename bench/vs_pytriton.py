"""3. Against PyTriton (``@batch``, same ONNX file, same intra-op threads, same tritonserver
binary) at concurrency 16. Both servers run side by side and are measured in alternating rounds;
each side keeps its best round."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from typing import Any

from bench.common import (
    ROOT,
    WORK,
    Options,
    Row,
    Workload,
    build_repo,
    in_process,
    light_feed,
    light_model,
    serving,
    sweep,
    workload,
)

NAME = "vs_pytriton"
TARGET = 1.5


@contextlib.contextmanager
def pytriton(w: Workload, max_batch: int) -> Iterator[str]:
    from builder.server import find_free_port

    ports = [find_free_port() for _ in range(3)]
    # The interpreter's own libpython first: the Python-backend stub breaks on another patch release.
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        x for x in (str(sysconfig.get_config_var("LIBDIR")), env.get("LD_LIBRARY_PATH")) if x
    )
    log = (WORK / "pytriton.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.pytriton_server", str(w.onnx), str(w.threads), str(max_batch),
         *map(str, ports)],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        line = ""
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if line.strip() == "READY":
                break
        if line.strip() != "READY":
            raise RuntimeError(f"PyTriton did not start; see {WORK / 'pytriton.log'}")
        yield f"127.0.0.1:{ports[1]}"
    finally:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    spec = light_model()
    repo = build_repo(NAME, [spec])
    ours = workload(repo, "light_cnn", spec, light_feed)
    theirs = Workload("pytriton_model", ours.onnx, ours.threads, ours.batches, ours.feed)
    hint = in_process(ours, 1.0)["throughput"]
    rounds = 1 if opts.quick else 2
    got: dict[str, list[dict[str, Any]]] = {"tritonforge": [], "pytriton": []}
    with serving(repo, NAME) as server, pytriton(theirs, spec["max_batch_size"]) as pt_url:
        for r in range(rounds):
            order = [("tritonforge", server.grpc_url, ours), ("pytriton", pt_url, theirs)]
            for key, url, w in order if r % 2 == 0 else order[::-1]:
                got[key] += sweep(url, w, (16,), opts, rate_hint=hint, tag=f"{NAME}_{key}_r{r}")
    top = {k: max(v, key=lambda p: p["throughput"]) for k, v in got.items()}
    ratio = top["tritonforge"]["throughput"] / top["pytriton"]["throughput"]
    row = Row(
        "3. vs PyTriton @batch: light_cnn c16",
        f"{ratio:.2f}x ({top['tritonforge']['throughput']:.0f} / {top['pytriton']['throughput']:.0f} inf/s; "
        f"p99 {top['tritonforge']['p99_ms']:.1f} / {top['pytriton']['p99_ms']:.1f} ms)",
        f">= {TARGET}x", ratio >= TARGET,
    )  # fmt: skip
    return {"in_process_hint": hint, "rounds": got, "best": top, "ratio": ratio}, [row]
