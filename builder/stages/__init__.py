"""Build stages: each a plain function from a model spec and artifacts to new artifacts."""
