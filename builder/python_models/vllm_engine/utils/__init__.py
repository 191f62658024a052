"""The ``vllm_engine`` model's parts, by concern; ``model.py`` beside this folder puts them together."""
