"""Measuring candidates on a real tritonserver in explicit model-control mode.

The model's folder from a fresh build (same artifacts, hard-linked) is copied into a
scratch repository; for each candidate only ``config.pbtxt`` is rewritten, through the
real ``builder.configs.core_config``, and the model is reloaded with the explicit
model-control API. Each load point is one perf_analyzer run through ``clients.perf``.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from builder.configs import write_config
from builder.errors import BuildError
from builder.perf_inputs import real_input_data, spec_shapes
from builder.pipeline import build
from builder.records import BuildOptions, VerificationReport
from builder.server import TritonServer
from builder.spec import ModelSpec, Spec, Variant
from builder.targets import served_here
from builder.targets.writer import link_tree
from builder.tune.candidates import Candidate, apply
from builder.tune.search import Point
from clients.perf import run_perf
from clients.perf.runner import Measurement


def build_local(spec_file: Path, out: Path, log: Callable[[str], None]) -> Path:
    """Build (from the stage cache when nothing changed) the repository the local server loads."""
    build(BuildOptions(spec_file=spec_file, repo=out, target=served_here().name, log=log))
    return out


def served_variant(repo: Path, name: str) -> Variant:
    manifest = json.loads((repo / "manifest.json").read_text())
    here = served_here().name
    if manifest.get("target") != here:
        raise BuildError(f"{repo} was built for target '{manifest.get('target')}', tuning needs '{here}'")
    return Variant.parse(manifest["models"][name]["served"])


def served_instances(repo: Path, name: str) -> int | None:
    """The instances the build sized the served variant at (the manifest's ``served_at``), or None
    where it recorded none."""
    served_at = json.loads((repo / "manifest.json").read_text())["models"][name].get("served_at") or {}
    count = served_at.get("instances")
    return int(count) if count is not None else None


def runs_alone(repo: Path, name: str) -> bool:
    """Whether the served variant's answer moved with its batch mates (it runs each row alone)."""
    entry = json.loads((repo / "manifest.json").read_text())["models"][name]
    report = VerificationReport.from_json(entry["verification"][entry["served"]])
    return not report.batch_invariant


def scratch_copy(built: Path, name: str, scratch: Path) -> Path:
    """``scratch/<name>`` with the built model's files hard-linked (only config.pbtxt changes)."""
    dst = scratch / name
    if dst.exists():
        shutil.rmtree(dst)
    link_tree(built / name, dst, rewritten="config.pbtxt")
    return dst


class Bench:
    """One server, one model; ``measure(candidate, concurrency)`` loads the candidate when needed."""

    def __init__(
        self,
        spec: Spec,
        spec_file: Path,
        name: str,
        work: Path,
        settings: Measurement,
        log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    ) -> None:
        self.spec, self.spec_file, self.name, self.work = spec, spec_file, name, work
        self.model: ModelSpec = spec.model(name)
        self.settings, self.log = settings, log
        built = build_local(spec_file, work / "built", log=lambda _: None)
        self.variant = served_variant(built, name)
        self.alone = runs_alone(built, name)
        self.sized_instances = served_instances(built, name)
        self.repo = work / "repo"
        self.repo.mkdir(parents=True, exist_ok=True)
        self.model_dir = scratch_copy(built, name, self.repo)
        self.shapes = spec_shapes(spec, self.model)
        self.input_data = (
            real_input_data(spec, spec_file, self.model, work / f"{name}.input_data.json")
            if any(t.dynamic for t in self.model.inputs)
            else None
        )
        self.server = TritonServer(self.repo, model_control="explicit", log_path=work / "server.log")
        self.current: Candidate | None = None
        self.loads = 0

    def __enter__(self) -> Bench:
        self.server.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.stop()

    def load(self, cand: Candidate) -> None:
        """Write the candidate's config.pbtxt and (re)load the model."""
        import tritonclient.http as httpclient

        cfg = served_here().core_config(apply(self.model, cand), self.name, self.variant, alone=self.alone)
        write_config(cfg, self.model_dir)
        client = httpclient.InferenceServerClient(self.server.http_url.split("://", 1)[1])
        try:
            client.load_model(self.name)
        except Exception as exc:
            self.current = None
            raise BuildError(
                f"{self.name} [{cand.label}] did not load: {exc}\n{self.server.log_tail(10)}"
            ) from exc
        self.current = cand
        self.loads += 1

    def measure(self, cand: Candidate, concurrency: int) -> Point:
        if cand != self.current:
            self.load(cand)
        slug = f"{cand.label.replace(' ', '_').replace('[', '').replace(']', '').replace(',', '-')}"
        report = run_perf(
            self.server.http_url, self.name, shapes=self.shapes, concurrency=[concurrency],
            input_data=self.input_data, out_dir=self.work / "perf", metrics_url=self.server.metrics_url,
            settings=self.settings, stem=f"{slug}_c{concurrency}",
        )  # fmt: skip
        p = report.points[0]
        point = Point(concurrency, p.throughput, p.p50_ms, p.p99_ms, p.server_avg_batch)
        self.log(
            f"  {cand.label:<28} c={concurrency:<3} {p.throughput:8.1f}/s  p50 {p.p50_ms:8.1f} ms  "
            f"p99 {p.p99_ms:8.1f} ms  batch {p.server_avg_batch:.2f}"
        )
        return point
