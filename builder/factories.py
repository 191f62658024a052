"""Import ``package.module:function`` references from the spec, relative to its folder."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from builder.errors import SpecError


def import_factory(
    ref: str, spec_dir: Path, *, spec_file: Path, model: str, field: str
) -> Callable[..., Any]:
    """Return the callable ``ref`` names; the spec's folder is importable first."""
    module_name, _, attr = ref.partition(":")
    root = str(spec_dir.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(
            f"cannot import module '{module_name}': {exc}", file=spec_file, model=model, field=field
        ) from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise SpecError(f"'{module_name}' has no callable '{attr}'", file=spec_file, model=model, field=field)
    return cast(Callable[..., Any], func)
