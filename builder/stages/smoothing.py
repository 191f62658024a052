"""SmoothQuant-style outlier smoothing, folded into an FP32 ONNX graph before quantization.

For a MatMul ``Y = X @ W`` with a constant 2-D ``W`` and per-input-channel outliers in ``X``,
``Y = (X / s) @ (diag(s) W)`` is exact in FP32. With
``s_k = max|X_k|^alpha / max|W_k,:|^(1 - alpha)`` the activation ranges shrink and the weight
rows take up the difference, so per-tensor activation scales lose less precision
(Xiao et al., SmoothQuant, 2023). ``X / s`` is one ``Mul`` by a constant inserted before the
MatMul (shared by every smoothed MatMul reading the same tensor); TensorRT fuses it into the
following quantize node. Activation ranges come from running the graph on calibration samples.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx import TensorProto, helper, numpy_helper

from builder.stages.runtimes import ort_session


def smooth_matmul_inputs(
    src: str | Path,
    dst: str | Path,
    samples: dict[str, NDArray[Any]],
    *,
    alpha: float = 0.5,
    nodes: list[str] | None = None,
    batch_size: int = 8,
) -> Path:
    """Write ``dst``: ``src`` with the inputs of the matching MatMuls smoothed.

    ``nodes`` are glob patterns on node names (``*/output/dense/MatMul``); ``None`` smooths every
    MatMul whose second input is a 2-D initializer. ``samples`` are the model's inputs, first
    axis = samples (the calibration reader's arrays).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be within 0..1, got {alpha}")
    model = onnx.load(str(src))
    targets = _targets(model, nodes)
    if not targets:
        raise ValueError(f"no MatMul with a constant weight matches {nodes}")
    amax = _activation_absmax(model, sorted({n.input[0] for n in targets}), samples, batch_size)
    _apply(model, targets, amax, alpha)
    onnx.save(model, str(dst))
    return Path(dst)


def _targets(model: onnx.ModelProto, patterns: list[str] | None) -> list[onnx.NodeProto]:
    weights = {i.name for i in model.graph.initializer if len(i.dims) == 2}
    found = []
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"MatMul_{i}"  # Muls are placed by their consumer's name
        if node.op_type != "MatMul" or node.input[1] not in weights:
            continue
        if patterns is None or any(fnmatch.fnmatchcase(node.name, p) for p in patterns):
            found.append(node)
    return found


def _batches(samples: dict[str, NDArray[Any]], batch_size: int) -> Iterator[dict[str, NDArray[Any]]]:
    n = len(next(iter(samples.values())))
    for i in range(0, n, batch_size):
        yield {k: v[i : i + batch_size] for k, v in samples.items()}


def _activation_absmax(
    model: onnx.ModelProto, tensors: list[str], samples: dict[str, NDArray[Any]], batch_size: int
) -> dict[str, NDArray[Any]]:
    """Per-channel (last axis) max |x| of each tensor over all samples."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in tensors)
    session = ort_session(probe.SerializeToString())
    names = {i.name for i in session.get_inputs()}
    amax: dict[str, NDArray[Any]] = {}
    for batch in _batches(samples, batch_size):
        outs = session.run(tensors, {k: v for k, v in batch.items() if k in names})
        for name, x in zip(tensors, outs, strict=True):
            m = np.abs(x.reshape(-1, x.shape[-1])).max(axis=0)
            amax[name] = np.maximum(amax[name], m) if name in amax else m
    return amax


def _apply(
    model: onnx.ModelProto, targets: list[onnx.NodeProto], amax: dict[str, NDArray[Any]], alpha: float
) -> None:
    inits = {i.name: i for i in model.graph.initializer}
    by_input: dict[str, list[onnx.NodeProto]] = {}
    for node in targets:
        by_input.setdefault(node.input[0], []).append(node)
    muls: dict[str, onnx.NodeProto] = {}  # first consumer's name -> the Mul to place before it
    for x_name, consumers in by_input.items():
        weights = [numpy_helper.to_array(inits[n.input[1]]) for n in consumers]
        w_max = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        scale = _scale(amax[x_name], w_max, alpha)
        inv = numpy_helper.from_array((1.0 / scale).astype(np.float32), f"{x_name}_smooth_inv_scale")
        smoothed = f"{x_name}_smoothed"
        muls[consumers[0].name] = helper.make_node(
            "Mul", [x_name, inv.name], [smoothed], name=f"{x_name}_Smooth"
        )
        model.graph.initializer.append(inv)
        for node, w in zip(consumers, weights, strict=True):
            new_w = numpy_helper.from_array((w * scale[:, None]).astype(w.dtype), f"{node.input[1]}_smoothed")
            model.graph.initializer.append(new_w)
            node.input[0], node.input[1] = smoothed, new_w.name
    _insert_before(model, muls)
    _drop_unused_initializers(model)


def _scale(x_max: NDArray[Any], w_max: NDArray[Any], alpha: float) -> NDArray[Any]:
    s = np.power(np.maximum(x_max, 1e-5), alpha) / np.power(np.maximum(w_max, 1e-5), 1.0 - alpha)
    s = np.clip(s, 1e-4, 1e4)
    return np.where(x_max > 0, s, 1.0).astype(np.float32)


def _insert_before(model: onnx.ModelProto, muls: dict[str, onnx.NodeProto]) -> None:
    """Place each new node right before the named node (keeps topological order)."""
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        if node.name in muls:
            nodes.append(muls[node.name])
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _drop_unused_initializers(model: onnx.ModelProto) -> None:
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
