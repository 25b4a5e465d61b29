# Fjord developer entry points. `make run` and `make test` are the only two commands a fresh machine needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Three installs, each a stamp: the broker alone (`make run`, nothing but the broker's own dependencies, so a fresh
# machine serves in well under a minute), the Spark pipelines (`make pipelines-install`: PySpark with Spark Connect
# and Declarative Pipelines, and Java), and everything the tests need (`make test`).
STAMP := $(VENV)/.installed
PIPELINES_STAMP := $(VENV)/.installed-pipelines
DEV_STAMP := $(VENV)/.installed-dev
JAVA_STAMP := .cache/java.installed
SYSTEM_STAMP := .cache/system-deps.installed
RDK_RUNNER := .cache/librdkafka/src/tests/test-runner
SOURCES := node broker spark_connector controller metadata settings raft wire storage tests bench scripts testkit

.PHONY: install pipelines-install run test lint unit bench clean

install: $(DEV_STAMP) $(SYSTEM_STAMP)

pipelines-install: $(PIPELINES_STAMP) $(JAVA_STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(PIPELINES_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[spark]'
	touch $(PIPELINES_STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP)

# Spark runs on the JVM: Java 17 from Debian's packages (scripts/install-system-deps.sh --java installs only it).
$(JAVA_STAMP): scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh --java
	mkdir -p .cache && touch $(JAVA_STAMP)

# Everything the tests need from outside PyPI: Debian's kcat/librdkafka, Java for Spark, and kafkajs from npm.
$(SYSTEM_STAMP): scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh
	mkdir -p .cache && touch $(SYSTEM_STAMP)

# librdkafka's own conformance suite, built from Debian's source package (tests/broker/test_librdkafka_suite.py).
$(RDK_RUNNER): scripts/build-librdkafka-tests.sh $(SYSTEM_STAMP)
	bash scripts/build-librdkafka-tests.sh

run: $(STAMP)
	$(BIN)/fjord server start --config config/server.properties

# ruff, mypy strict, the package layers of DESIGN.md section 2 (import-linter contracts in pyproject.toml), and
# the module size limit ([tool.fjord.module-size] in pyproject.toml: past it a module usually holds two ideas).
lint: install
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/mypy
	$(BIN)/mypy --strict scripts/check_module_size.py
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_module_size.py

# The nodes a test run starts run as installed ones do: each module compiled to bytecode once (by the first process
# that imports it) and kept, here in .cache/pycache. Under PYTHONDONTWRITEBYTECODE=1, which development machines
# set, every node process the suite starts compiled the project's ~370 modules again (tests/node: 62 s
# against 53). The bytecode is checked against each source file's time and size, as Python always does.
AS_INSTALLED = env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/.cache/pycache

unit: install
	$(AS_INSTALLED) $(BIN)/pytest -q tests

# The suite in two lanes (scripts/test_lanes.py: librdkafka's suite, which mostly waits, beside the rest);
# --durations: the slowest tests, so the suite's time budget (under 60 minutes with the install) can be kept.
test: install $(RDK_RUNNER)
	$(MAKE) lint
	$(AS_INSTALLED) $(BIN)/python scripts/test_lanes.py --durations=30

bench: install
	$(BIN)/python bench/storage.py

clean:
	rm -rf $(VENV) .cache build *.egg-info .pytest_cache .mypy_cache .ruff_cache
