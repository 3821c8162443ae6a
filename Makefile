# The two commands a newcomer needs: `make demo` and `make test`.
# Both do every setup step they need (venv, pip, emulator tools, Java bridge).

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test setup venv tools lint clean bench

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest tests $(PYTEST_ARGS)

setup: venv tools

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all,dev]"
	touch $(STAMP)

# Emulator tools (bqemulator venv, Go Cloud Tasks emulator) are cached outside
# the tree; this step is idempotent and takes seconds when warm.
tools: venv
	$(PY) -m pyflink_gcp.cli emulators setup

lint: venv
	$(VENV)/bin/ruff check pyflink_gcp tests examples bench
	$(VENV)/bin/ruff format --check pyflink_gcp tests examples bench

clean:
	rm -rf $(VENV) build *.egg-info
