"""The OpenAI-compatible endpoint, called with the official ``openai`` SDK, over the zoo's LLM on a
real tritonserver (the session's shared LLM server, one endpoint for the module)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionTokenLogprob

from builder.server import TritonServer
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine
from tests.integration.fixtures.llm_repo import MODEL, SHARED_MAX_MODEL_LEN, engine_metric

pytestmark = pytest.mark.integration

KEY = "test-key-0123456789"
MAX_BODY = 64 * 1024
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"
ITL_COUNT = "vllm:time_per_output_token_seconds_count"  # one per output token after a request's first


@pytest.fixture(scope="module")
def endpoint(llm_triton: TritonServer) -> Iterator[OpenAIServer]:
    """The endpoint on the session's shared LLM server."""
    settings = Settings(api_key=KEY, max_body_bytes=MAX_BODY)
    with OpenAIServer(settings, TritonEngine(llm_triton.grpc_url), port=0) as server:
        yield server


@pytest.fixture(scope="module")
def client(endpoint: OpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint.url, api_key=KEY, max_retries=0, timeout=120)


def test_models_lists_the_llm(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]


def test_chat_whole(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=12, temperature=0)  # type: ignore[arg-type]
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and choice.message.role == "assistant"
    assert "paris" in (choice.message.content or "").lower()
    assert reply.usage is not None and reply.usage.prompt_tokens > len(CHAT[0]["content"].split())
    assert 0 < reply.usage.completion_tokens <= 12
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_chat_stream_with_usage(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=16, temperature=0)  # type: ignore[arg-type]
    chunks = list(client.chat.completions.create(  # type: ignore[call-overload]
        model=MODEL, messages=CHAT, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    texts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert sum(1 for t in texts if t) > 1, "the answer came in one piece, not streamed"
    assert "".join(texts) == whole.choices[0].message.content  # greedy: the same tokens
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason


def test_completion_whole_max_tokens_gives_length(client: openai.OpenAI) -> None:
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0)
    assert reply.object == "text_completion"
    assert reply.choices[0].finish_reason == "length" and reply.usage is not None
    assert reply.usage.completion_tokens == 5
    assert not reply.choices[0].text.startswith(PROMPT)  # the prompt is not echoed


def test_completion_stream(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0,
                                            stream=True))  # fmt: skip
    assert len([c for c in chunks if c.choices[0].text]) > 1
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk
    counted = list(client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    assert counted[-1].choices == [] and counted[-1].usage == whole.usage


def test_stop_is_honoured(client: openai.OpenAI) -> None:
    free = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0).choices[0]
    words = free.text.split()
    assert len(words) >= 2, free.text
    stop = words[1]  # the second word the model says: the answer must end before it
    stopped = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0,
                                        stop=[stop]).choices[0]  # fmt: skip
    assert stopped.finish_reason == "stop"
    assert stopped.text == free.text[: free.text.index(stop)]


def test_seed_makes_sampling_repeatable(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                                          temperature=1.0, seed=seed)  # fmt: skip
        return reply.choices[0].text

    assert sample(7) == sample(7)


def test_bad_request_is_400_in_openai_shape(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens="many")  # type: ignore[call-overload]
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}
    assert body["type"] == "invalid_request_error" and body["param"] == "max_tokens"


