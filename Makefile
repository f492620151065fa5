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

.PHONY: setup demo test import-mtrag check-import refresh-embeddings sweep compare gate gate-demo report baseline

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	@start=$$(date +%s); \
	$(PY) -m venv $(VENV) && \
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.lock && \
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e . && \
	touch $@ && echo "setup took $$(( $$(date +%s) - start )) s"

demo: setup
	@start=$$(date +%s); stamp=$$(date +%Y%m%d-%H%M%S); \
	for c in $(DEMO_CONFIGS); do $(BIN)/harness run $$c --run-id demo-$$stamp-$$(basename $$c .yaml) || exit $$?; done; \
	$(BIN)/harness report runs/demo-$$stamp-* -o reports/demo-$$stamp.html || exit $$?; \
	echo "demo took $$(( $$(date +%s) - start )) s"

# the suite on TEST_WORKERS processes (pytest-xdist; each test file runs whole in one process, so
# its module fixtures are built once), longest first (tests/durations.json, tests/conftest.py); ends with
# the 15 slowest tests
TEST_WORKERS ?= 2
TEST_LINE = $(BIN)/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(TEST_LINE) --durations=15

# make test-durations: the suite as make test runs it, on a numba cache of its own (cold, as in a fresh
# clone), writes tests/durations.json, the seconds per test file that make test hands out longest first;
# commit it when files were added or their times changed much
.PHONY: test-durations
test-durations: setup
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	NUMBA_CACHE_DIR="$$d" $(TEST_LINE) --write-durations

sweep: setup
	$(BIN)/harness run configs/sweep-handbook.yaml --no-progress
	$(BIN)/harness run configs/sweep-mtrag.yaml --no-progress

compare: setup  # make compare A=runs/X B=runs/Y: B's arms against A's, paired by label
	@test -n "$(A)" -a -n "$(B)" || { echo "make compare: set A= and B= (run folders), e.g. make compare A=runs/baselines/b2b B=runs/X"; exit 2; }
	$(BIN)/harness compare $(A) $(B)  # into reports/compare/X_vs_Y

# make exits 2 whenever a command fails: the last line says what `harness gate` exited with, in the words of
# harness.errors.Exit (0 pass, 1 regression or insufficient data, 2 bad input, 3 infrastructure; CI calls harness gate)
gate: setup  # make gate BASELINE=runs/baselines/b2b CANDIDATE=runs/X [POLICY=configs/gate.yaml]
	@test -n "$(BASELINE)" -a -n "$(CANDIDATE)" || { echo "make gate: set BASELINE= and CANDIDATE= (run folders), e.g. make gate BASELINE=runs/baselines/b2b CANDIDATE=runs/X"; exit 2; }
	@$(BIN)/harness gate --baseline $(BASELINE) --candidate $(CANDIDATE) --policy $(or $(POLICY),configs/gate.yaml) -o reports/gate; \
	code=$$?; case $$code in 0) m=pass;; 1) m="regression or insufficient data";; 2) m="bad input";; 3) m=infrastructure;; *) m=unknown;; esac; \
	echo "harness gate exit $$code: $$m"; exit $$code

gate-demo: setup  # a demonstration of the gate's mechanics, offline: harness serve plays a scripted model (docs/gate.md)
	$(BIN)/python scripts/gate_demo.py

report: setup  # make report RUNS="runs/X runs/Y" [BASELINE=runs/B] [POLICY=configs/gate.yaml] [NAME=review]
	@test -n "$(RUNS)" || { echo 'make report: set RUNS= (run folders), e.g. make report RUNS="runs/baselines/b2b runs/X"'; exit 2; }
	$(BIN)/harness report $(RUNS) $(if $(BASELINE),--baseline $(BASELINE)) $(if $(POLICY),--policy $(POLICY)) -o reports/$(or $(NAME),review).html

baseline: setup  # refresh the committed baseline of the b2b demo config
	rm -rf runs/baselines/b2b
	$(BIN)/harness run configs/b2b.yaml --no-progress --run-id baselines/b2b

# The raw MTRAG-UN data (IBM/mt-rag-benchmark: mtragun-human/ and derived/pooled_corpus.jsonl) is
# not in the repository; point RAW at a copy of it.
need-raw = $(if $(RAW),,$(error set RAW to the raw MTRAG folder (with mtragun-human/ and derived/): make $@ RAW=path/to/mtrag))

import-mtrag: setup  # make import-mtrag RAW=path/to/mtrag: rewrite eval_sets/mtrag-un from the raw data
	$(need-raw)
	$(BIN)/harness import mtrag "$(RAW)" --out eval_sets/mtrag-un

