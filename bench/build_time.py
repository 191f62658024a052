"""5. Build time: a full ``make engines`` (empty stage cache) and a no-change rebuild, each timed
as the whole command. The spec is copied to a scratch folder (data, factories and python models
linked, not copied) so the build has its own empty cache and repository and never touches the
project's ``model_repository/`` or ``.tritonforge/cache``."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

from bench.common import ROOT, WORK, Options, Row

NAME = "build_time"
STAMP = ROOT / ".venv" / ".tritonforge-installed"


def scratch() -> Any:
    base = WORK / "build_copy"
    shutil.rmtree(base, ignore_errors=True)
    (base / "builder").mkdir(parents=True)
    shutil.copy2(ROOT / "models.yaml", base / "models.yaml")
    for link in ("zoo", "calibration"):
        (base / link).symlink_to(ROOT / link)
    (base / "builder" / "python_models").symlink_to(ROOT / "builder" / "python_models")
    return base


def make_engines(base: Any, spec: Any = None) -> tuple[float, str]:
    # -o: the install stamp counts as up to date (the venv is installed; never reinstall here).
    cmd = ["make", "-C", str(ROOT), "-o", str(STAMP), "engines", f"SPEC={spec or base / 'models.yaml'}",
           f"REPO={base / 'model_repository'}", "TARGET=local"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    base = scratch()
    rows = []
    results: dict[str, Any] = {}
    if opts.quick:
        # No full build in the smoke run: rebuild the project's spec against its own (warm) cache,
        # into a scratch repository.
        results["full_s"] = None
    else:
        full, out = make_engines(base)
        results["full_s"] = full
        results["full_output"] = out[-3000:]
        rows.append(Row("5. build: full `make engines` (empty cache)", f"{full:.0f} s", "recorded", None))
    again, out = make_engines(base, ROOT / "models.yaml" if opts.quick else None)
    results["no_change_s"] = again
    results["no_change_output"] = out[-3000:]
    rows.append(Row("5. build: no-change rebuild (`make engines`)", f"{again:.1f} s", "recorded", None))
    shutil.rmtree(base, ignore_errors=True)
    return results, rows
