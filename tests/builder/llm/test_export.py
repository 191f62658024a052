"""Export and check stages: bad sources get one-line errors; the real GGUF becomes a checkpoint
that loads, with the sizes the memory plan assumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.errors import SpecError
from builder.llm.export import Exported, export
from builder.sources.llm_checkpoint import copy_checkpoint
from builder.sources.llm_gguf import check_gguf
from builder.spec.llm import LLMDType, LLMSpec, parse_llm
from tests.builder.llm.needs import NEEDS_GGUF


def spec(**changes: object) -> LLMSpec:
    raw: dict[str, object] = {
        "name": "smollm2",
        "source": "zoo.smollm2:gguf",
        "max_model_len": 2048,
        "kv_cache_space_gib": 1,
        "dtype": "bfloat16",
        "gpu": {"dtype": "bfloat16"},
        "evaluation": {
            "prompts": "calibration/smollm2/eval.json",
            "tolerances": {"bfloat16": {"min_agreement": 0.5, "max_logprob_gap": 0.5}},
        },
    }
    raw.update(changes)
    return parse_llm(raw, file="models.yaml")


def test_a_gguf_that_is_not_one(tmp_path: Path) -> None:
    fake = tmp_path / "chat.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip file, not a model")
    with pytest.raises(SpecError) as info:
        export(fake, tmp_path / "out", LLMDType.BFLOAT16, file="models.yaml", model="chat")
    line = info.value.one_line()
    assert line.startswith("models.yaml: model 'chat': source: ")
    assert "is not a GGUF file" in line and "b'PK\\x03\\x04'" in line and "\n" not in line
    assert not (tmp_path / "out").exists()


def test_missing_or_short_gguf(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        check_gguf(tmp_path / "absent.gguf", file="m.yaml", model="chat")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"GG")
    with pytest.raises(SpecError, match="not a GGUF file"):
        check_gguf(empty, file="m.yaml", model="chat")


def test_checkpoint_folder_errors(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(SpecError, match="does not exist"):
        copy_checkpoint(tmp_path / "nowhere", out, LLMDType.BFLOAT16, file="m.yaml", model="chat")
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "config.json").write_text("{}")
    with pytest.raises(SpecError, match=r"has no tokenizer_config\.json"):
        copy_checkpoint(src, out, LLMDType.BFLOAT16, file="m.yaml", model="chat")
    (src / "tokenizer_config.json").write_text("{}")
    with pytest.raises(SpecError, match=r"no \.safetensors weights"):
        copy_checkpoint(src, out, LLMDType.BFLOAT16, file="m.yaml", model="chat")


@pytest.mark.slow
@NEEDS_GGUF
def test_export_and_check_the_packaged_gguf(smollm2_export: Exported, smollm2_checkpoint: Path) -> None:
    from builder.llm.check import check_checkpoint

    assert smollm2_export.parameters == 134_515_008
    # bf16: 2 bytes a parameter, not the 538 MB of float32
    assert 268_000_000 < smollm2_export.weights_bytes < 270_000_000
    assert b"de-quantizing" in (smollm2_checkpoint.parent / "export.log").read_bytes()  # not on the console

    config = json.loads((smollm2_checkpoint / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    assert (smollm2_checkpoint / "chat_template.jinja").is_file()
    checked = check_checkpoint(smollm2_checkpoint, spec(), file="models.yaml")
    assert checked.architecture == "LlamaForCausalLM" and checked.eos_token == "<|im_end|>"
    sizes = checked.sizes
    assert (sizes.layers, sizes.kv_heads, sizes.head_dim, sizes.heads, sizes.hidden) == (30, 3, 64, 9, 576)
    assert checked.memory.kv_bytes_per_token == 23_040 and checked.memory.sequences_that_fit == 22


@pytest.mark.slow
@NEEDS_GGUF
def test_check_refuses_what_the_checkpoint_cannot_hold(smollm2_checkpoint: Path) -> None:
    from builder.llm.check import check_checkpoint

    with pytest.raises(SpecError) as info:
        check_checkpoint(
            smollm2_checkpoint, spec(max_model_len=8192, kv_cache_space_gib=0.1), file="models.yaml"
        )
    line = info.value.one_line()
    assert line.startswith(
        "models.yaml: model 'smollm2': kv_cache_space_gib: 0.1 GiB cannot hold one sequence"
    )
    assert "needs 0.176 GiB" in line  # 8192 tokens × 23,040 bytes
    with pytest.raises(SpecError) as info:
        check_checkpoint(smollm2_checkpoint, spec(max_model_len=16384), file="models.yaml")
    assert info.value.field == "max_model_len" and "context of 8192 tokens" in info.value.one_line()


def test_resolve_source(tmp_path: Path) -> None:
    from builder.llm.export import resolve_source

    (tmp_path / "mysrc.py").write_text(
        "def ok():\n    return 'weights/chat.gguf'\n\n"
        "def bad():\n    return 3\n\n"
        "def boom():\n    raise OSError('gone')\n"
    )
    spec_file = tmp_path / "models.yaml"
    assert resolve_source(spec(source="models/c.gguf"), spec_file=spec_file) == tmp_path / "models" / "c.gguf"
    assert resolve_source(spec(source="mysrc:ok"), spec_file=spec_file) == Path("weights/chat.gguf").resolve()
    with pytest.raises(SpecError, match=r"mysrc:bad\(\) returned int"):
        resolve_source(spec(source="mysrc:bad"), spec_file=spec_file)
    with pytest.raises(SpecError, match=r"mysrc:boom\(\) failed: OSError: gone"):
        resolve_source(spec(source="mysrc:boom"), spec_file=spec_file)
    with pytest.raises(SpecError, match="cannot import module 'nomod'"):
        resolve_source(spec(source="nomod:fn"), spec_file=spec_file)


@NEEDS_GGUF
def test_zoo_factory_gives_the_packaged_gguf() -> None:
    from zoo.smollm2 import gguf

    path = gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90_000_000
    check_gguf(path, file="models.yaml", model="smollm2")


def test_a_factory_s_own_exception_stays_the_cause_of_its_one_line(tmp_path: Path) -> None:
    from builder.llm.export import resolve_source

    (tmp_path / "failing_src.py").write_text("def boom():\n    raise OSError('gone')\n")
    with pytest.raises(SpecError) as info:
        resolve_source(spec(source="failing_src:boom"), spec_file=tmp_path / "models.yaml")
    assert isinstance(info.value.__cause__, OSError)  # its traceback stays with the one line
