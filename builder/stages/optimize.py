"""Transformer fusion before dynamic INT8: ONNX Runtime's offline transformer optimizer.

ORT's session-time optimizations do not fuse a BERT-style attention block exported op by op;
``onnxruntime.transformers.optimizer`` does (Attention, EmbedLayerNormalization,
SkipLayerNormalization, BiasGelu). Quantizing the fused graph quantizes the same MatMuls with
fewer float ops around them, which is what makes dynamic INT8 pay off on the CPU. The fused
operators live in the ``com.microsoft`` domain: the result is for ONNX Runtime only (the cpu and
local targets), never for TensorRT. The graph must not have been through onnxsim, whose
MatMul+Add -> Reshape/Gemm/Reshape rewrite hides the attention pattern.
"""

from __future__ import annotations

from pathlib import Path

ATTENTION_OPS = ("Attention", "MultiHeadAttention")


def fuse_transformer(
    src: str | Path,
    dst: str | Path,
    *,
    model_type: str = "bert",
    num_heads: int = 0,
    hidden_size: int = 0,
    require_attention: bool = True,
) -> dict[str, int]:
    """Write the fused graph to ``dst``; return the fused operator counts.

    ``num_heads`` / ``hidden_size`` 0 = detected from the graph. Raises ValueError when no
    attention block was fused and ``require_attention`` is set (the pattern was not recognised).
    """
    from onnxruntime.transformers.optimizer import optimize_model

    # opt_level 0: only the Python fusions, so the file stays independent of this machine's CPU.
    optimized = optimize_model(
        str(src), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size, opt_level=0
    )
    stats = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v}
    if require_attention and not any(stats.get(op) for op in ATTENTION_OPS):
        raise ValueError(f"{src}: no attention block was fused (fused: {stats or 'nothing'})")
    optimized.save_model_to_file(str(dst))
    return stats
