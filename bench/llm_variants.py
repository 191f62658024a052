"""The served LLM's per-token cost, side by side in one run: the project's ``vllm_engine`` model,
Triton's own vLLM backend on the same tritonserver (its ``src`` folder, given with ``--backend``),
and variants of the project's model (its package with a patch applied), each against vLLM's own
OpenAI server, with ``bench.llm``'s checkpoint, dtype, engine settings, prompts and load.

Every Triton model is served by one tritonserver, beside vLLM's server; each round measures every
side once at 16 streams (64 new tokens, ``ignore_eos``, greedy), in an order rotated from round to
round, so that a shared machine's changing load falls on all of them. A side's figure is the sum
of its rounds' output tokens/s over the sum of vLLM's.

    python -m bench.llm_variants [--backend DIR] [--variant NAME=PATCH ...] [--reads]
                                 [--c1-first] [--rounds N] [--key KEY] [--out FILE]

``--reads``: also a copy of the model whose points are measured as ``bench.llm``'s are, with the
server's metrics read before and after each (``clients.perf.run_llm_perf``'s ``metrics_url``).
``--c1-first``: also a copy of the model and a second side on vLLM's server whose rounds run
``bench.llm``'s whole load, concurrency 1 and then 16 (their figure is the 16): row 2 of
``bench.llm`` compares these two.

``--rounds``: a multiple of the number of sides, so that each side goes first as often (default:
twice that number).

``--backend DIR``: a copy of ``triton-inference-server/vllm_backend``'s ``src`` (``model.py`` and
``utils/``), which this project does not ship; it is served as the model ``official``. The
record goes to ``runs.<KEY>`` of ``bench/results/llm_per_token.json`` (``--out``: another file).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import llm
from bench.common import cpu_seconds, machine, machine_cpu, stub_of
from bench.figures import backends_table
from builder.estimate.rss import children
from clients.perf.llm import LLMLoad, run_llm_perf
from clients.perf.llm_prompts import load_chats, shape

RESULTS = llm.RESULTS / "llm_per_token.json"
WORK = llm.WORK / "variants"
LOAD = LLMLoad(output_tokens=llm.NEW_TOKENS, concurrency=(16,), requests_per_user=2, min_requests=6)
VLLM = "vllm_openai"
PROJECT = llm.MODEL  # the project's model keeps the zoo's name
OFFICIAL = "official"
READS = "smollm2_reads"  # --reads: a copy of the model, its metrics read around each point
C1_FIRST = "smollm2_c1_first"  # --c1-first: a copy of the model, each round concurrency 1 then 16
VLLM_C1_FIRST = "vllm_openai_c1_first"  # --c1-first: vLLM's server again, with the same load
# Triton's backend imports vLLM inside the 2.51 stub, whose embedded interpreter runs in the C
# locale: torch then fails to read its UTF-8 files (the project's model sets the same locale).
OFFICIAL_ENTRY = '''"""Triton's vLLM backend (vllm_backend_model.py), loaded in a UTF-8 locale."""
import locale

locale.setlocale(locale.LC_ALL, "C.UTF-8")

