"""Put tensorrt-stubs where mypy reads them: ``.tools/trt-stubs/`` (idempotent).

tensorrt-stubs installs ``tensorrt/`` and ``tensorrt_bindings/`` as bare ``.pyi``
folders without ``py.typed``, so mypy ignores them in site-packages; and its
``tensorrt_bindings/tensorrt.pyi`` does not parse (parameters named ``in``, a
non-default ``channel_axis`` after defaulted ones). This copies both folders
and patches those lines. mypy.ini points ``mypy_path`` here.

    python tools/setup_trt_stubs.py [--dest .tools/trt-stubs]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

VERSION = "10.13.0.35.1"
PACKAGES = ("tensorrt", "tensorrt_bindings")
ROOT = Path(__file__).resolve().parent.parent


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("tensorrt-stubs")
    except importlib.metadata.PackageNotFoundError:
        return None


def ensure_installed() -> Path:
    # --no-deps: the package depends on `tensorrt`, which cannot be installed here.
    if installed_version() != VERSION:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", f"tensorrt-stubs=={VERSION}"]
        subprocess.run(cmd, check=True)
    return Path(sysconfig.get_paths()["purelib"])


def patch(text: str) -> str:
    text = re.sub(r"\bin: ", "in_: ", text)  # `in` is a keyword
    return text.replace(
        "power: Weights = None, channel_axis: int)", "power: Weights = None, channel_axis: int = ...)"
    )


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--dest", type=Path, default=ROOT / ".tools" / "trt-stubs")
    dest: Path = args.parse_args().dest
    stamp = dest / ".version"
    if stamp.is_file() and stamp.read_text().strip() == VERSION:
        return 0
    site = ensure_installed()
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for name in PACKAGES:
        shutil.copytree(site / name, tmp / name)
    bindings = tmp / "tensorrt_bindings" / "tensorrt.pyi"
    bindings.write_text(patch(bindings.read_text(encoding="utf-8")), encoding="utf-8")
    (tmp / ".version").write_text(VERSION + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    print(f"tensorrt-stubs {VERSION} ready in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