def test_model_refusal_is_400(client: openai.OpenAI) -> None:
    """An INVALID_ARG of the Triton model itself (here vLLM's own range check) is a 400."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=-3)
    assert "max_tokens" in caught.value.message


def test_max_tokens_beyond_the_context_is_400_as_vllms_server_words_it(client: openai.OpenAI) -> None:
    """vLLM's server refuses a max_tokens above max_model_len (whole or streamed) and caps one that
    fits max_model_len but not beside the prompt at the room left (it stops with "length")."""
    beyond = SHARED_MAX_MODEL_LEN + 1
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=beyond, stream=stream)  # type: ignore[call-overload]
        body = caught.value.body
        assert caught.value.status_code == 400 and isinstance(body, dict)
        assert body["message"] == (
            f"max_tokens={beyond} cannot be greater than max_model_len={SHARED_MAX_MODEL_LEN}. "
            f"Please request fewer output tokens. (parameter=max_tokens, value={beyond})"
        )
    long_prompt = "1, 2, 3," + " x" * 490  # 498 tokens: the room left is 14 tokens, not max_tokens' 512
    capped = client.completions.create(model=MODEL, prompt=long_prompt, max_tokens=SHARED_MAX_MODEL_LEN,
                                       temperature=0, extra_body={"ignore_eos": True})  # fmt: skip
    assert capped.choices[0].finish_reason == "length" and capped.usage is not None
    assert 0 < capped.usage.completion_tokens < 64
    assert capped.usage.prompt_tokens + capped.usage.completion_tokens == SHARED_MAX_MODEL_LEN


def test_n_completions_are_n_choices_whole_and_streamed(client: openai.OpenAI) -> None:
    """n = 3, 6 tokens each: three choices, each streamed with one finish reason of its own."""
    ask = {"model": MODEL, "messages": CHAT, "n": 3, "max_tokens": 6, "temperature": 1.0, "seed": 7,
           "extra_body": {"ignore_eos": True}}  # fmt: skip
    whole = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert [c.index for c in whole.choices] == [0, 1, 2]
    assert all(c.message.content and c.finish_reason == "length" for c in whole.choices)
    assert whole.usage is not None and whole.usage.completion_tokens == 3 * 6
    chunks = list(client.chat.completions.create(**ask, stream=True))  # type: ignore[call-overload]
    texts: dict[int, str] = {}
    reasons: dict[int, list[str]] = {}
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                reasons.setdefault(choice.index, []).append(choice.finish_reason)
    assert sorted(texts) == [0, 1, 2] and all(texts.values())
    assert reasons == {0: ["length"], 1: ["length"], 2: ["length"]}


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2)
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "model_not_found"


@pytest.mark.parametrize("key", ["", "wrong-key"])
def test_missing_or_wrong_key_is_401(endpoint: OpenAIServer, key: str) -> None:
    bad = openai.OpenAI(base_url=endpoint.url, api_key=key or "x", max_retries=0,
                        default_headers={"Authorization": ""} if not key else None)  # fmt: skip
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_oversized_body_is_413(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.completions.create(model=MODEL, prompt="x" * (MAX_BODY + 1), max_tokens=2)
    assert caught.value.status_code == 413
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "request_too_large"


def test_echo_puts_the_prompt_first_whole_and_streamed(client: openai.OpenAI) -> None:
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0)
    echoed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, echo=True)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    assert echoed.usage == plain.usage  # the prompt is not counted twice
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0,
                                            echo=True, stream=True))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks) == echoed.choices[0].text


def test_a_list_of_prompts_gives_one_choice_per_prompt(client: openai.OpenAI) -> None:
    """As vLLM: prompt i's n choices are i * n .. i * n + n - 1; greedy, each equals that prompt alone."""
    prompts = [PROMPT, "Once upon a time"]
    alone = [client.completions.create(model=MODEL, prompt=p, max_tokens=5, temperature=0) for p in prompts]
    both = client.completions.create(model=MODEL, prompt=prompts, max_tokens=5, temperature=0)
    assert [(c.index, c.text) for c in both.choices] == [(i, a.choices[0].text) for i, a in enumerate(alone)]
    assert both.usage is not None and both.usage.prompt_tokens == sum(
        a.usage.prompt_tokens for a in alone if a.usage
    )
    streamed: dict[int, str] = {}
    for c in client.completions.create(model=MODEL, prompt=prompts, max_tokens=5, temperature=0, stream=True):
        streamed[c.choices[0].index] = streamed.get(c.choices[0].index, "") + c.choices[0].text
    assert streamed == {0: alone[0].choices[0].text, 1: alone[1].choices[0].text}
    sampled = client.completions.create(model=MODEL, prompt=prompts, max_tokens=3, n=2, temperature=1.0,
                                        seed=7, extra_body={"ignore_eos": True})  # fmt: skip
    assert [(c.index, c.finish_reason) for c in sampled.choices] == [(i, "length") for i in range(4)]
    assert sampled.usage is not None and sampled.usage.completion_tokens == 4 * 3


