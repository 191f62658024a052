"""The LLM memory plan of ``tritonforge estimate`` against a checkpoint config with known sizes
(SmolLM2-135M's), and the command's output on a spec with that LLM (no server)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

import builder.cli.estimate as estimate_cli
from builder.cli import main
from builder.estimate.llm import CPU_ENGINE_BASE, GIB, advise_llms, checkpoint_sizes, llm_rows, llm_table
from builder.llm.memory import ModelSizes
from builder.spec.llm import LLMSpec, parse_llm

SMOLLM2 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
}
PARAMS = 30 * (576 * 64 * (2 * 9 + 2 * 3) + 3 * 576 * 1536 + 2 * 576) + 49152 * 576 + 576
SPEC_LLM = {
    "name": "smollm2",
    "source": "zoo.smollm2:gguf",
    "dtype": "float32",
    "max_model_len": 2048,
    "max_num_seqs": 16,
    "kv_cache_space_gib": 1,
    "evaluation": {
        "prompts": "calibration/smollm2/eval.json",
        "tolerances": {
            "float32": {"min_agreement": 0.75, "max_logprob_gap": 0.1},
            "bfloat16": {"min_agreement": 0.75, "max_logprob_gap": 0.1},
        },
    },
    "gpu": {"dtype": "bfloat16", "gpu_memory_utilization": 0.9},
}


def llm(**kw: object) -> LLMSpec:
    return parse_llm({**SPEC_LLM, **kw}, file="models.yaml")


def repo_with_checkpoint(root: Path) -> Path:
    folder = root / "smollm2" / "1" / "checkpoint"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(SMOLLM2))
    (root / "manifest.json").write_text(json.dumps({"models": {}}))
    return root


def test_sizes_come_from_the_exported_checkpoint(tmp_path: Path) -> None:
    sizes = checkpoint_sizes(repo_with_checkpoint(tmp_path), llm())
    assert (sizes.layers, sizes.kv_heads, sizes.head_dim) == (30, 3, 64)
    assert sizes.parameters == PARAMS == 134_515_008  # SmolLM2-135M as transformers counts it
    with pytest.raises(FileNotFoundError, match=r"smollm2: no .*config\.json"):
        checkpoint_sizes(tmp_path / "elsewhere", llm())


def test_cpu_plan_that_does_not_hold_the_limits_and_its_cuts() -> None:
    (row,) = llm_rows(llm(), ModelSizes.from_config(SMOLLM2))
    assert (row.device, row.dtype) == ("cpu", "float32")
    assert row.weights == PARAMS * 4
    assert row.kv_bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46080
    assert row.kv_at_limits == 46080 * 2048 * 16  # 1.41 GiB
    assert row.kv_space == GIB
    assert not row.limits_fit
    assert row.sequences_that_fit == GIB // (46080 * 2048) == 11
    assert row.total == PARAMS * 4 + GIB + CPU_ENGINE_BASE
    tokens = GIB // 46080  # 23301 tokens in 1 GiB
    assert row.cuts == [
        f"max_model_len 2048 -> {tokens // 16} (16 sequences of that length fit)",
        "max_num_seqs 16 -> 11 (full-length sequences that fit)",
        "dtype float32 -> bfloat16 (halves the KV cache and the weights)",
        "kv_cache_space_gib 1.0 -> 1.406 (KV space that holds the limits as stated)",
    ]
    verdicts = advise_llms([row], host=8 * GIB)
    assert verdicts[0].startswith("smollm2 float32 cpu: plan ") and verdicts[0].endswith("- fits")
    assert "only 11 of 16 full-length sequences fit" in verdicts[1]
    assert verdicts[2:] == [f"    - {c}" for c in row.cuts]


def test_cpu_plan_that_holds_the_limits_has_no_cuts_and_a_small_host_does_not_fit() -> None:
    (row,) = llm_rows(llm(max_model_len=1024, max_num_seqs=8), ModelSizes.from_config(SMOLLM2))
    assert row.limits_fit and row.cuts == [] and row.sequences_that_fit == 22
    verdicts = advise_llms([row], host=4 * GIB)  # the plan is 4.09 GiB
    assert "DOES NOT FIT" in verdicts[0]
    room = 4 * GIB - row.weights - CPU_ENGINE_BASE
    assert verdicts[0].endswith(f"cut first: kv_cache_space_gib -> {room / GIB:.2f}")
    assert advise_llms([row], host=2 * GIB)[0].endswith("cut first: dtype")  # no room for any KV
    assert verdicts[1] == "  1024 x 8 tokens need 0.352 GiB of KV: held (22 full-length sequences fit)"


def test_gpu_row_takes_its_share_of_the_gpu_minus_the_weights() -> None:
    sizes = ModelSizes.from_config(SMOLLM2)
    cpu, small = llm_rows(llm(), sizes, gpu_memory=GIB)
    assert cpu.device == "cpu"
    assert (small.device, small.dtype, small.overhead) == ("gpu", "bfloat16", 0)
    assert small.weights == PARAMS * 2
    assert small.kv_space == int(0.9 * GIB) - PARAMS * 2
    assert small.kv_bytes_per_token == 23040
    assert small.sequences_that_fit == 14 and not small.limits_fit
    assert small.cuts[2] == "gpu.gpu_memory_utilization 0.9 -> 0.95 (holds the limits)"
    assert not any(c.startswith("dtype") for c in small.cuts)  # already 2 bytes
    _, big = llm_rows(llm(gpu={"dtype": "bfloat16", "max_num_seqs": 64}), sizes, gpu_memory=24 * GIB)
    assert big.limits_fit and big.max_num_seqs == 64 and big.cuts == []
    _, tiny = llm_rows(llm(), sizes, gpu_memory=GIB // 4)  # 0.9 of it is below the weights
    assert tiny.kv_space == 0 and tiny.sequences_that_fit == 0
    assert "DOES NOT FIT" in advise_llms([tiny], host=8 * GIB)[0]
    assert "| smollm2 | bfloat16 | gpu | 134,515,008 | 256.6 | 22.5 |" in llm_table([small])


def test_estimate_command_reports_the_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    spec = tmp_path / "models.yaml"
    spec.write_text(json.dumps({"llms": [SPEC_LLM]}))  # YAML reads JSON

    def fake_build(spec_file: Path, out: Path, log: object) -> Path:
        return repo_with_checkpoint(out)

    monkeypatch.setattr(estimate_cli, "build_local", fake_build)
    out = tmp_path / "out"
    args = ["estimate", "--spec", str(spec), "--host-memory", "8"]
    code = main([*args, "--gpu-memory", "1", "--out", str(out)])
    assert code == 0  # the footprints fit; the limits not held is a warning
    printed = capsys.readouterr().out
    cpu = "| smollm2 | float32 | cpu | 134,515,008 | 513.1 | 45.0 | 1440.0 (2048 x 16) | 1024.0 | 11 of 16 |"
    assert cpu in printed
    assert "| smollm2 | bfloat16 | gpu |" in printed
    assert "max_num_seqs 16 -> 11" in printed
    report = json.loads((out / "estimate.json").read_text())
    assert [(r["device"], r["sequences_that_fit"], r["limits_fit"]) for r in report["llms"]] == [
        ("cpu", 11, False), ("gpu", 14, False)
    ]  # fmt: skip
    assert report["rows"] == [] and report["measured"] == []
    assert "| smollm2 | float32 | cpu |" in (out / "estimate.md").read_text()
    assert code == main(["estimate", "--spec", str(spec), "--host-memory", "1"]) - 3  # over 1 GiB of host


def test_parser_keeps_the_estimate_options() -> None:
    parser = argparse.ArgumentParser()
    estimate_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["estimate", "--gpu-memory", "24", "--measure"])
    assert args.gpu_memory == 24.0 and args.measure
