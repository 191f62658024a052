"""An LLM sweep's results and its files (CSV, JSON, Markdown, PNG) and regression gate."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from clients.perf.baseline import Margins
from clients.perf.errors import PerfError
from clients.perf.llm_metrics import ServerStats
from clients.perf.llm_stats import StreamStats
from clients.perf.report import _cell, json_safe


@dataclass
class LLMPoint:
    concurrency: int
    client: StreamStats
    server: ServerStats | None = None

    def flat(self) -> dict[str, Any]:
        row: dict[str, Any] = {"concurrency": self.concurrency, **asdict(self.client)}
        if self.server:
            row.update({f"server_{k}": v for k, v in asdict(self.server).items()})
        return row


@dataclass
class LLMReport:
    model: str
    url: str
    settings: dict[str, Any]  # output/input tokens, prompts, requests per point
    points: list[LLMPoint] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "llm", **asdict(self)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LLMReport:
        if raw.get("kind") != "llm":
            raise ValueError('not an LLM perf report (no "kind": "llm")')
        points = [
            LLMPoint(
                p["concurrency"],
                _typed(StreamStats, p["client"]),
                _typed(ServerStats, p["server"]) if p.get("server") else None,
            )
            for p in raw["points"]
        ]
        return cls(raw["model"], raw["url"], raw["settings"], points, raw.get("files", {}))

    @classmethod
    def load(cls, path: Path) -> LLMReport:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _typed(cls: Any, raw: dict[str, Any]) -> Any:
    return cls(**{f.name: math.nan if raw.get(f.name) is None else raw[f.name] for f in fields(cls)})


DEFAULT_MARGINS = Margins()
TABLE = [("concurrency", "{:d}"), ("output_tokens_per_s", "{:.1f}"), ("requests_per_s", "{:.2f}"),
         ("ttft_ms_p50", "{:.1f}"), ("ttft_ms_p95", "{:.1f}"), ("ttft_ms_p99", "{:.1f}"),
         ("itl_ms_p50", "{:.1f}"), ("itl_ms_p99", "{:.1f}"), ("latency_ms_p50", "{:.0f}"),
         ("server_refused", "{:.0f}"), ("server_failures", "{:.0f}"), ("server_ttft_ms_mean", "{:.1f}"),
         ("server_tpot_ms_mean", "{:.1f}")]  # fmt: skip
HEAD = ["concurrency", "output tok/s", "req/s", "TTFT p50 ms", "TTFT p95 ms", "TTFT p99 ms", "ITL p50 ms",
        "ITL p99 ms", "latency p50 ms", "refused", "errors", "server TTFT ms", "server TPOT ms"]  # fmt: skip


def markdown(report: LLMReport) -> str:
    s = report.settings
    lines = [
        f"### `{report.model}` (LLM, streaming gRPC, {s.get('output_tokens')} new tokens, "
        f"~{s.get('input_tokens_mean', math.nan):.0f} prompt tokens)",
        "",
        "| " + " | ".join(HEAD) + " |",
        "|" + "---:|" * len(HEAD),
    ]
    for p in report.points:
        row = p.flat()
        lines.append("| " + " | ".join(_cell(fmt, row.get(key, math.nan)) for key, fmt in TABLE) + " |")
    lines += ["", "Client figures from perf_analyzer's profile export (every response's timestamp); "
              "server TTFT/TPOT: the model's vllm:* histograms over the same point (means)."]  # fmt: skip
    lines += [bunch_warning(p) for p in report.points if _count(p.client.bunched_requests)]
    return "\n".join(lines) + "\n"


def _count(value: float) -> int:
    return 0 if math.isnan(value) else int(value)  # NaN: a report from before the count


def bunch_warning(point: LLMPoint) -> str:
    c = point.client
    return (
        f"\n**Concurrency {point.concurrency}: {_count(c.bunched_requests)} of {c.requests} requests "
        "reached the client in one bunch** (all their responses within 1 ms): their TTFT and "
        "inter-token gaps are when the client read them, not when the server sent them; measure again."
    )


def write_all(report: LLMReport, out_dir: Path, stem: str | None = None) -> dict[str, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or report.model
    files = {kind: str(out_dir / f"{stem}.{kind}") for kind in ("csv", "json", "md", "png")}
    report.files = files
    rows = [p.flat() for p in report.points]
    with Path(files["csv"]).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["concurrency"])
        writer.writeheader()
        writer.writerows(rows)
    Path(files["md"]).write_text(markdown(report))
    plot(report, Path(files["png"]))
    Path(files["json"]).write_text(json.dumps(json_safe(report.to_dict()), indent=2) + "\n")
    return files


def plot(report: LLMReport, path: Path) -> None:
    """Output tokens/s against TTFT p99, one labelled point per concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    xs = [p.client.ttft_ms_p99 for p in report.points]
    ys = [p.client.output_tokens_per_s for p in report.points]
    ax.plot(xs, ys, marker="o")
    for p, x, y in zip(report.points, xs, ys, strict=True):
        ax.annotate(f"c={p.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("TTFT p99 (ms)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"{report.model}: output tokens/s vs TTFT p99")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def compare(current: LLMReport, baseline: LLMReport, margins: Margins = DEFAULT_MARGINS) -> list[str]:
    """One line per regression: output tokens/s fell, or TTFT p99 rose, past the margins."""
    if current.model != baseline.model:
        raise PerfError(f"baseline is for model '{baseline.model}', not '{current.model}'")
    old = {p.concurrency: p.client for p in baseline.points}
    common = [p for p in current.points if p.concurrency in old]
    if not common:
        raise PerfError("the baseline has none of this sweep's concurrencies; run the same sweep")
    problems = []
    for p in common:
        now, was = p.client, old[p.concurrency]
        if _ok(was.output_tokens_per_s, now.output_tokens_per_s) and (
            now.output_tokens_per_s < was.output_tokens_per_s * (1 - margins.throughput_drop)
        ):
            problems.append(
                f"concurrency {p.concurrency}: output {now.output_tokens_per_s:.1f} tokens/s fell "
                f"below {was.output_tokens_per_s:.1f} (margin {margins.throughput_drop:.0%})"
            )
        if _ok(was.ttft_ms_p99, now.ttft_ms_p99) and now.ttft_ms_p99 > was.ttft_ms_p99 * (
            1 + margins.p99_rise
        ):
            problems.append(f"concurrency {p.concurrency}: TTFT p99 {now.ttft_ms_p99:.1f} ms rose above "
                            f"{was.ttft_ms_p99:.1f} ms (margin {margins.p99_rise:.0%})")  # fmt: skip
    return problems


def check(current: LLMReport, baseline_file: Path, margins: Margins = DEFAULT_MARGINS) -> list[str]:
    if not Path(baseline_file).is_file():
        raise PerfError(f"baseline file not found: {baseline_file}")
    try:
        baseline = LLMReport.load(baseline_file)
    except (ValueError, KeyError, TypeError) as exc:
        raise PerfError(f"{baseline_file} is not an LLM perf JSON report: {exc}") from exc
    return compare(current, baseline, margins)


def _ok(*values: float) -> bool:
    return all(math.isfinite(v) and v > 0 for v in values)
