# The two commands of the README: `make run` and `make test`. Everything they need is
# installed here, so a fresh clone needs nothing but Python 3.11, Java 17 and make.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | cksum | cut -d' ' -f1)

.PHONY: run test bench setup java test-deps kinesis-server compose-check clean

run: setup $(if $(filter kinesis,$(STREAMSTATE_SOURCE)),kinesis-server)  ## embedded stack + jobs + API + producers; Ctrl-C stops all
	$(BIN)/streamstate up

test: setup test-deps           ## the whole test suite (CI runs this)
	$(BIN)/pytest

bench: setup                    ## benchmarks: prints a table, writes bench/results.json
	$(BIN)/pip install -q -e ".[test,bench]"
	$(BIN)/python -m bench

setup: java $(STAMP)

java:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17 or newer is required by Spark; install it (e.g. apt-get install -y openjdk-17-jre-headless) and retry." >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  [ "$${v:-0}" -ge 17 ] || { echo "error: Java 17 or newer is required by Spark, found Java $$v." >&2; exit 1; }

$(STAMP):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) is required." >&2; exit 1; }
	@echo "Installing the project into $(VENV) (first run takes a few minutes)..."
	$(PYTHON) -m venv $(VENV)
	# setuptools and wheel build the project's wheel that is shipped to cluster executors
	# (pip wheel --no-build-isolation); Python 3.11's bundled setuptools cannot.
	$(BIN)/pip install -q --upgrade pip==26.3 setuptools==84.2.1 wheel==0.48.0
	$(BIN)/pip install -q -e ".[test]"
	rm -f $(VENV)/.installed-* && touch $@

test-deps: kinesis-server       ## Debian packages the tests use: prometheus, docker-compose
	bash infra/install-test-deps.sh

kinesis-server:                 ## the local Kinesis-API server (kinesis-mock from npm; Node.js from Debian if missing)
	bash infra/kinesis/install.sh

clean:
	rm -rf var .pytest_cache bench/runs
