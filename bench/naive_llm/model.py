"""Hand-written Python-backend LLM: transformers ``generate`` on one request at a time.

What a first LLM served from Triton's Python backend usually looks like; the LLM benchmark serves
it beside the vLLM engine model. Same inputs as Triton's vLLM backend (``text_input``,
``sampling_parameters`` with ``max_tokens`` / ``ignore_eos``); one response with the whole text and
``num_output_tokens``. Config parameter ``checkpoint``: the checkpoint folder.
"""

import json
import locale

import numpy as np
import triton_python_backend_utils as pb_utils

locale.setlocale(locale.LC_ALL, "C.UTF-8")  # the stub's C locale breaks torch's UTF-8 file reads

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def _text(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0].decode("utf-8")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        torch.set_num_threads(int(params.get("threads", "0")) or torch.get_num_threads())
        self.tokenizer = AutoTokenizer.from_pretrained(params["checkpoint"])
        dtype = getattr(torch, params.get("dtype", "bfloat16"))
        self.model = AutoModelForCausalLM.from_pretrained(params["checkpoint"], dtype=dtype).eval()

    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = _text(request, "text_input", "")
            sampling = json.loads(_text(request, "sampling_parameters", "{}"))
            new = int(sampling.get("max_tokens", 16))
            ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
            with torch.inference_mode():
                out = self.model.generate(
                    ids, max_new_tokens=new, min_new_tokens=new if sampling.get("ignore_eos") else 0,
                    do_sample=False, pad_token_id=self.tokenizer.eos_token_id,
                )  # fmt: skip
            tokens = out[0, ids.shape[1] :]
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            outputs = [
                pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_)),
                pb_utils.Tensor("num_output_tokens", np.array([len(tokens)], dtype=np.uint32)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
