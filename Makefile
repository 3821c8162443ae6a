# The two commands a newcomer needs: `make demo` and `make test`.
# Both do every setup step they need (venv, pip, emulator tools, Java bridge).

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test cluster-test faults soak setup venv tools bridge lint clean bench dist resolve-time

demo: setup
	$(PY) examples/demo.py

# The install-from-wheel test runs in a pytest process of its own: the jobs of the main run
# leave PyFlink's gateway and the repository's PYTHONPATH in the process's environment, and a
# clean venv must see neither.
# Every example on a standalone cluster (tests/cluster/test_examples.py) takes minutes, so it
# runs in `make cluster-test` only; `make test` keeps the cluster's TaskManager-kill test.
# --durations lists the 30 slowest tests, so a run shows where its wall time goes.
# TEST_WORKERS pytest processes (pytest-xdist) share the test files, each with its own
# emulators and PyFlink gateway: one process leaves a third of two cores idle while its jobs
# start JVMs and wait for checkpoints. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest tests --ignore=tests/packaging --ignore=tests/cluster/test_examples.py --durations=30 -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
	$(PY) -m pytest tests/packaging $(PYTEST_ARGS) || test $$? -eq 5

cluster-test: setup
	$(PY) -m pytest tests/cluster $(PYTEST_ARGS)

# The fault suite (tests/faults/, docs/reliability.md): every sink on a standalone cluster with
# faults injected, every record counted; minutes per sink, so not in `make test`.
# FAULTS_ARGS="--full" runs 4 runs of 5 faults per sink, "--sink pubsub --seed 7" a subset.
faults: setup
	$(PY) -m tests.faults $(FAULTS_ARGS)

# The soak (tests/soak/, docs/reliability.md "Soak"): each sink for an hour on a standalone
# cluster, destinations churning, a TaskManager killed every 10 minutes, RSS, threads, sockets
# and checkpoint durations sampled; an hour per sink, so not in `make test`.
# SOAK_ARGS="--sink pubsub --minutes 12 --kill-every 5" runs a short one.
soak: setup
	$(PY) -m tests.soak $(SOAK_ARGS)

setup: venv tools bridge

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

# The Java bridge jar, compiled with javac against the installed Flink jars (seconds; skipped
# when its sources and the Flink version are unchanged).
bridge: venv
	$(PY) -m pyflink_gcp.cli bridge build

# ruff (its rules include unused-noqa detection, so a stale suppression fails) and mypy.
lint: venv
	$(VENV)/bin/ruff check pyflink_gcp tests examples bench setup.py
	$(VENV)/bin/ruff format --check pyflink_gcp tests examples bench setup.py
	$(VENV)/bin/mypy pyflink_gcp

# The sdist and the wheel (with the bridge jar, compiled by setup.py) in dist/. The build runs
# in an isolated environment with apache-flink-libraries, the Flink jars the bridge compiles
# against; about 10 s with a warm pip cache.
dist: venv
	rm -rf dist
	$(PY) -m build --outdir dist .

# How long pip takes to resolve (the dry run), then resolve and install, the wheel with [all]
# into a fresh venv from the ranges in pyproject.toml alone (no constraints file), as a pip user
# installs it; the install unpacks about 1 GB (apache-flink's jars are 330 MB of it).
resolve-time: dist
	rm -rf build/resolve-venv
	$(PYTHON) -m venv build/resolve-venv
	build/resolve-venv/bin/python -m pip install --quiet --upgrade pip
	bash -c 'time build/resolve-venv/bin/python -m pip install --quiet --dry-run "$$(ls dist/*.whl)[all]"'
	bash -c 'time build/resolve-venv/bin/python -m pip install --quiet "$$(ls dist/*.whl)[all]"'

clean:
	rm -rf $(VENV) build dist *.egg-info
