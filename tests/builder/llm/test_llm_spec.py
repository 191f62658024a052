"""The ``llms:`` entry: what it accepts, and one-line errors that name file, model and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builder.errors import SpecError
from builder.spec.llm import DTypeSetting, LLMDType, SchedulingPolicy, SourceKind, parse_llm


def entry(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "smollm2",
        "source": "zoo.smollm2:gguf",
        "max_model_len": 2048,
        "max_num_seqs": 8,
        "evaluation": {
            "prompts": "calibration/smollm2/eval.json",
            "tolerances": {
                "float32": {"min_agreement": 0.75, "max_logprob_gap": 0.2},  # dtype auto's candidates
                "bfloat16": {"min_agreement": 0.75, "max_logprob_gap": 0.2},
                "float16": {"min_agreement": 0.75, "max_logprob_gap": 0.2},  # gpu.dtype's default
            },
        },
    }
    raw.update(changes)
    return raw


def error(raw: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_llm(raw, file="models.yaml", index=3)
    return info.value


def test_defaults() -> None:
    spec = parse_llm(entry(), file="models.yaml")
    assert spec.dtype is DTypeSetting.AUTO
    assert spec.candidates == (LLMDType.FLOAT32, LLMDType.BFLOAT16)
    assert spec.widest_dtype is LLMDType.FLOAT32 and spec.widest_dtype.bytes == 4
    assert spec.source_kind is SourceKind.FACTORY
    assert spec.scheduling_policy is SchedulingPolicy.FCFS
    assert spec.admission.max_waiting == 16 and spec.lanes is None
    assert spec.gpu.tensor_parallel_size == 1 and spec.evaluation.count == 4


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("models/chat.gguf", SourceKind.GGUF),
        ("checkpoints/chat", SourceKind.CHECKPOINT),
        ("a.b:c", SourceKind.FACTORY),
    ],
)
def test_source_kinds(source: str, kind: SourceKind) -> None:
    assert parse_llm(entry(source=source), file="models.yaml").source_kind is kind


def test_max_num_seqs_zero_names_the_field() -> None:
    err = error(entry(max_num_seqs=0))
    assert (err.file, err.model, err.field) == ("models.yaml", "smollm2", "max_num_seqs")
    assert "greater than or equal to 1" in err.one_line() and "\n" not in err.one_line()


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "chat bot"}, "name", "pattern"),
        ({"dtype": "int4"}, "dtype", "'auto', 'bfloat16', 'float16' or 'float32' (got 'int4')"),
        ({"dtype": "Auto"}, "dtype", "(got 'Auto')"),
        ({"engine": "tgi"}, "engine", "vllm"),
        ({"kv_cache_space_gib": 0}, "kv_cache_space_gib", "greater than 0"),
        ({"scheduling_policy": "lifo"}, "scheduling_policy", "fcfs"),
        ({"admission": {"max_waiting": -1}}, "admission.max_waiting", "greater than or equal to 0"),
        ({"sampling": {"top_p": 1.5}}, "sampling.top_p", "less than or equal to 1"),
        ({"sampling": {"temperature": -0.1}}, "sampling.temperature", "greater than or equal to 0"),
        ({"gpu": {"gpu_memory_utilization": 0}}, "gpu.gpu_memory_utilization", "greater than 0"),
        ({"gpu": {"tensor_parallel_size": 0}}, "gpu.tensor_parallel_size", "greater than or equal to 1"),
        ({"lanes": {"max_num_seqs": 2}}, "lanes", "min_max_tokens or min_prompt_tokens"),
        ({"prefix_caching": True}, "prefix_caching", "unknown field"),
    ],
)
def test_bad_fields(changes: dict[str, Any], field: str, words: str) -> None:
    err = error(entry(**changes))
    assert err.field == field, err.one_line()
    assert words in err.one_line()


def test_missing_evaluation_and_unnamed_entry() -> None:
    raw = entry()
    del raw["evaluation"], raw["name"]
    err = error(raw)
    assert err.model == "llms[3]"
    assert err.field in ("name", "evaluation") and "required field is missing" in err.one_line()


def test_prompts_must_be_under_calibration() -> None:
    raw = entry()
    raw["evaluation"] = {**raw["evaluation"], "prompts": "../prompts.json"}
    err = error(raw)
    assert err.field == "evaluation" and "under calibration/" in err.one_line()


def test_explicit_dtype_is_the_only_candidate() -> None:
    spec = parse_llm(entry(dtype="bfloat16"), file="models.yaml")
    assert spec.candidates == (LLMDType.BFLOAT16,) and spec.widest_dtype is LLMDType.BFLOAT16


def test_tolerance_needed_for_each_dtype_served() -> None:
    tolerances = {k: v for k, v in entry()["evaluation"]["tolerances"].items() if k != "float32"}
    no_fp32 = entry(evaluation={"prompts": "calibration/smollm2/eval.json", "tolerances": tolerances})
    err = error(no_fp32)
    assert err.one_line() == (
        "models.yaml: model 'smollm2': evaluation.tolerances has no entry for dtype float32 "
        "(dtype auto verifies float32 and bfloat16)"
    )
    assert parse_llm(no_fp32 | {"dtype": "bfloat16"}, file="models.yaml").candidates == (LLMDType.BFLOAT16,)
    err = error(no_fp32 | {"dtype": "bfloat16", "gpu": {"dtype": "float32"}})
    assert "no entry for dtype float32" in err.one_line() and "auto" not in err.one_line()
    only_bf16 = entry(dtype="bfloat16")
    only_bf16["evaluation"] = {
        **only_bf16["evaluation"],
        "tolerances": {"bfloat16": {"min_agreement": 1.0, "max_logprob_gap": 0.1}},
    }
    assert "no entry for dtype float16" in error(only_bf16).one_line()  # gpu.dtype's default


def test_max_tokens_must_leave_room_for_a_prompt() -> None:
    err = error(entry(max_model_len=256, sampling={"max_tokens": 256}))
    assert "max_model_len 256" in err.one_line()


def test_lane_threshold_below_max_model_len() -> None:
    assert parse_llm(entry(lanes={"min_max_tokens": 256}), file="m.yaml").lanes is not None
    err = error(entry(lanes={"min_prompt_tokens": 4096}))
    assert "lanes.min_prompt_tokens 4096" in err.one_line()


def test_spec_is_frozen() -> None:
    spec = parse_llm(entry(), file="models.yaml")
    with pytest.raises(ValueError, match="frozen"):
        spec.max_num_seqs = 2  # type: ignore[misc]


# The default zoo's entry, as the `llms:` section of models.yaml holds it.
ZOO_ENTRY = """
name: smollm2
source: zoo.smollm2:gguf
dtype: auto
max_model_len: 2048
max_num_seqs: 16
kv_cache_space_gib: 1
admission: {max_waiting: 16}
sampling: {temperature: 0.7, top_p: 0.95, max_tokens: 128}
evaluation:
  prompts: calibration/smollm2/eval.json
  count: 4
  tokens: 16
  tolerances:
    float32: {min_agreement: 0.75, max_logprob_gap: 0.1}
    bfloat16: {min_agreement: 0.75, max_logprob_gap: 0.1}
    float16: {min_agreement: 0.75, max_logprob_gap: 0.1}
gpu: {dtype: float16, tensor_parallel_size: 1, gpu_memory_utilization: 0.9}
"""


def test_zoo_entry() -> None:
    import yaml

    spec = parse_llm(yaml.safe_load(ZOO_ENTRY), file="models.yaml")
    root = Path(__file__).parents[3]
    assert (root / spec.evaluation.prompts).is_file()
    assert spec.source_kind is SourceKind.FACTORY and spec.max_num_seqs == 16


@pytest.mark.parametrize("gap", [-1, 1001, "soon"])
def test_a_bad_streaming_gap_is_one_line_naming_the_field(gap: object) -> None:
    err = error(entry(streaming={"min_gap_ms": gap}))
    assert "streaming.min_gap_ms" in err.one_line() and "\n" not in err.one_line()


def test_an_unknown_streaming_key_is_refused() -> None:
    assert "unknown field" in error(entry(streaming={"stream_interval": 8})).one_line()


def test_a_negative_response_budget_is_one_line_naming_the_field() -> None:
    err = error(entry(streaming={"max_responses_per_s": -5}))
    assert "streaming.max_responses_per_s" in err.one_line() and "\n" not in err.one_line()