from vllm_backend_model import TritonPythonModel  # noqa: E402,F401
'''


@dataclass(frozen=True)
class Side:
    name: str  # the served model's name, or VLLM / VLLM_C1_FIRST
    what: str
    source: dict[str, str] = field(default_factory=dict)  # what it was made of: a patch, file digests
    reads_metrics: bool = False  # the server's metrics are read before and after each point
    c1_first: bool = False  # each round runs bench.llm's full load: concurrency 1, then 16


def digests(folder: Path) -> dict[str, str]:
    """sha256 of each Python file under ``folder`` (what a run of Triton's backend ran)."""
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*.py"))}  # fmt: skip


def write_official_model(model_dir: Path, backend: Path, engine: Any) -> None:
    """Triton's vLLM backend as a Python-backend model: its ``model.py`` and ``utils/`` in the
    version folder, ``model.json`` as the project writes it, and a config as that backend's
    ``auto_complete_config`` shapes it (decoupled, no Triton batching, its text inputs and outputs;
    it adds its ``image`` and ``embedding_request`` inputs itself). Its defaults are kept: no
    custom metrics, no health check."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from builder.llm.interface import BACKEND_INPUTS, BACKEND_OUTPUTS, add_tensors
    from builder.llm.serving import model_json
    from builder.python_models.vllm_engine.contract import ENGINE_ARGS_FILE

    version = model_dir / "1"
    shutil.rmtree(model_dir, ignore_errors=True)
    version.mkdir(parents=True)
    shutil.copy2(backend / "model.py", version / "vllm_backend_model.py")
    shutil.copytree(backend / "utils", version / "utils")
    (version / "model.py").write_text(OFFICIAL_ENTRY, encoding="utf-8")
    (version / ENGINE_ARGS_FILE).write_text(json.dumps(model_json(engine), indent=2) + "\n", encoding="utf-8")
    cfg = mc.ModelConfig(
        name=model_dir.name, backend="python", max_batch_size=0,
        model_transaction_policy=mc.ModelTransactionPolicy(decoupled=True),
        instance_group=[mc.ModelInstanceGroup(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)],
    )  # fmt: skip
    add_tensors(cfg, BACKEND_INPUTS, BACKEND_OUTPUTS)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(cfg), encoding="utf-8")


def write_model(model_dir: Path, engine: Any) -> Path:
    """The project's model as bench.llm serves it (64 may wait); returns its version folder."""
    from builder.llm.serving import ServingSettings
    from builder.targets.vllm_python import write_local_model

    shutil.rmtree(model_dir, ignore_errors=True)
    return write_local_model(model_dir, engine, ServingSettings(max_waiting=64))


def write_variant(model_dir: Path, patch: Path, engine: Any) -> None:
    """The project's model with ``patch`` (a unified diff of its package, ``a/model.py``,
    ``a/utils/lanes.py``...) applied."""
    version = write_model(model_dir, engine)
    done = subprocess.run(["patch", "--quiet", "-p1", "-d", str(version), "-i", str(patch.resolve())],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{patch}: does not apply to the model: {(done.stdout + done.stderr).strip()}")


def write_repo(
    repo: Path, checkpoint: Path, backend: Path | None, variants: dict[str, Path],
    reads: bool = False, c1_first: bool = False,
) -> list[Side]:  # fmt: skip
    from builder.llm.serving import EngineArgs

    engine = EngineArgs(model=str(checkpoint.resolve()), **llm.ENGINE)
    shutil.rmtree(repo, ignore_errors=True)
    write_model(repo / PROJECT, engine)
    sides = [Side(PROJECT, "the project's vllm_engine model as it is")]
    if reads:
        write_model(repo / READS, engine)
        what = "the project's model, its metrics read before and after each point (as bench.llm does)"
        sides.append(Side(READS, what, reads_metrics=True))
    if c1_first:
        write_model(repo / C1_FIRST, engine)
        what = "the project's model, each round at concurrency 1 before 16 (bench.llm's load)"
        sides.append(Side(C1_FIRST, what, c1_first=True))
        what = "vLLM's own OpenAI server, each round at concurrency 1 before 16 (bench.llm's load)"
        sides.append(Side(VLLM_C1_FIRST, what, c1_first=True))
    if backend is not None:
        write_official_model(repo / OFFICIAL, backend, engine)
        sides.append(Side(OFFICIAL, f"Triton's own vLLM backend ({backend})", digests(backend)))
    for name, patch in variants.items():
        write_variant(repo / name, patch, engine)
        what = f"the project's model with {patch.name} applied"
        sides.append(Side(name, what, {"patch": patch.read_text()}))
    return [*sides, Side(VLLM, "vLLM's own OpenAI server")]


@contextlib.contextmanager
def servers(repo: Path, checkpoint: Path) -> Iterator[tuple[Any, llm.VLLMServer]]:
    """tritonserver on ``repo`` and vLLM's own server."""
    from builder.server import TritonServer

    server = TritonServer(repo, log_path=WORK / "server.log")
    server.start(timeout=llm.START_TIMEOUT)
    try:
        with llm.vllm_openai(checkpoint) as vllm:
            yield server, vllm
    finally:
        server.stop()


def _cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError):  # gone
        return 0.0


def cpu_now(frontend: int, server: int | None) -> dict[str, float]:
    """CPU seconds so far: ``frontend`` (the side's stub, or vLLM's API server) itself, its
    descendants (``engine``: vLLM's engine core), tritonserver, the finished perf_analyzer runs
    (``client``) and the whole machine."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"frontend": _cpu(frontend), "engine": sum(_cpu(c) for c in children(frontend)),
            "server": _cpu(server) if server is not None else 0.0,
            "client": ended.ru_utime + ended.ru_stime, "machine": machine_cpu()[0],
            "wall": time.perf_counter()}  # fmt: skip


def cores_used(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """Cores used on average between two ``cpu_now`` readings; ``other``: every other process
    (the sides not measured, this process)."""
    wall = end["wall"] - start["wall"]
    used = {k: (end[k] - start[k]) / wall for k in ("frontend", "engine", "server", "client", "machine")}
    used["other"] = max(0.0, used.pop("machine") - sum(used.values()))
    return {k: round(v, 3) for k, v in used.items()}


def stub_pid(server: Any, model: str) -> int:
    """The Python-backend stub serving ``model``."""
    found = [pid for pid in children(server.pid) if stub_of(pid, model)]
    if not found:
        raise RuntimeError(f"no stub process of model '{model}' under tritonserver {server.pid}")
    return found[0]


@dataclass
class Measured:
    tps: dict[str, list[float]]  # output tokens/s at 16 streams, one figure per round
    cores: dict[str, list[dict[str, float]]]  # cores used during each round's run (cores_used)


def measure(sides: list[Side], repo: Path, checkpoint: Path, rounds: int) -> Measured:
    prompts = shape(load_chats(llm.ROOT / "calibration" / llm.MODEL / "perf.json"), checkpoint, None)
    done = Measured({s.name: [] for s in sides}, {s.name: [] for s in sides})
    with servers(repo, checkpoint) as (server, vllm):
        for r in range(rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for side in order:
                folder = WORK / side.name / f"round{r + 1}"
                load = llm.LOAD if side.c1_first else LOAD
                if side.name in (VLLM, VLLM_C1_FIRST):
                    start = cpu_now(vllm.pid, None)
                    report = run_llm_perf(
                        vllm.url, llm.MODEL, prompts, load, out_dir=folder, service_kind="openai"
                    )
                    used = cores_used(start, cpu_now(vllm.pid, None))
                else:
                    stub = stub_pid(server, side.name)
                    start = cpu_now(stub, server.pid)
                    reads = {"metrics_url": server.metrics_url} if side.reads_metrics else {}
                    report = run_llm_perf(server.grpc_url, side.name, prompts, load, out_dir=folder, **reads)
                    used = cores_used(start, cpu_now(stub, server.pid))
                done.tps[side.name].append(round(llm.point(report, 16)["output_tokens_per_s"], 1))
                done.cores[side.name].append(used)
                print(
                    f"round {r + 1} {side.name}: {done.tps[side.name][-1]} tokens/s, cores {used}", flush=True
                )
    return done


def summary(sides: list[Side], done: Measured) -> dict[str, Any]:
    base = done.tps[VLLM]
    out: dict[str, Any] = {}
    for side in sides:
        rounds, cores = done.tps[side.name], done.cores[side.name]
        ratios = [round(a / b, 3) for a, b in zip(rounds, base, strict=True)]
        mean = {k: round(sum(c[k] for c in cores) / len(cores), 3) for k in cores[0]} if cores else {}
        out[side.name] = {"what": side.what, "source": side.source, "round_tps_c16": rounds,
                          "round_ratios": ratios, "vs_vllm_c16": round(sum(rounds) / sum(base), 3),
                          "cores_used": mean, "round_cores_used": cores}  # fmt: skip
        if side.c1_first and side.name != VLLM_C1_FIRST:  # row 2's own comparison: the same load
            out[side.name]["vs_vllm_c1_first_c16"] = round(sum(rounds) / sum(done.tps[VLLM_C1_FIRST]), 3)
    return out


def keep(runs: dict[str, Any], key: str, record: dict[str, Any]) -> None:
    """``record`` as ``runs[key]``; the record it replaces goes whole (without its own earlier
    ones) to ``runs[key].earlier``: a side's ratio from one run alone is within the rounds'
    noise, the runs together tell."""
    previous = runs.get(key)
    earlier = list(previous.get("earlier", [])) if previous else []
    if previous:
        earlier.append({k: v for k, v in previous.items() if k != "earlier"})
    runs[key] = {**record, "earlier": earlier}


def check_out(out: Path, key: str) -> str | None:
    """Why ``--out``/``--key`` cannot take a record (before anything is measured), or None."""
    if not out.is_file():
        return None
    try:
        held = json.loads(out.read_text()).get("runs", {}).get(key)
    except (ValueError, AttributeError) as exc:
        return f"--out {out}: not a results file ({exc})"
    if held is not None and not (isinstance(held, dict) and "sides" in held):
        return f"--key {key}: {out} holds another kind of record under runs.{key}; choose another key"
    return None


def variant_arg(text: str) -> tuple[str, Path]:
    name, sep, patch = text.partition("=")
    if (
        not sep
        or not name.isidentifier()
        or name in (PROJECT, OFFICIAL, READS, C1_FIRST, VLLM, VLLM_C1_FIRST)
    ):
        raise argparse.ArgumentTypeError(f"--variant {text}: write NAME=PATCH, NAME a new identifier")
    if not Path(patch).is_file():
        raise argparse.ArgumentTypeError(f"--variant {text}: no such patch file")
    return name, Path(patch).resolve()


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.llm_variants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", type=Path, help="Triton's vLLM backend's src folder (model.py, utils/)")
    ap.add_argument("--variant", type=variant_arg, action="append", default=[], metavar="NAME=PATCH")
    ap.add_argument("--reads", action="store_true", help=f"also serve {READS}: the model, its metrics read")
    ap.add_argument(
        "--c1-first", action="store_true", help=f"also {C1_FIRST}, {VLLM_C1_FIRST}: bench.llm's load"
    )
    ap.add_argument("--rounds", type=int, help="a multiple of the sides (default: twice their number)")
    ap.add_argument("--key", default="backends", help="the record's name under runs (default: backends)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    opts = ap.parse_args(argv)
    backend = opts.backend
    if backend is not None and not ((backend / "model.py").is_file() and (backend / "utils").is_dir()):
        ap.error(f"--backend {backend}: needs model.py and utils/ (vllm_backend's src folder)")
    names = [name for name, _ in opts.variant]
    if len(set(names)) != len(names):
        ap.error(f"--variant: each name once, got {', '.join(names)}")
    sides = 2 + (backend is not None) + opts.reads + 2 * opts.c1_first + len(names)  # 2: model, vLLM
    opts.rounds = 2 * sides if opts.rounds is None else opts.rounds
    if opts.rounds < 1 or opts.rounds % sides:
        ap.error(f"--rounds {opts.rounds}: a multiple of the {sides} sides, so that each goes first as often")
    problem = check_out(opts.out, opts.key)
    if problem:
        ap.error(problem)
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    reason = llm.skipped()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    checkpoint = llm.checkpoint()
    WORK.mkdir(parents=True, exist_ok=True)
    variants = dict(opts.variant)
    sides = write_repo(WORK / "repo", checkpoint, opts.backend, variants, opts.reads, opts.c1_first)
    info, start = machine(), time.monotonic()  # the date and load average when it starts
    result = summary(sides, measure(sides, WORK / "repo", checkpoint, opts.rounds))
    record = {**info, "engine": llm.ENGINE, "dtype_reason": llm.DTYPE_REASON[0], "load": vars(LOAD),
              "method": "bench.llm_variants: every side up at once, one round each in a rotated order, "
                        "output tokens/s at 16 streams (perf_analyzer streaming); ratios of the rounds' sums",
              "minutes": round((time.monotonic() - start) / 60, 1),
              "load_avg_after": [round(x, 2) for x in os.getloadavg()], "sides": result}  # fmt: skip
    data = json.loads(opts.out.read_text()) if opts.out.is_file() else {}
    keep(data.setdefault("runs", {}), opts.key, record)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(backends_table(result))
    print(f"written: {opts.out} (runs.{opts.key})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
