"""ONNX Runtime as a runtime (shared/runtimes/onnxruntime.py): its threads and whether its idle
workers spin, from the parameters the local target writes."""

from __future__ import annotations

from typing import Any

import pytest

from builder.python_models.shared.runtimes import Knobs, base
from builder.python_models.shared.runtimes import onnxruntime as ort_runtime


def test_spinning_follows_the_parameter() -> None:
    assert not ort_runtime.spinning({"allow_spinning": "0"}, 1)
    assert ort_runtime.spinning({"allow_spinning": "true"}, 2)


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 8, 64])
def test_unset_spinning_follows_this_machines_cores(monkeypatch: Any, cores: int) -> None:
    """Unset, workers spin only where the instances' threads leave a core free, read from the
    same os.cpu_count() the threads are shared out by."""
    monkeypatch.setattr(ort_runtime.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(base.os, "cpu_count", lambda: cores)
    assert ort_runtime.spinning({"intra_op_threads": "1"}, 1) is (cores > 1)
    assert ort_runtime.spinning({"intra_op_threads": "2"}, 1) is (cores > 2)
    assert not ort_runtime.spinning({}, 1)  # unset threads take every core: none is left
    assert ort_runtime.spinning({"intra_op_threads": "1"}, 2) is (cores > 2)


def _entry(options: Any, key: str) -> str | None:
    try:
        return str(options.get_session_config_entry(key))
    except RuntimeError:  # not set
        return None


def test_session_options_follow_the_spinning_parameters() -> None:
    sleeping = ort_runtime.session_options({"allow_spinning": "0", "stop_spinning": "1"}, 1)
    assert _entry(sleeping, "session.intra_op.allow_spinning") == "0"
    assert _entry(sleeping, "session.force_spinning_stop") is None
    spinning = ort_runtime.session_options({"allow_spinning": "1", "intra_op_threads": "2"}, 1)
    assert _entry(spinning, "session.intra_op.allow_spinning") is None
    assert _entry(spinning, "session.force_spinning_stop") is None
    assert spinning.intra_op_num_threads == 2
    during_runs = ort_runtime.session_options({"allow_spinning": "1", "stop_spinning": "true"}, 1)
    assert _entry(during_runs, "session.force_spinning_stop") == "1"


def test_a_spare_core_is_one_the_sessions_threads_leave() -> None:
    assert ort_runtime.spare_core(1, 1, 2) and ort_runtime.spare_core(2, 1, 3)
    assert not ort_runtime.spare_core(1, 2, 2) and not ort_runtime.spare_core(2, 1, 2)


def test_the_parameters_carry_the_knobs_the_spec_sets() -> None:
    ort = ort_runtime.OnnxRuntime()
    assert ort.parameters(Knobs()) == {"intra_op_threads": "0"}  # unset spinning: the rule decides
    assert ort.parameters(Knobs(threads=2, spinning=False)) == {
        "intra_op_threads": "2",
        "allow_spinning": "0",
    }


def test_the_container_serves_every_precision_on_the_onnxruntime_backend() -> None:
    backend = ort_runtime.OnnxRuntime().container(Knobs(threads=3), 8)
    assert backend.platform == "onnxruntime_onnx" and not backend.pinned_only
    assert backend.precisions == {"fp32", "fp16", "int8", "int8_dynamic"}
    assert backend.parameters == {"intra_op_thread_count": "3"}
    assert ort_runtime.OnnxRuntime().container(Knobs(), 8).parameters == {}
