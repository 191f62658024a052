"""What a GPU host without TensorRT can prove, in one run and one JSON report.

For a host with one NVIDIA GPU, CUDA, PyTorch, onnx and CPU ONNX Runtime, and no TensorRT,
onnxruntime-gpu, tritonserver or network. What a passing run proves, on that GPU:

1. detect: the project's GPU detection (builder/engines/detect.py: cuda-python, else the CUDA
   runtime library, else nvidia-smi) finds the GPU PyTorch uses (same name and compute
   capability), and says whether TensorRT is here;
2. timing: the project's CUDA-event timer (builder/engines/trt_runner.py, _timed_ms: events
   recorded around the launches through the libcudart Polygraphy loads) times a known
   workload, back-to-back FP16 matrix products of 4096 x 4096 on one stream, and agrees with
   torch.cuda.Event timing of the same launches within 10 % (median of alternated rounds),
   and the project's time does not exceed the wall-clock time around it;
3. zoo: efficientnet_lite0 and resnet18, built by their models.yaml factories, run in FP16 on
   CUDA (PyTorch) on their evaluation sets and match the FP32 CPU reference under the spec's
   fp16 tolerances (builder.stages.verify.compare).

It proves nothing about TensorRT, its plans, their profiles or Triton (tools/gpu_check.sh
without --no-tensorrt does, on a host that has them).

Exit 0 when every step passed, 1 when one failed or the budget (--budget-s, default 420:
7 minutes) ran out (the step running then is marked "out of time (--budget-s)", the steps
after it do not run), 2 when there is no CUDA GPU here: one line says why, and the report
says checked: false.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from functools import partial
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.engines.detect import detect, first_gpu  # noqa: E402

ZOO = ("efficientnet_lite0", "resnet18")
MATRIX = 4096
LAUNCHES = 20
ROUNDS = 5
AGREE = 0.10  # the two timers may differ by this share of torch's time


class OutOfTime(Exception):
    pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tools/gpu_check.sh --no-tensorrt",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--spec", type=Path, default=ROOT / "models.yaml", help="the spec (default: models.yaml)")
    p.add_argument("--out", type=Path, default=Path("gpu_check_no_trt.json"), help="the JSON report")
    p.add_argument("--budget-s", type=int, default=420, help="time for all steps together (default 420)")
    args = p.parse_args(argv)
    if not args.spec.is_file():
        p.error(f"--spec: {args.spec} is not a file")
    if args.budget_s <= 0:
        p.error("--budget-s: must be above 0")
    return args


def no_gpu_reason() -> str | None:
    """Why nothing can be checked here, or None: the project's detection and PyTorch must both
    see a CUDA device."""
    gpu, why = first_gpu()
    if gpu is None:
        return why or "no CUDA device"
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not installed ({exc})"
    if not torch.cuda.is_available():
        return f"PyTorch sees no CUDA device (the project's detection found {gpu.name})"
    return None


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    report: dict[str, Any] = {"spec": str(args.spec), "budget_s": args.budget_s, "steps": {}}
    why = no_gpu_reason()
    if why is not None:
        report |= {"checked": False, "reason": why}
        write(args.out, report)
        print(f"gpu_check --no-tensorrt: no CUDA GPU here, nothing was checked: {why} (report: {args.out})")
        return 2
    steps: dict[str, Any] = report["steps"]
    runs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("detect", step_detect),
        ("timing", step_timing),
        *[(f"zoo:{name}", partial(step_zoo, args.spec, name)) for name in ZOO],
    ]
    with budget(args.budget_s):
        for name, run in runs:
            try:
                steps[name] = run()
            except OutOfTime:
                steps[name] = {"ok": False, "error": "out of time (--budget-s)"}
                break
            except Exception as exc:  # the step's own failure is the finding
                steps[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    report["checked"] = True
    report["ok"] = len(steps) == len(runs) and all(s["ok"] for s in steps.values())
    write(args.out, report)
    gpu = steps.get("detect", {}).get("gpu", {}).get("name", "?")
    print(f"gpu_check --no-tensorrt: {'passed' if report['ok'] else 'FAILED'} on {gpu} (report: {args.out})")
    return 0 if report["ok"] else 1


@contextmanager
def budget(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise OutOfTime

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def step_detect() -> dict[str, Any]:
    import torch

    found = detect()
    gpu, _ = first_gpu()
    assert gpu is not None
    torch_name = torch.cuda.get_device_name(0)
    torch_cc = "{}.{}".format(*torch.cuda.get_device_capability(0))
    same = gpu.name == torch_name and gpu.compute_capability == torch_cc
    return {
        "ok": same,
        "gpu": {"name": gpu.name, "compute_capability": gpu.compute_capability},
        "torch": {"name": torch_name, "compute_capability": torch_cc, "cuda": torch.version.cuda},
        "tensorrt": {"available": found.available, "reason": found.reason},
    }


class TorchLaunches:
    """Stands where _timed_ms expects a TensorRT execution context: each execute_async_v3
    enqueues the known workload on the stream it is handed."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.work = work

    def execute_async_v3(self, stream_ptr: int) -> bool:
        import torch

        with torch.cuda.stream(torch.cuda.ExternalStream(stream_ptr)):
            self.work()
        return True


