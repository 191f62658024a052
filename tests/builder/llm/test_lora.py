"""The LoRA check (builder/llm/lora.py) on small safetensors files made here: a checkpoint with two
attention weights and PEFT-shaped adapters, good and bad, each bad one a one-line SpecError naming
file, model and field."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from builder.errors import SpecError
from builder.llm.lora import check_adapter, check_adapter_folder, copy_adapter, resolve_adapters
from builder.spec import load_spec
from builder.spec.llm import LLMSpec, parse_llm

HIDDEN, Q_OUT = 16, 8
Q = "model.layers.0.self_attn.q_proj"


TOLERANCE = {"min_agreement": 0.5, "max_logprob_gap": 1.0}


def spec(adapters: dict[str, str], max_lora_rank: int = 8) -> LLMSpec:
    evaluation = {
        "prompts": "calibration/p.json",
        "tolerances": {"bfloat16": TOLERANCE, "float16": TOLERANCE},
    }
    lora = {"adapters": adapters, "max_lora_rank": max_lora_rank}
    raw = {"name": "tiny_llm", "source": "ckpt", "dtype": "bfloat16", "gpu": {"dtype": "float16"}}
    return parse_llm(raw | {"evaluation": evaluation, "lora": lora}, file="models.yaml")


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    save_file({f"{Q}.weight": np.zeros((Q_OUT, HIDDEN), np.float32)}, str(folder / "model.safetensors"))
    return folder


def adapter(folder: Path, *, r: int = 4, a: tuple[int, int] | None = None, b: tuple[int, int] | None = None,
            module: str = Q, config: dict[str, Any] | None = None) -> Path:  # fmt: skip
    folder.mkdir(parents=True)
    cfg = {"peft_type": "LORA", "r": r, "lora_alpha": 8, "target_modules": ["q_proj"]} | (config or {})
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    prefix = f"base_model.model.{module}"
    tensors = {
        f"{prefix}.lora_A.weight": np.zeros(a or (r, HIDDEN), np.float32),
        f"{prefix}.lora_B.weight": np.ones(b or (Q_OUT, r), np.float32),
    }
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return folder


def test_an_adapter_made_for_the_checkpoint_passes_and_is_copied(tmp_path: Path, checkpoint: Path) -> None:
    folder = adapter(tmp_path / "a")
    found = check_adapter(folder, "a", spec({"a": "a"}), checkpoint, file="models.yaml")
    assert (found.rank, found.modules) == (4, 1)
    copy_adapter(folder, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d, "not found"),
        (lambda d: (d.mkdir(), d)[1], "is not a PEFT LoRA adapter folder (no adapter_config.json)"),
        (lambda d: adapter(d, config={"peft_type": "IA3"}), "is a PEFT IA3 adapter, not LoRA"),
        (lambda d: adapter(d, r=16), "rank 16 is above lora.max_lora_rank 8"),
        (
            lambda d: adapter(d, config={"rank_pattern": {"q_proj": 32}}),
            "rank 32 is above lora.max_lora_rank 8",
        ),
        (lambda d: adapter(d, config={"use_dora": True}), "sets use_dora, which vLLM does not serve"),
    ],
)
def test_a_bad_adapter_folder_is_refused_before_any_stage(tmp_path: Path, make: Any, message: str) -> None:
    folder = make(tmp_path / "bad")
    with pytest.raises(SpecError) as caught:
        check_adapter_folder(folder, "bad", spec({"bad": "bad"}), file="models.yaml")
    line = caught.value.one_line()
    assert line.startswith("models.yaml: model 'tiny_llm': lora.adapters.bad: ") and message in line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"a": (4, 2 * HIDDEN)}, f"base model: {Q} adapts a [8, 32] weight, the checkpoint's is [8, 16]"),
        ({"module": "model.layers.0.mlp.up"}, "made for another architecture: the checkpoint has no module"),
        ({"b": (Q_OUT, 2)}, "are not one low-rank pair"),
    ],
)  # fmt: skip
def test_an_adapter_for_another_base_is_refused(
    tmp_path: Path, checkpoint: Path, kwargs: dict[str, Any], message: str
) -> None:
    folder = adapter(tmp_path / "other", **kwargs)
    with pytest.raises(SpecError, match=r"lora\.adapters\.other: ") as caught:
        check_adapter(folder, "other", spec({"other": "other"}), checkpoint, file="models.yaml")
    assert message in str(caught.value)


def test_a_factory_names_the_adapter_folder(tmp_path: Path) -> None:
    (tmp_path / "adapters_pkg.py").write_text(
        "def sea():\n    return 'made/sea'\n\ndef broken():\n    return 3\n"
    )
    found = resolve_adapters(spec({"sea": "adapters_pkg:sea"}), spec_file=tmp_path / "models.yaml")
    assert found == {"sea": (Path.cwd() / "made/sea").resolve()}
    with pytest.raises(SpecError, match=r"lora.adapters.x: adapters_pkg:broken\(\) returned int"):
        resolve_adapters(spec({"x": "adapters_pkg:broken"}), spec_file=tmp_path / "models.yaml")
    sys.modules.pop("adapters_pkg", None)


def test_a_relative_adapter_is_found_beside_models_yaml(tmp_path: Path) -> None:
    found = resolve_adapters(spec({"sea": "loras/sea"}), spec_file=tmp_path / "models.yaml")
    assert found == {"sea": tmp_path / "loras" / "sea"}


@pytest.mark.parametrize(
    ("lora", "field", "message"),
    [
        ({"adapters": {}}, "lora.adapters", "at least 1 item"),
        ({"adapters": {"bad name": "x"}}, "lora.adapters.bad name.[key]", "should match pattern"),
        ({"adapters": {"a": "x"}, "max_lora_rank": 12}, "lora", "max_lora_rank 12 is not one vLLM takes"),
        ({"adapters": {"tiny_llm": "x"}}, None, "lora.adapters: 'tiny_llm' is the model's own name"),
        ({"adapters": {"a": "x"}, "max_loras": 0}, "lora.max_loras", "greater than or equal to 1"),
    ],
)
def test_bad_lora_sections(lora: dict[str, Any], field: str | None, message: str) -> None:
    raw = spec({"a": "x"}).model_dump(mode="json") | {"lora": lora}
    with pytest.raises(SpecError) as caught:
        parse_llm(raw, file="models.yaml")
    assert caught.value.field == field and message in caught.value.message


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"name": "other", "lora": {"adapters": {"sea": "x"}}}, "'sea' is also an adapter of 'tiny_llm'"),
        ({"name": "sea"}, "llm 'tiny_llm' lora.adapters: 'sea' is also a model's name"),
    ],
)
def test_adapter_names_are_unique_model_names(tmp_path: Path, second: dict[str, Any], message: str) -> None:
    first = spec({"sea": "x"}).model_dump(mode="json")
    other = first | {"lora": None} | second
    (tmp_path / "models.yaml").write_text(json.dumps({"llms": [first, other]}))
    with pytest.raises(SpecError, match=message):
        load_spec(tmp_path / "models.yaml")


def test_a_factory_s_own_exception_stays_the_cause_of_its_one_line(tmp_path: Path) -> None:
    (tmp_path / "failing_adapters.py").write_text("def boom():\n    raise OSError('gone')\n")
    with pytest.raises(SpecError, match=r"failing_adapters:boom\(\) failed: OSError: gone") as info:
        resolve_adapters(spec({"x": "failing_adapters:boom"}), spec_file=tmp_path / "models.yaml")
    assert isinstance(info.value.__cause__, OSError)
    sys.modules.pop("failing_adapters", None)
