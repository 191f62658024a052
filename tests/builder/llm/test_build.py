"""The LLM verify stage's inputs and its reports: an explicit dtype that a finished ``dtype: auto``
verification of the same export, prompts and limits already ran takes that report, no engine of its
own (in a real build only float32 can: an explicit float32 beside the zoo's auto build)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import builder.llm.verify as verify
from builder.cache import StageCache
from builder.llm.build import _verify, auto_inputs, auto_sibling, verify_inputs
from builder.llm.verify import LLMVerification, PromptCheck, _report
from builder.llm.vllm_greedy import GreedyResult
from builder.records import LLMVerdict
from builder.spec.llm import LLMDType, LLMSpec, LLMTolerance, parse_llm

ROOT = Path(__file__).parents[3]
PROMPTS = ROOT / "calibration" / "smollm2" / "eval.json"
F32, BF16 = LLMDType.FLOAT32, LLMDType.BFLOAT16
TOLERANCE = {"min_agreement": 0.5, "max_logprob_gap": 0.5}


def spec(dtype: str) -> LLMSpec:
    evaluation = {
        "prompts": "calibration/smollm2/eval.json",
        "tolerances": {"float32": TOLERANCE, "bfloat16": TOLERANCE},
    }
    raw = {"name": "chat", "source": "ckpt", "dtype": dtype, "gpu": {"dtype": "bfloat16"}}
    return parse_llm(raw | {"evaluation": evaluation}, file="models.yaml")


def report(dtype: LLMDType, tokens_per_second: float | None = None) -> LLMVerification:
    checks = (PromptCheck(0, True, 16, 0.01, "a", "a"),)
    result = GreedyResult(tokens=[], logprobs=[], start_seconds=1.0, generate_seconds=2.0)
    made = _report(dtype, 16, checks, LLMTolerance(**TOLERANCE), result, 3.0)
    return replace(made, tokens_per_second=tokens_per_second)


def inputs(s: LLMSpec) -> Any:
    return verify_inputs(s, "export", "source", "prompts", auto_inputs(s))


def test_an_explicit_dtypes_sibling_is_the_key_dtype_auto_gives_the_same_inputs() -> None:
    explicit, auto = inputs(spec("float32")), inputs(spec("auto"))
    assert auto_sibling(spec("float32"), explicit) == auto.key() != explicit.key()
    assert auto_sibling(spec("auto"), auto) == auto.key()
    longer = verify_inputs(spec("float32"), "export", "source", "other prompts", None)
    assert auto_sibling(spec("float32"), longer) != auto.key()


def test_only_an_explicit_float32_shares_the_export_dtype_auto_verifies() -> None:
    """The export is an input of the verify stage: auto's is float32 (its widest candidate), so an
    explicit bfloat16, exported in bfloat16, can never find auto's report."""
    assert spec("auto").widest_dtype is F32
    assert spec("float32").widest_dtype is F32
    assert spec("bfloat16").widest_dtype is BF16


class Engines:
    """verify_dtypes and verify_llm, recording what they were asked to run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = list[tuple[LLMDType, ...]]()
        monkeypatch.setattr(verify, "verify_dtypes", self.verify_dtypes)
        monkeypatch.setattr(verify, "verify_llm", self.verify_llm)

    def verify_dtypes(self, spec: LLMSpec, dtypes: tuple[LLMDType, ...], *a: Any, **k: Any) -> list[Any]:
        self.calls.append(dtypes)
        return [report(d, 100.0) for d in dtypes]

    def verify_llm(self, spec: LLMSpec, *a: Any, **k: Any) -> LLMVerification:
        self.calls.append(spec.candidates)
        return report(spec.candidates[0])


def run_auto(cache: StageCache, key: str, native_bf16: bool = True) -> Path:
    auto = spec("auto")
    settings = auto_inputs(auto).model_copy(update={"native_bf16": native_bf16})  # type: ignore[union-attr]
    body = lambda out: _verify(auto, Path("ckpt"), Path("src"), PROMPTS, out, settings, out)  # noqa: E731
    return cache.run("chat", "llm-verify", key, body).out


def test_an_explicit_dtype_dtype_auto_ran_takes_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines = Engines(monkeypatch)
    cache = StageCache(tmp_path, lambda _: None)
    earlier = run_auto(cache, "auto-key")
    explicit = spec("float32")
    info = _verify(explicit, Path("ckpt"), Path("src"), PROMPTS, tmp_path / "out", None, earlier)
    assert engines.calls == [(F32, BF16)]  # the auto run's, and no engine for float32
    expected = json.loads(json.dumps(report(F32).to_json()))
    assert info == expected | {"note": "float32 verified by dtype auto's run of it (llm-verify auto-key)"}
    assert LLMVerdict.from_info(info) == LLMVerdict(F32, True, 1.0, 0.01, ())


def test_a_dtype_auto_did_not_run_or_did_not_finish_gets_its_own_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines = Engines(monkeypatch)
    cache = StageCache(tmp_path, lambda _: None)
    earlier = run_auto(cache, "auto-key", native_bf16=False)  # bfloat16 skipped on this CPU
    assert engines.calls == [(F32,)]
    # No report of bfloat16 in the folder (in a real build its export differs as well).
    info = _verify(spec("bfloat16"), Path("ckpt"), Path("src"), PROMPTS, tmp_path / "out", None, earlier)
    assert engines.calls[-1] == (BF16,) and "note" not in info
    unfinished = tmp_path / "chat" / "llm-verify" / "auto-key.tmp-1"
    unfinished.mkdir()
    (unfinished / "report-float32.json").write_text((earlier / "report-float32.json").read_text())
    _verify(spec("float32"), Path("ckpt"), Path("src"), PROMPTS, tmp_path / "out2", None, unfinished)
    assert engines.calls[-1] == (F32,)
    (earlier / "report-float32.json").write_text("{not json")  # a file that does not read: run, not fail
    _verify(spec("float32"), Path("ckpt"), Path("src"), PROMPTS, tmp_path / "out3", None, earlier)
    assert engines.calls[-1] == (F32,) and len(engines.calls) == 4
