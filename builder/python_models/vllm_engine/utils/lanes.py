"""Lanes and admission: which engine a request runs on, where each engine's CPUs are, and how many
requests each lane admits before it refuses (``max_num_seqs + max_waiting``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..contract import LANES
from .metrics import Metrics

SERVER_CPUS = 1  # left to tritonserver and this stub's threads, as vLLM's own CPU binding leaves one
FOLDED_PRIORITY = 1  # a lane folded into the default engine runs after the default lane's requests


@dataclass(frozen=True)
class LaneRule:
    """An engine of its own for long requests: those whose prompt + max_tokens reach ``min_tokens``,
    whose max_tokens reaches ``min_max_tokens`` or whose prompt reaches ``min_prompt_tokens``
    (any threshold set and reached)."""

    name: str
    min_tokens: int | None = None
    max_num_seqs: int | None = None  # None: model.json's
    max_waiting: int | None = None  # None: the lane's max_num_seqs
    cpus: str | None = None  # VLLM_CPU_OMP_THREADS_BIND for this lane's engine (CPU)
    min_max_tokens: int | None = None
    min_prompt_tokens: int | None = None
    kv_cache_space_gib: float | None = None  # None: model.json's
    priority: int = 0  # above 0: no engine of its own, its requests run on the default one at this

    @property
    def shares_default(self) -> bool:
        return self.priority > 0

    @property
    def thresholds(self) -> tuple[int | None, int | None, int | None]:
        return self.min_tokens, self.min_max_tokens, self.min_prompt_tokens

    def takes(self, n_prompt: int, max_tokens: int) -> bool:
        reached = (n_prompt + max_tokens, max_tokens, n_prompt)
        return any(t is not None and n >= t for t, n in zip(self.thresholds, reached, strict=True))


def parse_lanes(text: str) -> list[LaneRule]:
    """The ``lanes`` parameter (a JSON list of rules) after the default lane; ValueError if bad."""
    try:
        items = json.loads(text) if text.strip() else []
        rules = [LaneRule(**item) for item in items]
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(
            f"parameter {LANES}: {exc} (want a JSON list of {{name, min_tokens, ...}})"
        ) from None
    names = [r.name for r in rules]
    if "default" in names or len(set(names)) != len(names):
        raise ValueError(f"parameter {LANES}: names must be unique and not 'default', got {names}")
    for r in rules:
        given = [t for t in r.thresholds if t is not None]
        if not given:
            raise ValueError(
                f"parameter {LANES}: {r.name} needs min_tokens, min_max_tokens or min_prompt_tokens"
            )
        if any(t < 1 for t in given):
            raise ValueError(f"parameter {LANES}: {r.name}: thresholds must be >= 1, got {given}")
    return [LaneRule("default"), *sorted(rules, key=lambda r: r.min_tokens or 0)]


def route(rules: list[LaneRule], n_prompt: int, max_tokens: int) -> int:
    """The index of the last lane that takes the request (rules[0], the default lane, takes all)."""
    return max((i for i, r in enumerate(rules) if r.takes(n_prompt, max_tokens)), default=0)


def place_lanes(rules: list[LaneRule], cpus: list[int]) -> list[LaneRule]:
    """The lanes with CPUs of their own for each engine (``cpus``), the last SERVER_CPUS left to the
    server; where too few remain for one per engine, the long lanes folded into the default engine
    at FOLDED_PRIORITY. Two engines on the same cores make short requests slower, not faster.
    Rules that name their CPUs or a priority are kept as written."""
    if len(rules) == 1 or any(r.cpus or r.shares_default for r in rules):
        return rules
    usable = sorted(cpus)[: max(0, len(cpus) - SERVER_CPUS)]
    if len(usable) < len(rules):
        return [rules[0], *(dataclasses.replace(r, priority=FOLDED_PRIORITY) for r in rules[1:])]
    share, extra = divmod(len(usable), len(rules))  # the remainder to the default lane, the busiest
    placed, start = [], 0
    for i, rule in enumerate(rules):
        count = share + (extra if i == 0 else 0)
        placed.append(dataclasses.replace(rule, cpus=",".join(map(str, usable[start : start + count]))))
        start += count
    return placed


def placement_note(rules: list[LaneRule], cpus: int) -> str:
    """One line saying where each lane runs."""
    folded = [r.name for r in rules if r.shares_default]
    if folded:
        return (
            f"lanes: {cpus} CPUs cannot give each of {len(rules)} engines one of its own beside the "
            f"server's: {', '.join(folded)} run(s) on the default engine at lower priority"
        )
    return "lanes: " + ", ".join(f"{r.name} on CPUs {r.cpus or 'auto'}" for r in rules)


def lane_engine_args(config: dict[str, Any], rule: LaneRule) -> dict[str, Any]:
    """model.json's engine arguments with the lane's own max_num_seqs and KV-cache size (CPU)."""
    config = dict(config)
    if rule.max_num_seqs:
        config["max_num_seqs"] = rule.max_num_seqs
    if rule.kv_cache_space_gib:
        config["kv_cache_memory_bytes"] = int(rule.kv_cache_space_gib * (1 << 30))
    return config


@dataclass
class Lane:
    """One engine and the requests in flight on it."""

    rule: LaneRule
    bound: int  # max_num_seqs + max_waiting
    metrics: Metrics
    engine: Any = None
    inflight: int = 0
