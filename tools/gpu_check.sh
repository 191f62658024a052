#!/usr/bin/env bash
# The TensorRT checks only a GPU host can run, in under ten minutes, into one JSON report
# (`tools/gpu_check.sh --help` says what a passing run proves, and what happens when the
# budget runs out):
# detect TensorRT and the GPU, build and verify every plan under every profile, rebuild with
# --if-stale (nothing may be rebuilt), and, when tritonserver is on PATH, serve the
# repository and compare every model's answers on its evaluation set with the reference (at
# each profile's opt batch, the max batch and with dynamic batching). On a machine without a
# GPU or TensorRT it says so in one line and exits 2.
#
#   tools/gpu_check.sh [--spec models.yaml] [--repo DIR] [--out gpu_check.json] [--budget-s 540] [--no-server]
#
# In the serving image: docker run --rm --gpus all --entrypoint /opt/nvidia/nvidia_entrypoint.sh \
#   tritonforge:0.1.0 tools/gpu_check.sh --out /tmp/gpu_check.json
# PYTHON names the interpreter (default: python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$here/gpu_check.py" "$@"
