# The two commands a newcomer runs (see README.md):
#   make demo    install what it needs into .venv, then run the whole loop on this machine (crcr demo)
#   make test    install everything into .venv and run lint, import contracts and tests
# make serve runs the relay alone on the embedded default (SQLite, a supervised worker child process).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_WORKERS ?= 2

.PHONY: serve demo test lint unit install install-dev clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# base install: the relay needs no torch
$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# everything the tests need; torch is pinned first so the CPU wheel on disk is taken
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,postgres,redis,llm,torch,fast]'
	touch $(VENV)/.installed-base $@

install: $(VENV)/.installed-base
install-dev: $(VENV)/.installed-dev

serve: $(VENV)/.installed-base
	$(BIN)/crcr serve

# torch and git are needed: the demo's runs execute upstream tests on snpu
demo: $(VENV)/.installed-dev
	$(BIN)/crcr demo $(DEMO_ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

test: lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --durations=25 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .crcr .pytest_cache .ruff_cache .hypothesis
