"""LLMs: checkpoints served by vLLM."""
