"""builder.llm.vllm_spin: the vLLM plugin that sets how long vLLM's queue readers spin."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from builder.llm import vllm_spin
from builder.python_models.vllm_engine.contract import VLLM_SPIN_ENV

shm_broadcast = pytest.importorskip("vllm.distributed.device_communicators.shm_broadcast")
zmq = pytest.importorskip("zmq")


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A factory of reader SpinConditions; the class's own __init__ back afterwards."""
    monkeypatch.setattr(shm_broadcast.SpinCondition, "__init__", shm_broadcast.SpinCondition.__init__)
    context = zmq.Context()
    made: list[object] = []

    def make() -> object:
        made.append(shm_broadcast.SpinCondition(True, context, f"ipc://{tmp_path}/notify-{len(made)}"))
        return made[-1]

    yield make
    for condition in made:
        for name in ("local_notify_socket", "write_cancel_socket", "read_cancel_socket"):
            getattr(condition, name).close(linger=0)
    context.term()


def test_the_plugin_is_one_of_vllms_general_plugins() -> None:
    plugins = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert plugins.get("tritonforge_spin") == "builder.llm.vllm_spin:register"


def test_without_the_variable_vllms_spinning_is_kept(reader, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(VLLM_SPIN_ENV, raising=False)
    vllm_spin.register()
    assert reader().busy_loop_s == 1


def test_the_variable_sets_every_later_readers_spin_once(reader, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(VLLM_SPIN_ENV, "0.25")
    vllm_spin.register()
    vllm_spin.register()  # vLLM may load its plugins again in the same process
    assert reader().busy_loop_s == 0.25
    monkeypatch.setenv(VLLM_SPIN_ENV, "0")  # a later load changes nothing either
    vllm_spin.register()
    assert reader().busy_loop_s == 0.25


def test_a_value_that_is_no_number_keeps_vllms_spinning(reader, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(VLLM_SPIN_ENV, "soon")
    vllm_spin.register()
    assert reader().busy_loop_s == 1
    assert f"{VLLM_SPIN_ENV}=soon not applied" in caplog.text
