"""LoRA in the vllm_engine Python model, as Triton's vLLM backend has it: multi_lora.json, the
``lora_name`` key of a request's sampling parameters, and that backend's refusals word for word
(its own tests compare the whole message). The helpers import without Triton or vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.python_models.vllm_engine import model as m
from builder.python_models.vllm_engine.contract import MULTI_LORA_FILE
from builder.python_models.vllm_engine.utils.lora import Adapter
from tests.builder.llm.needs import NEEDS_VLLM

KNOWN = {"max_tokens", "temperature"}
LORA_ON = {"model": "checkpoint", "enable_lora": True}


def getter(**inputs: Any) -> Any:
    return {k: np.array([v], dtype=object) for k, v in inputs.items()}.get


def test_lora_name_comes_out_of_the_sampling_parameters() -> None:
    sampling = json.dumps({"temperature": "0", "lora_name": "sea"})
    parsed = m.parse_request(getter(text_input="Hi", sampling_parameters=sampling), "", KNOWN)
    assert parsed.lora_name == "sea" and parsed.sampling == {"temperature": 0.0}


def test_lora_name_in_the_request_parameters_as_that_backend_takes_it() -> None:
    parsed = m.parse_request(
        getter(text_input="Hi"), json.dumps({"lora_name": "sea", "max_tokens": 3}), KNOWN
    )
    assert parsed.lora_name == "sea" and parsed.sampling == {"max_tokens": 3}


def test_without_lora_name_the_base_model_answers() -> None:
    assert m.parse_request(getter(text_input="Hi"), "", KNOWN).lora_name is None


@pytest.mark.parametrize("value", [3, "", ["sea"]])
def test_a_lora_name_that_is_not_a_name_is_refused(value: Any) -> None:
    sampling = json.dumps({"lora_name": value})
    with pytest.raises(m.BadRequest, match=r"^sampling_parameters\.lora_name must be a non-empty string"):
        m.parse_request(getter(text_input="Hi", sampling_parameters=sampling), "", KNOWN)


def test_lora_name_is_not_a_sampling_default() -> None:
    with pytest.raises(ValueError, match="unknown key"):
        m.parse_defaults(json.dumps({"lora_name": "sea"}), KNOWN)


def write(version: Path, table: Any) -> Path:
    version.mkdir(parents=True, exist_ok=True)
    (version / MULTI_LORA_FILE).write_text(table if isinstance(table, str) else json.dumps(table))
    return version


def test_multi_lora_json_is_read_only_with_enable_lora(tmp_path: Path) -> None:
    version = write(tmp_path / "1", {"sea": "loras/sea"})
    assert m.parse_multi_lora(version, {"model": "checkpoint"}) is None
    assert m.parse_multi_lora(version, {"enable_lora": "false"}) is None


def test_adapters_are_numbered_from_1_in_file_order_relative_folders_resolved(tmp_path: Path) -> None:
    version = write(tmp_path / "1", {"sea": "loras/sea", "sky": "/abs/sky", "gone": "missing"})
    (version / "loras" / "sea").mkdir(parents=True)
    adapters = m.parse_multi_lora(version, {"enable_lora": "true"})  # a string, as that backend reads it
    assert adapters == {
        "sea": Adapter("sea", 1, str(version / "loras" / "sea")),
        "sky": Adapter("sky", 2, "/abs/sky"),
        "gone": Adapter("gone", 3, "missing"),  # left to vLLM (the server's working directory)
    }


@pytest.mark.parametrize(
    ("table", "error", "message"),
    [
        (None, FileNotFoundError, "multi_lora.json: missing; model.json sets enable_lora"),
        ("{", ValueError, "multi_lora.json: not valid JSON"),
        ([], ValueError, "must be a non-empty JSON object of adapter name -> folder"),
        ({"sea": 3}, ValueError, "adapter 'sea': its folder must be a non-empty string"),
    ],
)
def test_a_bad_multi_lora_json_fails_initialize_naming_the_file(
    tmp_path: Path, table: Any, error: type[Exception], message: str
) -> None:
    version = tmp_path / "1"
    if table is None:
        version.mkdir()
    else:
        write(version, table)
    with pytest.raises(error, match=message):
        m.parse_multi_lora(version, LORA_ON)


def test_the_lora_names_parameter_must_match_multi_lora_json() -> None:
    adapters = {"sea": Adapter("sea", 1, "/x")}
    m.check_lora_names("", adapters)
    m.check_lora_names('["sea"]', adapters)
    with pytest.raises(ValueError, match=r"lora_names \['sky'\] does not match .* \['sea'\]"):
        m.check_lora_names('["sky"]', adapters)
    with pytest.raises(ValueError, match=r"lora_names \['sea'\] does not match .* \[\]"):
        m.check_lora_names('["sea"]', None)


def test_refusals_are_triton_vllm_backend_words() -> None:
    adapters = {"doll": Adapter("doll", 1, "/d"), "sheep": Adapter("sheep", 2, "/s")}
    assert m.choose_adapter(None, adapters) is None and m.choose_adapter(None, None) is None
    assert m.choose_adapter("sheep", adapters) == adapters["sheep"]
    with pytest.raises(m.BadRequest) as unknown:
        m.choose_adapter("bactrian", adapters)
    assert str(unknown.value) == "LoRA bactrian is not supported, we currently support ['doll', 'sheep']"
    with pytest.raises(m.BadRequest) as off:
        m.choose_adapter("doll", None)
    assert str(off.value) == "LoRA feature is not enabled."


@NEEDS_VLLM
def test_lora_request_is_vllms() -> None:
    request = m.lora_request(Adapter("sea", 2, "/x/sea"))
    assert (request.lora_name, request.lora_int_id, request.lora_path) == ("sea", 2, "/x/sea")
    assert m.lora_request(None) is None
