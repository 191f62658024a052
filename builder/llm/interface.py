"""The tensors of Triton's vLLM-backend interface (its ``auto_complete_config``), written into
every LLM config so that the server validates requests before a model sees them.

The ``gpu`` target's entry (Triton's own vLLM backend) has the backend's interface; the ``local``
model (``builder/python_models/vllm_engine``) has all of it with two additions: ``messages`` (a chat,
in place of ``text_input``) and ``priority``. The names are the model's contract's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelInput, ModelOutput

from builder.python_models.vllm_engine import contract as c


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # a Triton type name: TYPE_STRING, TYPE_BOOL...
    dims: tuple[int, ...] = (1,)
    optional: bool = True


BACKEND_INPUTS = (
    Tensor(c.TEXT_INPUT, "TYPE_STRING", optional=False),
    Tensor(c.STREAM, "TYPE_BOOL"),
    Tensor(c.SAMPLING_PARAMETERS, "TYPE_STRING"),
    Tensor(c.EXCLUDE_INPUT_IN_OUTPUT, "TYPE_BOOL"),
    *(Tensor(name, "TYPE_BOOL") for name in c.RETURNS),
)
BACKEND_OUTPUTS = (
    Tensor(c.TEXT_OUTPUT, "TYPE_STRING", (-1,)),
    Tensor(c.FINISH_REASON, "TYPE_STRING", (-1,)),
    Tensor(c.CUMULATIVE_LOGPROB, "TYPE_FP32", (-1,)),
    Tensor(c.LOGPROBS, "TYPE_STRING", (-1,)),
    Tensor(c.NUM_INPUT_TOKENS, "TYPE_UINT32", (1,)),
    Tensor(c.NUM_OUTPUT_TOKENS, "TYPE_UINT32", (-1,)),
)
LOCAL_INPUTS = (
    replace(BACKEND_INPUTS[0], optional=True),  # or ``messages``
    Tensor(c.MESSAGES, "TYPE_STRING"),
    *BACKEND_INPUTS[1:],
    Tensor(c.PRIORITY, "TYPE_INT32"),
)
LOCAL_OUTPUTS = BACKEND_OUTPUTS


def add_tensors(cfg: ModelConfig, inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...]) -> None:
    for t in inputs:
        cfg.input.append(
            ModelInput(name=t.name, data_type=DataType.Value(t.dtype), dims=t.dims, optional=t.optional)
        )
    for t in outputs:
        cfg.output.append(ModelOutput(name=t.name, data_type=DataType.Value(t.dtype), dims=t.dims))
