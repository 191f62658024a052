"""7. An object detector served against the same pipeline in process: a YOLO-style ONNX file
(``bench/detector_model.py``, 320 x 320, 80 classes, 2100 anchors) built with ``task:
object-detection`` and its ``detection:`` block (fp32, fp16 and bf16, on every runtime; the fastest
that verified is served), its ensemble (letterbox, network, box decoder) measured with
perf_analyzer at concurrency 1 and 8 on real photos of several sizes, and in process the same three
steps with the served models' own code and parameters (the letterbox's ``prepared``, the served
variant's session as the served model opens it, the box decoder's ``Decoder``): one photo at a time
for concurrency 1, eight at a time for 8. In-process figures are timed right before and after the
served sweeps; the larger counts. At concurrency 8 the box decoder's share of a request's time is
its compute per request (Triton's counters) over the ensemble's request duration."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import detector_model
from bench.common import ROOT, WORK, Options, Row, build_repo, cpu_use, serving
from bench.cpu_runtimes import Published

NAME = "detection"
MODEL = "detector"
CONCURRENCY = (1, 8)
TARGET_POST_SHARE = 0.10  # the box decoder's share of a request's time at concurrency 8, at most


def spec(onnx: Path, photos: Path) -> dict[str, Any]:
    return {
        "name": MODEL, "source": str(onnx), "task": "object-detection",
        "precisions": ["fp32", "fp16", "bf16"], "evaluation": {"data": str(photos)},
        "detection": {"letterbox": {"size": [detector_model.SIZE] * 2}},
    }  # fmt: skip


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    photos = detector_model.photos(ROOT)
    folder = WORK / "detector_photos"
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(photos):
        (folder / f"photo_{i}.jpg").write_bytes(data)
    repo = build_repo(NAME, [spec(detector_model.export(WORK / "detector.onnx"), folder)])
    entry = json.loads((repo / "manifest.json").read_text())["models"][MODEL]
    pipeline = InProcess(repo)
    seconds = 2.0 if opts.quick else 4.0
    before = pipeline.measure(photos, seconds)
    served = serve(repo, photos, opts)
    after = pipeline.measure(photos, seconds)
    results: dict[str, Any] = {
        "served_variant": entry["served"], "photos": [list(p) for p in pipeline.sizes(photos)],
        "boxes_per_photo": pipeline.boxes(photos), "in_process_before": before, "in_process_after": after,
        "served": served,
    }  # fmt: skip
    return results, rows(results)


class InProcess:
    """The pipeline's three steps with the served models' own code and config parameters."""

    def __init__(self, repo: Path) -> None:
        from builder.python_models.box_decoder.model import Decoder
        from builder.python_models.letterbox.model import Recipe
        from builder.python_models.shared.runtimes import open_served

        def parameters(model: str) -> dict[str, str]:
            config = Published(model, "", "", repo / model).config()
            return {k: v["string_value"] for k, v in config.get("parameters", {}).items()}

        self.recipe = Recipe.from_parameters(parameters(f"{MODEL}_preprocess"))
        self.decoder = Decoder(parameters(f"{MODEL}_postprocess"))
        core = Published(MODEL, "", "", repo / MODEL)
        self.session = open_served(core.onnx, parameters(MODEL), core.config())

    def sizes(self, photos: list[bytes]) -> list[tuple[int, int]]:
        from builder.python_models.letterbox.model import prepared

        return [tuple(s) for s in prepared(self.recipe, photos)[1].tolist()]  # type: ignore[misc]

    def boxes(self, photos: list[bytes]) -> list[int]:
        return [int(self.answer([p])["count"][0][0]) for p in photos]

    def answer(
        self, photos: list[bytes], clock: Callable[[str, float], None] | None = None
    ) -> dict[str, Any]:
        from builder.python_models.letterbox.model import prepared

        tick = time.perf_counter()
        pixels, sizes = prepared(self.recipe, photos)
        net = time.perf_counter()
        (head,) = self.session.run(None, {"images": pixels})
        post = time.perf_counter()
        arrays = self.decoder.answer(head, sizes, self.decoder.rules.threshold)
        end = time.perf_counter()
        if clock is not None:
            clock("pre", net - tick)
            clock("network", post - net)
            clock("post", end - post)
        return arrays

    def measure(self, photos: list[bytes], seconds: float) -> dict[str, Any]:
        """Photos per second and ms per photo in each step: one photo a call (concurrency 1), then
        eight (the batch concurrency 8 lets the batcher form at best)."""
        out: dict[str, Any] = {}
        for batch in CONCURRENCY:
            spent: dict[str, float] = {"pre": 0.0, "network": 0.0, "post": 0.0}
            calls = [photos[(i * batch) % len(photos) :][:batch] for i in range(len(photos))]
            calls = [c if len(c) == batch else (c + photos)[:batch] for c in calls]
            self.answer(calls[0])  # warm-up
            done, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds or done < 3 * batch:
                self.answer(calls[(done // batch) % len(calls)], _adder(spent))
                done += batch
            per_photo = {k: 1000 * v / done for k, v in spent.items()}
            out[str(batch)] = {"throughput": done / elapsed, "ms_per_photo": per_photo}
        return out


def _adder(spent: dict[str, float]) -> Callable[[str, float], None]:
    def add(step: str, seconds: float) -> None:
        spent[step] += seconds

    return add


def serve(repo: Path, photos: list[bytes], opts: Options) -> dict[str, Any]:
    from clients.perf import bytes_entries, run_perf, write_input_data
    from clients.perf.runner import Measurement

    data = write_input_data(bytes_entries("IMAGE", photos), WORK / "perf" / NAME / "photos.json")
    points: dict[str, Any] = {}
    with serving(repo, NAME) as server:
        for c in CONCURRENCY:
            settings = Measurement(
                request_count=60 if opts.quick else 150, stability_percentage=50, max_trials=opts.max_trials,
                retries=1, protocol="grpc", timeout_s=300,
            )  # fmt: skip
            with cpu_use(server.pid) as cores:
                report = run_perf(
                    server.grpc_url, f"{MODEL}_pipeline", concurrency=(c,), input_data=data,
                    out_dir=WORK / "perf" / f"{NAME}_c{c}", metrics_url=server.metrics_url, settings=settings,
                    stem=f"{NAME}_c{c}",
                )  # fmt: skip
            (p,) = report.points
            points[str(c)] = {"throughput": p.throughput, "p50_ms": p.p50_ms, "p99_ms": p.p99_ms,
                              "models": _clean(p.models), "cores": cores}  # fmt: skip
    return points


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return None if isinstance(value, float) and not np.isfinite(value) else value


def post_share(point: dict[str, Any]) -> float | None:
    """The box decoder's compute per request over the ensemble's request duration."""
    models = point.get("models") or {}
    post, whole = models.get(f"{MODEL}_postprocess") or {}, models.get(f"{MODEL}_pipeline") or {}
    parts = [post.get(k) for k in ("compute_input_us", "compute_infer_us", "compute_output_us")]
    if any(v is None for v in parts) or not whole.get("request_us"):
        return None
    return float(sum(parts)) / float(whole["request_us"])  # type: ignore[arg-type]


def rows(results: dict[str, Any]) -> list[Row]:
    out = []
    for c in map(str, CONCURRENCY):
        limit = max(
            results["in_process_before"][c]["throughput"], results["in_process_after"][c]["throughput"]
        )
        served = results["served"][c]
        ms = results["in_process_after"][c]["ms_per_photo"]
        steps = " + ".join(f"{ms[k]:.1f}" for k in ("pre", "network", "post"))
        out.append(Row(
            f"7. detection: YOLO-style {results['served_variant']} served / in process at c{c}",
            f"{served['throughput'] / limit:.2f} ({served['throughput']:.1f} / {limit:.1f} photos/s in "
            f"process at batch {c}; in process ms per photo letterbox + network + decoder {steps}; "
            f"served p50 {served['p50_ms']:.1f} ms)",
            "recorded", None,
        ))  # fmt: skip
    share = post_share(results["served"]["8"])
    models = results["served"]["8"].get("models") or {}
    decoder = models.get(f"{MODEL}_postprocess") or {}
    us = sum(decoder.get(k) or 0.0 for k in ("compute_input_us", "compute_infer_us", "compute_output_us"))
    whole = (models.get(f"{MODEL}_pipeline") or {}).get("request_us") or 0.0
    measured = (
        "not measured (no server counters)"
        if share is None
        else (f"{share:.1%} ({us / 1000:.2f} ms of the ensemble's {whole / 1000:.1f} ms per request)")
    )
    met = None if share is None else share <= TARGET_POST_SHARE
    out.append(Row("7. detection: box decoder's share of a request's time at c8", measured,
                   f"<= {TARGET_POST_SHARE:.0%}", met))  # fmt: skip
    return out
