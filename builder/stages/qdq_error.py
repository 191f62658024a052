"""Each quantized node's measured error, by ONNX Runtime's ``qdq_loss_debug``: the INT8 search
keeps the worst in float first.

One pass of the float graph and one of its Q/DQ graph over a few evaluation samples (ORT's
``modify_model_output_intermediate_tensors`` and ``collect_activations``) give every tensor in
both; ``compute_signal_to_quantization_noice_ratio`` then gives how far each tensor of the Q/DQ
graph (after its DequantizeLinear, where it has one) is from the float one, as noise / signal power
``10 ** (-SQNR / 10)``. A node's score is the noise it adds: its outputs' less the most of its
inputs'. (The Q/DQ graph's own before/after pairs would count a Relu or Clip that ONNX Runtime
folds into the quantization range as noise.) Only nodes that read a quantized tensor are ranked;
nodes TensorRT fuses into their neighbours (activations, reshapes) are not, for TensorRT's recipe:
it would quantize around them all the same.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import NDArray
from onnxruntime.quantization.qdq_loss_debug import (
    collect_activations,
    compute_signal_to_quantization_noice_ratio,
    modify_model_output_intermediate_tensors,
)

from builder.progress import quiet
from builder.stages.quantize import LOG_FILE, SampleReader
from builder.stages.search import Ranked

# ModelOpt's placement rules: TensorRT fuses these into the Q/DQ'd op before or after them, so
# keeping one in float changes nothing it runs.
TENSORRT_FUSED = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Softmax",
        "Clip",
        "Reshape",
        "Transpose",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
    }
)
DEQUANTIZED = "_DequantizeLinear_Output"  # ONNX Runtime's name of a tensor after its Q/DQ pair
SAVED = "_ReshapedSavedOutput"  # what modify_model_output_intermediate_tensors appends
RANKING_SAMPLES = 4  # the activations of every tensor of each sample are held at once


def rank_nodes(
    float_graph: Path,
    qdq_graph: Path,
    samples: dict[str, NDArray[Any]],
    batch: int,
    *,
    skip: frozenset[str] = frozenset(),
    unranked_ops: frozenset[str] = frozenset(),
) -> list[Ranked]:
    """The nodes of ``float_graph`` that read a tensor ``qdq_graph`` quantizes, worst first; ``skip``
    names nodes already in float, ``unranked_ops`` op types left out (TensorRT's fused ones)."""
    count = next(iter(samples.values())).shape[0]
    few = {k: v[: min(count, RANKING_SAMPLES)] for k, v in samples.items()}
    with tempfile.TemporaryDirectory(prefix="rank.", dir=qdq_graph.parent) as tmp_name:
        tmp = Path(tmp_name)
        with quiet(qdq_graph.parent / LOG_FILE):
            floats = _activations(float_graph, tmp / "float.onnx", few, batch)
            quantized = _activations(qdq_graph, tmp / "qdq.onnx", few, batch)
    noise: dict[str, float] = {}
    for name, values in floats.items():
        got = quantized.get(name + DEQUANTIZED, quantized.get(name))
        if got is not None and len(got) == len(values):
            noise[name] = _noise(compute_signal_to_quantization_noice_ratio(values, got))
    read = {name[: -len(DEQUANTIZED)] for name in quantized if name.endswith(DEQUANTIZED)}
    nodes = list(onnx.load(str(float_graph), load_external_data=False).graph.node)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    ranked = []
    for node in nodes:
        if not node.name or node.name in skip or node.op_type in unranked_ops or not read & set(node.input):
            continue
        before = max((noise[i] for i in node.input if i in noise), default=0.0)
        # An output the Q/DQ graph does not have (a Conv's, where ORT folded the Relu after it into
        # the quantization range) is seen after that Relu.
        outputs = [o for o in node.output if o in noise] or [
            x for o in node.output for r in readers.get(o, []) for x in r.output if x in noise
        ]
        after = max((noise[o] for o in outputs), default=before)
        ranked.append(Ranked(node.name, node.op_type, max(after - before, 0.0)))
    return sorted(ranked, key=lambda r: -r.score)


def _activations(
    graph: Path, augmented: Path, samples: dict[str, NDArray[Any]], batch: int
) -> dict[str, list[NDArray[Any]]]:
    modify_model_output_intermediate_tensors(str(graph), str(augmented))
    found = collect_activations(str(augmented), SampleReader(samples, batch))
    return {name.removesuffix(SAVED): values for name, values in found.items()}


def _noise(sqnr_db: float) -> float:
    """Noise / signal power from a signal-to-quantization-noise ratio in dB."""
    if not np.isfinite(sqnr_db):
        return 0.0 if sqnr_db > 0 else 1.0
    return float(10.0 ** (-float(sqnr_db) / 10.0))
