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
# With --no-tensorrt, what a GPU host without TensorRT can prove, in at most 7 minutes
# (tools/gpu_check_no_trt.py; `tools/gpu_check.sh --no-tensorrt --help` says what):
#
#   tools/gpu_check.sh --no-tensorrt [--spec models.yaml] [--out gpu_check_no_trt.json] [--budget-s 420]
#
# In the serving image: docker run --rm --gpus all --entrypoint /opt/nvidia/nvidia_entrypoint.sh \
#   tritonforge:0.1.0 tools/gpu_check.sh --out /tmp/gpu_check.json
# PYTHON names the interpreter (default: python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for arg in "$@"; do
  if [[ "$arg" == --no-tensorrt ]]; then
    rest=()
    for a in "$@"; do [[ "$a" == --no-tensorrt ]] || rest+=("$a"); done
    exec "${PYTHON:-python3}" "$here/gpu_check_no_trt.py" ${rest[@]+"${rest[@]}"}
  fi
done
exec "${PYTHON:-python3}" "$here/gpu_check.py" "$@"
