"""How many threads a runtime's session takes: the spec's number, else the cores shared out among
the model's instances (each its own process), so that instances x threads never oversubscribes the
machine."""

from __future__ import annotations

import os
from typing import Any

from ..contract import INTRA_OP_THREADS


def threads(params: dict[str, str], config: dict[str, Any]) -> int:
    given = int(params.get(INTRA_OP_THREADS, "0") or 0)
    if given > 0:
        return given
    return max(1, (os.cpu_count() or 1) // instances(config))


def instances(config: dict[str, Any]) -> int:
    return sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
