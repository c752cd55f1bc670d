# Quick start: `make run` (server on 127.0.0.1:11300, data in ./data) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: run test test-fast lint bench system-deps bytecode ext crash-campaign failover-campaign fuzz clean dashboard-screenshot

$(VENV)/.base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@

$(VENV)/.dev: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[dev]'
	touch $@ $(VENV)/.base

system-deps:
	bash scripts/system-deps.sh

# The compiled hot path: the .py modules Cython compiles (stalkd.extensions.CYTHON_MODULES) and
# the C accelerators (stalkd.protocol._speedups, stalkd.server._conn, ...), rebuilt when a source
# changes. Without a compiler or Cython setup.py warns and the .py files run; STALKD_NO_EXTENSIONS=1
# forces them.
CYTHON_SRC := $(shell $(PYTHON) -c 'exec(open("src/stalkd/extensions.py").read()); print(*map(source_path, CYTHON_MODULES))')

ext: $(VENV)/.ext

$(VENV)/.ext: $(VENV)/.base setup.py src/stalkd/extensions.py $(CYTHON_SRC) src/stalkd/protocol/_speedups.c $(wildcard src/stalkd/protocol/_cext/*.h) src/stalkd/server/_conn.c $(wildcard src/stalkd/server/_cext/*.h) src/stalkd/engine/_heap.c src/stalkd/engine/_engine.c $(wildcard src/stalkd/engine/_cext/*.h) \
		src/stalkd/engine/_records.c src/stalkd/engine/_wal.c src/stalkd/log/_frames.c \
		src/stalkd/log/_write.c $(wildcard src/stalkd/log/_cext/*.h)
	$(PIP) install -e . --no-deps
	touch $@

# An editable install leaves src/ without bytecode, and where PYTHONDONTWRITEBYTECODE is set
# (as on these machines) every start compiles it again: ~70 ms more before the server's first
# reply (150 instead of 80 ms), which client test fixtures that wait 0.1 s notice.
bytecode: $(VENV)/.base $(VENV)/.ext
	$(PY) -m compileall -q src >/dev/null

# `make run PORT=11301 DIR=/tmp/q` runs a second server beside the first.
PORT ?= 11300
DIR  ?= ./data

run: $(VENV)/.base bytecode
	$(VENV)/bin/stalkd serve -p $(PORT) --dir $(DIR)

# The whole suite (with the C accelerators when they are built), then the parser and transcript
# tests, the connection's (its queues, limits, reads and ACL, over real sockets too), the
# engine tests that move jobs between heaps and the WAL's tests (its record and frame encoders,
# its write, sync and room, whose compiled twins tests/engine/test_wal_chain_differential.py
# holds to the references in the first run),
# again on the pure-Python modules, the reference and fallback (stalkd's side only: the
# transcripts run against beanstalkd do not
# involve either). Not rerun there: the transcripts against stalkd+tls, whose plain listener runs
# the same parser and encoders as plain stalkd's (the TLS and ACL setup is what they add, and it
# does not change with the switch), and the build test, which compiles the extension in a
# subprocess that ignores the switch. pytest's exit code 5 (no tests collected) is a failure, as
# is any other non-zero.
PURE_TESTS := tests/protocol tests/compat tests/server/test_conn.py tests/server/test_readbuf.py \
	tests/server/test_output_limit.py tests/server/test_input_limit.py tests/server/test_wire.py \
	tests/server/test_server.py tests/server/test_acl.py tests/engine/test_commands.py tests/engine/test_kick_steps.py \
	tests/engine/test_step_budget.py tests/engine/test_heap_build.py tests/engine/test_tail.py \
	tests/engine/test_snapshot_v2.py tests/engine/test_wal_encoders_build.py tests/engine/test_wal.py \
	tests/log/test_group_commit.py tests/log/test_log_basic.py tests/server/test_group_commit.py tests/server/test_lone_writer.py \
	tests/engine/test_room.py tests/engine/test_space_short.py tests/engine/test_spare_files.py tests/engine/test_wal_files.py \
	tests/log/test_zero_ahead.py
PURE_SKIP  := not stalkd+tls and not test_a_missing_compiler_is_a_warning_not_a_failed_build

test: system-deps $(VENV)/.dev bytecode
	$(PY) -m pytest -q --durations=15
	STALKD_NO_EXTENSIONS=1 $(PY) -m pytest -q -m "not beanstalkd" -k "$(PURE_SKIP)" $(PURE_TESTS)

# Everything but the Spark and long crash tests, for a quick loop while developing.
test-fast: $(VENV)/.dev $(VENV)/.ext
	$(PY) -m pytest -q -m "not spark and not slow" -x

# check_imports: no import cycles among stalkd's modules, counting function-local and
# TYPE_CHECKING imports too (a cycle mypy sees is still two modules that know each other).
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests bench scripts examples
	$(VENV)/bin/mypy
	$(PY) scripts/check_imports.py --count typing

bench: system-deps $(VENV)/.dev bytecode
	for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Long campaigns, not part of `make test`.
crash-campaign: $(VENV)/.dev
	STALKD_CRASH_CYCLES=1000 $(PY) -m pytest -q tests/log/test_crash.py

# kill -9 of a --sync-standbys 1 primary under load, then promotion of its standby: nothing
# acknowledged may be lost (STALKD_FAILOVER_CYCLES=N to change the count).
failover-campaign: $(VENV)/.dev bytecode
	# one test runs every cycle: the per-test timeout (pyproject's 300 s) scales with them
	STALKD_FAILOVER_CYCLES=$${STALKD_FAILOVER_CYCLES:-300} $(PY) -m pytest -q tests/standby/test_zero_loss.py -k kill9 \
		--timeout $$(( 60 * $${STALKD_FAILOVER_CYCLES:-300} + 300 ))

fuzz: $(VENV)/.dev
	$(PIP) install -e '.[fuzz]'
	$(PY) fuzz/fuzz_parser.py -max_total_time=$${FUZZ_SECONDS:-3600}

# A PNG of the dashboard under live traffic, for a person to look at (Debian's Chromium).
dashboard-screenshot: $(VENV)/.dev bytecode
	$(PY) scripts/dashboard_screenshot.py build/dashboard.png

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
	find src -name "*.so" -delete
