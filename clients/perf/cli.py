"""Command-line arguments shared by `python -m clients.perf` and `tritonforge perf`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clients.perf import llm_prompts, llm_report
from clients.perf.api import run_perf
from clients.perf.baseline import Margins, check
from clients.perf.errors import PerfError
from clients.perf.inputs import served_model
from clients.perf.llm import DEFAULT_CONCURRENCY, LLMLoad, run_llm_perf
from clients.perf.report import markdown
from clients.perf.runner import Measurement


def parse_shape(text: str) -> tuple[str, list[int]]:
    """NAME:d1,d2 (without the batch dimension), as perf_analyzer spells it."""
    name, sep, dims = text.rpartition(":")
    try:
        values = [int(d) for d in dims.split(",")]
    except ValueError:
        values = []
    if not sep or not name or not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': expected NAME:d1,d2,... with positive sizes")
    return name, values


def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def float_list(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model name as served")
    p.add_argument("--url", default="127.0.0.1:8000", help="server HTTP (or gRPC) address, host:port")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument(
        "--metrics-url",
        default=None,
        help="Prometheus metrics address (host:port); default: the url's host, port 8002",
    )
    p.add_argument("--no-metrics", action="store_true", help="do not scrape the server's metrics")
    load = p.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency",
        type=int_list,
        default=None,
        help="sweep, e.g. 1,2,4,8 (default 1,2,4; an LLM 1,4,16)",
    )
    load.add_argument("--request-rate", type=float_list, default=None, help="sweep, e.g. 50,100,200")
    p.add_argument(
        "--shape",
        type=parse_shape,
        action="append",
        default=[],
        metavar="NAME:d1,d2",
        help="shape of a dynamic input without the batch dimension (repeatable)",
    )
    p.add_argument("--input-data", type=Path, default=None, help="perf_analyzer --input-data JSON")
    p.add_argument("-b", "--batch-size", type=int, default=1)
    p.add_argument("--request-count", type=int, default=300, help="requests per measurement window")
    p.add_argument("--stability-percentage", type=int, default=50)
    p.add_argument("--max-trials", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path("perf_results"), help="output folder")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="earlier JSON report: exit 1 when throughput falls or p99 rises past the margins",
    )
    p.add_argument("--max-throughput-drop", type=float, default=0.10, help="fraction, default 0.10")
    p.add_argument("--max-p99-rise", type=float, default=0.20, help="fraction, default 0.20")  # fmt: skip
    llm = p.add_argument_group("LLM mode (a decoupled model with a text_input string input)")
    llm.add_argument(
        "--grpc-url", default=None, help="gRPC address for the streaming load (default: port 8001)"
    )
    llm.add_argument("--prompts", type=Path, default=None, help='JSON list of {"messages": [...]}')
    llm.add_argument("--checkpoint", type=Path, default=None, help="the LLM's folder (its tokenizer)")
    llm.add_argument("--output-tokens", type=int, default=64, help="new tokens per request (ignore_eos)")
    llm.add_argument("--input-tokens", type=int, default=None, help="trim/pad prompts to this many tokens")
    llm.add_argument("--requests-per-user", type=int, default=4, help="requests per concurrent stream")


def default_metrics_url(url: str) -> str:
    host = url.split("://", 1)[-1].rsplit(":", 1)[0]
    return f"{host}:8002"


def run(args: argparse.Namespace, shapes: dict[str, list[int]], input_data: Path | None) -> int:
    """Sweep, print the Markdown table, then apply the baseline gate (exit 1 on regression)."""
    if served_model(args.url, args.model, args.protocol).is_llm:
        return run_llm(args)
    args.concurrency = args.concurrency or [1, 2, 4]
    settings = Measurement(
        request_count=args.request_count, stability_percentage=args.stability_percentage,
        max_trials=args.max_trials, batch_size=args.batch_size, protocol=args.protocol,
    )  # fmt: skip
    metrics_url = None if args.no_metrics else (args.metrics_url or default_metrics_url(args.url))
    report = run_perf(
        args.url, args.model, shapes=shapes, concurrency=args.concurrency, request_rate=args.request_rate,
        input_data=input_data, out_dir=args.out, metrics_url=metrics_url, settings=settings,
    )  # fmt: skip
    print(markdown(report))
    print("wrote " + ", ".join(report.files.values()))
    if args.baseline is None:
        return 0
    problems = check(report, args.baseline, Margins(args.max_throughput_drop, args.max_p99_rise))
    return gate(problems, args.baseline)


def run_llm(args: argparse.Namespace) -> int:
    """The LLM mode: streaming sweep over gRPC, Markdown table, the same baseline gate."""
    if args.prompts is None:
        raise PerfError(
            f"model '{args.model}' is an LLM: give --prompts (a JSON list of {{\"messages\": [...]}})"
        )
    if args.request_rate:
        raise PerfError("the LLM mode sweeps concurrency; --request-rate is not supported")
    prompts = llm_prompts.shape(llm_prompts.load_chats(args.prompts), args.checkpoint, args.input_tokens)
    concurrency = tuple(args.concurrency or DEFAULT_CONCURRENCY)
    load = LLMLoad(args.output_tokens, concurrency, requests_per_user=args.requests_per_user)
    metrics_url = None if args.no_metrics else (args.metrics_url or default_metrics_url(args.url))
    grpc_url = args.grpc_url or (args.url if args.protocol == "grpc" else default_grpc_url(args.url))
    report = run_llm_perf(grpc_url, args.model, prompts, load, out_dir=args.out, metrics_url=metrics_url)
    print(llm_report.markdown(report))
    print("wrote " + ", ".join(report.files.values()))
    if args.baseline is None:
        return 0
    margins = Margins(args.max_throughput_drop, args.max_p99_rise)
    return gate(llm_report.check(report, args.baseline, margins), args.baseline)


def default_grpc_url(url: str) -> str:
    host = url.split("://", 1)[-1].rsplit(":", 1)[0]
    return f"{host}:8001"


def gate(problems: list[str], baseline: Path) -> int:
    for line in problems:
        print(f"REGRESSION {line}", file=sys.stderr)
    if not problems:
        print(f"no regression against {baseline}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clients.perf", description="perf_analyzer sweep")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args, dict(args.shape), args.input_data)
    except PerfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
