# Two commands do the whole set-up on a fresh machine with python3 and make:
#   make demo   runs the main job on embedded defaults (no server, no API key)
#   make test   runs the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint docs bench mutants faults soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,bench,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agentloop demo

# The suite in TEST_JOBS processes (pytest-xdist), a test file to a process: most of a test's time is
# spent waiting on a worker, a server or a model double, so three processes on two cores keep both
# cores busy while one waits. TEST_JOBS=0 runs it in this process.
TEST_JOBS ?= 3
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (mkdocs.yml), built into site/ in strict mode and offline: a broken link,
# a missing reference or a public name without a docstring fails it. The reference pages are
# generated from the code at build time (docs/hooks/).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: $(STAMP)
	$(BIN)/python -m bench

# The fault suite on a real worker, a private Redis and PostgreSQL (tests/faults/): each scenario's
# runs tried / completed / failed with a reason / lost / stuck; then again on a private RabbitMQ
# node; then the guarantee matrix (tests/faults/matrix.py) on both brokers, every cell, each one
# run even when an earlier one failed. CI runs their quick parts (Redis) in `make test`.
faults: $(STAMP)
	$(BIN)/python -m tests.faults --broker redis $(FAULTS_ARGS)
	$(BIN)/python -m tests.faults --broker rabbitmq $(FAULTS_ARGS)
	status=0; for broker in redis rabbitmq; do \
	  $(BIN)/python -m tests.faults matrix --broker $$broker || status=1; done; exit $$status

# The bounded soak (about 5 minutes per broker, not in CI): mixed workflows and a poison message
# every 10 s; the worker's memory and Redis's keys must stay flat and every run must end.
soak: $(STAMP)
	$(BIN)/python -m tests.faults soak --minutes 5 --broker redis
	$(BIN)/python -m tests.faults soak --minutes 5 --broker rabbitmq

# A mutation run over the decision points ([tool.mutmut] in pyproject.toml; not part of CI):
# each mutant of the bound, budgets, width rules, registry, redaction and store seams against
# the fast tests that reach it, at the lowest priority. `$(BIN)/mutmut show NAME` shows a survivor.
mutants: $(STAMP)
	$(BIN)/pip install --quiet -e '.[mutation]'
	rm -rf mutants
	nice -n 19 $(BIN)/mutmut run --max-children 2 > /dev/null
	$(BIN)/mutmut results
	$(BIN)/mutmut export-cicd-stats
	$(BIN)/python -c "import json; s = json.load(open('mutants/mutmut-cicd-stats.json')); \
		print(f\"killed {s['killed'] + s['timeout']} of {s['total']} mutants\", \
		f\"({s['timeout']} by a timeout, {s['survived']} survived, {s['no_tests']} untested)\")"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache mutants site
