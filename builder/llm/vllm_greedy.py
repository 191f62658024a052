"""Greedy generation with vLLM's offline engine, run as its own process by the verify stage:
``python -m builder.llm.vllm_greedy REQUEST.json RESULT.json``.

vLLM starts its engine core with ``spawn``, prints much and holds its memory until the
process ends; a child process keeps all of that out of the builder.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class GreedyRequest:
    model: str  # checkpoint folder
    dtype: Literal["bfloat16", "float16", "float32"]
    max_model_len: int
    max_num_seqs: int
    kv_cache_space_gib: int
    max_tokens: int
    prompts: list[list[int]]  # token ids, chat template applied
    # After the greedy run, when above 0: max_num_seqs prompts of this many new tokens each
    # (ignore_eos), timed once the builder writes a line to stdin (its own work is done by then).
    speed_tokens: int = 0


@dataclass(frozen=True)
class GreedyResult:
    tokens: list[list[int]]
    logprobs: list[list[float]]  # log p of each generated token
    start_seconds: float
    generate_seconds: float
    tokens_per_second: float | None = None  # the speed run's new tokens over its wall time


READY_FILE = "ready"  # written beside the result once the greedy run is done and the speed run waits


def run(request: GreedyRequest, ready: Path | None = None) -> GreedyResult:
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(request.kv_cache_space_gib)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=request.model,
        dtype=request.dtype,
        max_model_len=request.max_model_len,
        max_num_seqs=request.max_num_seqs,
        enforce_eager=True,
        seed=0,
    )
    started = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=request.max_tokens, logprobs=0)
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in request.prompts]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    tokens, logprobs = [], []
    for out in outputs:
        completion = out.outputs[0]
        ids = list(completion.token_ids)
        tokens.append(ids)
        logprobs.append(_picked(completion.logprobs, ids))
    generate_seconds = time.perf_counter() - started
    speed = _speed(llm, request, prompts, ready) if request.speed_tokens > 0 else None
    return GreedyResult(tokens, logprobs, started - start, generate_seconds, speed)


def _speed(llm: Any, request: GreedyRequest, prompts: list[Any], ready: Path | None) -> float:
    """Output tokens/s with every one of max_num_seqs slots decoding (the greedy run warmed up)."""
    from vllm import SamplingParams

    if ready is not None:
        ready.touch()
    sys.stdin.readline()  # the builder's go: nothing else of the build runs beside the timing
    batch = [prompts[i % len(prompts)] for i in range(request.max_num_seqs)]
    params = SamplingParams(temperature=0.0, max_tokens=request.speed_tokens, ignore_eos=True)
    started = time.perf_counter()
    outputs = llm.generate(batch, params, use_tqdm=False)
    seconds = time.perf_counter() - started
    return sum(len(out.outputs[0].token_ids) for out in outputs) / seconds


def _picked(steps: Any, ids: list[int]) -> list[float]:
    """The log-probability vLLM gave each token it chose (``logprobs=0`` returns just that one)."""
    if steps is None or len(steps) != len(ids):
        raise RuntimeError("vLLM returned no log-probabilities for the generated tokens")
    return [float(step[t].logprob) for step, t in zip(steps, ids, strict=True)]


def main(argv: list[str]) -> int:
    request = GreedyRequest(**json.loads(Path(argv[1]).read_text()))
    result = Path(argv[2])
    result.write_text(json.dumps(asdict(run(request, result.with_name(READY_FILE)))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
