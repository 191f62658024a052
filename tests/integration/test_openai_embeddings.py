"""``/v1/embeddings`` through the official ``openai`` SDK, over the zoo's ``minilm_embed`` on a real
tritonserver (the session's zoo server): the vectors Triton's own ModelInfer returns, and
sentence-transformers' ``encode`` within the served variant's tolerance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient

from builder.server import TritonServer
from builder.spec import Variant, load_spec
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine
from zoo.minilm import DIM, load_texts, reference_embeddings, tokenize

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
EMBEDDER = "minilm_embed"
TEXTS = [
    "A cat.",
    "Ça marche très bien — naïve café, 東京の天気は晴れです。",
    "The weather report said it would rain all week. " * 60,  # past 256 tokens: truncated
    *load_texts(ROOT / "calibration" / "minilm" / "eval.txt")[:9],
]
SAME = 1e-5  # the endpoint adds no error to the model's vectors (cosine distance)


@pytest.fixture(scope="module")
def client(triton: TritonServer) -> Iterator[openai.OpenAI]:
    with OpenAIServer(Settings(), TritonEngine(triton.grpc_url), port=0) as server:
        yield openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def served(triton: TritonServer, texts: list[str]) -> np.ndarray[Any, Any]:
    """The ensemble's own answer for the same batch, by Triton's gRPC client."""
    tensor = grpcclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_))
    result = grpcclient.InferenceServerClient(triton.grpc_url).infer(EMBEDDER, [tensor])
    return np.asarray(result.as_numpy("EMBEDDING"))


def cosine(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


def test_models_lists_the_embedder_beside_the_llm(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert EMBEDDER in ids and "smollm2" in ids
    assert not {"minilm_encoder", "minilm_tokenizer"} & set(ids)  # the ensemble's steps are not embedders


def test_vectors_are_the_models_and_sentence_transformers(
    client: openai.OpenAI, triton: TritonServer, zoo_repo: Path
) -> None:
    reply = client.embeddings.create(model=EMBEDDER, input=TEXTS)  # the SDK asks for base64 and decodes it
    assert reply.model == EMBEDDER and [d.index for d in reply.data] == list(range(len(TEXTS)))
    vectors = np.array([d.embedding for d in reply.data], dtype=np.float32)
    assert vectors.shape == (len(TEXTS), DIM)
    assert cosine(vectors, served(triton, TEXTS)).min() >= 1 - SAME
    floats = client.embeddings.create(model=EMBEDDER, input=TEXTS, encoding_format="float")
    np.testing.assert_array_equal(np.array([d.embedding for d in floats.data], dtype=np.float32), vectors)
    # Sentence-transformers' vectors within the tolerance of the variant the build chose to serve.
    model = load_spec(ROOT / "models.yaml").model("minilm_encoder")
    entry = json.loads((zoo_repo / "manifest.json").read_text())["models"]["minilm_encoder"]
    allowed = model.tolerances[Variant.parse(entry["served"]).precision]
    against = cosine(vectors, reference_embeddings(TEXTS))
    assert against.min() >= allowed.min_cosine, against
    assert allowed.mean_cosine is None or against.mean() >= allowed.mean_cosine, against


def test_usage_counts_the_models_own_tokens(client: openai.OpenAI) -> None:
    """Counted by the ensemble's tokenizer step: [CLS] and [SEP] included, truncated at 256."""
    reply = client.embeddings.create(model=EMBEDDER, input=TEXTS[:3])
    tokens = int(tokenize(TEXTS[:3])["attention_mask"].sum())
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens


def test_one_string(client: openai.OpenAI) -> None:
    reply = client.embeddings.create(model=EMBEDDER, input="A cat.", dimensions=DIM)  # its own size: taken
    assert len(reply.data) == 1 and len(reply.data[0].embedding) == DIM


@pytest.mark.parametrize(
    ("ask", "param"),
    [
        ({"model": EMBEDDER, "input": "A cat.", "dimensions": 128}, "dimensions"),
        ({"model": EMBEDDER, "input": [[101, 102]]}, "input"),
        ({"model": "smollm2", "input": "A cat."}, "model"),
    ],
)
def test_refusals_are_400(client: openai.OpenAI, ask: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(**ask)  # type: ignore[arg-type]
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == param
