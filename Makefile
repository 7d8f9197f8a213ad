# claimrace: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'

NODE_LIBS := harness/libraries/node
NODE_STAMP := $(NODE_LIBS)/node_modules/.package-lock.json

$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the exact versions the report was built with, then the package itself
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name claimrace --display-name "claimrace (.venv)" >/dev/null
	@touch $(STAMP)

# the Node job libraries (pg-boss, graphile-worker), pinned by their package-lock.json, where Node runs; without
# node and npm, one line, and they are tried again on the next make (npm ci writes the stamp)
$(NODE_STAMP): $(NODE_LIBS)/package-lock.json
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		npm ci --prefix $(NODE_LIBS) --no-audit --no-fund --loglevel=error \
			|| echo "npm ci failed: pg-boss and graphile-worker will not be raced (make install tries again)" >&2; \
	else \
		echo "node and npm not found: pg-boss and graphile-worker will not be raced (install Node.js 20 and npm, then run make install)" >&2; \
	fi

install: $(STAMP) $(NODE_STAMP) ## create .venv, install requirements.lock's pins and the package, and npm ci the Node job libraries

lock: ## re-pin requirements.lock from pyproject.toml's ranges (newest versions that fit; Python 3.11)
	@test -x $(VENV)/lock/bin/pip-compile || ($(PYTHON) -m venv $(VENV)/lock && $(VENV)/lock/bin/pip install --quiet pip-tools)
	$(VENV)/lock/bin/pip-compile --quiet --upgrade --extra dev --strip-extras --no-emit-index-url \
		--no-emit-find-links --output-file requirements.lock pyproject.toml

report: $(STAMP) $(NODE_STAMP) ## run the races, plans, churn and notebooks; write report/index.html (PARAMS=other.yml)
	$(PY) -m harness.report $(if $(PARAMS),--params $(PARAMS))

# Test files run in TEST_WORKERS processes, each with its own embedded server; most tests wait on servers, workers
# and sleeps rather than on a CPU, so there are more workers than CPUs. Tests marked serial (CPU shares, timing)
# still run with no other test beside them; tests/conftest.py sees to it. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 3

test: $(STAMP) $(NODE_STAMP) ## run the test suite against an embedded PostgreSQL 16 (TEST_WORKERS=3 processes)
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

bench: $(STAMP) $(NODE_STAMP) ## harness vs pgbench on the same SQL at 1, 8, 32, 64, 100 workers, 5 pairs of 10 s (about an hour)
	$(PY) -m harness bench

lab: $(STAMP) $(NODE_STAMP) ## open the notebooks in JupyterLab with the project's kernel
	$(VENV)/bin/jupyter lab notebooks/

db-up: ## start postgres:16 on tmpfs with Docker (then export DATABASE_URL, see compose.yml)
	@command -v docker >/dev/null || { echo "make db-up: docker is not installed; make report starts an embedded server without it" >&2; exit 2; }
	@docker compose version >/dev/null 2>&1 || { echo "make db-up: this Docker has no compose plugin (docker compose); install it, or run make report, which starts an embedded server" >&2; exit 2; }
	docker compose up -d --wait
	@echo "export DATABASE_URL=postgresql://postgres@127.0.0.1:54316/postgres"

db-down: ## stop the compose server and any embedded server a killed harness left behind
	-docker compose down --volumes 2>/dev/null
	@if [ -x $(PY) ]; then $(PY) -m harness reap; fi

clean: ## remove results and the built report (keeps .venv)
	find data -mindepth 1 ! -name README.md -exec rm -rf {} +
	find report -mindepth 1 ! -name README.md -exec rm -rf {} +

.PHONY: help install lock report test bench lab db-up db-down clean
