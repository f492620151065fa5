# make setup: .venv with the pinned dependencies; make demo: the main job on the embedded
# defaults; make test: the test suite. Nothing here needs an API key or the internet beyond
# the package registry.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export RAGAS_DO_NOT_TRACK := true
export HF_HUB_OFFLINE := 1
export NUMBA_CACHE_DIR := $(CURDIR)/.cache/numba
export IR_DATASETS_HOME := $(CURDIR)/.cache/ir_datasets
export MPLCONFIGDIR := $(CURDIR)/.cache/matplotlib
export HARNESS_HOME := $(CURDIR)

DEMO_CONFIGS ?= configs/mtrag.yaml configs/handbook.yaml configs/b2b.yaml

.PHONY: setup demo test import-mtrag sweep

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	@start=$$(date +%s); \
	$(PY) -m venv $(VENV) && \
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.lock && \
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e . && \
	touch $@ && echo "setup took $$(( $$(date +%s) - start )) s"

demo: setup
	@start=$$(date +%s); \
	for c in $(DEMO_CONFIGS); do $(BIN)/harness run $$c --no-progress || exit $$?; done; \
	echo "demo took $$(( $$(date +%s) - start )) s"

test: setup
	$(BIN)/python -m pytest -p no:cacheprovider

sweep: setup
	$(BIN)/harness run configs/sweep-handbook.yaml --no-progress
	$(BIN)/harness run configs/sweep-mtrag.yaml --no-progress

import-mtrag: setup
	$(BIN)/harness import mtrag ../shared/datasets/mtrag --out eval_sets/mtrag-un

# make local-llm: a real local LLM endpoint (llama-server, Gemma 3 270M) on 127.0.0.1:8088 or $LLM_PORT; docs/local-llm.md
.PHONY: local-llm
local-llm:
	bash scripts/local_llm.sh
