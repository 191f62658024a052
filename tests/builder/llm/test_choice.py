"""dtype auto's choice: the fastest candidate that verified, ties to the more exact, none when
none verified; and the verify stage's record of it."""

from __future__ import annotations

from builder.llm.build import NO_NATIVE_BF16, auto_info
from builder.llm.choice import TIE_MARGIN, Candidate, choose
from builder.records import LLMVerdict
from builder.spec.llm import AUTO_CANDIDATES, LLMDType

F32, BF16 = LLMDType.FLOAT32, LLMDType.BFLOAT16


def test_the_faster_verified_candidate_is_served() -> None:
    choice = choose([Candidate(F32, True, 268.0), Candidate(BF16, True, 312.0)])
    assert choice.dtype is BF16
    assert choice.reason == "dtype bfloat16 (312 tok/s) over float32 (268 tok/s), both verified"


def test_a_faster_candidate_out_of_tolerance_is_not_served() -> None:
    choice = choose([Candidate(F32, True, 100.0), Candidate(BF16, False, 300.0)])
    assert choice.dtype is F32
    assert choice.reason == "dtype float32 (100 tok/s), the only one verified (bfloat16 out of tolerance)"


def test_a_tie_goes_to_the_more_exact_candidate() -> None:
    assert AUTO_CANDIDATES[0] is F32  # the order ties fall to
    near = 100.0 * (1 + TIE_MARGIN) - 0.1
    choice = choose([Candidate(F32, True, 100.0), Candidate(BF16, True, near)])
    assert choice.dtype is F32 and choice.reason.endswith("within 5%: the more exact one")
    beyond = 100.0 * (1 + TIE_MARGIN) + 0.1
    assert choose([Candidate(F32, True, 100.0), Candidate(BF16, True, beyond)]).dtype is BF16


def test_skipped_candidate_is_named_with_its_reason() -> None:
    choice = choose([Candidate(F32, True), Candidate(BF16, False, skipped="no avx512_bf16")])
    assert choice.dtype is F32
    assert choice.reason == "dtype float32, the only one verified (bfloat16 skipped: no avx512_bf16)"


def test_none_verified_chooses_nothing() -> None:
    choice = choose([Candidate(F32, False, 100.0), Candidate(BF16, False, 200.0)])
    assert choice.dtype is None
    assert choice.reason == "no dtype verified: float32 out of tolerance; bfloat16 out of tolerance"


def report(dtype: LLMDType, passed: bool, tps: float | None) -> dict[str, object]:
    failures = [] if passed else [f"{dtype.value}: first 16 tokens agree on 50% of prompts, below 75%"]
    out: dict[str, object] = {
        "dtype": dtype.value, "passed": passed, "agreement": 1.0 if passed else 0.5,
        "mean_logprob_gap": 0.01, "failures": failures,
    }  # fmt: skip
    return out | ({"tokens_per_second": tps} if tps is not None else {})


def test_stage_record_holds_the_chosen_report_and_every_candidate() -> None:
    info = auto_info(AUTO_CANDIDATES, {F32: report(F32, True, 268.0), BF16: report(BF16, True, 312.0)}, {})
    verdict = LLMVerdict.from_info(info)
    assert verdict.dtype is BF16 and verdict.passed
    assert verdict.choice == "dtype bfloat16 (312 tok/s) over float32 (268 tok/s), both verified"
    candidates = info["choice"]["candidates"]  # type: ignore[index]
    assert [(c["dtype"], c["passed"], c["tokens_per_second"]) for c in candidates] == [
        ("float32", True, 268.0),
        ("bfloat16", True, 312.0),
    ]


def test_stage_record_when_none_verified_fails_with_every_reason() -> None:
    info = auto_info(AUTO_CANDIDATES, {F32: report(F32, False, None)}, {BF16: NO_NATIVE_BF16})
    verdict = LLMVerdict.from_info(info)
    assert not verdict.passed and verdict.choice is not None
    assert verdict.failures == (
        "float32: first 16 tokens agree on 50% of prompts, below 75%",
        f"bfloat16 skipped: {NO_NATIVE_BF16}",
    )
