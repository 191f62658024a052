"""The vllm_engine model's engine arguments and config parameters (utils/engine.py): ``model.json``
read from the version folder, and what a vLLM without ``stream_interval`` is handed."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.python_models.vllm_engine import model as m
from builder.python_models.vllm_engine.utils import engine
from tests.builder.python_models.vllm_engine.doubles import use_fake_pb_utils


def test_engine_args_resolve_a_relative_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "model.json").write_text('{"model": "checkpoint", "max_num_seqs": 2}')
    assert m.engine_args(tmp_path) == {"model": str(tmp_path / "checkpoint"), "max_num_seqs": 2}
    (tmp_path / "model.json").write_text('{"model": "/abs/elsewhere"}')
    assert m.engine_args(tmp_path)["model"] == "/abs/elsewhere"
    (tmp_path / "model.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.json: missing"):
        m.engine_args(tmp_path)


def test_config_parameter_reads_string_values() -> None:
    config = {"parameters": {"max_waiting_requests": {"string_value": "7"}}}
    assert m.config_parameter(config, "max_waiting_requests", "3") == "7"
    assert m.config_parameter({}, "max_waiting_requests", "3") == "3"


def test_stream_interval_goes_to_a_vllm_that_knows_it_and_is_dropped_for_one_that_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_fake_pb_utils(monkeypatch)  # the drop is logged
    config = {"model": "/m", "stream_interval": 4}
    assert engine.without_unknown_stream_interval(config, {"model", "stream_interval"}) == config
    assert engine.without_unknown_stream_interval(config, {"model"}) == {"model": "/m"}
