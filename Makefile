# The two commands of the README: `make run` and `make test`. Everything they need is
# installed here, so a fresh clone needs nothing but Python 3.11, Java 17, Maven, Go and make.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
# Every package and its sha256, resolved from pyproject.toml by `make lock`; installs use nothing else.
LOCK   := requirements.lock
# The workspace's members (pyproject.toml [tool.uv.workspace]): each a folder with its own pyproject.toml.
MEMBERS := library pipeline spark-jobs services/api producers infra/stack
MEMBER_NAMES := streamstate streamstate-pipeline streamstate-jobs streamstate-api streamstate-producers streamstate-stack
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(addsuffix /pyproject.toml,$(MEMBERS)) $(LOCK) Makefile | cksum | cut -d' ' -f1)
# Where checkpoints go (both run Apache Kafka with Spark's Kafka connector): embedded
# (the local disk) or production (s3a:// in MinIO, as compose): `make run PROFILE=production`.
PROFILE ?= embedded
# Test sessions side by side (pytest-xdist), each with its own broker and SparkSession. Three
# on 2 cores: with two, the cores were 77 % busy (vmstat), one session in pure-Python tests
# while the other waited on a broker, a timeout or a job's restart; a third fills those gaps
# (93 % busy, 17.6-18.5 min of pytest against 19.6-19.9, docs/profile.md).
TEST_WORKERS ?= 3
# The suite's JVMs (the job processes' Spark drivers, the Kafka brokers) live minutes and the
# suite is bound by 2 cores: compiling with C1 only and collecting serially spends less CPU
# (the e2e test: 61 s of CPU against 71 s, same wall time on an idle machine).
TEST_JVM_OPTIONS ?= -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
# make run's JVMs (broker, the two jobs' Spark drivers) the same way: they all start at once on
# 2 cores, and C2's compiles then delay the first alert (62 s -> 42 s measured; `make run
# RUN_JVM_OPTIONS=` keeps the JVM's defaults, for peak throughput on a long run).
RUN_JVM_OPTIONS ?= $(TEST_JVM_OPTIONS)

# The versions of everything that is not a Python package (SPARK_VERSION, KAFKA_VERSION, ...).
include infra/versions.env

.PHONY: run test lint unit docs images bench soak setup lock java spark-pin test-deps broker-deps class-archives deps versions kinesis-server clean

run: setup class-archives $(if $(filter production,$(PROFILE)),deps) $(if $(filter kinesis,$(STREAMSTATE_SOURCE)),kinesis-server)  ## the whole pipeline until Ctrl-C
	env JAVA_TOOL_OPTIONS="$(RUN_JVM_OPTIONS)" $(BIN)/streamstate up --profile $(PROFILE)

