#!/usr/bin/env bash
# Container entrypoint: build missing or stale TensorRT plans for the GPU found here,
# then exec tritonserver (so it is the process that receives SIGTERM) with safe defaults.
# `tritonforge engines` builds only the plans, into the repository the image's builder stage
# wrote, from the verified ONNX variants that build left in .tritonforge/cache: no model is
# exported again, and no entry is added (the LLMs are the vLLM image's).
#
# The repository is the gpu target's: every core model is a TensorRT plan, and its ONNX
# Runtime fallback and the ensembles run on the GPU too. So the container refuses to start
# without a GPU, and it starts only once every plan is built and verified
# (--require-engines): a model without its plan would not load, and the server runs with
# --exit-on-error. Either way it says why in one line and exits non-zero.
#
# Environment:
#   TRITONFORGE_REPOSITORY  model repository: a path, or s3:// / gs:// (plans must then be prebuilt)
#   TRITONFORGE_SPEC        models.yaml inside the image
#   TRITON_ADMIN_KEY        value of the header that unlocks the restricted endpoints;
#                           unset = a random key nobody knows, so they stay closed
#   TRITON_ADMIN_HEADER     that header's name (default triton-admin-key)
#   TRITONFORGE_SKIP_ENGINES=1  serve what is there without building plans (nor checking for a GPU)
#   TRITONFORGE_OPENAI_PORT     the OpenAI-compatible endpoint for the LLMs (default 9000; 0: off)
#   TRITONFORGE_OPENAI_API_KEY  the key it asks for (Authorization: Bearer KEY); unset: none
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
    log "TRITONFORGE_SKIP_ENGINES=1: serving the repository as it is (a model whose plan is missing will not load)"
    return
  fi
  if ! gpu_present; then
    log "error: no GPU visible (nvidia-smi -L lists none): this image serves TensorRT plans and runs their" \
      "ONNX Runtime fallbacks on the GPU too, so it cannot serve here; start it with --gpus (Kubernetes:" \
      "an nvidia.com/gpu limit), or serve the cpu target's repository (tritonforge build --target cpu)"
    exit 1
  fi
  if [[ "$repo" == *://* ]]; then
    log "remote repository $repo: serving the TensorRT plans it holds (build them beforehand)"
    return
  fi
  local status=0
  tritonforge engines --if-stale --require-engines --spec "$spec" --repo "$repo" || status=$?
  if (( status != 0 )); then
    log "error: not starting tritonserver: a TensorRT plan could not be built and verified on this GPU" \
      "(tritonforge's message above says which and why); a model without its plan cannot load"
    exit "$status"
  fi
}

# In the background, before tritonserver: it answers 503 until the server is up, and the
# container stops with tritonserver (the process this script becomes).
openai_endpoint() {
  local port="${TRITONFORGE_OPENAI_PORT:-9000}"
  [[ "$port" == 0 ]] && return
  if ! python3 -c "import openai_frontend.app" >/dev/null 2>&1; then
    log "no OpenAI endpoint on port $port: this image lacks openai_frontend or its dependencies"
    return
  fi
  if [[ -z "${TRITONFORGE_OPENAI_API_KEY:-}" ]]; then
    log "TRITONFORGE_OPENAI_API_KEY is not set: the OpenAI endpoint on port $port asks for no key"
  fi
  python3 -m openai_frontend --triton 127.0.0.1:8001 --host 0.0.0.0 --port "$port" &
}

key="$(admin_key)"
build_engines
openai_endpoint
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