check-import: setup  # make check-import RAW=path/to/mtrag: the committed eval_sets/mtrag-un equals a fresh import
	$(need-raw)
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(BIN)/harness import mtrag "$(RAW)" --out "$$d/mtrag-un" && \
	diff -r -x embeddings eval_sets/mtrag-un "$$d/mtrag-un" && \
	echo "eval_sets/mtrag-un equals a fresh import of $(RAW)"

# Runs only read the shipped embedding caches (eval_sets/*/embeddings) and write new vectors to
# .cache/embeddings/; this adds what CONFIGS (default: the demo's) embed beyond them, on purpose.
refresh-embeddings: setup  # make refresh-embeddings [CONFIGS="configs/x.yaml ..."]; then commit eval_sets/*/embeddings
	$(BIN)/python -m harness.run.refresh $(or $(CONFIGS),$(DEMO_CONFIGS))

# make local-llm: a real local LLM endpoint (llama-server, SmolLM2-135M-Instruct; LLM_MODEL=gemma for Gemma 3 270M)
# on 127.0.0.1:8088 or $LLM_PORT, llama-server built once per machine ($HARNESS_LLAMA_DIR); docs/local-llm.md
.PHONY: local-llm local-llm-stop smoke-llm
local-llm:
	bash scripts/local_llm.sh start

local-llm-stop:  # stops the server make local-llm started on $LLM_PORT (its pid file), nothing else
	bash scripts/local_llm.sh stop

# the real-model smoke (tests/llm_smoke): every LLM role on a few turns against the server at
# HARNESS_LOCAL_LLM_URL (default: LLM_PORT's); fails, never skips, when that server does not answer
smoke-llm: setup
	HARNESS_LOCAL_LLM_URL=$${HARNESS_LOCAL_LLM_URL:-http://127.0.0.1:$${LLM_PORT:-8088}/v1} \
	  $(BIN)/python -m pytest -p no:cacheprovider -q tests/llm_smoke

# make demo-llm: after make local-llm, every LLM arm on SmolLM2-135M-Instruct beside the offline arms, on
# slices of the three sets, twice at temperature 0.7, judged and labelled, then the report
# (scripts/demo_llm.py); the server at HARNESS_LOCAL_LLM_URL (default LLM_PORT's); none: exit 3
.PHONY: demo-llm
demo-llm: setup
	HARNESS_LOCAL_LLM_URL=$${HARNESS_LOCAL_LLM_URL:-http://127.0.0.1:$${LLM_PORT:-8088}/v1} $(BIN)/python scripts/demo_llm.py

# make gate-local [PROMPT=configs/prompts/rewrite.md] [BASE_PROMPT=HEAD:configs/prompts/rewrite.md] [POLICY=...]:
# after make local-llm, a rewrite prompt edit (a file, a git ref or REF:PATH) and its baseline (default: the
# file at HEAD) replayed on a b2b-shop slice against the local model and gated (scripts/gate_local.py,
# docs/local-llm.md); the script exits with the gate's code (make itself exits 2 on any failure)
.PHONY: gate-local
gate-local: setup
	HARNESS_LOCAL_LLM_URL=$${HARNESS_LOCAL_LLM_URL:-http://127.0.0.1:$${LLM_PORT:-8088}/v1} $(BIN)/python scripts/gate_local.py \
	  "$(or $(PROMPT),configs/prompts/rewrite.md)" $(if $(BASE_PROMPT),--baseline "$(BASE_PROMPT)") $(if $(POLICY),--policy "$(POLICY)")

# make bench: replay throughput and warm cache, Ragas's evaluate side by side on the same endpoint, retrieval lanes
# on Vaswani, metrics at 50,000 turns, make demo with one worker and the default;
# one after the other, under 10 minutes on 2 cores; figures in bench/results/latest.md (workloads stated there)
.PHONY: bench
bench: setup
	$(BIN)/python bench/all.py

# make bench-scale: time and peak memory of the replay at 10^4 and 10^5 synthetic turns x 5 offline arms
# (REPLAY_TURNS; about 24 CPU minutes at 10^5), of scoring, compare and report at 10^4, 10^5 and 10^6
# (TURNS) and of the gate at 10^4 and 10^5 (GATE_TURNS: it keeps per-turn rows, 5.2 GB at 10^5) on
# synthetic run folders, each in its own process (not part of make bench, never run by CI); table,
# slopes and plot in bench/results/scale.md and scale.png, figures in scale.json
.PHONY: bench-scale
bench-scale: setup
	$(BIN)/python bench/scale.py --turns $${REPLAY_TURNS:-10000,100000} --stages replay
	$(BIN)/python bench/scale.py --turns $${TURNS:-10000,100000,1000000} --stages metrics,compare,report --source synth
	$(BIN)/python bench/scale.py --turns $${GATE_TURNS:-10000,100000} --stages gate --source synth
