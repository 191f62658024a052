"""clients.shm: the shared-memory plan of a request (no server, no /dev/shm)."""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

from clients.protocol import make_inputs, make_outputs
from clients.shm import ALIGN, Slot, aligned, attach, layout, own_prefix, plan
from tests.clients._helpers import simple_info, simple_inputs, text_info


def test_fixed_size_tensors_get_aligned_slots_in_two_regions() -> None:
    inputs = {"INPUT0": np.zeros((3, 16), np.int32), "INPUT1": np.zeros((3, 16), np.int32)}
    p = plan(simple_info(), inputs, ["OUTPUT0", "OUTPUT1"], batch=3, class_count=0)
    assert [(s.name, s.offset, s.nbytes) for s in p.inputs] == [("INPUT0", 0, 192), ("INPUT1", 192, 192)]
    assert [(s.name, s.shape, s.dtype) for s in p.outputs] == [
        ("OUTPUT0", (3, 16), np.dtype(np.int32)),
        ("OUTPUT1", (3, 16), np.dtype(np.int32)),
    ]
    assert p.input_region is not None and p.output_region is not None
    assert p.input_region.size == p.output_region.size == 384
    assert p.input_region.name != p.output_region.name
    for region in p.regions():
        assert region.name.startswith(own_prefix()) and region.key == "/" + region.name
    assert p.input_names() == {"INPUT0", "INPUT1"}


def test_odd_sizes_are_padded_to_the_alignment() -> None:
    assert aligned(1) == ALIGN and aligned(ALIGN) == ALIGN and aligned(ALIGN + 1) == 2 * ALIGN
    slots = [Slot("a", 0, 12), Slot("b", 0, 100), Slot("c", 0, 64)]
    assert layout(slots) == 64 + 128 + 64
    assert [s.offset for s in slots] == [0, 64, 192]
    p = plan(simple_info(), simple_inputs(1), [], batch=1, class_count=0)
    assert p.output_region is None and p.regions() == [p.input_region]


def test_strings_dynamic_outputs_and_classes_stay_in_the_request() -> None:
    info = text_info()
    inputs = {"TEXT": np.array([[b"a"], [b"b"]], dtype=object), "SCALE": np.ones((2, 1), np.float32)}
    p = plan(info, inputs, ["TOKENS", "LABEL"], batch=2, class_count=0)
    assert [s.name for s in p.inputs] == ["SCALE"]
    assert [s.name for s in p.outputs] == ["LABEL"]  # TOKENS has a dynamic dimension
    classes = plan(info, inputs, ["LABEL"], batch=2, class_count=2)
    assert classes.outputs == [] and classes.output_region is None


def test_attach_points_tensors_at_their_slots() -> None:
    arrays = simple_inputs(2)
    p = plan(simple_info(), arrays, ["OUTPUT1"], batch=2, class_count=0)
    inputs = make_inputs(httpclient, simple_info().datatypes, arrays, skip=p.input_names())
    outputs = make_outputs(httpclient, ["OUTPUT1"], 0)
    attach(p, inputs, outputs)
    assert p.input_region is not None and p.output_region is not None
    assert inputs[1]._get_tensor()["parameters"] == {
        "shared_memory_region": p.input_region.name,
        "shared_memory_byte_size": 128,
        "shared_memory_offset": 128,
    }
    assert outputs[0]._get_tensor()["parameters"]["shared_memory_region"] == p.output_region.name
    assert outputs[0]._get_tensor()["parameters"]["shared_memory_byte_size"] == 128
