"""Deployment manifests (Kubernetes, KServe) derived from the spec."""
