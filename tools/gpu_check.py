"""What only a GPU host with TensorRT can check, in one run and one JSON report.

What a passing run proves, step by step (the report has one entry per step):

1. detect: TensorRT 10.8-11.x and a CUDA GPU are here (else it says so in one line, writes
   the report with checked: false and exits 2: nothing was checked);
2. build: every plan of the spec is built, run on the evaluation set at each optimization
   profile's opt batch and at the max batch under the profile Triton picks for each batch
   (the nearest opt shape), verified against the reference outputs with the CPU variant's
   tolerance, timed, and published (tritonforge engines --require-engines);
3. rebuild: a second run with --if-stale rebuilds nothing (every plan's metadata fits
   this machine);
4. plans: the metadata of the plans installed in the repository (plans kept for other GPUs'
   compute capabilities too, with cc_model_filenames), and "served": the precision of the plan
   Triton loads on this GPU (its compute capability's file, else model.plan), for each model;
5. server (when tritonserver is on PATH): Triton loads the repository, and every core model
   (its plan) and its ONNX Runtime fallback answer the whole evaluation set, sent at each
   profile's opt batch and at the max batch (so Triton serves it under every profile) and as
   one request per sample all at once (so its dynamic batcher forms the batches: Triton's own
   statistics for that run must count fewer executions than inferences), each answer
   compared with the reference under the tolerance of the precision served.

Exit 0 when every step that ran passed, 1 when one failed, 2 when nothing was checked.
On a GPU host without TensorRT, `tools/gpu_check.sh --no-tensorrt` checks what can be
checked there (tools/gpu_check_no_trt.py; its --help says what).
The budget (--budget-s, default 540: under ten minutes with the server's start) covers all
steps: when it runs out, the running step is stopped (tritonforge and the TensorRT build
worker it started are killed as one process group; the server check stops before its next
run), that step is marked "out of time (--budget-s)", the steps after it do not run, and
the check fails (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.engines.detect import detect  # noqa: E402

ENGINE_LINE = re.compile(r"^\[(?P<model>[^\]]+)\] engine (?P<precision>\w+): (?P<status>\w+)")
TRITONFORGE = [sys.executable, "-c", "import sys; from builder.cli import main; sys.exit(main(sys.argv[1:]))"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tools/gpu_check.sh",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    seed_from_image(args.repo)
    steps["build"] = engines(args, deadline, "--require-engines")
    if steps["build"]["ok"]:
        steps["rebuild"] = engines(args, deadline, "--if-stale", "--require-engines")
        rebuilt = [e for e in steps["rebuild"]["plans"] if e["status"] != "fresh"]
        steps["rebuild"]["rebuilt"] = rebuilt
        steps["rebuild"]["ok"] = steps["rebuild"]["ok"] and not rebuilt
    assert found.gpu is not None
    in_use = served_plans(args, found.gpu.compute_capability)
    steps["plans"] = plans(args.repo, set(in_use.values()))
    report["served"] = {
        model: served_precision(plan) for model, plan in in_use.items() if meta(plan).is_file()
    }
    server = shutil.which("tritonserver")
    if args.no_server or server is None:
        steps["server"] = {
            "ok": None,
            "skipped": "--no-server" if args.no_server else "no tritonserver on PATH",
        }
    elif steps["build"]["ok"] and steps.get("rebuild", {}).get("error") is None:
        steps["server"] = serve_and_check(server, args, deadline, in_use)
    else:
        steps["server"] = {"ok": None, "skipped": "the build did not pass"}
    report["checked"] = True
    report["ok"] = all(s.get("ok") is not False for s in steps.values() if isinstance(s, dict))
    write(args.out, report)
    print(f"gpu_check: {'passed' if report['ok'] else 'FAILED'} on {found.reason} (report: {args.out})")
    return 0 if report["ok"] else 1


def seed_from_image(repo: Path) -> None:
    """In the serving image, a repository not built yet starts as a copy of the image's
    ($TRITONFORGE_REPOSITORY, built by the builder stage), so its plans are built as the
    entrypoint builds them; that image cannot run the whole build (no exporters)."""
    image = Path(os.environ.get("TRITONFORGE_REPOSITORY", "/nonexistent"))
    if not repo.exists() and (image / "manifest.json").is_file():
        shutil.copytree(image, repo, symlinks=True)


def engines(args: argparse.Namespace, deadline: float, *flags: str) -> dict[str, Any]:
    cmd = [*TRITONFORGE, "engines", *flags, "--spec", str(args.spec), "--repo", str(args.repo)]
    start = time.monotonic()
    done = run_group(cmd, left(deadline))
    if done is None:
        error = "out of time (--budget-s): tritonforge and its TensorRT build worker were killed"
        return {"ok": False, "command": cmd, "error": error}
    code, _, stderr = done
    lines = stderr.splitlines()
    found = [m.groupdict() for m in map(ENGINE_LINE.match, lines) if m]
    step: dict[str, Any] = {"ok": code == 0, "exit": code, "command": cmd}
    step |= {"seconds": round(time.monotonic() - start, 1), "plans": found}
    if code != 0:
        step["error"] = (lines or ["(no output)"])[-1]
    return step


def served_plans(args: argparse.Namespace, compute_capability: str) -> dict[str, Path]:
    """Model -> the plan Triton loads on a GPU of this compute capability: the file
    cc_model_filenames maps it to when the spec asks for per-GPU plans, else model.plan."""
    from builder.spec import load_spec
    from builder.spec.engine import plan_filename

    spec = load_spec(args.spec)
    return {
        m.name: args.repo / m.name / "1" / plan_filename(m.engine, compute_capability) for m in spec.models
    }


def meta(plan: Path) -> Path:
    return plan.with_name(plan.name + ".json")


def plans(repo: Path, in_use: set[Path]) -> list[dict[str, Any]]:
    out = []
    for meta_file in sorted(repo.glob("*/1/*.plan.json")):
        data = json.loads(meta_file.read_text(encoding="utf-8"))
        keep = ("model", "precision", "tensorrt_version", "gpu_name", "compute_capability", "verification")
        plan = meta_file.with_suffix("")
        out.append({"file": str(plan), "in_use": plan in in_use, **{k: data.get(k) for k in keep}})
    return out


def serve_and_check(
    binary: str, args: argparse.Namespace, deadline: float, in_use: dict[str, Path]
) -> dict[str, Any]:
    port = free_port()
    cmd = [binary, f"--model-repository={args.repo}", "--exit-on-error=true", "--strict-readiness=true"]
    cmd += [f"--http-port={port}", "--http-address=127.0.0.1", "--allow-grpc=false", "--allow-metrics=false"]
    log = args.out.resolve().with_suffix(".tritonserver.log")
    base = f"http://127.0.0.1:{port}/v2"
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, preexec_fn=os.setpgrp)
    try:
        while call(f"{base}/health/ready") is None:
            if proc.poll() is not None or left(deadline) <= 1:
                return {"ok": False, "error": f"the server did not become ready (log: {log})"}
            time.sleep(1)
        results = {c.name: check_served(base, c, deadline) for c in served_checks(args, in_use)}
        return {"ok": all(r["ok"] for r in results.values()), "log": str(log), "models": results}
    finally:
        stop_group(proc, grace_s=30)


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


@dataclass
class ServedCheck:
    """One served model and what its answers must match: the evaluation set's reference
    outputs under the tolerance of the precision it serves."""

    name: str
    precision: str
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    tolerance: Any
    outputs: list[Any]
    batches: list[int]  # each profile's opt batch and the max (0: unbatched)
    profiles: list[Any]


def served_checks(args: argparse.Namespace, in_use: dict[str, Path]) -> list[ServedCheck]:
    """Every core model (its plan) and its ONNX Runtime fallback, with the evaluation set the
    build verified it on."""
    from builder.cache import cache_root
    from builder.engines.profiles import profile_shapes
    from builder.engines.trt_runner import verification_batches
    from builder.spec import Precision, load_spec

    spec = load_spec(args.spec)
    cache = cache_root(args.spec)
    out = []
    for model in spec.models:
        found = sorted(
            (cache / model.name / "reference").glob("*/inputs.npz"), key=lambda p: p.stat().st_mtime
        )
        if not found:
            continue
        with np.load(found[-1], allow_pickle=False) as i, np.load(found[-1].with_name("reference.npz")) as r:
            inputs, reference = {k: i[k] for k in i.files}, {k: r[k] for k in r.files}
        profiles = profile_shapes(model)
        batches = verification_batches(model.max_batch_size, profiles)
        plan = served_precision(in_use[model.name])
        fallback = Precision.FP32 if Precision.FP32 in model.tolerances else Precision(plan)
        for name, precision in ((model.name, Precision(plan)), (f"{model.name}_onnx", fallback)):
            tolerance = model.tolerances[precision]
            out.append(
                ServedCheck(
                    name, precision.value, inputs, reference, tolerance, model.outputs, batches, profiles
                )
            )
    return out


def served_precision(plan: Path) -> str:
    """The precision of the plan Triton loads here (its metadata), fp32 if none says."""
    if not meta(plan).is_file():
        return "fp32"
    return str(json.loads(meta(plan).read_text(encoding="utf-8")).get("precision", "fp32"))


def check_served(base: str, check: ServedCheck, deadline: float) -> dict[str, Any]:
    """The whole evaluation set at each batch size (so Triton serves it under every profile),
    then one sample per request all at once (so its dynamic batcher forms the batches), each
    compared with the reference; stops, saying so, when the budget runs out."""
    from builder.engines.profiles import profile_for
    from builder.engines.trt_runner import batches
    from builder.stages.verify import compare

    result: dict[str, Any] = {"precision": check.precision, "runs": {}, "profiles": set()}
    runs: list[tuple[str, int]] = [(f"batch {b}", b) for b in check.batches] + [("dynamic batching", -1)]
    for label, size in runs:
        if left(deadline) <= 5:
            result["error"] = f"out of time (--budget-s) before {label}: the rest was not checked"
            break
        try:
            if size >= 0:
                feeds = list(batches(check.inputs, size))
                if check.profiles and size:
                    result["profiles"] |= {
                        profile_for({k: v.shape for k, v in f.items()}, check.profiles, batching=size > 0)
                        for f in feeds
                    }
                got = join([infer(base, check.name, f, check.outputs) for f in feeds], batched=size > 0)
            else:
                before = counts(base, check.name)
                got = infer_concurrently(base, check.name, check.inputs, check.outputs)
                batching = batched(before, counts(base, check.name), max(check.batches) > 1)
        except (RuntimeError, UnsupportedInput) as exc:  # the server's own error text is the finding
            result["runs"][label] = {"ok": False, "error": str(exc)}
            continue
        metrics, failures = compare(check.reference, got, check.tolerance, check.outputs)
        result["runs"][label] = {"ok": not failures, "failures": failures}
        if size < 0:
            result["runs"][label]["batching"] = batching
            result["runs"][label]["ok"] = not failures and batching["ok"] is not False
        result["runs"][label] |= {"metrics": {k: asdict(m) for k, m in metrics.items()}}
    result["profiles"] = sorted(result["profiles"])
    result["ok"] = "error" not in result and all(r["ok"] for r in result["runs"].values())
    return result


def counts(base: str, model: str) -> tuple[int, int]:
    """(inferences, executions) Triton's statistics count for the model, all versions."""
    stats = call(f"{base}/models/{model}/stats") or {}
    found = stats.get("model_stats", [])
    return sum(int(s["inference_count"]) for s in found), sum(int(s["execution_count"]) for s in found)