def step_timing() -> dict[str, Any]:
    import torch

    _libcudart_on_path()
    from builder.engines.trt_runner import _timed_ms

    a = torch.randn(MATRIX, MATRIX, device="cuda", dtype=torch.float16)
    b = torch.randn(MATRIX, MATRIX, device="cuda", dtype=torch.float16)
    stream = torch.cuda.Stream()
    context = TorchLaunches(lambda: torch.matmul(a, b))
    handle = SimpleNamespace(ptr=stream.cuda_stream)
    for _ in range(3):  # warm up: cuBLAS picks its kernel, the clocks rise
        _timed_ms(cast(Any, context), handle, LAUNCHES)
    project, torch_ms, wall = [], [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        project.append(_timed_ms(cast(Any, context), handle, LAUNCHES))
        wall.append((time.perf_counter() - start) * 1000)
        torch_ms.append(torch_events_ms(stream, context.work, LAUNCHES))
    return timing_verdict(project, torch_ms, wall)


def torch_events_ms(stream: Any, work: Callable[[], Any], launches: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record(stream)
        for _ in range(launches):
            work()
        end.record(stream)
    end.synchronize()
    return float(start.elapsed_time(end))


def timing_verdict(project: list[float], torch_ms: list[float], wall: list[float]) -> dict[str, Any]:
    """The medians agree within AGREE and the project's events fit inside the wall clock."""
    p, t, w = statistics.median(project), statistics.median(torch_ms), statistics.median(wall)
    flop = 2 * MATRIX**3 * LAUNCHES
    agree = t > 0 and abs(p - t) <= AGREE * t
    return {
        "ok": bool(agree and 0 < p <= w * 1.05),
        "workload": f"{LAUNCHES} x matmul fp16 {MATRIX}x{MATRIX}, one stream",
        "project_ms": round(p, 3),
        "torch_events_ms": round(t, 3),
        "wall_ms": round(w, 3),
        "difference": round((p - t) / t, 4) if t > 0 else None,
        "tflops": round(flop / (p / 1000) / 1e12, 1) if p > 0 else None,
        "rounds": {"project_ms": project, "torch_events_ms": torch_ms, "wall_ms": wall},
    }


def _libcudart_on_path() -> None:
    """Polygraphy looks for libcudart on LD_LIBRARY_PATH and in nvidia/cuda_runtime; the
    project's search also knows the CUDA 13 wheels' folder."""
    from builder.engines.cuda_runtime import cudart_dirs

    found = [str(d) for d in cudart_dirs()]
    current = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys([*found, *current]))


def step_zoo(spec_file: Path, name: str, device: str = "cuda") -> dict[str, Any]:
    """The model in FP16 on ``device`` against its FP32 CPU reference, on its evaluation set."""
    import torch

    from builder.data import load_samples
    from builder.factories import import_factory
    from builder.spec import Precision, load_spec
    from builder.stages.verify import compare

    spec = load_spec(spec_file)
    model = spec.model(name)
    net = import_factory(
        model.source, spec_file.parent, spec_file=spec_file, model=name, field="source"
    )().eval()
    assert model.evaluation is not None, f"{name} has no evaluation set"
    feed = load_samples(
        model.evaluation, model, spec_dir=spec_file.parent, spec_file=spec_file, section="evaluation"
    )
    inputs = [torch.from_numpy(feed[t.name]) for t in model.inputs]
    with torch.inference_mode():
        reference = _outputs(net(*inputs), model.outputs)
        half = net.to(device=device, dtype=torch.float16)
        got = _outputs(half(*[x.to(device=device, dtype=torch.float16) for x in inputs]), model.outputs)
    tolerance = model.tolerances[Precision.FP16]
    metrics, failures = compare(reference, got, tolerance, model.outputs)
    return {
        "ok": not failures,
        "samples": int(inputs[0].shape[0]),
        "device": device,
        "tolerance": tolerance.model_dump(mode="json", exclude_none=True),
        "failures": failures,
        "metrics": {k: asdict(m) for k, m in metrics.items()},
    }


def _outputs(result: Any, outputs: list[Any]) -> dict[str, Any]:
    import torch

    if isinstance(result, torch.Tensor):
        result = [result]
    if isinstance(result, dict):
        result = [result[o.name] for o in outputs]
    return {o.name: r.float().cpu().numpy() for o, r in zip(outputs, result, strict=True)}


def write(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
