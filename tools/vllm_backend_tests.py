"""Run Triton's own vLLM-backend tests (a checkout of triton-inference-server/vllm_backend, its
``ci/`` folder) unchanged against the project's LLM model (``vllm_engine``).

The server is started the way their ``test.sh`` scripts start theirs: the model named
``vllm_opt`` (the name their tests hard-code), HTTP, gRPC and metrics on localhost 8000, 8001
and 8002, explicit model control with the model loaded. Each test file runs from its own folder
(they import ``../../common/test_util.py``), with python for their unittest files and pytest for
the others, as their scripts run them. Their files are not part of this project:
pass the checkout's folder.

    python tools/vllm_backend_tests.py --checkout ~/vllm_backend \\
        ci/L0_additional_outputs_vllm/additional_outputs_test.py

Exit status: pytest's (0 when every test passed), 2 for a bad argument. What to expect with the
zoo's SmolLM2 (measured 2026-12-01, 51 of the 1458 additional-outputs cases, every 29th): the
cases pass except where the test assumes the model writes 16 tokens without ending its answer
(finish reason ``length``, no end-of-text token among the log-probabilities), which holds for the
OPT-125m their CI serves, not for an instruction-tuned model that answers in fewer; Triton's own
backend returns the same outputs for the same engine. Tests that cannot run here at all: the
metrics test (it asserts OPT-125m's exact token counts), the health check (it patches vLLM's
installed sources), multi-LoRA (it downloads adapters) and the multi-GPU ones (no GPU). The
request cancellation test (ci/L0_backend_vllm/request_cancellation) passed with
``--max-waiting 128``: it sends 100 requests at once, and the model refuses those beyond
max_num_seqs + max_waiting, which that test does not expect.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.llm.serving import EngineArgs, ServingSettings  # noqa: E402
from builder.server import TritonServer  # noqa: E402
from builder.targets.vllm_python import write_local_model  # noqa: E402

MODEL = "vllm_opt"  # the model name Triton's vLLM-backend tests use


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="a vllm_backend checkout")
    parser.add_argument("--work", type=Path, default=ROOT / ".tritonforge" / "vllm-backend-tests")
    parser.add_argument("--max-waiting", type=int, default=None, help="admission beyond max_num_seqs")
    parser.add_argument("--pytest", default="", help="more pytest arguments as one value: --pytest='-k x'")
    parser.add_argument("tests", nargs="+", help="test files, relative to the checkout")
    args = parser.parse_args(argv)
    for test in args.tests:
        if not (args.checkout / test).is_file():
            parser.error(f"{args.checkout / test}: no such test file in the checkout")
    return args


def serve(work: Path, max_waiting: int | None) -> TritonServer:
    from tests.integration.fixtures.llm_repo import checkpoint

    engine = EngineArgs(model="checkpoint", dtype="float32", max_model_len=2048, max_num_seqs=16)
    shutil.rmtree(work / "repo" / MODEL, ignore_errors=True)  # a run before this one left it
    settings = ServingSettings(max_waiting=max_waiting)
    write_local_model(work / "repo" / MODEL, engine, settings, checkpoint=checkpoint())
    server = TritonServer(
        work / "repo", log_path=work / "server.log", model_control="explicit", load_models=[MODEL],
        http_port=8000, grpc_port=8001, metrics_port=8002,
    )  # fmt: skip
    server.start(timeout=400)
    return server


def command(test: Path, pytest_args: str) -> list[str]:
    """As their test scripts run it: a unittest file (it ends in unittest.main(), and its result
    collector needs unittest's runner) with python, the others with pytest."""
    if "unittest.main()" in test.read_text(encoding="utf-8"):
        return [sys.executable, test.name]
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *shlex.split(pytest_args), test.name]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    server = serve(args.work, args.max_waiting)
    try:
        status = 0
        for test in args.tests:
            path = (args.checkout / test).resolve()
            done = subprocess.run(command(path, args.pytest), cwd=path.parent, check=False)
            status = status or done.returncode
        return status
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
