"""What every CPU runtime shares (shared/runtimes/base.py): the sizings worth measuring, and
their labels."""

from __future__ import annotations

from builder.python_models.shared.runtimes import Knobs, Sizing
from builder.python_models.shared.runtimes.base import instance_counts
from builder.python_models.shared.runtimes.onnxruntime import OnnxRuntime
from builder.python_models.shared.runtimes.openvino import OpenVino


def test_instance_counts_double_up_to_the_cores() -> None:
    assert instance_counts(1) == [1] and instance_counts(2) == [1, 2]
    assert instance_counts(6) == [1, 2, 4] and instance_counts(64) == [1, 2, 4, 8]


def test_each_instance_count_shares_the_cores_out() -> None:
    sizings = OnnxRuntime().sizings(4, Knobs(spinning=False))
    assert sizings == [Sizing(n, Knobs(threads=4 // n, spinning=False)) for n in (1, 2, 4)]
    assert OnnxRuntime().sizings(4, Knobs(threads=1), instances=2) == [Sizing(2, Knobs(threads=1))]


def test_openvino_also_tries_its_throughput_hint() -> None:
    *latency, throughput = OpenVino().sizings(2, Knobs())
    assert [s.instances for s in latency] == [1, 2] and all(s.knobs.hint is None for s in latency)
    assert throughput == Sizing(1, Knobs(threads=2, hint="THROUGHPUT", streams=2))
    assert throughput.label == "1 x 2 threads THROUGHPUT/2" and latency[1].label == "2 x 1 thread"
    assert OpenVino().parameters(throughput.knobs)["performance_hint"] == "THROUGHPUT"
