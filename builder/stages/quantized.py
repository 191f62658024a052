"""Whether a graph is quantized already: a third-party INT8 file quantized again loses accuracy
twice (an INT8 MiniLM served at cosine 0.953 to its own file), so its own precision is served."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx

# Operators only a quantized graph has (ONNX's and ONNX Runtime's contrib operators).
QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
        "MatMulInteger", "ConvInteger", "QLinearAdd", "QLinearMul", "QGemm", "QAttention",
        "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearSigmoid", "QLinearGlobalAveragePool",
    }
)  # fmt: skip


def quantized_ops(path: Path) -> dict[str, int]:
    """How many of each quantized operator the graph (and its subgraphs) holds."""
    graph = onnx.load(str(path), load_external_data=False).graph
    return dict(sorted(Counter(op for op in _op_types(graph) if op in QUANTIZED_OPS).items()))


def _op_types(graph: onnx.GraphProto) -> list[str]:
    ops = []
    for node in graph.node:
        ops.append(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops += _op_types(attr.g)
    return ops
