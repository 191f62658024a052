"""Verify stage: vLLM's greedy output on the held-out prompts against the source model run by
transformers (float32, greedy). A dtype out of the spec's tolerance is not published.

Two measures per prompt: whether the first N tokens agree, and the mean gap between the
log-probabilities the engine gave its tokens and those the source gives the same tokens
(teacher-forced), which catches drift before it flips a token.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.errors import BuildError, VerificationError
from builder.llm.prompts import Conversation
from builder.llm.vllm_greedy import READY_FILE, GreedyRequest, GreedyResult
from builder.progress import progress, quiet
from builder.spec.llm import LLMDType, LLMSpec, LLMTolerance

ENGINE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class PromptCheck:
    index: int
    agrees: bool  # the first N tokens are the same
    agreed_tokens: int  # length of the common prefix
    logprob_gap: float  # mean |log p engine - log p source| over the engine's tokens
    engine_text: str
    source_text: str


@dataclass(frozen=True)
class LLMVerification:
    dtype: LLMDType
    tokens: int  # N
    prompts: tuple[PromptCheck, ...]
    agreement: float  # share of prompts whose first N tokens agree
    mean_logprob_gap: float
    tolerance: LLMTolerance
    passed: bool
    failures: tuple[str, ...]
    engine_start_seconds: float
    engine_generate_seconds: float
    source_seconds: float
    tokens_per_second: float | None = None  # the speed run's, when there was one

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["dtype"] = self.dtype.value
        out["tolerance"] = self.tolerance.model_dump()
        if self.tokens_per_second is None:
            del out["tokens_per_second"]
        return out


def verify_llm(
    spec: LLMSpec,
    checkpoint: Path,
    source: Path,
    conversations: tuple[Conversation, ...],
    *,
    work: Path,
) -> LLMVerification:
    """The spec's one dtype (an explicit ``dtype``): the engine in a child process (its output goes
    to ``work/vllm.log``) against the source."""
    (dtype,) = spec.candidates
    (report,) = verify_dtypes(spec, (dtype,), checkpoint, source, conversations, work=work)
    return report


def verify_dtypes(
    spec: LLMSpec,
    dtypes: tuple[LLMDType, ...],
    checkpoint: Path,
    source: Path,
    conversations: tuple[Conversation, ...],
    *,
    work: Path,
    speed_tokens: int = 0,
) -> list[LLMVerification]:
    """Each dtype's engine (its own child process; ``work/<dtype>/vllm.log`` when more than one)
    against the source, run once. The engines start and run their greedy prompts at once, beside the
    source. With ``speed_tokens``, each child then times max_num_seqs prompts of that many new tokens,
    one child at a time, once every child is ready and the builder's own work is done."""
    work = work.resolve()  # the engine's process runs in it
    ev = spec.evaluation
    prompts = render_prompts(checkpoint, conversations[: ev.count])
    seqs = spec.max_num_seqs if speed_tokens else max(1, min(spec.max_num_seqs, len(prompts)))
    reports: list[LLMVerification] = []
    source_tokens: list[list[int]] = []
    runs: list[tuple[LLMDType, Path, subprocess.Popen[bytes]]] = []
    try:
        for dtype in dtypes:  # every engine starts at once; only the speed runs take turns
            where = work if len(dtypes) == 1 else work / dtype.value
            where.mkdir(parents=True, exist_ok=True)
            request = GreedyRequest(
                model=str(checkpoint.resolve()),
                dtype=dtype.value,
                max_model_len=spec.max_model_len,
                max_num_seqs=seqs,
                kv_cache_space_gib=max(1, math.ceil(spec.kv_cache_space_gib)),
                max_tokens=ev.tokens,
                prompts=prompts,
                speed_tokens=speed_tokens,
            )
            runs.append((dtype, where, _start_engine(request, where)))
        started = time.perf_counter()  # the source runs once, while the engines start
        with quiet(work / "source.log"):
            source_model = SourceModel(source)
            with progress(len(prompts), f"{spec.name} verify", unit="prompt") as bar:
                for ids in prompts:
                    source_tokens.append(source_model.greedy(ids, ev.tokens))
                    bar.advance()
        source_seconds = time.perf_counter() - started
        if speed_tokens:
            for _, where, engine in runs:
                _await_ready(engine, where)
        for dtype, where, engine in runs:
            _go(engine)  # alone: the other engines wait at their own go, idle
            result = _finish_engine(engine, where)
            checks = _compare(source_model, prompts, source_tokens, result, ev.tokens)
            reports.append(_report(dtype, ev.tokens, checks, ev.tolerances[dtype], result, source_seconds))
    except BaseException:
        for _, _, engine in runs:
            if engine.poll() is None:
                engine.kill()
                engine.wait()
        raise
    return reports


def _await_ready(engine: subprocess.Popen[bytes], work: Path) -> None:
    """Wait until the child has done its greedy run and waits for its go (or has exited: then
    _finish_engine reports how)."""
    deadline = time.monotonic() + ENGINE_TIMEOUT_S
    while not (work / READY_FILE).is_file() and engine.poll() is None:
        if time.monotonic() > deadline:
            raise BuildError(f"vLLM did not start within {ENGINE_TIMEOUT_S:.0f} s (log: {work / 'vllm.log'})")
        time.sleep(0.2)


def _go(engine: subprocess.Popen[bytes]) -> None:
    """Let the child time its speed run (it reads a line before it starts the clock)."""
    if engine.stdin is not None:
        try:
            engine.stdin.write(b"go\n")
            engine.stdin.close()
        except BrokenPipeError:  # the child already failed: _finish_engine reports how
            pass