def test_without_model_the_one_model_served_answers(endpoint: OpenAIServer) -> None:
    """The SDK requires ``model``: the request goes as JSON, with a lower-case Bearer scheme."""
    body = {"prompt": PROMPT, "max_tokens": 3, "temperature": 0}
    reply = httpx.post(f"{endpoint.url}/completions", json=body, headers={"Authorization": f"bearer {KEY}"},
                       timeout=120)  # fmt: skip
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == MODEL and reply.json()["choices"][0]["text"]


def test_tool_choice_none_answers_without_tools_and_auto_is_400(client: openai.OpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    ask = {"model": MODEL, "messages": CHAT, "max_tokens": 8, "temperature": 0}
    plain = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    reply = client.chat.completions.create(**ask, tools=tools, tool_choice="none")  # type: ignore[call-overload]
    assert reply.choices[0].message.content == plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**ask, tools=tools)  # type: ignore[call-overload]
    assert "tool-call parser" in caught.value.message


@pytest.mark.parametrize(
    ("ask", "param"),
    [
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"extra_body": {"guided_json": {"type": "object"}}}, "guided_json"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_what_would_be_ignored_is_400(client: openai.OpenAI, ask: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=4, **ask)  # type: ignore[call-overload]
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == param


CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "London", "Rome"]},
        "sure": {"type": "boolean"},
    },
    "required": ["city", "sure"],
    "additionalProperties": False,
}


def test_a_json_schema_response_format_is_followed_whole_and_streamed(client: openai.OpenAI) -> None:
    """vLLM's structured outputs (xgrammar) enforce the schema: the answer parses and validates."""
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}
    ask = {"model": MODEL, "messages": CHAT, "max_tokens": 40, "temperature": 0, "response_format": fmt}
    reply = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    content = reply.choices[0].message.content or ""
    answer = json.loads(content)  # valid as CITY says: its two keys alone, of their types
    assert set(answer) == {"city", "sure"} and answer["city"] in CITY["properties"]["city"]["enum"]  # type: ignore[index]
    assert isinstance(answer["sure"], bool)
    assert reply.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(**ask, stream=True))  # type: ignore[call-overload]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content


def test_a_json_object_response_format_gives_json(client: openai.OpenAI) -> None:
    fmt = {"response_format": {"type": "json_object"}}  # vLLM's completions extension
    reply = client.completions.create(model=MODEL, prompt="A JSON object about Paris:", max_tokens=30,
                                      temperature=0, extra_body=fmt)  # fmt: skip
    assert reply.choices[0].text.lstrip().startswith("{"), reply.choices[0].text


def test_chat_logprobs_whole_and_streamed(client: openai.OpenAI) -> None:
    """One entry per generated token (the end-of-turn token too, as vLLM's server counts it), its top
    list ``top_logprobs`` long; greedy, the token is the most likely one."""
    ask = {"model": MODEL, "messages": CHAT, "max_tokens": 8, "temperature": 0, "logprobs": True,
           "top_logprobs": 3}  # fmt: skip
    reply = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    assert reply.usage is not None and len(content) == reply.usage.completion_tokens
    text = "".join(t.token for t in content)
    assert text.startswith(choice.message.content or "") and (choice.finish_reason == "stop" or
                                                              text == choice.message.content)  # fmt: skip
    for t in content:
        assert len(t.top_logprobs) == 3 and t.bytes == list(t.token.encode())
        assert t.logprob == max(c.logprob for c in t.top_logprobs)  # greedy: the most likely token
        assert t.top_logprobs[0].token == t.token
    streamed: list[ChatCompletionTokenLogprob] = []
    for c in client.chat.completions.create(**ask, stream=True):  # type: ignore[call-overload]
        if c.choices and c.choices[0].logprobs is not None:
            streamed += c.choices[0].logprobs.content or []
    assert [t.token for t in streamed] == [t.token for t in content]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in content], abs=1e-3)


