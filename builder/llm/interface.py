"""The tensors of Triton's vLLM-backend interface (its ``auto_complete_config``), written into
every LLM config so that the server validates requests before a model sees them.

The ``gpu`` target's entry (Triton's own vLLM backend) has the backend's interface; the ``local``
model (``builder/python_models/vllm_engine``) has all of it with two additions: ``messages`` (a chat,
in place of ``text_input``) and ``priority``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelInput, ModelOutput


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # a Triton type name: TYPE_STRING, TYPE_BOOL...
    dims: tuple[int, ...] = (1,)
    optional: bool = True


BACKEND_INPUTS = (
    Tensor("text_input", "TYPE_STRING", optional=False),
    Tensor("stream", "TYPE_BOOL"),
    Tensor("sampling_parameters", "TYPE_STRING"),
    Tensor("exclude_input_in_output", "TYPE_BOOL"),
    Tensor("return_finish_reason", "TYPE_BOOL"),
    Tensor("return_cumulative_logprob", "TYPE_BOOL"),
    Tensor("return_logprobs", "TYPE_BOOL"),
    Tensor("return_num_input_tokens", "TYPE_BOOL"),
    Tensor("return_num_output_tokens", "TYPE_BOOL"),
)
BACKEND_OUTPUTS = (
    Tensor("text_output", "TYPE_STRING", (-1,)),
    Tensor("finish_reason", "TYPE_STRING", (-1,)),
    Tensor("cumulative_logprob", "TYPE_FP32", (-1,)),
    Tensor("logprobs", "TYPE_STRING", (-1,)),
    Tensor("num_input_tokens", "TYPE_UINT32", (1,)),
    Tensor("num_output_tokens", "TYPE_UINT32", (-1,)),
)
LOCAL_INPUTS = (
    replace(BACKEND_INPUTS[0], optional=True),  # or ``messages``
    Tensor("messages", "TYPE_STRING"),
    *BACKEND_INPUTS[1:],
    Tensor("priority", "TYPE_INT32"),
)
LOCAL_OUTPUTS = BACKEND_OUTPUTS
# Triton's vLLM-backend config parameter: a model whose engine died stops serving and unloads itself
# (with explicit model control), so that it stops being READY. Both LLM models honour it.
HEALTH_CHECK = "ENABLE_VLLM_HEALTH_CHECK"
# tritonforge's config parameter naming a model's LoRA adapters (a JSON list), written only where
# the spec has adapters; requests choose one as Triton's vLLM backend has it, with sampling_parameters'
# ``lora_name``.
LORA_NAMES = "lora_names"


def add_tensors(cfg: ModelConfig, inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...]) -> None:
    for t in inputs:
        cfg.input.append(
            ModelInput(name=t.name, data_type=DataType.Value(t.dtype), dims=t.dims, optional=t.optional)
        )
    for t in outputs:
        cfg.output.append(ModelOutput(name=t.name, data_type=DataType.Value(t.dtype), dims=t.dims))
