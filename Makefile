# The two Quickstart commands: `make run` (set up, run the default scenario) and `make test`
# (set up, install the system tools the tests need, run every test).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: run test tools lint docs figures bench clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install -q -e '.[test,hdl,dask]'
	touch $@

run: $(VENV)/.base
	$(VENV)/bin/nicsim run

tools:
	@bash scripts/install-tools.sh

test: $(VENV)/.test tools
	$(PY) -m pytest -q -n 2 -p no:cacheprovider

lint: $(VENV)/.test
	$(VENV)/bin/ruff check .
	$(PY) scripts/lint_imports.py

docs: $(VENV)/.test
	$(VENV)/bin/mkdocs build --strict

# docs/benchmarks.md: every benchmark run now on this machine (several minutes)
figures: $(VENV)/.test
	$(PY) scripts/figures.py

clean:
	rm -rf $(VENV) hdl_tb/sim_build traces/*.pcap
