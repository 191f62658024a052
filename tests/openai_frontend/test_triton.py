"""How the endpoint learns a model's LoRA adapters from its config (``lora_names``), and how a
request for an adapter reaches its base model."""

from __future__ import annotations

import json

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from clients.vllm_engine_contract import LORA_NAMES, SAMPLING_DEFAULTS
from openai_frontend.protocol import parse_completion
from openai_frontend.triton import adapter_names, limits_output


@pytest.mark.parametrize(
    ("value", "names"), [(None, ()), ('["sea", "sky"]', ("sea", "sky")), ("{", ()), ('"sea"', ())]
)
def test_adapter_names_come_from_the_config(value: str | None, names: tuple[str, ...]) -> None:
    config = ModelConfig(name="m")
    if value is not None:
        config.parameters[LORA_NAMES].string_value = value
    assert adapter_names(config) == names


def test_an_adapter_request_names_it_in_sampling_parameters() -> None:
    call = parse_completion({"model": "sea", "prompt": "Hi", "max_tokens": 4, "temperature": 0})
    sampling = json.loads(call.fields(with_priority=False, lora_name="sea")["sampling_parameters"])
    assert sampling["lora_name"] == "sea" and sampling["max_tokens"] == 4
    assert "lora_name" not in json.loads(call.fields(with_priority=False)["sampling_parameters"])


@pytest.mark.parametrize(
    ("value", "limits"),
    [
        (None, False),
        ('{"temperature": 0.5}', False),
        ('{"max_tokens": 64}', True),
        ("{", False),
        ("[]", False),
    ],
)
def test_a_models_sampling_defaults_may_set_its_output_limit(value: str | None, limits: bool) -> None:
    """Where they set max_tokens a request without one gets that, not the context's end."""
    config = ModelConfig(name="m")
    if value is not None:
        config.parameters[SAMPLING_DEFAULTS].string_value = value
    assert limits_output(config) is limits
