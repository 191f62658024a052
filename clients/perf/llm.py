"""The perf wrapper's LLM mode: perf_analyzer's streaming load at each concurrency, every response
timed from its profile export, the model's own vllm:* metrics scraped around each point.

    from clients.perf.llm import LLMLoad, run_llm_perf
    report = run_llm_perf("127.0.0.1:8001", "smollm2", prompts, LLMLoad(output_tokens=64),
                          out_dir=Path("perf"), metrics_url="127.0.0.1:8002")
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from clients.perf import llm_metrics, profile_export
from clients.perf.errors import PerfError
from clients.perf.llm_prompts import Prompt, input_data, openai_input_data
from clients.perf.llm_report import LLMPoint, LLMReport, write_all
from clients.perf.llm_stats import stream_stats
from clients.perf.runner import find_perf_analyzer, host_port

DEFAULT_CONCURRENCY = (1, 4, 16)


@dataclass(frozen=True)
class LLMLoad:
    """What each load point sends: ``output_tokens`` new tokens (``ignore_eos``, greedy), and
    ``requests_per_user`` requests per concurrent stream (at least ``min_requests`` in all)."""

    output_tokens: int = 64
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    requests_per_user: int = 4
    min_requests: int = 8
    timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.output_tokens < 1:
            raise PerfError(f"output tokens must be at least 1, got {self.output_tokens}")
        if not self.concurrency or min(self.concurrency) < 1:
            raise PerfError(f"concurrency must be positive integers, got {list(self.concurrency)}")

    def requests(self, concurrency: int) -> int:
        return max(self.requests_per_user * concurrency, self.min_requests)


def run_llm_perf(
    url: str,
    model: str,
    prompts: Sequence[Prompt],
    load: LLMLoad,
    *,
    out_dir: Path,
    metrics_url: str | None = None,
    stem: str | None = None,
    service_kind: str = "triton",
) -> LLMReport:
    """One streaming perf_analyzer run per concurrency (gRPC ``url``); writes CSV/JSON/MD/PNG.
    ``service_kind="openai"``: the same load on an OpenAI-compatible server's ``v1/completions``
    (HTTP ``url``), for comparisons."""
    if service_kind not in ("triton", "openai"):
        raise PerfError(f"service kind '{service_kind}': choose triton or openai")
    if not prompts:
        raise PerfError("no prompts to send")
    out_dir = Path(out_dir)
    raw = out_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    data_file = raw / f"{model}.llm_input_data.json"
    data = (
        openai_input_data(list(prompts), load.output_tokens, model)
        if service_kind == "openai"
        else input_data(list(prompts), load.output_tokens)
    )
    data_file.write_text(json.dumps(data, indent=1) + "\n")
    known = [p.tokens for p in prompts if p.tokens >= 0]
    mean = sum(known) / len(known) if known else math.nan
    report = LLMReport(model=model, url=url, settings={
        **asdict(load), "prompts": len(prompts), "input_tokens_mean": mean,
        "input_tokens_min": min(known, default=-1), "input_tokens_max": max(known, default=-1),
    })  # fmt: skip
    for c in load.concurrency:
        report.points.append(_measure(url, model, c, load, data_file, raw, metrics_url, service_kind))
    write_all(report, out_dir, stem)
    return report


def _measure(
    url: str,
    model: str,
    concurrency: int,
    load: LLMLoad,
    data_file: Path,
    raw: Path,
    metrics_url: str | None,
    service_kind: str,
) -> LLMPoint:
    export = raw / f"{model}_llm_concurrency_{concurrency}.profile.json"
    export.unlink(missing_ok=True)
    before = llm_metrics.scrape(metrics_url, model) if metrics_url else None
    run(command(url, model, concurrency, load, data_file, export, service_kind), load.timeout_s)
    server = None
    if metrics_url and before:
        server = llm_metrics.server_stats(before, llm_metrics.scrape(metrics_url, model))
    experiments = profile_export.load(export)
    if len(experiments) != 1:
        raise PerfError(f"{export}: expected one experiment, found {len(experiments)}")
    try:
        client = stream_stats(experiments[0])
    except ValueError as exc:
        raise PerfError(f"{export}: {exc}") from exc
    return LLMPoint(concurrency, client, server)


def command(
    url: str,
    model: str,
    concurrency: int,
    load: LLMLoad,
    data_file: Path,
    export: Path,
    service_kind: str = "triton",
) -> list[str]:
    """A fixed number of requests (``--request-count``), not stability windows: a streamed request
    lasts seconds here, and every recorded response is what the figures come from."""
    # 2.48 streams only over gRPC; its OpenAI client (async only) records every SSE chunk anyway.
    openai = ["-i", "http", "--async", "--service-kind", "openai", "--endpoint", "v1/completions"]
    kind = ["-i", "grpc", "--streaming"] if service_kind == "triton" else openai
    return [
        find_perf_analyzer(), "-m", model, "-u", host_port(url), *kind,
        "--concurrency-range", f"{concurrency}:{concurrency}",
        "--request-count", str(load.requests(concurrency)),
        "--input-data", str(data_file), "--profile-export-file", str(export),
    ]  # fmt: skip


def run(cmd: list[str], timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PerfError(f"perf_analyzer did not finish within {timeout_s:g} s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise PerfError(f"perf_analyzer failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
