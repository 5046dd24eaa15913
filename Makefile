# The README's two commands: `make run` (start the service on an embedded Redis-compatible server)
# and `make test` (lint, type-check, test). Each builds the virtual environment on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest's parallel workers: most integration tests wait (sleeps, TTLs, servers starting, SIGSTOPped
# processes) rather than compute, so 5 workers finish the suite sooner than 1 even on 2 cores: at 4 the
# cores idled mid-run where wait-heavy modules met (470 -> 425 s in one clone, round 60; docs/experiments.md,
# "CI time"). `make test PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS ?= 5
# Python may write bytecode in these commands whatever the environment says (PYTHONDONTWRITEBYTECODE):
# pytest caches its rewrite of the test modules' asserts only where it may, and tests/rewrite_ahead.py
# writes that cache once, before pytest's workers start, where each worker would otherwise rewrite all
# ~670 modules itself (~12 CPU-s a worker; docs/experiments.md, collect58). Caches are in __pycache__
# folders, which git ignores.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test lint typecheck pytest bench venv clean

venv: $(STAMP)

# pip byte-compiles what it installs on one core (~36 of its ~62 CPU-s on 2 cores); compileall -j 0 does
# the same compile on every core (docs/experiments.md, "CI time: the single-threaded minutes"), less the
# test suites the libraries ship (pandas', scipy's, numpy's... 1,998 of the venv's 7,439 modules), which
# nothing here imports: 27 CPU-s where all took 45, medians of 3 (docs/experiments.md, "CI time: the
# libraries' test suites left uncompiled"). One imported after all is compiled by its first importer.
# The runtime dependencies at deploy/constraints.txt's pins, the image's: the tests run what the image
# ships, whatever the registry serves that day (tests/deploy/test_constraints_in_step.py holds the two
# together). To upgrade one: pip install it in the venv, run the tests, then deploy/pin_constraints.py.
# The venv's own pip (ensurepip's: 23.2 with Python 3.11.7) installs all of this (an editable install
# of a pyproject build needs 21.3), so it is not upgraded first: that was a registry round trip and a
# reinstall of pip's own files on one core before anything else could start: a venv and the upgrade
# 34.5 s (9.1 CPU-s), the venv alone 26.8 s (7.6), medians of 3 pairs at load 19-28 on 2 cores
# (docs/experiments.md, helper ci65).
$(STAMP): pyproject.toml deploy/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile --constraint deploy/constraints.txt -e '.[dev,trace,embedded]'
	$(BIN)/python -m compileall -q -j 0 -x 'site-packages/.*/tests/' $(VENV)
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/rollout-scheduler serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Every folder that holds Python, deploy/'s scripts included (the image runs its health check):
# tests/test_quick_start_docs.py checks the list against the tree.
typecheck: $(STAMP)
	$(BIN)/mypy scheduler predictors service tests deploy

pytest: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadscope

# mypy (~60 CPU-s, one core) runs beside pytest, which keeps both cores ~88% busy: run one after the
# other, mypy left a core idle for a minute of every CI run. No --output-sync: it would hold back
# pytest's progress until the end; mypy prints its one report when it ends.
test: lint
	$(MAKE) --no-print-directory -j 2 typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m service.bench.report --out docs/benchmarks.md

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
