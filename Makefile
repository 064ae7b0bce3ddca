# The two commands of the README: `make run` and `make test`. Everything they need is
# installed here, so a fresh clone needs nothing but Python 3.11, Java 17, Maven, Go and make.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | cksum | cut -d' ' -f1)
# embedded (Tansu in memory, local checkpoints) or production (Apache Kafka, Spark's
# Kafka connector, s3a:// checkpoints in MinIO): `make run PROFILE=production`.
PROFILE ?= embedded

# The versions of everything that is not a Python package (SPARK_VERSION, KAFKA_VERSION, ...).
include infra/versions.env

.PHONY: run test bench setup java spark-pin test-deps deps versions kinesis-server clean

run: setup $(if $(filter production,$(PROFILE)),deps) $(if $(filter kinesis,$(STREAMSTATE_SOURCE)),kinesis-server)  ## the whole pipeline until Ctrl-C
	$(BIN)/streamstate up --profile $(PROFILE)

test: setup test-deps deps      ## the whole test suite (CI runs this)
	$(BIN)/pytest

deps: setup                     ## the production profile's parts: Spark jars, Apache Kafka, MinIO (cached in .deps/)
	bash infra/deps/install-spark-jars.sh
	bash infra/deps/install-kafka.sh
	bash infra/deps/install-minio.sh

versions: setup                 ## re-render docker-compose.yml and the Dockerfiles from infra/versions.env
	$(BIN)/python -m streamstate.version_pins

bench: setup                    ## benchmarks: prints a table, writes bench/results.json
	$(BIN)/pip install -q -e ".[test,bench]"
	$(BIN)/python -m bench

setup: java spark-pin $(STAMP)

spark-pin:                      # the wheel and the jars must be the same Spark
	@grep -q '"pyspark==$(SPARK_VERSION)"' pyproject.toml || { echo "error: infra/versions.env has SPARK_VERSION=$(SPARK_VERSION) but pyproject.toml pins another pyspark: make them equal." >&2; exit 1; }

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

test-deps: kinesis-server       ## Debian packages the tests use: prometheus, docker-compose, maven
	bash infra/install-test-deps.sh

kinesis-server:                 ## the local Kinesis-API server (kinesis-mock from npm; Node.js from Debian if missing)
	bash infra/kinesis/install.sh

clean:                          ## run-time state (not the installed .deps/)
	rm -rf var .pytest_cache bench/runs
