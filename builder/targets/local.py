"""``local``: the pip-installed tritonserver, which has only the Python backend.

Each core model is served by the ``onnx_runner`` Python model running its variant's runtime (ONNX
Runtime or OpenVINO) on the CPU; every other verified ONNX Runtime variant is published
(``<model>_<precision>``) beside the served one.
"""

from __future__ import annotations

import json
from dataclasses import replace

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import ONNX_FILE, model_io_config, param_str, set_parameters
from builder.python_models import model_sources, package
from builder.python_models.shared import onnx_contract as runner
from builder.python_models.shared.runtimes import DEFAULT, PRECISION, RUNTIME, Knobs, Sizing
from builder.records import EngineSummary, LLMBuild, ModelBuild
from builder.spec import (
    ONNXRUNTIME,
    Batching,
    ModelSpec,
    Precision,
    PythonModelSpec,
    TimeoutAction,
    Variant,
    as_variant,
)
from builder.spec.sequence import SequenceSpec
from builder.targets.base import ModelEntry, Target, TargetOptions
from builder.targets.vllm_python import vllm_python_entry

ONNX_RUNNER = package("onnx_runner") / "model.py"
# A stateful model's runner: the 2.51 Python backend has no implicit state, so it keeps the states.
ONNX_SEQUENCE = package("onnx_sequence") / "model.py"


class LocalOptions(TargetOptions):
    """``targets.local``: besides ``serve``, what only this target's server has."""

    # Whether ONNX Runtime's idle intra-op workers spin waiting for work (the onnx_runner's
    # allow_spinning); unset: only where the instances' threads leave a core of the serving machine
    # free. Which is faster depends on the serving machine's other load, so `tritonforge tune`
    # measures it. The container's onnxruntime backend has no such setting.
    spinning: bool | None = None
    # The bundled tritonserver 2.51 holds a request for up to 500 ms whenever a model has any queue
    # policy field or priority level: its batcher then wakes for a new request only if an instance
    # is waiting at that moment (bench/queue_stall.py). So here the queue policy and priorities are
    # written only when this is true; otherwise the onnx_runner model enforces `batching.queue`
    # itself (local_queue_parameters). The container targets always get Triton's policy.
    queue_policy: bool = False


class LocalTarget(Target):
    name = "local"
    description = "the pip-installed tritonserver (Python backend only); the default without TensorRT"
    implicit_state = False  # the onnx_sequence model keeps the states per correlation id
    runs_rows_alone = True  # the onnx_runner's run_alone
    sizes = True
    Options = LocalOptions

    def local_options(self, model: ModelSpec | PythonModelSpec) -> LocalOptions:
        options = self.options(model)
        assert isinstance(options, LocalOptions)
        return options

    def knobs(self, model: ModelSpec) -> Knobs:
        return replace(super().knobs(model), spinning=self.local_options(model).spinning)

    def serves(self, variant: Variant) -> bool:
        return True  # the onnx_runner runs every runtime (runtimes/)

    def beside(self, variant: Variant) -> bool:
        # ONNX Runtime's, as ever: an OpenVINO variant is served when it wins. Each published model
        # is a stub process of its own, and the zoo's would double (memory, start-up).
        return variant.runtime == ONNXRUNTIME

    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        return [
            ModelEntry(
                config,
                {ONNX_FILE: build.variants[variant]},
                model_sources((ONNX_RUNNER if build.spec.sequence is None else ONNX_SEQUENCE).parent),
                variant=variant,
            )
            for _, variant, config in self.core_entries(build)
        ]

    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        return [vllm_python_entry(build)]

    def core_config(
        self, model: ModelSpec, name: str, variant: Variant | Precision, *, alone: bool = False,
        sizing: Sizing | None = None,
    ) -> ModelConfig:  # fmt: skip
        variant = as_variant(variant)
        cfg = model_io_config(model, name)
        cfg.backend = "python"
        set_parameters(cfg, {runner.ONNX_FILE_KEY: ONNX_FILE, PRECISION: variant.precision.value})
        # The runtime's own parameters: the very ones the build verified, sized and timed it with.
        knobs = sizing.knobs if sizing is not None else self.knobs(model)
        set_parameters(cfg, variant.cpu_runtime.parameters(knobs))
        if variant.runtime != DEFAULT:
            set_parameters(cfg, {RUNTIME: variant.runtime})
        if alone:
            set_parameters(cfg, {runner.RUN_ALONE: "1"})
        if model.sequence is not None:
            set_parameters(cfg, {runner.SEQUENCE_STATE: sequence_state_parameter(model.sequence)})
        # Without Triton's policy the onnx_runner model can enforce the spec's bound itself.
        policy = self.writes_queue_policy(model)
        if not policy:
            set_parameters(cfg, local_queue_parameters(model.batching, model.max_batch_size))
        instances = sizing.instances if sizing is not None else None
        return self._serving(cfg, model, queue_policy=policy, instances=instances)

    def writes_queue_policy(self, model: ModelSpec | PythonModelSpec) -> bool:
        # tritonserver 2.51's batcher stalls up to 500 ms whenever a queue policy is set
        # (bench/queue_stall.py); only where the spec asks for it.
        return self.local_options(model).queue_policy


def sequence_state_parameter(seq: SequenceSpec) -> str:
    """The states, as JSON, for a model that keeps them itself (the local target's onnx_sequence)."""
    states = [
        runner.StateEntry(input=s.input, output=s.output, dtype=s.dtype.value, dims=s.dims) for s in seq.state
    ]
    return json.dumps(states, separators=(",", ":"))


def local_queue_parameters(batching: Batching, max_batch_size: int) -> dict[str, str]:
    """Where Triton's queue policy is left out (``targets.local.queue_policy``), the onnx_runner
    model bounds its own queue with the spec's default policy; empty when there is no bound."""
    policy = batching.queue
    if not batching.enabled or max_batch_size <= 0:
        return {}
    if policy.max_queue_size == 0 and policy.default_timeout_us == 0:
        return {}
    reject = policy.timeout_action is TimeoutAction.REJECT  # DELAY: the timeout refuses nothing
    return {
        runner.MAX_QUEUE_SIZE: str(policy.max_queue_size),
        runner.QUEUE_TIMEOUT_US: str(policy.default_timeout_us if reject else 0),
        runner.ALLOW_TIMEOUT_OVERRIDE: param_str(policy.allow_timeout_override),
    }
