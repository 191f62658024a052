"""Whether a graph is quantized already: a third-party INT8 file quantized again loses accuracy
twice (an INT8 MiniLM served at cosine 0.953 to its own file), so its own precision is served.

A graph is quantized when it has an operator only quantized graphs have (QuantizeLinear,
MatMulInteger, MatMulNBits...), or when its weights are stored quantized and dequantized on the
way into the computation (weight-only quantization): an integer weight (int4/uint4, int8/uint8,
int16/uint16 initializer or Constant) read by a Cast to float whose result, less a constant zero
point or not, multiplied by a constant scale or not (scaled after the product), reaches an
operator's weight input (MatMul, Gemm, Conv, an embedding's Gather...) through nothing but
reshaping. An integer tensor used otherwise (a shape, the indices of a Gather, a uint8 table
gathered from as it is, a mask cast and added to scores) does not count.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import onnx
from onnx import TensorProto

# Operators only a quantized graph has (ONNX's and ONNX Runtime's contrib operators).
QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
        "MatMulInteger", "ConvInteger", "QLinearAdd", "QLinearMul", "QGemm", "QAttention",
        "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearSigmoid", "QLinearGlobalAveragePool",
        "MatMulNBits", "GatherBlockQuantized", "MatMulBnb4", "DequantizeBFP",
    }
)  # fmt: skip

# The types a quantized weight is stored in.
QUANTIZED_TYPES: dict[int, str] = {
    TensorProto.INT4: "int4", TensorProto.UINT4: "uint4", TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8", TensorProto.INT16: "int16", TensorProto.UINT16: "uint16",
}  # fmt: skip
FLOATS: frozenset[int] = frozenset(
    {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
)
# Operators that only reshape or retype a tensor: a dequantized weight passes them unchanged.
RESHAPING = frozenset({"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Cast"})
# The inputs by which an operator reads a weight (None: any input).
WEIGHT_INPUTS: dict[str, tuple[int, ...] | None] = {
    "MatMul": None, "Gemm": (0, 1), "Conv": (1,), "ConvTranspose": (1,), "Gather": (0,),
    "Einsum": None, "FusedMatMul": None, "Attention": (1,), "LSTM": (1, 2), "GRU": (1, 2), "RNN": (1, 2),
}  # fmt: skip


def quantized_ops(path: Path) -> dict[str, int]:
    """What makes the graph quantized, counted: each quantized operator it (and its subgraphs)
    holds, and its weight-only quantized weights as ``int8 weights through Cast``. Empty for a
    float graph."""
    graph = onnx.load(str(path), load_external_data=False).graph
    found: Counter[str] = Counter()
    for g, constants in _graphs(graph, {}):
        found.update(node.op_type for node in g.node if node.op_type in QUANTIZED_OPS)
        found.update(f"{kind} weights through Cast" for kind in _weights_through_cast(g, constants))
    return dict(sorted(found.items()))


def _graphs(
    graph: onnx.GraphProto, outer: dict[str, int]
) -> Iterator[tuple[onnx.GraphProto, dict[str, int]]]:
    """The graph and each of its subgraphs, with the element type of every constant each one sees
    (its own initializers and Constant nodes, and those of the graphs around it)."""
    constants = dict(outer)
    constants.update({init.name: init.data_type for init in graph.initializer})
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    constants[node.output[0]] = attr.t.data_type
    yield graph, constants
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g, constants)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub, constants)


def _weights_through_cast(graph: onnx.GraphProto, constants: dict[str, int]) -> list[str]:
    """The type of each integer constant the graph casts to float on its way into a weight input,
    scaled or not (one entry a weight)."""
    flow = _Flow(graph, constants)
    kinds = []
    for name, dtype in constants.items():
        kind = QUANTIZED_TYPES.get(dtype)
        if kind is None:
            continue
        casts = [n for n, _ in flow.readers.get(name, []) if n.op_type == "Cast" and _cast_to(n) in FLOATS]
        if any(flow.dequantized(cast.output[0]) for cast in casts):
            kinds.append(kind)
    return kinds


def _cast_to(node: onnx.NodeProto) -> int:
    return next((attr.i for attr in node.attribute if attr.name == "to"), 0)


class _Flow:
    """Who reads and who makes each tensor of one graph."""

    def __init__(self, graph: onnx.GraphProto, constants: dict[str, int]) -> None:
        self.constants = constants
        self.readers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
        self.maker: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            for i, name in enumerate(node.input):
                self.readers[name].append((node, i))
            for name in node.output:
                self.maker[name] = node

    def constant(self, tensor: str) -> bool:
        """A constant, or a constant reshaped or cast (a scale or zero point stored as it comes)."""
        if tensor in self.constants:
            return True
        node = self.maker.get(tensor)
        return node is not None and node.op_type in RESHAPING and self.constant(node.input[0])

    def dequantized(self, tensor: str) -> bool:
        """Whether the cast weight ``tensor`` reaches a weight input, scaled by a constant on the
        way (a constant zero point taken off first or not) or as it is (scaled after the product)."""
        if self.reaches_weight_input(tensor, set()):
            return True
        for node, i in self.readers.get(tensor, []):
            if len(node.input) != 2 or not self.constant(node.input[1 - i]):
                continue
            if node.op_type == "Sub" and i == 0 and self.dequantized(node.output[0]):
                return True
            if node.op_type == "Mul" and self.reaches_weight_input(node.output[0], set()):
                return True
        return False

    def reaches_weight_input(self, tensor: str, seen: set[str]) -> bool:
        """Whether ``tensor`` is read as a weight, as it is or only reshaped."""
        if tensor in seen:
            return False
        seen.add(tensor)
        for node, i in self.readers.get(tensor, []):
            slots = WEIGHT_INPUTS.get(node.op_type, ())
            if slots is None or i in slots:
                return True
            passes = node.op_type in RESHAPING and i == 0
            if passes and self.reaches_weight_input(node.output[0], seen):
                return True
        return False