def batched(before: tuple[int, int], after: tuple[int, int], batches: bool) -> dict[str, Any]:
    """The dynamic-batching run batched when Triton ran fewer executions than inferences;
    ok None for a model without a batch dimension (nothing to batch)."""
    inferences, executions = after[0] - before[0], after[1] - before[1]
    ok = (0 < executions < inferences) if batches else None
    return {"ok": ok, "inference_count": inferences, "execution_count": executions}


def infer_concurrently(
    base: str, model: str, inputs: dict[str, np.ndarray], outputs: list[Any]
) -> dict[str, np.ndarray]:
    """One sample a request, every request made before any is sent, then sent at once by up to
    32 threads (the first of each at a barrier), so the dynamic batcher finds them waiting rather
    than one request at a time from threads still starting."""
    count = len(next(iter(inputs.values())))
    requests = [encode({k: v[i : i + 1] for k, v in inputs.items()}, outputs) for i in range(count)]
    lanes = min(32, count)
    together = threading.Barrier(lanes)
    answers: list[dict[str, np.ndarray]] = [{} for _ in range(count)]

    def lane(first: int) -> None:
        together.wait(timeout=120)
        for i in range(first, count, lanes):
            answers[i] = send(base, model, requests[i])

    with ThreadPoolExecutor(max_workers=lanes) as pool:
        for done in [pool.submit(lane, j) for j in range(lanes)]:
            done.result()
    return join(answers, batched=True)