def test_completion_logprobs_whole_and_streamed(client: openai.OpenAI) -> None:
    ask = {"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 2}
    reply = client.completions.create(**ask)  # type: ignore[call-overload]
    choice = reply.choices[0]
    found = choice.logprobs
    assert found is not None and found.tokens and found.token_logprobs and found.top_logprobs
    assert "".join(found.tokens) == choice.text and len(found.tokens) == 6
    assert found.text_offset == [sum(len(t) for t in found.tokens[:i]) for i in range(6)]
    for token, logprob, top in zip(found.tokens, found.token_logprobs, found.top_logprobs, strict=True):
        assert 2 <= len(top) <= 3 and top[token] == logprob == max(top.values())
    tokens: list[str] = []
    offsets: list[int] = []
    for c in client.completions.create(**ask, stream=True):  # type: ignore[call-overload]
        if c.choices[0].logprobs is not None:
            tokens += c.choices[0].logprobs.tokens or []
            offsets += c.choices[0].logprobs.text_offset or []
    assert tokens == found.tokens and offsets == found.text_offset


def test_logit_bias_is_applied_and_bad_keys_are_400(client: openai.OpenAI) -> None:
    """A bias of 100 (the clamp) on one token makes greedy decoding choose it every time."""
    ask = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logprobs": 0}
    plain = client.completions.create(**ask)  # type: ignore[call-overload]
    biased = client.completions.create(**ask, logit_bias={"42": 500})  # type: ignore[call-overload]
    tokens = biased.choices[0].logprobs.tokens
    assert tokens is not None and len(set(tokens)) == 1 and biased.choices[0].text != plain.choices[0].text
    for bad in ({"999999999": 1}, {"the": 1}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(**ask, logit_bias=bad)  # type: ignore[call-overload]
        assert "logit_bias" in caught.value.message


def test_without_max_tokens_the_answer_is_not_cut_at_16_tokens(client: openai.OpenAI) -> None:
    """vLLM's server lets it run to the context's end; SamplingParams' own default would stop at 16."""
    reply = client.completions.create(model=MODEL, prompt="1, 2, 3, 4, 5,", temperature=0, stop=["19"])
    assert reply.choices[0].finish_reason == "stop", reply.choices[0].text
    assert reply.usage is not None and reply.usage.completion_tokens > 16


def test_a_whole_answer_whose_client_left_stops_generating(
    llm_triton: TritonServer, endpoint: OpenAIServer, client: openai.OpenAI
) -> None:
    """A non-streamed request is cancelled when its client disconnects, as vLLM's server does: the
    engine stops it, counted in tokens, not timed. Ordered by control: the client leaves once the
    engine has made the request's first tokens; the engine is then polled until it is empty."""
    asked = SHARED_MAX_MODEL_LEN - 32
    before = engine_metric(llm_triton, ITL_COUNT)
    body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": asked, "ignore_eos": True}).encode()
    address = urlsplit(endpoint.url)
    with socket.create_connection((address.hostname, address.port), timeout=60) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        _until(lambda: engine_metric(llm_triton, ITL_COUNT) > before, "the request's tokens coming")
    # The engine's gauges move only when it steps: each poll sends a one-token request first.
    _until(
        lambda: (
            client.completions.create(model=MODEL, prompt="Hi", max_tokens=1) is not None
            and engine_metric(llm_triton, "vllm:num_requests_running") == 0
        ),
        "the engine empty",
    )
    made = engine_metric(llm_triton, ITL_COUNT) - before
    assert made < asked / 2, f"{made:.0f} of {asked} tokens made after the client left"


def _until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {timeout:.0f} s: {what}"
        time.sleep(0.05)