test: setup test-deps deps class-archives ## the whole test suite (CI runs this), a Docker engine and the images included
	bash infra/docker/with-engine.sh env JAVA_TOOL_OPTIONS="$(TEST_JVM_OPTIONS)" $(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal

lint: setup                     ## the inner loop's first step: ruff, mypy and the layers' import contracts, as make test runs them (seconds)
	$(BIN)/ruff check $(MEMBERS) tests bench examples infra
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: setup                     ## the inner loop's second: each member's tests and tests/unit (pure logic, no broker, no Spark; under a minute)
	$(BIN)/pytest $(addsuffix /tests,$(MEMBERS)) tests/unit -n $(TEST_WORKERS) -q

docs: setup                     ## the state library's API reference (mkdocs, mkdocstrings: docs/library/) into build/library-docs/
	$(BIN)/mkdocs build --strict -f docs/library/mkdocs.yml

images: deps                    ## the compose stack's images, built here (starts a Docker engine if none runs); plain `docker compose` then runs them
	bash infra/docker/engine.sh start
	bash infra/deps/install-mc.sh
	bash infra/docker/build-images.sh
	bash infra/docker/use-local-images.sh
	bash infra/docker/engine.sh status

broker-deps: setup              ## Apache Kafka's jars, Spark's Kafka connector and the checkpoint classes of spark-jobs/jvm/ (cached in .deps/)
	bash infra/deps/install-spark-jars.sh
	bash infra/deps/install-kafka.sh
	bash infra/deps/install-checkpoint-io.sh

# Class data sharing: each JVM maps the classes an earlier run loaded instead of loading them
# again (a SparkSession starts in about half the time, a broker about 1 s sooner). Built once per
# Spark, Kafka and Java install; a JVM is given only the archive of its own classpath.
class-archives: broker-deps     ## the Spark drivers' and the brokers' class archives (cached in .deps/class-archives/)
	$(BIN)/python -m streamstate_stack.class_archive

deps: broker-deps               ## and MinIO, for s3a:// checkpoints (PROFILE=production, the tests)
	bash infra/deps/install-minio.sh

versions: setup                 ## re-render docker-compose.yml and the Dockerfiles from infra/versions.env
	$(BIN)/python -m streamstate_stack.version_pins

bench: deps class-archives      ## benchmarks: prints a table, writes bench/results.json
	$(BIN)/python infra/locked_requirements.py --all-members --group test --group bench > $(VENV)/requirements-bench.txt
	$(BIN)/pip install --require-hashes -r $(VENV)/requirements-bench.txt
	$(BIN)/python -m bench

soak: deps class-archives       ## an hour of the anomalies job at 5,000 points/s: latency, fds, sockets, threads and RSS each minute
	$(BIN)/python -m bench.soak

# Not after `setup`: setup installs from the lock, which fails while the lock lacks a new pin.
lock:                           ## re-resolve requirements.lock from the members' pyproject.toml files (after changing a pin)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PYTHON) infra/locked_requirements.py --group lock > $(VENV)/requirements-lock.txt
	$(BIN)/pip install --require-hashes -r $(VENV)/requirements-lock.txt
	$(BIN)/uv pip compile $(addsuffix /pyproject.toml,$(MEMBERS)) --all-extras \
	  $(foreach group,test bench docs build lock,--group pyproject.toml:$(group)) \
	  $(foreach name,$(MEMBER_NAMES),--no-emit-package $(name)) \
	  --universal --python-version 3.11 --generate-hashes -o $(LOCK)
	$(BIN)/python infra/locked_requirements.py --check

setup: java spark-pin $(STAMP)

spark-pin:                      # the wheel and the jars must be the same Spark
	@grep -q '"pyspark==$(SPARK_VERSION)"' spark-jobs/pyproject.toml || { echo "error: infra/versions.env has SPARK_VERSION=$(SPARK_VERSION) but spark-jobs/pyproject.toml pins another pyspark: make them equal." >&2; exit 1; }

java:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17 or newer is required by Spark; install it (e.g. apt-get install -y openjdk-17-jre-headless) and retry." >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  [ "$${v:-0}" -ge 17 ] || { echo "error: Java 17 or newer is required by Spark, found Java $$v." >&2; exit 1; }

$(STAMP): $(LOCK)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) is required." >&2; exit 1; }
	@echo "Installing the project into $(VENV) from $(LOCK), every file checked against its hash (first run: a few minutes)..."
	$(PYTHON) -m venv $(VENV)
	@echo "[1/3] pip, setuptools and wheel: they build the project and the wheel shipped to cluster executors"
	$(PYTHON) infra/locked_requirements.py --group build > $(VENV)/requirements-build.txt
	$(BIN)/pip install --require-hashes -r $(VENV)/requirements-build.txt
	@echo "[2/3] every member's dependencies (with their extras), the test tools and the docs' (make docs; the suite builds them)"
	$(PYTHON) infra/locked_requirements.py --all-members --group test --group docs > $(VENV)/requirements.txt
	$(BIN)/pip install --require-hashes -r $(VENV)/requirements.txt
	@echo "[3/3] the workspace's members (editable, nothing more: their dependencies are in place)"
	$(BIN)/pip install --no-deps --no-build-isolation $(addprefix -e ,$(MEMBERS))
	@# Editable sources get no bytecode from pip. Python reads .pyc files even where
	@# PYTHONDONTWRITEBYTECODE stops it writing them (as on these machines), and then
	@# every job process and Python worker compiled the jobs' modules again: 0.2-0.3 s of CPU each.
	$(BIN)/python -m compileall -q $(addsuffix /src,$(MEMBERS))
	rm -f $(VENV)/.installed-* && touch $@

test-deps: kinesis-server       ## Debian packages the tests use: prometheus, docker-compose, maven
	bash infra/install-test-deps.sh

kinesis-server:                 ## the local Kinesis-API server (kinesis-mock from npm; Node.js from Debian if missing)
	bash infra/kinesis/install.sh

clean:                          ## run-time state (not the installed .deps/)
	rm -rf var .pytest_cache bench/runs