def join(parts: list[dict[str, np.ndarray]], batched: bool) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] if batched else p[k][None] for p in parts]) for k in parts[0]}


TRITON_TYPES = {
    "float32": "FP32",
    "float16": "FP16",
    "int64": "INT64",
    "int32": "INT32",
    "int8": "INT8",
    "uint8": "UINT8",
    "bool": "BOOL",
}
NUMPY_TYPES = {v: k for k, v in TRITON_TYPES.items()}


class UnsupportedInput(Exception):
    """An input this check cannot send (a dtype without a Triton type here)."""


def infer(base: str, model: str, feed: dict[str, np.ndarray], outputs: list[Any]) -> dict[str, np.ndarray]:
    """One request with the binary tensor extension (the data is not turned into JSON numbers)."""
    return send(base, model, encode(feed, outputs))


def encode(feed: dict[str, np.ndarray], outputs: list[Any]) -> tuple[bytes, bytes]:
    """A request's JSON header and whole body."""
    header: dict[str, Any] = {"inputs": [], "outputs": []}
    blobs = []
    for name, value in feed.items():
        datatype = TRITON_TYPES.get(str(value.dtype))
        if datatype is None:
            raise UnsupportedInput(f"input '{name}' is {value.dtype}, which this check cannot send")
        blob = np.ascontiguousarray(value).tobytes()
        header["inputs"].append(
            {
                "name": name,
                "shape": list(value.shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": len(blob)},
            }
        )
        blobs.append(blob)
    header["outputs"] = [{"name": o.name, "parameters": {"binary_data": True}} for o in outputs]
    head = json.dumps(header).encode()
    return head, head + b"".join(blobs)


def send(base: str, model: str, request_bytes: tuple[bytes, bytes]) -> dict[str, np.ndarray]:
    head, data = request_bytes
    request = urllib.request.Request(
        f"{base}/models/{model}/infer",
        data=data,
        headers={
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head)),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            length = int(response.headers.get("Inference-Header-Content-Length") or 0)
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(exc.read().decode(errors="replace")[:500]) from None
    except OSError as exc:
        raise RuntimeError(f"no answer: {exc}") from None
    return decode(body, length)


def decode(body: bytes, length: int) -> dict[str, np.ndarray]:
    answer = json.loads(body[:length] if length else body)
    offset, out = length, {}
    for o in answer.get("outputs", []):
        size = o.get("parameters", {}).get("binary_data_size")
        dtype = np.dtype(NUMPY_TYPES.get(o["datatype"], "float32"))
        if size is None:
            out[o["name"]] = np.array(o["data"], dtype).reshape(o["shape"])
            continue
        out[o["name"]] = np.frombuffer(body[offset : offset + size], dtype).reshape(o["shape"])
        offset += size
    return out


def run_group(cmd: list[str], timeout: float) -> tuple[int, str, str] | None:
    """Run ``cmd`` in its own process group; None when it ran out of time, after killing the
    whole group (tritonforge and the TensorRT build worker it started)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=os.setpgrp
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc, grace_s=0)
        return None
    return proc.returncode, out, err


def stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM the process group and wait up to ``grace_s`` (0: none), then SIGKILL the whole
    group, which reaches the children too even when their parent has exited."""
    if grace_s:
        _signal_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=grace_s)
    _signal_group(proc, signal.SIGKILL)
    proc.communicate()
    _await_group_end(proc.pid)


def _await_group_end(pgid: int, within_s: float = 10.0) -> None:
    """Return once no process of the group runs any more (zombies count as ended): a SIGKILLed
    child that outlived its parent is reaped by init, not by us, and can still be running in the
    kernel for a moment after killpg() returns; there is no event to wait on but /proc."""
    deadline = time.monotonic() + within_s
    while _group_running(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _group_running(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(pgrp) == pgid and state != "Z":
            return True
    return False


def _signal_group(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


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
