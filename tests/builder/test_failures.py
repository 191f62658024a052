"""Which exceptions are a refusal of the user's model and which are defects of the builder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from builder.cache import file_hash
from builder.errors import ModelRefused, SpecError, StageDefect
from builder.failures import defect, guarded, reason, refusal


def raised(fn: object, *args: object) -> BaseException:
    with pytest.raises(BaseException) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


def test_an_exception_of_the_builder_s_own_code_is_a_defect(tmp_path: Path) -> None:
    # open() of a missing file, called by builder/cache.py: the builder's own mistake.
    assert refusal(raised(file_hash, tmp_path / "missing"), tmp_path) is None


def test_a_model_library_s_own_exception_is_a_refusal(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["missing"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    exc = raised(onnx.checker.check_model, helper.make_model(graph))
    line = refusal(exc, tmp_path)
    assert line is not None and line.startswith("ValidationError")


def test_the_user_s_own_code_failing_is_the_user_s(tmp_path: Path) -> None:
    (tmp_path / "factory.py").write_text("def make():\n    return {}['weights']\n")
    found = importlib.util.spec_from_file_location("factory", tmp_path / "factory.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    exc = raised(module.make)
    assert refusal(exc, tmp_path) == "KeyError: 'weights'"
    assert refusal(exc, tmp_path / "elsewhere") is None


def test_named_reasons_are_refusals(tmp_path: Path) -> None:
    assert refusal(SpecError("bad"), tmp_path) == "SpecError: bad"
    assert refusal(ModelRefused("no operator quantized"), tmp_path) == "ModelRefused: no operator quantized"


def test_the_guard_wraps_a_refusal_and_logs_a_defect(tmp_path: Path) -> None:
    def body(_: Path) -> dict[str, object]:
        raise KeyError("planted")

    log = tmp_path / "logs" / "int8.failure.log"
    run = guarded(body, model="m", stage="int8", user_code=tmp_path, log=log)
    with pytest.raises(StageDefect) as info:
        run(tmp_path)
    assert info.value.log == log and "KeyError: 'planted'" in str(info.value)
    assert "Traceback" in log.read_text() and "raise KeyError" in log.read_text()

    refuse = guarded(lambda _: onnx.load(str(tmp_path / "none.onnx")), model="m", stage="check",
                     user_code=tmp_path, log=log)  # fmt: skip
    with pytest.raises(ModelRefused) as refused:
        refuse(tmp_path)
    assert isinstance(refused.value.__cause__, FileNotFoundError)


def test_a_defect_line_names_model_stage_and_log(tmp_path: Path) -> None:
    exc = defect(TypeError("bad call"), "m", "verify-fp16", tmp_path / "x.log")
    assert str(exc).startswith("model 'm': verify-fp16 stage: TypeError: bad call")
    assert str(tmp_path / "x.log") in str(exc)


def test_a_refusal_keeps_its_traceback_in_the_stage_log_and_its_line_names_the_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "check.failure.log"
    refuse = guarded(lambda _: onnx.load(str(tmp_path / "none.onnx")), model="m", stage="check",
                     user_code=tmp_path, log=log)  # fmt: skip
    with pytest.raises(ModelRefused) as refused:
        refuse(tmp_path)
    assert "Traceback" in log.read_text() and "onnx.load" in log.read_text()
    assert reason(refused.value).startswith("FileNotFoundError: ")
    assert reason(refused.value).endswith(f" (traceback in {log})")


def test_a_named_refusal_keeps_its_traceback_too(tmp_path: Path) -> None:
    def body(_: Path) -> dict[str, object]:
        raise ModelRefused("no operator quantized")

    log = tmp_path / "int8.failure.log"
    with pytest.raises(ModelRefused) as refused:
        guarded(body, model="m", stage="int8", user_code=tmp_path, log=log)(tmp_path)
    assert reason(refused.value) == f"ModelRefused: no operator quantized (traceback in {log})"
    assert 'raise ModelRefused("no operator quantized")' in log.read_text()
