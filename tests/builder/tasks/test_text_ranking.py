"""Text ranking: a (query, document) pair per row through the tokenizer's pair encoding (truncated
``only_second``), one logit per pair scored by ``hf_cross_encoder``; a checkpoint of more labels or an
activation sentence-transformers would not apply is refused when the spec loads; pairs as data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from builder.errors import SpecError
from builder.python_models.hf_cross_encoder.model import Scorer, activation
from builder.spec import load_spec
from builder.spec.checkpoint import task_of
from builder.tasks import TASKS, task
from builder.tasks.base import CoreInputs
from builder.tasks.text_ranking import SAMPLE_PAIRS
from tests.builder.fixtures import hf_checkpoints as hf
from tests.builder.tasks.checkpoints import composed, text

INPUTS = ["input_ids", "token_type_ids", "attention_mask"]
IDENTITY = "torch.nn.modules.linear.Identity"


def test_the_pairs_go_through_the_tokenizer_then_the_logit_to_the_scorer() -> None:
    spec = composed(text("text-ranking", labels=1), precisions=["fp32", "int8_dynamic"])
    core = spec.model("m")
    assert [(t.name, t.dims) for t in core.outputs] == [("logits", [1])]
    tolerances = {p.value: t.max_abs for p, t in core.tolerances.items()}
    assert tolerances == {"fp32": 1e-4, "int8_dynamic": 0.25}  # the logit's: a cosine of one number is ±1
    pre, post = spec.python_models
    assert Path(pre.path).name == "hf_tokenizer" and [t.name for t in pre.inputs] == ["TEXT", "TEXT_PAIR"]
    assert pre.parameters == {"max_length": 64, "truncation": "only_second"}
    assert [(t.name, t.dims) for t in pre.outputs] == [*((n, [-1]) for n in INPUTS), ("NUM_TOKENS", [1])]
    assert Path(post.path).name == "hf_cross_encoder" and post.files == ["ckpt/config.json"]
    assert [(t.name, t.dims) for t in post.outputs] == [("SCORE", [1])]
    (pipeline,) = spec.ensembles
    assert [t.name for t in pipeline.inputs] == ["TEXT", "TEXT_PAIR"]
    assert [s.model for s in pipeline.steps] == ["m_preprocess", "m", "m_postprocess"]
    assert [(t.name, t.dims) for t in pipeline.outputs] == [("SCORE", [1]), ("NUM_TOKENS", [1])]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ranking")
    hf.cross_encoder(root / "ce")
    hf.bert(root / "sentiment", "sequence")
    hf.cross_encoder(root / "gelu", "torch.nn.modules.activation.GELU")
    return root


def _load(folder: Path, source: str) -> object:
    path = folder / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "m", "source": source, "task": "text-ranking"}]}))
    return load_spec(path)


def test_a_checkpoint_that_cannot_rank_is_one_line_naming_why(checkpoints: Path) -> None:
    _load(checkpoints, "ce")
    with pytest.raises(SpecError, match=r"model 'm': task: 'sentiment' cannot do text-ranking: .* 2 labels"):
        _load(checkpoints, "sentiment")
    with pytest.raises(SpecError, match=r"activation_fn '[a-z.]*GELU' is not one of"):
        _load(checkpoints, "gelu")


def test_init_offers_text_ranking_for_a_one_label_sequence_classifier(checkpoints: Path) -> None:
    assert task_of(checkpoints / "ce" / "config.json") is TASKS["text-ranking"]
    assert task_of(checkpoints / "sentiment" / "config.json") is TASKS["text-classification"]


@pytest.mark.parametrize(
    ("config", "name"),
    [
        ({"id2label": {"0": "LABEL_0"}}, "Sigmoid"),
        ({"id2label": {"0": "a", "1": "b"}}, "Identity"),
        ({"id2label": {"0": "a"}, "sentence_transformers": {"activation_fn": IDENTITY}}, "Identity"),
        ({"id2label": {"0": "a"}, "sbert_ce_default_activation_function": "torch.nn.Tanh"}, "Tanh"),
        # a path outside torch: sentence-transformers falls back to its default without remote code
        ({"id2label": {"0": "a"}, "sentence_transformers": {"activation_fn": "mine.Act"}}, "Sigmoid"),
    ],
)  # fmt: skip
def test_the_activation_is_sentence_transformers_rule(config: dict[str, object], name: str) -> None:
    assert activation(config) == name


def test_the_scores_are_the_activation_of_the_logits() -> None:
    logits = [[2.0], [-1000.0], [0.0]]
    scored = Scorer({"id2label": {"0": "a"}}).scores(logits)  # type: ignore[arg-type]
    assert scored.dtype == "float32" and scored.shape == (3, 1)
    assert scored[:, 0].tolist() == pytest.approx([1 / (1 + 2.718281828**-2), 0.0, 0.5], rel=1e-6)


def _core(folder: Path, longest: int = 64) -> CoreInputs:
    return CoreInputs(folder, {n: [longest] for n in INPUTS})


def test_pairs_are_read_one_a_line_tab_separated_and_truncated_in_the_document(
    checkpoints: Path, tmp_path: Path
) -> None:
    ranking = task("text-ranking")
    path = tmp_path / "pairs.tsv"
    lines = [
        "# query<TAB>document",
        "where is the cat\tthe cat sat on the mat",
        "",
        "is paris a city\tparis is a city",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    arrays = ranking.read_data(path, _core(checkpoints / "ce"))
    assert list(arrays) == INPUTS and arrays["input_ids"].shape == (2, 13)  # [CLS] 4 [SEP] 6 [SEP]
    assert arrays["token_type_ids"][0].tolist() == [0] * 6 + [1] * 7  # the document's segment
    cut = ranking.read_data(path, _core(checkpoints / "ce", longest=8))
    assert cut["token_type_ids"][0].tolist() == [0] * 6 + [1] * 2  # only the document was cut
    (tmp_path / "bad.tsv").write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1 has no tab"):
        ranking.read_data(tmp_path / "bad.tsv", _core(checkpoints / "ce"))
    samples = ranking.sample_inputs(_core(checkpoints / "ce"), 4)
    assert samples is not None and samples["input_ids"].shape[0] == 4
    assert len({q for q, _ in SAMPLE_PAIRS[:4]}) == 2  # both queries among the first pairs


def test_the_tokenizer_model_encodes_pairs_and_counts_them_before_truncation(checkpoints: Path) -> None:
    from builder.python_models.hf_tokenizer.model import encode, load_tokenizer

    tokenizer = load_tokenizer(checkpoints / "ce")
    names = [*INPUTS, "NUM_TOKENS"]
    long = " ".join(["the cat sat on the mat"] * 3)
    arrays = encode(tokenizer, ["where is the cat", "a"], names, 12, [long, "paris"], "only_second")
    assert arrays["input_ids"].shape == (2, 12) and arrays["NUM_TOKENS"].tolist() == [[25], [5]]
    expected = tokenizer(["where is the cat"], [long], truncation="only_second", max_length=12)
    assert arrays["input_ids"][0].tolist() == expected["input_ids"][0]
    assert json.dumps(arrays["attention_mask"][1].tolist()) == json.dumps([1] * 5 + [0] * 7)
