# `make run`: the main job on the shipped default profile (no GPU, no torch needed).
# `make test`: the test suite (installs the CPU build of torch for the tiny-model tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
QPS ?= 1,2,4,8

.PHONY: run test install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

# torch==2.13.0 first: a CPU wheel, so the `measure` extra pulls no CUDA packages.
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[measure,dev]"
	touch $(VENV)/.base $@

install: $(VENV)/.base
install-test: $(VENV)/.test

run: $(VENV)/.base
	$(BIN)/costmodel simulate --qps $(QPS) --mode diffusion,ar,mtp --hardware h200 -o out/simulate

test: $(VENV)/.test
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -n 2 tests

clean:
	rm -rf $(VENV) .pytest_cache
