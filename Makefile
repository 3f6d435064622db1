# The two Quickstart commands: `make run` (set up, run the default scenario) and `make test`
# (set up, install the system tools the tests need, run every test).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: run test tools native lint docs figures bench clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install -q -e '.[test,hdl,dask]'
	touch $@

run: $(VENV)/.base native
	$(VENV)/bin/nicsim run

tools:
	@bash scripts/install-tools.sh

# nicsim's libibverbs.so.1 for C programs under `nicsim exec` (native/libibverbs, into
# build/native), from gcc and libibverbs-dev; skipped with a note where they are missing
# (`make tools` installs them; nicsim exec also builds it on first use).
native:
	@if command -v $(CC) >/dev/null 2>&1 && [ -f /usr/include/infiniband/verbs.h ]; then \
		$(MAKE) -s -C native/libibverbs OUT=$(CURDIR)/build/native; \
	else \
		echo "note: no gcc or libibverbs-dev: C programs under nicsim exec need them (make tools)"; \
	fi

# (native after tools, which installs what it is built from)
test: $(VENV)/.test tools
	@$(MAKE) -s native
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
	rm -rf $(VENV) hdl_tb/sim_build traces/*.pcap build/native
