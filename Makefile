# claimrace: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m ipykernel install --sys-prefix --name claimrace --display-name "claimrace (.venv)" >/dev/null
	@touch $(STAMP)

install: $(STAMP) ## create .venv and install the package with its test and dev extras

report: $(STAMP) ## run the races, plans, churn and notebooks; write report/index.html (PARAMS=other.yml)
	$(PY) -m harness.report $(if $(PARAMS),--params $(PARAMS))

test: $(STAMP) ## run the test suite against an embedded PostgreSQL 16
	$(PY) -m pytest

bench: $(STAMP) ## harness vs pgbench on the same SQL at 1, 8, 32, 64, 100 workers (prints ratios)
	$(PY) -m harness bench

lab: $(STAMP) ## open the notebooks in JupyterLab with the project's kernel
	$(VENV)/bin/jupyter lab notebooks/

db-up: ## start postgres:16 on tmpfs with Docker (then export DATABASE_URL, see compose.yml)
	docker compose up -d --wait
	@echo "export DATABASE_URL=postgresql://postgres@127.0.0.1:54316/postgres"

db-down: ## stop the compose server and any embedded server a killed harness left behind
	-docker compose down --volumes 2>/dev/null
	@if [ -x $(PY) ]; then $(PY) -m harness reap; fi

clean: ## remove results and the built report (keeps .venv)
	find data -mindepth 1 ! -name README.md -exec rm -rf {} +
	find report -mindepth 1 ! -name README.md -exec rm -rf {} +

.PHONY: help install report test bench lab db-up db-down clean
