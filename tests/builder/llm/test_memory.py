"""The memory plan against SmolLM2-135M-Instruct's config (30 layers, 9 heads, 3 KV heads of
64, hidden 576): the sizes the slow export test reads back from the real checkpoint."""

from __future__ import annotations

from builder.llm.memory import GIB, Lever, ModelSizes, plan

# config.json of the checkpoint exported from the packaged GGUF (the fields memory reads)
SMOLLM2_CONFIG = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "tie_word_embeddings": True,
    "vocab_size": 49152,
}
SMOLLM2 = ModelSizes.from_config(SMOLLM2_CONFIG)


def test_sizes_and_parameters() -> None:
    assert (SMOLLM2.layers, SMOLLM2.kv_heads, SMOLLM2.head_dim, SMOLLM2.heads) == (30, 3, 64, 9)
    # transformers counts 134,515,008 parameters in the dequantized model
    assert SMOLLM2.parameters == 134_515_008


def test_head_dim_and_kv_heads_default_from_hidden_and_heads() -> None:
    config = {k: v for k, v in SMOLLM2_CONFIG.items() if k not in ("head_dim", "num_key_value_heads")}
    sizes = ModelSizes.from_config(config)
    assert sizes.head_dim == 64 and sizes.kv_heads == 9


def test_kv_bytes_per_token() -> None:
    # 2 × 30 layers × 3 KV heads × 64 × 2 bytes
    assert SMOLLM2.kv_bytes_per_token(2) == 23_040
    assert SMOLLM2.kv_bytes_per_token(4) == 46_080


def test_plan_that_fits() -> None:
    p = plan(SMOLLM2, dtype_bytes=2, max_model_len=2048, max_num_seqs=16, kv_space_bytes=GIB)
    assert p.kv_bytes_at_limits == 23_040 * 2048 * 16
    assert p.fits and p.cuts == ()
    assert p.sequences_that_fit == GIB // (23_040 * 2048) == 22
    assert p.weights_bytes == 134_515_008 * 2
    assert abs(p.one_sequence_gib - 0.0439453125) < 1e-12


def test_plan_that_does_not_fit_says_what_to_cut() -> None:
    space = 23_040 * 8192  # 8192 tokens
    p = plan(SMOLLM2, dtype_bytes=2, max_model_len=4096, max_num_seqs=8, kv_space_bytes=space)
    assert not p.fits and p.sequences_that_fit == 2
    by_lever = {c.lever: c.value for c in p.cuts}
    assert [c.lever for c in p.cuts] == [Lever.MAX_MODEL_LEN, Lever.MAX_NUM_SEQS, Lever.KV_CACHE_SPACE_GIB]
    assert by_lever[Lever.MAX_MODEL_LEN] == "1024"  # 8 sequences of 1024 fill 8192 tokens
    assert by_lever[Lever.MAX_NUM_SEQS] == "2"
    assert float(by_lever[Lever.KV_CACHE_SPACE_GIB]) == round(23_040 * 4096 * 8 / GIB, 3)


def test_float32_offers_a_smaller_dtype_and_none_fit() -> None:
    p = plan(SMOLLM2, dtype_bytes=4, max_model_len=8192, max_num_seqs=4, kv_space_bytes=46_080 * 4096)
    assert p.sequences_that_fit == 0
    assert Lever.DTYPE in {c.lever for c in p.cuts}
    assert Lever.MAX_NUM_SEQS not in {c.lever for c in p.cuts}  # not even one full sequence fits
