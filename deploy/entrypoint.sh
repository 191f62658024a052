#!/usr/bin/env bash
# Container entrypoint: build missing or stale TensorRT plans for the GPU found here,
# then exec tritonserver (so it is the process that receives SIGTERM) with safe defaults.
#
# Environment:
#   TRITONFORGE_REPOSITORY  model repository: a path, or s3:// / gs:// (plans must then be prebuilt)
#   TRITONFORGE_SPEC        models.yaml inside the image
#   TRITON_ADMIN_KEY        value of the header that unlocks the restricted endpoints;
#                           unset = a random key nobody knows, so they stay closed
#   TRITON_ADMIN_HEADER     that header's name (default triton-admin-key)
#   TRITONFORGE_SKIP_ENGINES=1  serve what is there without building plans
# Extra arguments are passed to tritonserver (e.g. --http-port=8080 --log-verbose=1).
set -euo pipefail

repo="${TRITONFORGE_REPOSITORY:-/opt/tritonforge/model_repository}"
spec="${TRITONFORGE_SPEC:-/opt/tritonforge/models.yaml}"
header="${TRITON_ADMIN_HEADER:-triton-admin-key}"
restricted="model-repository,shared-memory,trace,logging"

log() { echo "entrypoint: $*" >&2; }

admin_key() {
  if [[ -n "${TRITON_ADMIN_KEY:-}" ]]; then
    printf '%s' "$TRITON_ADMIN_KEY"
  else
    log "TRITON_ADMIN_KEY is not set: model control, shared memory, trace and logging stay closed"
    od -An -N24 -tx1 /dev/urandom | tr -d ' \n'
  fi
}

gpu_present() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}

build_engines() {
  if [[ "${TRITONFORGE_SKIP_ENGINES:-0}" == 1 ]]; then
    log "TRITONFORGE_SKIP_ENGINES=1: serving the repository as it is"
  elif [[ "$repo" == *://* ]]; then
    log "remote repository $repo: TensorRT plans must be built beforehand"
  elif ! gpu_present; then
    log "no GPU found: TensorRT models will not load; the ONNX Runtime fallback serves"
  else
    tritonforge engines --if-stale --spec "$spec" --repo "$repo"
  fi
}

key="$(admin_key)"
build_engines
exec tritonserver \
  --model-repository="$repo" \
  --model-control-mode=none \
  --strict-readiness=true \
  --exit-on-error=true \
  --allow-metrics=true \
  --allow-gpu-metrics=true \
  --allow-cpu-metrics=true \
  --http-restricted-api="${restricted}:${header}=${key}" \
  --grpc-restricted-protocol="${restricted}:${header}=${key}" \
  "$@"
