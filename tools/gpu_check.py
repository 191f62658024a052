"""What only a GPU host with TensorRT can check, in one run and one JSON report.

Run through ``tools/gpu_check.sh`` (see its header). Steps: detect TensorRT and the
GPU; build and verify every plan (``tritonforge engines --require-engines``);
rebuild with ``--if-stale``, which must rebuild nothing; when ``tritonserver`` is
on PATH, load the repository and infer once per core model and per ONNX Runtime
fallback with the model's first evaluation sample. Exit 0 when every step that ran
passed, 1 when one failed, 2 when nothing could be checked here (no TensorRT or no
GPU: the report and the one line printed say so).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.engines.detect import detect  # noqa: E402

ENGINE_LINE = re.compile(r"^\[(?P<model>[^\]]+)\] engine (?P<precision>\w+): (?P<status>\w+)")
TRITONFORGE = [sys.executable, "-c", "import sys; from builder.cli import main; sys.exit(main(sys.argv[1:]))"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tools/gpu_check.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", type=Path, default=ROOT / "models.yaml", help="the spec (default: models.yaml)")
    p.add_argument("--repo", type=Path, default=None, help="repository to build (default: a fresh folder)")
    p.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="the JSON report")
    p.add_argument("--budget-s", type=float, default=540.0, help="time for all steps together (default 540)")
    p.add_argument("--no-server", action="store_true", help="skip the tritonserver step")
    args = p.parse_args(argv)
    if not args.spec.is_file():
        p.error(f"--spec: {args.spec} is not a file")
    if args.budget_s <= 0:
        p.error("--budget-s: must be above 0")
    args.repo = args.repo or args.out.resolve().parent / "gpu_check_repository"
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    found = detect()
    report: dict[str, Any] = {
        "detect": {"available": found.available, "reason": found.reason, "tensorrt": found.version}
        | ({"gpu": asdict(found.gpu)} if found.gpu else {}),
        "spec": str(args.spec),
        "repository": str(args.repo),
        "steps": {},
    }
    if not found.available:
        report["checked"] = False
        write(args.out, report)
        print(
            f"gpu_check: no GPU with TensorRT here, nothing was checked: {found.reason} (report: {args.out})"
        )
        return 2
    steps = report["steps"]
    steps["build"] = engines(args, deadline, "--require-engines")
    if steps["build"]["ok"]:
        steps["rebuild"] = engines(args, deadline, "--if-stale", "--require-engines")
        rebuilt = [e for e in steps["rebuild"]["plans"] if e["status"] != "fresh"]
        steps["rebuild"]["rebuilt"] = rebuilt
        steps["rebuild"]["ok"] = steps["rebuild"]["ok"] and not rebuilt
    steps["plans"] = plans(args.repo)
    server = shutil.which("tritonserver")
    if args.no_server or server is None:
        steps["server"] = {
            "ok": None,
            "skipped": "--no-server" if args.no_server else "no tritonserver on PATH",
        }
    elif steps["build"]["ok"]:
        steps["server"] = serve_and_infer(server, args, deadline)
    report["checked"] = True
    report["ok"] = all(s.get("ok") is not False for s in steps.values() if isinstance(s, dict))
    write(args.out, report)
    print(f"gpu_check: {'passed' if report['ok'] else 'FAILED'} on {found.reason} (report: {args.out})")
    return 0 if report["ok"] else 1


def engines(args: argparse.Namespace, deadline: float, *flags: str) -> dict[str, Any]:
    cmd = [*TRITONFORGE, "engines", *flags, "--spec", str(args.spec), "--repo", str(args.repo)]
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=left(deadline), check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "command": cmd, "error": "out of time (--budget-s)"}
    lines = done.stderr.splitlines()
    found = [m.groupdict() for m in map(ENGINE_LINE.match, lines) if m]
    step: dict[str, Any] = {"ok": done.returncode == 0, "exit": done.returncode, "command": cmd}
    step |= {"seconds": round(time.monotonic() - start, 1), "plans": found}
    if done.returncode != 0:
        step["error"] = (lines or ["(no output)"])[-1]
    return step


def plans(repo: Path) -> list[dict[str, Any]]:
    out = []
    for meta_file in sorted(repo.glob("*/1/*.plan.json")):
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        keep = ("model", "precision", "tensorrt_version", "gpu_name", "compute_capability", "verification")
        out.append({"file": str(meta_file.with_suffix("")), **{k: meta.get(k) for k in keep}})
    return out


def serve_and_infer(binary: str, args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    port = free_port()
    cmd = [binary, f"--model-repository={args.repo}", "--exit-on-error=true", "--strict-readiness=true"]
    cmd += [f"--http-port={port}", "--http-address=127.0.0.1", "--allow-grpc=false", "--allow-metrics=false"]
    log = args.out.resolve().with_suffix(".tritonserver.log")
    base = f"http://127.0.0.1:{port}/v2"
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        while call(f"{base}/health/ready") is None:
            if proc.poll() is not None or left(deadline) <= 1:
                return {"ok": False, "error": f"the server did not become ready (log: {log})"}
            time.sleep(1)
        results = {name: infer_once(base, name, sample) for name, sample in samples(args)}
        return {"ok": all(r["ok"] for r in results.values()), "log": str(log), "models": results}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def call(url: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Triton's HTTP/JSON protocol with the standard library (the serving image has no HTTP client)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(exc.read().decode(errors="replace")[:500]) from None
    except OSError:
        return None
    return json.loads(text) if text else {}


def samples(args: argparse.Namespace) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(served model, its first evaluation sample) for every core model and its fallback."""
    from builder.spec import load_spec

    spec = load_spec(args.spec)
    cache = args.spec.resolve().parent / ".tritonforge" / "cache"
    out = []
    for model in spec.models:
        found = sorted(
            (cache / model.name / "reference").glob("*/inputs.npz"), key=lambda p: p.stat().st_mtime
        )
        if not found:
            continue
        with np.load(found[-1], allow_pickle=False) as data:
            sample = {k: data[k][:1] if model.max_batch_size else data[k][0] for k in data.files}
        out += [(model.name, sample), (f"{model.name}_onnx", sample)]
    return out


TRITON_TYPES = {"float32": "FP32", "float16": "FP16", "int64": "INT64", "int32": "INT32", "bool": "BOOL"}


def infer_once(base: str, model: str, sample: dict[str, np.ndarray]) -> dict[str, Any]:
    inputs = [
        {
            "name": k,
            "shape": list(v.shape),
            "datatype": TRITON_TYPES[str(v.dtype)],
            "data": v.ravel().tolist(),
        }
        for k, v in sample.items()
    ]
    try:
        result = call(f"{base}/models/{model}/infer", {"inputs": inputs})
    except (RuntimeError, KeyError) as exc:  # the server's own error text is the finding
        return {"ok": False, "error": str(exc)}
    if result is None:
        return {"ok": False, "error": "no answer"}
    return {"ok": True, "outputs": {o["name"]: o["shape"] for o in result.get("outputs", [])}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def left(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())


def write(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
