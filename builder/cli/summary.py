"""The table ``tritonforge build`` prints at the end."""

from __future__ import annotations

from typing import Any

from builder.pipeline import BuildResult, ModelBuild

HEADERS = ("model", "served", "variants published", "verification (worst output)", "size", "build time")


def render(result: BuildResult) -> str:
    rows = [_row(b) for b in result.models]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    lines = [
        "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    state = "published" if result.published else "unchanged"
    lines.append(f"{result.target} repository {result.repo} ({state}) in {result.seconds:.1f} s")
    return "\n".join(lines)


def _row(b: ModelBuild) -> tuple[str, ...]:
    served = b.served.value if b.served else "-"
    published = ", ".join(p.value for p in b.passed)
    checks = "; ".join(_metric(p.value, b.reports[p]) for p in b.reports)
    size = b.variants[b.served].stat().st_size if b.served else 0
    skipped = all(s.skipped for s in b.stages)
    took = "skipped (unchanged)" if skipped else f"{b.seconds:.1f} s"
    return (b.spec.name, served, published, checks, _mib(size), took)


def _metric(name: str, report: dict[str, Any]) -> str:
    mark = "ok" if report["passed"] else "FAILED"
    metrics = report.get("metrics", {})
    worst: list[str] = []
    for values in metrics.values():
        if values.get("exact") is not None:
            worst.append("exact" if values["exact"] else "differs")
        elif values.get("min_cosine") is not None:
            worst.append(f"min cos {values['min_cosine']:.4f}")
    shown = min(worst, default="") if worst else ""
    return f"{name} {mark} {shown}".strip()


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"
