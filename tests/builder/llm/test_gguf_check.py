"""builder.llm.gguf_check: the export against the packaged GGUF read by the gguf package alone."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from builder.llm import gguf_check
from builder.llm.gguf_check import compare, hf_name, unpermute
from builder.spec.llm import LLMDType
from tests.builder.llm.needs import NEEDS_GGUF


def llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to Q and K (LlamaModel.permute)."""
    shape = weight.shape
    return weight.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def test_unpermute_undoes_llama_cpps_rotary_order() -> None:
    weight = np.arange(6 * 64 * 5, dtype=np.float32).reshape(6 * 64, 5)
    permuted = llama_cpp_permute(weight, 6)
    assert not np.array_equal(permuted, weight)
    np.testing.assert_array_equal(unpermute(permuted, 6), weight)


def test_llama_cpp_names_map_to_transformers_names() -> None:
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert hf_name("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj.weight"
    assert hf_name("blk.0.ssm_conv1d.weight") is None and hf_name("rope_freqs.weight") is None


@pytest.fixture
def gguf_file() -> Path:
    from zoo.smollm2 import gguf

    return gguf()


@pytest.mark.slow
@NEEDS_GGUF
def test_the_packaged_gguf_agrees_with_its_export(gguf_file: Path, smollm2_checkpoint: Path) -> None:
    found = compare(gguf_file, smollm2_checkpoint, LLMDType.BFLOAT16)
    assert found.agrees, found.mismatches
    assert (found.tensors, found.tokens, found.merges) == (272, 49152, 48900)


@pytest.mark.slow
@NEEDS_GGUF
def test_a_dequantisation_or_row_order_error_is_found(
    gguf_file: Path, smollm2_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = gguf_check._exported_tensors

    def off_by_a_scale(checkpoint: Path) -> Iterator[tuple[str, np.ndarray]]:
        for name, values in real(checkpoint):
            yield name, values * (1.05 if name == "model.layers.3.mlp.up_proj.weight" else 1.0)

    monkeypatch.setattr(gguf_check, "_exported_tensors", off_by_a_scale)
    found = compare(gguf_file, smollm2_checkpoint, LLMDType.BFLOAT16)
    assert [m.split(":")[0] for m in found.mismatches] == ["tensor model.layers.3.mlp.up_proj.weight"]
    monkeypatch.setattr(gguf_check, "_exported_tensors", real)
    monkeypatch.setattr(gguf_check, "unpermute", lambda weight, heads: weight)  # Q/K rows as stored
    wrong = compare(gguf_file, smollm2_checkpoint, LLMDType.BFLOAT16).mismatches
    assert wrong and all("q_proj" in m or "k_proj" in m for m in wrong), wrong


@pytest.mark.slow
@NEEDS_GGUF
def test_a_tokenizer_or_template_error_is_found(
    gguf_file: Path, smollm2_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_check, "_compare_tensors", lambda *args: 0)  # the tokenizer's part alone
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    for file in smollm2_checkpoint.iterdir():
        if file.suffix == ".safetensors":
            (folder / file.name).symlink_to(file)
        else:
            shutil.copy2(file, folder / file.name)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["Ġhello!"] = vocab.pop(next(t for t, i in vocab.items() if i == 1000))  # one id renamed
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    template = folder / "chat_template.jinja"
    template.write_text(template.read_text().replace("<|im_start|>", "<|im_begin|>"))
    found = compare(gguf_file, folder, LLMDType.BFLOAT16)
    assert [m.split(":")[0] for m in found.mismatches] == ["vocabulary", "chat template"], found.mismatches
    assert "1 of 49152 tokens differ (first at id 1000" in found.mismatches[0]
