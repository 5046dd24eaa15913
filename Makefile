# The README's two commands: `make run` (start the service on an embedded Redis-compatible server)
# and `make test` (lint, type-check, test). Each builds the virtual environment on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck pytest bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,trace,embedded]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/rollout-scheduler serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy scheduler predictors service tests

pytest: $(STAMP)
	$(BIN)/pytest

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m service.benchreport --out docs/benchmarks.md

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
