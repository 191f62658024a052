"""The contract of the ``local`` target's ONNX models (``onnx_runner``, and ``onnx_sequence``
for a stateful model): the config parameters the builder writes (builder/targets/local.py,
builder/configs.py) and the models read, declared once.

Both packages link to this file as their ``contract.py``, so the repository writer copies it beside
``model.py`` and the model imports it as a sibling; the builder imports it from here. It imports
nothing of the project.
"""

from __future__ import annotations

from typing import TypedDict

# -- files of the version folder -------------------------------------------------------------------
ONNX_FILE = "model.onnx"  # the variant's graph, and the model's default for ONNX_FILE_KEY

# -- config parameters (string values) -------------------------------------------------------------
ONNX_FILE_KEY = "onnx_file"  # the graph's file name in the version folder
# The runtime's own parameters (runtime, precision, threads and each runtime's knobs) are its
# module's, in the ``runtimes`` package both models link to (shared/runtimes/).
# "1": every row of every request runs on its own (its answer would move with the rows beside it)
RUN_ALONE = "run_alone"
SEQUENCE_STATE = "sequence_state"  # onnx_sequence: its states, a JSON list of StateEntry
# onnx_runner's own bound on its queue, where Triton's queue policy is left out:
MAX_QUEUE_SIZE = "max_queue_size"  # the model's share over its instances; "0": unbounded
QUEUE_TIMEOUT_US = "queue_timeout_us"  # a waiting request older than this is refused; "0": never
ALLOW_TIMEOUT_OVERRIDE = "allow_timeout_override"  # "true"/"false": a request's own timeout wins


class StateEntry(TypedDict):
    """One state of SEQUENCE_STATE: the graph's input that takes it, the output that gives its next
    value, its Triton dtype (FP32...) and dims (without the batch)."""

    input: str
    output: str
    dtype: str
    dims: list[int]
