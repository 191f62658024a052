"""``gpu``: the official tritonserver container on a GPU host.

The core model is a ``tensorrt_plan`` (its verified plan where one was built here)
and ``<model>_onnx`` serves the same model with ONNX Runtime beside it.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import ONNX_FILE, model_io_config, set_instances, set_warmup
from builder.engines.profiles import opt_batches, profile_shapes, triton_profiles
from builder.errors import SpecError, VerificationError
from builder.llm.gpu import gpu_config, gpu_engine_args, mounted_version
from builder.python_models.shared.runtimes import Sizing
from builder.records import GPU_PREFERENCE, EngineSummary, LLMBuild, ModelBuild
from builder.spec import ONNXRUNTIME, InstanceKind, ModelSpec, Precision, Variant
from builder.spec.engine import cc_model_filenames
from builder.targets.base import ModelEntry, Target
from builder.targets.vllm_python import llm_entry

PLAN_FILE = "model.plan"


class GpuTarget(Target):
    name = "gpu"
    description = "the official tritonserver container on a GPU host: TensorRT plans, ONNX Runtime fallback"
    builds_engines = True
    default_instance_kind = InstanceKind.GPU

    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        return [self._plan_model(build, engines), self._fallback(build)]

    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        """An entry for Triton's vLLM backend (``backend: "vllm"``, the -vllm-python-py3 image), its
        paths where the image mounts the repository."""
        spec = build.spec
        return [
            llm_entry(gpu_config(spec), gpu_engine_args(spec), version=mounted_version(spec.name),
                      checkpoint=build.checkpoint, adapters=build.adapters)
        ]  # fmt: skip

    def published(self, build: ModelBuild) -> dict[str, Variant]:
        assert build.served is not None
        return {build.spec.name: build.served}  # one plan per model; the fallback is fp32 ONNX

    def check(self, model: ModelSpec, spec_file: Path) -> None:
        super().check(model, spec_file)
        for precision in self.options(model, spec_file).precisions:
            if precision not in GPU_PREFERENCE:
                raise SpecError(f"{precision.value} has no TensorRT kernels; use int8, fp16 or fp32",
                                file=spec_file, model=model.name, field="targets.gpu.serve")  # fmt: skip

    def serves(self, variant: Variant) -> bool:
        return variant.runtime == ONNXRUNTIME and variant.precision in GPU_PREFERENCE

    def choose_served(self, build: ModelBuild, spec_file: Path) -> Variant:
        """The TensorRT plan's precision: the one the spec names, else the first of TensorRT's
        preference that verified on ONNX Runtime."""
        allowed = self.candidates(build)
        for precision in GPU_PREFERENCE:
            if Variant(precision) in allowed:
                return Variant(precision)
        if self.options(build.spec).precisions:
            raise self._none_allowed(build, spec_file)
        raise VerificationError(
            "no TensorRT-compatible variant (int8, fp16, fp32) passed verification",
            file=spec_file,
            model=build.spec.name,
            field="precisions",
        )

    def core_config(
        self, model: ModelSpec, name: str, variant: Variant | Precision, *, alone: bool = False,
        sizing: Sizing | None = None,
    ) -> ModelConfig:  # fmt: skip
        """The TensorRT plan model (one plan per model: ``variant`` is the one it was built from;
        the CPU's sizing does not apply to a GPU: the spec's instances)."""
        cfg = model_io_config(model, name)
        cfg.platform = "tensorrt_plan"
        cfg.default_model_filename = PLAN_FILE
        cfg.cc_model_filenames.update(cc_model_filenames(model.engine))
        if model.engine.cuda_graphs and not any(t.dynamic for t in model.inputs):
            set_cuda_graphs(cfg, model)
        self._scheduling(cfg, model, queue_policy=True)
        set_instances(cfg, model.instances.count, self.instance_kind(model.instances.kind))
        # Every TensorRT profile selectable: without this Triton uses profile 0 only.
        cfg.instance_group[0].profile.extend(triton_profiles(model))
        set_warmup(cfg, model)
        return cfg

    def _plan_model(self, build: ModelBuild, engines: EngineSummary | None) -> ModelEntry:
        model = build.spec
        assert build.served is not None
        cfg = self.core_config(model, model.name, build.served)
        artifacts: dict[str, Path] = {}
        for installed in engines.plans.get(model.name, []) if engines is not None else []:
            artifacts.update(
                {installed.plan.name: installed.plan, installed.metadata.name: installed.metadata}
            )
        return ModelEntry(cfg, artifacts, variant=build.served)

    def fallback_config(self, model: ModelSpec) -> ModelConfig:
        """``<model>_onnx``: the same model on ONNX Runtime, beside the plan."""
        cfg = model_io_config(model, f"{model.name}_onnx")
        cfg.platform = "onnxruntime_onnx"
        cfg.default_model_filename = ONNX_FILE
        self._scheduling(cfg, model, queue_policy=True)
        set_instances(cfg, model.instances.count, self.instance_kind(model.instances.kind))
        return cfg

    def _fallback(self, build: ModelBuild) -> ModelEntry:
        assert build.served is not None
        fp32 = Variant(Precision.FP32)
        source = fp32 if fp32 in build.passed and fp32 not in self.refusals(build) else build.served
        return ModelEntry(self.fallback_config(build.spec), {ONNX_FILE: build.variants[source]})


def set_cuda_graphs(cfg: ModelConfig, model: ModelSpec) -> None:
    """CUDA graphs for every batch size served: one graph at each profile's opt batch and at the
    max, each used (padded) from just above the previous one. Only for fixed tensor shapes: a
    graph serves the shapes it was captured at, and Triton without ``graph_spec`` captures at
    the opt shape and exact batch sizes only."""
    cuda = cfg.optimization.cuda
    cuda.graphs = True
    tops = sorted({b for b in opt_batches(profile_shapes(model)) if b <= model.max_batch_size})
    tops = sorted({*tops, model.max_batch_size})
    lower = 1 if model.batched else 0
    for top in tops:
        spec = cuda.graph_spec.add(batch_size=top)
        spec.graph_lower_bound.batch_size = lower
        for tensor in model.inputs:
            spec.input[tensor.name].dim.extend(tensor.dims)
            spec.graph_lower_bound.input[tensor.name].dim.extend(tensor.dims)
        lower = top + 1