def _compare(
    source_model: SourceModel,
    prompts: list[list[int]],
    source_tokens: list[list[int]],
    result: GreedyResult,
    n: int,
) -> tuple[PromptCheck, ...]:
    checks = []
    for i, ids in enumerate(prompts):
        engine_tokens = result.tokens[i][:n]
        source_lp = source_model.logprobs(ids, engine_tokens)
        gaps = [abs(a - b) for a, b in zip(result.logprobs[i], source_lp, strict=True)]
        checks.append(
            PromptCheck(
                index=i,
                agrees=engine_tokens == source_tokens[i][:n],
                agreed_tokens=_common_prefix(engine_tokens, source_tokens[i]),
                logprob_gap=sum(gaps) / len(gaps) if gaps else 0.0,
                engine_text=source_model.decode(engine_tokens),
                source_text=source_model.decode(source_tokens[i]),
            )
        )
    return tuple(checks)


def require_passed(report: LLMVerification, *, file: Path | str, model: str) -> None:
    """Nothing out of tolerance is published: raise VerificationError naming the failures."""
    if not report.passed:
        raise VerificationError("; ".join(report.failures), file=file, model=model, field="evaluation")


def render_prompts(checkpoint: Path, conversations: tuple[Conversation, ...]) -> list[list[int]]:
    """Token ids of each conversation through the checkpoint's own chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    out = []
    for conv in conversations:
        text = tokenizer.apply_chat_template(conv.as_chat(), tokenize=False, add_generation_prompt=True)
        out.append(list(tokenizer(str(text), add_special_tokens=False)["input_ids"]))
    return out


class SourceModel:
    """The source (a .gguf file or a checkpoint folder) in transformers, float32, on the CPU."""

    def __init__(self, source: Path) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if source.is_file():
            where, extra = str(source.parent), {"gguf_file": source.name}
        else:
            where, extra = str(source), {}
        self.torch = torch
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **extra)
        self.model = model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(where, **extra)

    def greedy(self, ids: list[int], n: int) -> list[int]:
        with self.torch.inference_mode():
            x = self.torch.tensor([ids])
            out = self.model.generate(
                x,
                attention_mask=self.torch.ones_like(x),
                max_new_tokens=n,
                do_sample=False,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        return [int(t) for t in out[0, len(ids) :]]

    def logprobs(self, ids: list[int], continuation: list[int]) -> list[float]:
        """log p of each continuation token given the tokens before it (teacher forcing)."""
        if not continuation:
            return []
        with self.torch.inference_mode():
            x = self.torch.tensor([ids + continuation[:-1]])
            logits = self.model(x).logits[0, len(ids) - 1 :]
            lp = self.torch.log_softmax(logits.float(), dim=-1)
            picked = lp[self.torch.arange(len(continuation)), self.torch.tensor(continuation)]
        return [float(v) for v in picked]

    def decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True))


def _start_engine(request: GreedyRequest, work: Path) -> subprocess.Popen[bytes]:
    (work / "request.json").write_text(json.dumps(asdict(request)))
    (work / "result.json").unlink(missing_ok=True)
    (work / READY_FILE).unlink(missing_ok=True)
    log = (work / "vllm.log").open("wb")
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    cmd = [
        sys.executable,
        "-m",
        "builder.llm.vllm_greedy",
        str(work / "request.json"),
        str(work / "result.json"),
    ]
    try:
        stdin = subprocess.PIPE if request.speed_tokens else subprocess.DEVNULL
        return subprocess.Popen(cmd, stdin=stdin, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    finally:
        log.close()


def _finish_engine(proc: subprocess.Popen[bytes], work: Path) -> GreedyResult:
    try:
        code = proc.wait(timeout=ENGINE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise BuildError(
            f"vLLM did not finish within {ENGINE_TIMEOUT_S:.0f} s (log: {work / 'vllm.log'})"
        ) from None
    result = work / "result.json"
    if code != 0 or not result.is_file():
        tail = (work / "vllm.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise BuildError(f"vLLM exited with status {code}: {tail[0]} (log: {work / 'vllm.log'})")
    return GreedyResult(**json.loads(result.read_text()))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _report(
    dtype: LLMDType,
    n: int,
    checks: tuple[PromptCheck, ...],
    tolerance: LLMTolerance,
    result: GreedyResult,
    source_seconds: float,
) -> LLMVerification:
    agreement = sum(c.agrees for c in checks) / len(checks)
    gap = sum(c.logprob_gap for c in checks) / len(checks)
    failures = []
    if agreement < tolerance.min_agreement:
        failures.append(
            f"{dtype.value}: first {n} tokens agree on {agreement:.0%} of prompts, "
            f"below min_agreement {tolerance.min_agreement:.0%}"
        )
    if gap > tolerance.max_logprob_gap:
        failures.append(
            f"{dtype.value}: mean log-prob gap {gap:.4f} above max_logprob_gap {tolerance.max_logprob_gap}"
        )
    failures += [
        f"{dtype.value}: prompt {c.index}: log-prob gap {c.logprob_gap:.4f} above {tolerance.prompt_gap:.4g} "
        "(max_prompt_logprob_gap)"
        for c in checks
        if c.logprob_gap > tolerance.prompt_gap
    ]
    return LLMVerification(
        dtype=dtype,
        tokens=n,
        prompts=checks,
        agreement=agreement,
        mean_logprob_gap=gap,
        tolerance=tolerance,
        passed=not failures,
        failures=tuple(failures),
        engine_start_seconds=result.start_seconds,
        engine_generate_seconds=result.generate_seconds,
        source_seconds=source_seconds,
        tokens_per_second=result.tokens_per_second,
    )
