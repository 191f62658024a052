"""The contract of the ``vllm_engine`` Python-backend model (the ``local`` and ``cpu`` targets' LLM):
the names the builder writes, the model reads and the clients match, declared once.

This file is the only copy. The model's package links to it (``builder/python_models/vllm_engine/
contract.py``), so the repository writer copies it beside ``model.py`` and the model imports it as a
sibling; the builder imports it from the model's package; the clients ship it. It imports nothing, so
each of the three may import it on its own.

Most names are those of Triton's vLLM backend (the ``gpu`` target's model), which both models honour.
"""

# -- files of the version folder -------------------------------------------------------------------
ENGINE_ARGS_FILE = "model.json"  # vLLM's engine arguments (Triton's vLLM backend's file)
MULTI_LORA_FILE = "multi_lora.json"  # that backend's file: adapter name -> folder

# -- config parameters -----------------------------------------------------------------------------
# Triton's vLLM backend's: a model whose engine died stops serving and unloads itself (with explicit
# model control), so that it stops being READY.
HEALTH_CHECK = "ENABLE_VLLM_HEALTH_CHECK"
# tritonforge's: the model's LoRA adapters (a JSON list), written only where the spec has adapters,
# for clients that see only the config (the OpenAI endpoint lists them as models).
LORA_NAMES = "lora_names"
MAX_WAITING = "max_waiting_requests"  # requests allowed to wait beyond max_num_seqs
LANES = "lanes"  # engines of their own for long jobs (a JSON list of rules)
SAMPLING_DEFAULTS = "sampling_defaults"  # a JSON object: sampling values of requests that omit them
# tritonforge's: a streamed request's next response goes out once the one before has been sent,
# carrying every token made meanwhile, and no sooner than this many milliseconds after it (0: at once).
STREAM_MIN_GAP_MS = "stream_min_gap_ms"
# tritonforge's: the model's responses per second, all streams together, beyond which a stream's
# tokens wait to go together in its next response; a final response never waits, though it counts
# ("0": no budget; unset: the model's default for the CPUs it runs on).
STREAM_MAX_RESPONSES_PER_S = "stream_max_responses_per_s"

# -- inputs ----------------------------------------------------------------------------------------
TEXT_INPUT = "text_input"
MESSAGES = "messages"  # tritonforge's: a JSON chat, in place of text_input
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
EXCLUDE_INPUT_IN_OUTPUT = "exclude_input_in_output"
RETURN_FINISH_REASON = "return_finish_reason"
RETURN_CUMULATIVE_LOGPROB = "return_cumulative_logprob"
RETURN_LOGPROBS = "return_logprobs"
RETURN_NUM_INPUT_TOKENS = "return_num_input_tokens"
RETURN_NUM_OUTPUT_TOKENS = "return_num_output_tokens"
PRIORITY = "priority"  # tritonforge's: lower runs first (vLLM's convention)
RETURNS = (
    RETURN_FINISH_REASON,
    RETURN_CUMULATIVE_LOGPROB,
    RETURN_LOGPROBS,
    RETURN_NUM_INPUT_TOKENS,
    RETURN_NUM_OUTPUT_TOKENS,
)
LORA_KEY = "lora_name"  # the sampling_parameters key naming a request's adapter (that backend's)
# tritonforge's: a max_tokens of this value (the largest INT32) asks for the room the context leaves;
# any other above max_model_len is refused, as vLLM's OpenAI server refuses it.
TO_CONTEXT_END = 2**31 - 1

# -- outputs ---------------------------------------------------------------------------------------
TEXT_OUTPUT = "text_output"
FINISH_REASON = "finish_reason"
CUMULATIVE_LOGPROB = "cumulative_logprob"
LOGPROBS = "logprobs"
NUM_INPUT_TOKENS = "num_input_tokens"
NUM_OUTPUT_TOKENS = "num_output_tokens"

# -- messages --------------------------------------------------------------------------------------
# A request finding its lane full is refused with a message starting so; clients raise RequestRejected.
REFUSED = "engine is full"
UNHEALTHY = "Model is unavailable due to unhealthy vLLM engine"  # Triton's vLLM backend's words
