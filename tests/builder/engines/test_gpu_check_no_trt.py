"""tools/gpu_check.sh --no-tensorrt: what it says it proves, its one-line refusal on this
machine (no GPU), its timing verdict, and its zoo comparison run on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from builder.engines.detect import first_gpu

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "gpu_check.sh"


def check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), "--no-tensorrt", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def load_tool() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check_no_trt", ROOT / "tools" / "gpu_check_no_trt.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_help_says_what_a_passing_run_proves() -> None:
    shown = check("--help")
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    for claim in (
        "What a passing run proves",
        "the project's GPU detection (builder/engines/detect.py",
        "the project's CUDA-event timer (builder/engines/trt_runner.py",
        "torch.cuda.Event timing of the same launches within 10 %",
        "efficientnet_lite0 and resnet18",
        "FP16 on CUDA",
        "the spec's fp16 tolerances",
        "It proves nothing about TensorRT",
        "2 when there is no CUDA GPU here",
        "default 420",
    ):
        assert claim in text, claim


def test_without_a_gpu_it_exits_2_with_one_line(tmp_path: Path) -> None:
    if first_gpu()[0] is not None:
        pytest.skip("a GPU is here")
    out = tmp_path / "report.json"
    result = check("--out", str(out))
    assert result.returncode == 2, result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith("gpu_check --no-tensorrt: no CUDA GPU here, nothing was checked: ")
    report = json.loads(out.read_text())
    assert report["checked"] is False and report["steps"] == {} and report["reason"] in line


def test_bad_arguments_are_refused() -> None:
    result = check("--budget-s", "0")
    assert result.returncode == 2 and "--budget-s: must be above 0" in result.stderr


@pytest.mark.parametrize(
    ("project", "torch_ms", "wall", "ok"),
    [
        ([10.0, 10.2, 10.1], [10.0, 10.1, 10.0], [10.5, 10.6, 10.4], True),
        ([12.0, 12.0, 12.0], [10.0, 10.0, 10.0], [13.0, 13.0, 13.0], False),  # 20 % apart
        ([10.0, 10.0, 10.0], [10.0, 10.0, 10.0], [5.0, 5.0, 5.0], False),  # longer than the wall clock
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], False),  # nothing timed
    ],
)
def test_timing_verdict(project: list[float], torch_ms: list[float], wall: list[float], ok: bool) -> None:
    verdict = load_tool().timing_verdict(project, torch_ms, wall)
    assert verdict["ok"] is ok


@pytest.mark.slow
def test_the_zoo_comparison_runs_on_the_cpu_here() -> None:
    # The same code as on the GPU, with the CPU standing in for CUDA (FP16 there too).
    tool = load_tool()
    result = tool.step_zoo(ROOT / "models.yaml", "resnet18", device="cpu")
    assert result["ok"], result["failures"]
    assert result["samples"] == 32 and result["tolerance"]["min_cosine"] == 0.999
    assert result["metrics"]["logits"]["min_cosine"] >= 0.999


def test_the_project_timer_it_drives_times_the_launches_it_is_handed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The contract the check relies on, with a stand-in for libcudart: _timed_ms records an event,
    # calls execute_async_v3 on the stream once per launch, records and reads the second event.
    from types import SimpleNamespace

    import polygraphy.cuda

    from builder.engines.trt_runner import _timed_ms

    calls: list[str] = []

    class FakeCudart:
        def __getattr__(self, name: str) -> Any:
            def call(*args: Any) -> int:
                calls.append(name)
                if name == "cudaEventElapsedTime":
                    args[0]._obj.value = 12.5
                return 0

            return call

    monkeypatch.setattr(polygraphy.cuda, "wrapper", lambda: SimpleNamespace(handle=FakeCudart()))
    launched: list[int] = []

    def execute_async_v3(ptr: int) -> bool:
        launched.append(ptr)
        return True

    context = SimpleNamespace(execute_async_v3=execute_async_v3)
    assert _timed_ms(context, SimpleNamespace(ptr=0xABC), 7) == 12.5  # type: ignore[arg-type]
    assert launched == [0xABC] * 7
    assert calls == [
        "cudaEventCreate", "cudaEventCreate", "cudaEventRecord", "cudaEventRecord",
        "cudaEventSynchronize", "cudaEventElapsedTime", "cudaEventDestroy", "cudaEventDestroy",
    ]  # fmt: skip
