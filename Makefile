# fleetmon — two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
SERVICES = scripts/services.sh

.PHONY: install run lint test test-unit test-integration services services-down services-status bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# the native fast path of the worker (Rust, built by maturin with the machine's cargo)
NATIVE_SOURCES = $(wildcard native/src/*.rs) native/Cargo.toml native/Cargo.lock native/pyproject.toml
$(BIN)/.native: $(BIN)/.installed $(NATIVE_SOURCES)
	PATH="$(HOME)/.cargo/bin:$$PATH" $(BIN)/pip install -q ./native
	touch $@

install: $(BIN)/.installed $(BIN)/.native

run: install
	$(BIN)/fleetmon run --config fleetmon.toml

# FLEETMON_SERVICES_SECURE=1 adds the SASL_SSL Kafka listener and the TLS Redis that
# tests/integration/test_secure.py runs on (docs/operating.md "Secure transports"); SERVICES_SECURE=0 leaves them out
SERVICES_SECURE ?= 1
# FLEETMON_SERVICES_REDIS_CLUSTER=1 adds the six-node Redis Cluster on 7000-7005 that
# tests/integration/test_cluster.py runs on (docs/operating.md "Redis Cluster"); SERVICES_REDIS_CLUSTER=0 leaves it out
SERVICES_REDIS_CLUSTER ?= 1
services:
	FLEETMON_SERVICES_SECURE=$(SERVICES_SECURE) FLEETMON_SERVICES_REDIS_CLUSTER=$(SERVICES_REDIS_CLUSTER) bash $(SERVICES) start

services-down:
	bash $(SERVICES) stop

services-status:
	bash $(SERVICES) status

test-unit: install
	$(BIN)/python -m pytest tests/unit tests/property -q -n 2

test-integration: install services
	$(BIN)/python -m pytest tests/integration -q -n 2 --dist loadgroup

# ruff (rules in pyproject.toml) and mypy (files and the strict core listed in pyproject.toml)
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# unit and property tests are CPU-bound: two processes (pytest-xdist) on the machine's 2 cores;
# the integration tests mostly wait on real services and rate-limited feeders: two processes too,
# the files that share a port or the Redis Cluster kept in one (tests/integration/conftest.py XDIST_GROUPS)
# (both runs always run, so one failing does not hide the other's results)
test: install lint services
	$(BIN)/python -m pytest -q -n 2 --durations=15 tests/unit tests/property; unit=$$?; \
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25 tests/integration; integration=$$?; \
	test $$unit -eq 0 -a $$integration -eq 0

bench: install services
	$(BIN)/python bench/stats_bench.py

clean:
	rm -rf $(VENV) .services build *.egg-info native/target
