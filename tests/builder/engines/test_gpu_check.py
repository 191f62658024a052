"""tools/gpu_check.sh: its arguments, its report on this machine (no GPU), and its whole run
against the TensorRT double (real builds, real subprocesses, plans run as their ONNX)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engine_support import DOUBLE_DIR

from builder.engines.detect import detect
from builder.host import cpu_has_vnni

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "gpu_check.sh"


def check(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=full, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_help_and_bad_arguments(tmp_path: Path) -> None:
    shown = check("--help")
    assert shown.returncode == 0 and "--budget-s" in shown.stdout and "--no-server" in shown.stdout
    for args, why in [
        (("--bogus",), "unrecognized arguments: --bogus"),
        (("--spec", str(tmp_path / "none.yaml")), "--spec: "),
        (("--budget-s", "0"), "--budget-s: must be above 0"),
    ]:
        result = check(*args)
        assert result.returncode == 2 and why in result.stderr, result.stderr


def load_tool() -> Any:
    """tools/gpu_check.py as a module, for its parts."""
    spec = importlib.util.spec_from_file_location("gpu_check_tool", ROOT / "tools" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_help_documents_what_a_passing_run_proves_and_the_budget() -> None:
    shown = check("--help").stdout
    for claim in (
        "What a passing run proves",
        "opt batch and at the max batch under the profile Triton picks",
        "under every profile",
        "dynamic batcher forms the batches",
        "compared with the reference under the tolerance of the precision served",
        '"served": the precision',
        "killed as one process group",
        'marked "out of time (--budget-s)"',
    ):
        assert claim in " ".join(shown.split()), claim


def test_running_out_of_time_kills_the_build_worker_too(tmp_path: Path, monkeypatch) -> None:
    # tritonforge stands in as a shell that starts a child (the build worker) and waits on it
    tool = load_tool()
    pidfile = tmp_path / "worker.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    monkeypatch.setattr(tool, "TRITONFORGE", ["bash", "-c", script, "tritonforge"])
    args = argparse.Namespace(spec=tmp_path / "models.yaml", repo=tmp_path / "repo")
    step = tool.engines(args, time.monotonic() + 3)
    assert step["ok"] is False and step["error"].startswith("out of time (--budget-s)")
    worker = int(pidfile.read_text())
    # The tool returns once its group has ended: gone, or a zombie init has yet to reap.
    with contextlib.suppress(FileNotFoundError):
        assert ") Z " in Path(f"/proc/{worker}/stat").read_text()


def test_an_input_type_it_cannot_send_is_a_finding_not_a_keyerror(tmp_path: Path) -> None:
    tool = load_tool()
    from builder.spec import Tolerance

    odd = {"x": np.zeros((2, 4), np.uint16)}
    served = tool.ServedCheck(
        "m", "fp32", odd, {"y": np.zeros((2, 4))}, Tolerance(min_cosine=0.99), [], [2], []
    )
    result = tool.check_served("http://127.0.0.1:9/v2", served, time.monotonic() + 60)
    assert result["ok"] is False
    assert result["runs"]["batch 2"]["error"] == "input 'x' is uint16, which this check cannot send"
    assert set(result["runs"]) == {"batch 2", "dynamic batching"}


def test_the_budget_stops_the_server_check_and_says_where(tmp_path: Path) -> None:
    tool = load_tool()
    from builder.spec import Tolerance

    served = tool.ServedCheck(
        "m", "fp32", {"x": np.zeros((2, 4), np.float32)}, {}, Tolerance(min_cosine=0.99), [], [2], []
    )
    result = tool.check_served("http://127.0.0.1:9/v2", served, time.monotonic())
    assert result["ok"] is False and result["runs"] == {}
    assert result["error"] == "out of time (--budget-s) before batch 2: the rest was not checked"


def test_on_this_machine_it_says_plainly_that_nothing_was_checked(tmp_path: Path) -> None:
    if detect().available:
        pytest.skip("TensorRT and a GPU are present")
    out = tmp_path / "report.json"
    result = check("--out", str(out))
    assert result.returncode == 2
    assert result.stdout.startswith("gpu_check: no GPU with TensorRT here, nothing was checked: ")
    report = json.loads(out.read_text())
    assert report["checked"] is False and report["steps"] == {}
    assert report["detect"]["available"] is False and report["detect"]["reason"] in result.stdout


def cpu_verified(repo: Path, model: str) -> list[str]:
    """The model's precisions that passed the CPU verification, from the repository's manifest."""
    manifest = json.loads((repo / "manifest.json").read_text())
    reports = manifest["models"][model]["verification"]
    return [p for p in ("fp32", "fp16", "int8") if reports[p]["passed"]]


@pytest.mark.slow
def test_a_gpu_host_run_builds_every_plan_then_rebuilds_none(tiny_project: Path, tmp_path: Path) -> None:
    env = {"PYTHONPATH": f"{DOUBLE_DIR}:{ROOT}", "TRT_DOUBLE_GPU": "NVIDIA A10:8.6"}
    out = tmp_path / "report.json"
    result = check("--spec", str(tiny_project / "models.yaml"), "--out", str(out), "--no-server", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["checked"] and report["ok"]
    assert report["detect"]["gpu"] == {"name": "NVIDIA A10", "compute_capability": "8.6"}
    built = [(p["model"], p["precision"], p["status"]) for p in report["steps"]["build"]["plans"]]
    fresh = [(p["model"], p["precision"], p["status"]) for p in report["steps"]["rebuild"]["plans"]]
    verified = cpu_verified(Path(report["repository"]), "tiny")
    # A plan for every precision that passed the CPU verification, as the build's own manifest
    # records it. fp32 and fp16 pass on any CPU. The int8 variant, made with TensorRT's recipe
    # (8-bit weights), passes only where ONNX Runtime's INT8 dot products do not saturate: on
    # a CPU with VNNI (cpu_has_vnni, the flag the local target's 7-bit recipe reads).
    assert verified == (["fp32", "fp16", "int8"] if cpu_has_vnni() else ["fp32", "fp16"])
    assert built == [("tiny", p, "built") for p in verified]
    assert fresh == [("tiny", p, "fresh") for p in verified]
    assert report["steps"]["rebuild"]["rebuilt"] == []
    (plan,) = report["steps"]["plans"]  # the served one, installed in the repository
    assert plan["tensorrt_version"] == "10.13.0.35" and plan["verification"]
    assert plan["in_use"] and report["served"] == {"tiny": plan["precision"]}
    assert report["steps"]["server"] == {"ok": None, "skipped": "--no-server"}


def test_served_names_the_plan_of_the_gpu_in_use(tmp_path: Path, monkeypatch) -> None:
    # Per-GPU plans (cc_model_filenames) kept side by side: the first or last file would name
    # another GPU's plan; the one Triton loads here is this compute capability's.
    import builder.spec
    from builder.spec.engine import EngineOptions

    tool = load_tool()
    version = tmp_path / "repo" / "m" / "1"
    version.mkdir(parents=True)
    for cc, precision in (("7.5", "fp32"), ("8.6", "int8"), ("9.0", "fp16")):
        (version / f"model.sm{cc.replace('.', '')}.plan.json").write_text(
            json.dumps({"precision": precision})
        )
    engine = EngineOptions(cc_model_filenames=["7.5", "8.6", "9.0"])
    fake = argparse.Namespace(models=[argparse.Namespace(name="m", engine=engine)])
    monkeypatch.setattr(builder.spec, "load_spec", lambda path: fake)
    args = argparse.Namespace(spec=tmp_path / "models.yaml", repo=tmp_path / "repo")
    in_use = tool.served_plans(args, "8.6")
    assert in_use == {"m": version / "model.sm86.plan"}
    assert tool.served_precision(in_use["m"]) == "int8"
    listed = tool.plans(args.repo, set(in_use.values()))
    assert [(Path(p["file"]).name, p["in_use"]) for p in listed] == [
        ("model.sm75.plan", False), ("model.sm86.plan", True), ("model.sm90.plan", False)
    ]  # fmt: skip
    one = EngineOptions()  # no per-GPU plans: model.plan on every GPU
    monkeypatch.setattr(builder.spec, "load_spec", lambda path: argparse.Namespace(models=[
        argparse.Namespace(name="m", engine=one)]))  # fmt: skip
    assert tool.served_plans(args, "8.6") == {"m": version / "model.plan"}


@pytest.mark.parametrize(
    ("stats", "ok"),
    [
        ([(0, 0), (16, 3)], True),  # 16 requests in 3 executions: batched
        ([(0, 0), (16, 16)], False),  # one execution per request: the batcher did not batch
        ([(4, 4), (20, 5)], True),  # counted from before the run
    ],
)
def test_the_dynamic_batching_run_must_show_batches_in_tritons_statistics(
    monkeypatch, stats: list[tuple[int, int]], ok: bool
) -> None:
    tool = load_tool()
    from builder.spec import Tolerance

    x = np.ones((16, 4), np.float32)
    replies = iter({"model_stats": [{"inference_count": i, "execution_count": e}]} for i, e in stats)
    monkeypatch.setattr(tool, "call", lambda url, body=None: next(replies))
    monkeypatch.setattr(tool, "infer_concurrently", lambda base, model, inputs, outputs: {"y": x})
    served = tool.ServedCheck("m", "fp32", {"x": x}, {"y": x}, Tolerance(min_cosine=0.99), [], [], [])
    served.batches = [8, 16]
    result = tool.check_served("http://127.0.0.1:9/v2", served, time.monotonic() + 60)
    run = result["runs"]["dynamic batching"]
    assert run["batching"]["ok"] is ok and run["ok"] is ok
    assert run["batching"]["inference_count"] == stats[1][0] - stats[0][0]
