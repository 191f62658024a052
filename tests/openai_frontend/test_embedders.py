"""Which served models answer /v1/embeddings, read from their Triton configs (no server)."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from openai_frontend.embedders import MARKER, embedder
from openai_frontend.engine import Embedder, Tokenizer

STRING, FP32, INT64 = mc.TYPE_STRING, mc.TYPE_FP32, mc.TYPE_INT64


def config(
    name: str, inputs: list[tuple[str, int, list[int]]], outputs: list[tuple[str, int, list[int]]],
    batch: int = 32, steps: list[tuple[str, dict[str, str], dict[str, str]]] | None = None,
) -> Any:  # fmt: skip
    made = mc.ModelConfig(name=name, max_batch_size=batch, platform="ensemble" if steps else "")
    for n, dtype, dims in inputs:
        made.input.add(name=n, data_type=dtype, dims=dims)
    for n, dtype, dims in outputs:
        made.output.add(name=n, data_type=dtype, dims=dims)
    for model, ins, outs in steps or []:
        step = made.ensemble_scheduling.step.add(model_name=model)
        step.input_map.update(ins)
        step.output_map.update(outs)
    return made


TOKENIZE = ("tok", {"TEXT": "TEXT"}, {"input_ids": "ids", "attention_mask": "mask"})
ENCODE = ("enc", {"input_ids": "ids", "attention_mask": "mask"}, {"embedding": "EMBEDDING"})


def test_the_zoo_embedder_and_its_tokenizer() -> None:
    found = embedder(config("minilm_embed", [("TEXT", STRING, [1])], [("EMBEDDING", FP32, [384])],
                            steps=[TOKENIZE, ENCODE]))  # fmt: skip
    assert found == Embedder("minilm_embed", "TEXT", "EMBEDDING", 384, 32, (1,), Tokenizer("tok", "TEXT"))


def test_a_feature_extraction_pipeline_gives_its_pooled_vector() -> None:
    outputs = [("LAST_HIDDEN_STATE", FP32, [-1, 768]), ("EMBEDDING", FP32, [768])]
    found = embedder(config("bert_pipeline", [("TEXT", STRING, [1])], outputs, steps=[TOKENIZE, ENCODE]))
    assert found is not None and (found.output, found.dims) == ("EMBEDDING", 768)


def test_an_unbatched_python_embedder() -> None:
    found = embedder(config("py", [("TEXT", STRING, [-1])], [("VECTORS", FP32, [-1, 16])], batch=0))
    assert found is not None and (found.dims, found.batch, found.shape_tail) == (16, 0, ())


def test_models_that_are_no_text_embedders() -> None:
    text = [("TEXT", STRING, [1])]
    classifier = [("LABEL", STRING, [1]), ("SCORE", FP32, [1]), ("SCORES", FP32, [3])]
    image = ("pre", {"IMAGE": "IMAGE"}, {"pixel_values": "pixel_values"})
    assert embedder(config("cls", text, classifier, steps=[TOKENIZE])) is None  # a text output
    assert (
        embedder(config("img", [("IMAGE", STRING, [1])], [("EMBEDDING", FP32, [8])], steps=[image])) is None
    )
    assert embedder(config("ids", [("input_ids", INT64, [-1])], [("embedding", FP32, [8])])) is None
    assert embedder(config("two", text, [("A", FP32, [8]), ("B", FP32, [8])])) is None
    llm = config("llm", text, [("text_output", STRING, [-1])])
    llm.model_transaction_policy.decoupled = True
    assert embedder(llm) is None


def test_the_marker_names_the_output() -> None:
    made = config("m", [("TEXT", STRING, [1])], [("A", FP32, [8]), ("B", FP32, [4]), ("T", STRING, [1])])
    made.parameters[MARKER].string_value = "B"
    found = embedder(made)
    assert found is not None and (found.output, found.dims, found.tokenizer) == ("B", 4, None)
