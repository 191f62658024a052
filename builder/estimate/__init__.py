"""``tritonforge estimate``: a memory plan per model and variant, checked against the real server."""
