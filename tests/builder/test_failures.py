"""Which exceptions are a refusal of the user's model and which are defects of the builder."""

from __future__ import annotations

import errno
import importlib.util
import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from builder.cache import file_hash
from builder.errors import BuildError, EnvironmentFault, ModelRefused, SpecError, StageDefect, UserError
from builder.failures import defect, environment_fault, guarded, reason, refusal, unreadable_input


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


# The host's refusals: each errno, the line's words, and where.
HOST = [
    (errno.ENOSPC, "no space left on device writing /srv/repo.staging-7/m/config.pbtxt"),
    (errno.EDQUOT, "disk quota exceeded writing /srv/repo.staging-7/m/config.pbtxt"),
    (errno.EROFS, "read-only file system writing /srv/repo.staging-7/m/config.pbtxt"),
    (errno.EACCES, "permission denied on /srv/repo.staging-7/m/config.pbtxt"),
    (errno.EPERM, "operation not permitted on /srv/repo.staging-7/m/config.pbtxt"),
    (errno.ENOMEM, "out of memory"),
    (errno.EMFILE, "too many open files (this process's limit) opening /srv/repo.staging-7/m/config.pbtxt"),
    (errno.ENFILE, "too many open files (the system's limit) opening /srv/repo.staging-7/m/config.pbtxt"),
]


@pytest.mark.parametrize(("code", "line"), HOST)
def test_each_refusal_of_the_host_is_one_line_naming_what_and_where(code: int, line: str) -> None:
    fault = environment_fault(OSError(code, os.strerror(code), "/srv/repo.staging-7/m/config.pbtxt"))
    assert isinstance(fault, EnvironmentFault) and isinstance(fault, BuildError)
    assert fault.what == line == str(fault) and "defect" not in line


def test_memory_and_a_port_taken_are_the_hosts_too() -> None:
    assert str(environment_fault(MemoryError())) == "out of memory"
    taken = OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))
    assert (
        str(environment_fault(taken, where="127.0.0.1:8000 (http)"))
        == "address already in use: 127.0.0.1:8000 (http)"
    )


def test_other_errors_are_not_the_hosts() -> None:
    assert environment_fault(FileNotFoundError(errno.ENOENT, "No such file", "/x")) is None
    assert environment_fault(KeyError("planted")) is None


def test_a_refusal_wrapped_by_a_library_is_found_in_the_chain() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/cache/m/int8/k.tmp-1/model.onnx")
        except OSError as exc:
            raise RuntimeError("serialization failed") from exc
    except RuntimeError as wrapped:
        assert (
            str(environment_fault(wrapped))
            == "no space left on device writing /cache/m/int8/k.tmp-1/model.onnx"
        )


def test_a_write_that_names_no_file_is_named_by_the_file_being_written(tmp_path: Path) -> None:
    def write_text(self: Path) -> None:  # as Path.write_text's f.write() fails: no file in the error
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError) as caught:
        write_text(tmp_path / "manifest.json")
    assert (
        str(environment_fault(caught.value))
        == f"no space left on device writing {tmp_path / 'manifest.json'}"
    )
    assert str(environment_fault(OSError(errno.ENOSPC, "full"), where="/repo.staging-1")).endswith(
        "writing /repo.staging-1"
    )


FULL = Path("/dev/full")  # every write to it fails with ENOSPC, as on a full disk


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")
def test_the_guard_stops_the_build_on_a_full_disk_even_inside_a_model_library(tmp_path: Path) -> None:
    """onnx's own frame raised it: sorted as a library's refusal, the variant would be dropped."""

    def save(_: Path) -> None:
        onnx.save_model(helper.make_model(helper.make_graph([], "g", [], [])), str(FULL))

    with pytest.raises(OSError) as raw:
        save(tmp_path)
    assert refusal(raw.value, tmp_path) is not None  # what the guard would have made of it
    log = tmp_path / "cache" / "m" / "check.failure.log"
    with pytest.raises(EnvironmentFault) as caught:
        guarded(save, model="m", stage="check", user_code=tmp_path, log=log)(
            tmp_path / "cache" / "m" / "check" / "k"
        )
    fault = caught.value
    assert str(fault) == f"no space left on device writing {FULL} (model 'm', check stage)"
    assert not isinstance(fault, (StageDefect, ModelRefused)) and "defect" not in str(fault)
    assert fault.log == log and "Traceback" in log.read_text()


@pytest.mark.parametrize("error", [MemoryError(), OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))])
def test_memory_exhausted_in_a_stage_stops_the_build(tmp_path: Path, error: BaseException) -> None:
    def body(_: Path) -> None:
        raise error

    log = tmp_path / "m" / "int8.failure.log"
    with pytest.raises(EnvironmentFault, match=r"^out of memory \(model 'm', int8 stage\)$"):
        guarded(body, model="m", stage="int8", user_code=tmp_path, log=log)(tmp_path / "m" / "int8" / "k")
    assert "Traceback" in log.read_text()


def test_a_permission_refused_on_the_users_file_is_the_users_error_on_the_builds_the_hosts(
    tmp_path: Path,
) -> None:
    users, out = tmp_path / "data" / "calib.npz", tmp_path / ".tritonforge" / "cache" / "m" / "int8" / "k"
    log = tmp_path / ".tritonforge" / "cache" / "m" / "int8.failure.log"

    def refused(path: Path) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    with pytest.raises(UserError) as caught:
        guarded(lambda _: refused(users), model="m", stage="int8", user_code=tmp_path, log=log)(out)
    assert (
        caught.value.one_line()
        == f"{users}: model 'm': permission denied: the spec names this file and the build cannot read it"
    )
    earlier = tmp_path / ".tritonforge" / "cache" / "m" / "check" / "k2" / "model.onnx"  # an earlier stage's
    for path in (out / "model.onnx", earlier, Path("/etc/somewhere")):
        with pytest.raises(EnvironmentFault, match=f"^permission denied on {path} "):
            guarded(lambda _, p=path: refused(p), model="m", stage="int8", user_code=tmp_path, log=log)(out)  # type: ignore[misc]


def test_a_repositorys_staging_folder_beside_it_is_the_builds(tmp_path: Path) -> None:
    refused = PermissionError(
        errno.EACCES, "Permission denied", str(tmp_path / "model_repository.staging-9" / "m")
    )
    assert unreadable_input(refused, tmp_path, [tmp_path / "model_repository"]) is None
    mine = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "models.yaml"))
    assert unreadable_input(mine, tmp_path, [tmp_path / "model_repository"]) is not None
