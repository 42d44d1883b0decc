# fairlane's developer commands. `make demo` and `make test` are the two that matter; both
# set everything up on first use (a virtualenv in .venv/, the package installed editable).
#
# Variables: PYTHON (the interpreter that creates .venv, default python3), DATABASE_URL (for
# migrate, demo, bench and the tests; see queue/fairlane/config.py), PYTEST_ARGS, DEMO_ARGS and
# BENCH_ARGS (passed through to pytest, `fairlane demo` and `fairlane bench suite`).
#
# `make bench` (bench/README.md, "make bench: the side-by-side table"): PEERS_DIR is the peer
# harness, a directory outside this repository (empty, the default: fairlane's steps alone; also
# read from the environment); PEERS_VENV and PEERS_NODE its interpreters (empty: what its
# run_all.sh uses); BENCH_OUT the results file appended to; REPS the repetitions (medians when
# more than one); QUICK=1 the 20k sizes only; BENCH_SIZES the drain sizes (default 20k,100k,1M).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Written after a successful install; remade when pyproject.toml changes.
STAMP := $(VENV)/.fairlane-installed
LINT_PATHS := queue tests migrations tools

PYTEST_ARGS ?=
DEMO_ARGS ?=
BENCH_ARGS ?=
PEERS_DIR ?=
PEERS_VENV ?=
PEERS_NODE ?=
export PEERS_DIR PEERS_VENV PEERS_NODE
BENCH_OUT ?= bench/results/$(shell date +%F).jsonl
REPS ?= 1
QUICK ?=
BENCH_SIZES ?=

.PHONY: help install runtime lint generate test stress chaos migrate demo bench clean

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z]+):.*## /  make \1\t/' | expand -t 20

install: $(STAMP) ## create .venv and install fairlane editable, with the dev, embedded and web extras

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,embedded,web]'
	@touch $@ $(RUNTIME_STAMP)

# What the demo and migrate need, without the test and lint tools; `make install` covers it.
RUNTIME_STAMP := $(VENV)/.fairlane-runtime-installed
runtime: $(RUNTIME_STAMP)

$(RUNTIME_STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[embedded]'
	@touch $@

lint: install ## ruff (lint and format check) and mypy
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy

# tests/unit/test_generated_sync.py (in `make test`) fails when a generated file is stale.
generate: install ## write the sync code generated from its async source (client.py, sync sections, ...)
	$(BIN)/python tools/async_to_sync.py

# pytest exits 5 when it collected no test: that fails here like any other non-zero status.
test: install ## run the test suite (needs PostgreSQL: DATABASE_URL, or the local server)
	@status=0; $(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; \
	exit $$status

stress: install ## the stress tests: many transactions, threads and worker processes at once
	$(BIN)/pytest -m stress -q -s $(PYTEST_ARGS)

# Its own throwaway cluster (initdb from the local PostgreSQL binaries), so no DATABASE_URL.
chaos: install ## worker processes killed, a cluster of its own restarted, crashed and frozen
	$(BIN)/pytest -m chaos -q -s $(PYTEST_ARGS)

migrate: runtime ## apply fairlane's migrations to DATABASE_URL (creates the database if missing)
	$(BIN)/fairlane migrate

demo: runtime ## a multi-tenant workload with live progress (embedded PostgreSQL if none answers)
	$(BIN)/fairlane demo $(DEMO_ARGS)

SUITE_ARGS = --out '$(BENCH_OUT)' --reps '$(REPS)' $(if $(QUICK),--quick) \
	$(if $(BENCH_SIZES),--sizes '$(BENCH_SIZES)') $(BENCH_ARGS)

bench: install ## fairlane beside the peer harness (PEERS_DIR): one JSON line per step, a table; then waits, keys, key-rate and periodic
	$(BIN)/fairlane bench suite $(strip $(SUITE_ARGS))
	$(BIN)/fairlane bench waits
	$(BIN)/fairlane bench keys
	$(BIN)/fairlane bench key-rate
	for tenants in 1 1000 10000; do $(BIN)/fairlane bench periodic --tenants $$tenants; done

clean: ## stop the embedded server if it runs; remove .venv, .pgdata and caches
	@if [ -f .pgdata/postmaster.pid ] && [ -x $(BIN)/python ]; then \
		$(BIN)/python -m fairlane.tools.embedded stop --data-dir .pgdata; fi
	rm -rf $(VENV) .pgdata .mypy_cache .ruff_cache .pytest_cache build dist
	find . -path ./.git -prune -o \( -name __pycache__ -o -name '*.egg-info' \) -type d -prune \
		-exec rm -rf {} +
