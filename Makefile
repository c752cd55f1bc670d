# Quick start: `make run` (server on 127.0.0.1:11300, data in ./data) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: run test test-fast lint bench system-deps bytecode ext ext-dev stale-ext crashloop crash-campaign failover-campaign ha-campaign powerloss-campaign campaign fuzz clean dashboard-screenshot

# Each install builds the accelerators too: it stamps .ext, so `make run` installs once.
$(VENV)/.base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@ $(VENV)/.ext

$(VENV)/.dev: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[dev]'
	touch $@ $(VENV)/.base $(VENV)/.ext

system-deps:
	bash scripts/system-deps.sh

# The compiled hot path: the .py modules Cython compiles (stalkd.extensions.CYTHON_MODULES) and
# the parser's C accelerator (stalkd.protocol._speedups), rebuilt when a source
# changes. Without a compiler or Cython setup.py warns and the .py files run; STALKD_NO_EXTENSIONS=1
# forces them.
CYTHON_SRC := $(shell $(PYTHON) -c 'exec(open("src/stalkd/extensions.py").read()); print(*map(source_path, CYTHON_MODULES))')

# A compiled module an earlier in-place build left beside the sources after its own source went (a
# .c file deleted, a .py file deleted or taken out of CYTHON_MODULES) would still be imported first:
# every build target removes it. A .so counts as built from src/a/b.py or src/a/b.c (b.*.so); nothing
# is removed when the list of Cython modules could not be read.
STALE_EXT = $(strip $(if $(CYTHON_SRC),$(foreach so,$(shell find src -name '*.so'),$(if $(filter $(basename $(basename $(so))).py,$(CYTHON_SRC))$(wildcard $(basename $(basename $(so))).c),,$(so)))))

stale-ext:
	$(if $(STALE_EXT),rm -f $(STALE_EXT))

ext: $(VENV)/.ext stale-ext

$(VENV)/.ext: $(VENV)/.base setup.py src/stalkd/extensions.py $(CYTHON_SRC) $(wildcard $(CYTHON_SRC:.py=.pxd)) src/stalkd/protocol/_speedups.c $(wildcard src/stalkd/protocol/_cext/*.h)
	$(PIP) install -e . --no-deps
	touch $@

# While working on a compiled module: `make ext-dev` builds in place only what changed since its
# last run (Cython's dependency check follows .py and cimported .pxd files, then build_ext's
# timestamps): seconds for one module, where `make ext` (pip, a fresh build directory each time)
# compiles all ~40 again. Its first run builds everything into build/. A module that fails is
# left out with the same warning as in `make ext`.
ext-dev: $(VENV)/.dev stale-ext
	$(PY) setup.py -q build_ext --inplace
	touch $(VENV)/.ext

# An editable install leaves src/ without bytecode, and where PYTHONDONTWRITEBYTECODE is set
# (as on these machines) every start compiles it again: ~70 ms more before the server's first
# reply (150 instead of 80 ms), which client test fixtures that wait 0.1 s notice.
bytecode: $(VENV)/.base $(VENV)/.ext stale-ext
	$(PY) -m compileall -q src >/dev/null

# `make run PORT=11301 DIR=/tmp/q` runs a second server beside the first.
PORT ?= 11300
DIR  ?= ./data

run: $(VENV)/.base bytecode
	$(VENV)/bin/stalkd serve -p $(PORT) --dir $(DIR)

# The whole suite twice, at once: on the compiled build, and on the pure-Python one
# (STALKD_NO_EXTENSIONS=1: the .py files themselves, what users without a compiler run), whose
# output is printed after the first's. Each pass runs on two pytest-xdist workers
# (TEST_WORKERS=1 for one): four test processes on two cores, as most of a test's time is spent
# waiting on the servers, disks and subprocesses it started. Tests sharing an expensive session
# fixture (the Spark cluster, PostgreSQL) stay on one worker (tests/conftest.py). The pure pass
# keeps no pytest cache (the first pass owns it). pytest's exit code 5 (no tests collected) is a
# failure, as is any other non-zero.
TEST_WORKERS ?= 2
XDIST      := $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)
PURE_LOG   := build/test-pure.log

test: system-deps $(VENV)/.dev bytecode
	mkdir -p build
	STALKD_NO_EXTENSIONS=1 $(PY) -m pytest -q -p no:cacheprovider $(XDIST) \
		>$(PURE_LOG) 2>&1 & pure=$$!; \
	$(PY) -m pytest -q $(XDIST) --durations=15; compiled=$$?; \
	wait $$pure; pure_rc=$$?; \
	echo "== the same suite on the pure-Python build (STALKD_NO_EXTENSIONS=1), from $(PURE_LOG)"; \
	cat $(PURE_LOG); \
	test $$compiled = 0 && test $$pure_rc = 0

# Everything but the Spark and long crash tests, for a quick loop while developing.
test-fast: $(VENV)/.dev $(VENV)/.ext
	$(PY) -m pytest -q -m "not spark and not slow" -x

# check_imports: no import cycles among stalkd's modules, counting function-local and
# TYPE_CHECKING imports too (a cycle mypy sees is still two modules that know each other).
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests bench scripts examples campaign
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy campaign
	$(PY) scripts/check_imports.py --count typing

bench: system-deps $(VENV)/.dev bytecode
	for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Long campaigns, not part of `make test`.
# The crash loop of issue 34: restart cost and WAL size per kill -9 cycle (CYCLES=500 by default;
# PEER_SRC=/path/to/main/src runs the same loop on that tree first, for before/after in one run).
crashloop: $(VENV)/.dev bytecode
	$(PY) bench/crashloop_bench.py --cycles $${CYCLES:-500} $${PEER_SRC:+--peer-src $$PEER_SRC}

crash-campaign: $(VENV)/.dev
	STALKD_CRASH_CYCLES=1000 $(PY) -m pytest -q tests/log/test_crash.py

# kill -9 of a --sync-standbys 1 primary under load, then promotion of its standby: nothing
# acknowledged may be lost (STALKD_FAILOVER_CYCLES=N to change the count).
failover-campaign: $(VENV)/.dev bytecode
	# one test runs every cycle: the per-test timeout (pyproject's 300 s) scales with them
	STALKD_FAILOVER_CYCLES=$${STALKD_FAILOVER_CYCLES:-300} $(PY) -m pytest -q tests/standby/test_zero_loss.py -k kill9 \
		--timeout $$(( 60 * $${STALKD_FAILOVER_CYCLES:-300} + 300 ))

# A three-node --ha cluster (real etcd) under kill -9, pauses past the lease and cuts from etcd
# of its primary, cycle after cycle, checked against what the clients were told
# (STALKD_HA_CYCLES=N to change the count).
ha-campaign: $(VENV)/.dev bytecode
	STALKD_HA_CYCLES=$${STALKD_HA_CYCLES:-200} $(PY) -m pytest -q -s tests/ha/test_ha_campaign.py \
		--timeout $$(( 30 * $${STALKD_HA_CYCLES:-200} + 300 ))

# Power loss for one node: stalkd (campaign/powercut.py) and the embedded log with its group
# cursors (campaign/logcut.py) on a FUSE file system that keeps only what was fsynced, directory
# entries included (campaign/powerfs.py --strict), killed and power-cut at random under load,
# for each durability policy; a fresh and an old data directory. Tables in build/ (exit 1 on
# any loss the policy does not allow, anything invented, or a server that would not restart).
# POWERLOSS_FAULTS=N faults per run (default 50, 70% of them power cuts: ~300 cuts in all).
# Then a primary and its sync standby power-cut together under `always` (campaign/pairloss.py),
# POWERLOSS_FAULTS cuts; its history, logs and plot in build/pairloss/. Every part runs even when
# an earlier one fails (each part's table says what it found); the target fails at the end, naming them.
powerloss-campaign: system-deps $(VENV)/.dev bytecode
	mkdir -p build
	failed=""; n=$${POWERLOSS_FAULTS:-50}; \
	$(PY) -m campaign.powercut --faults $$n --table build/powerloss-server.md || failed="$$failed powercut"; \
	$(PY) -m campaign.logcut --faults $$n --table build/powerloss-log.md || failed="$$failed logcut"; \
	$(PY) -m campaign.pairloss --cycles $$n --out build/pairloss || failed="$$failed pairloss"; \
	$(PY) -m campaign.pairloss --cycles $$n --promote --out build/pairloss-promote || failed="$$failed pairloss-promote"; \
	if [ -n "$$failed" ]; then echo "powerloss-campaign: failed:$$failed" >&2; exit 1; fi

# The fault campaign (campaign/README.md): every nemesis against a single server, a primary
# with a sync standby and three --ha nodes on an etcd the run starts (faults against the current
# primary; its way to etcd cut as well), CAMPAIGN_CYCLES faults each (default 20; a line after
# each fault says how far a run is); the table (table.md) and a plot and history per run go to
# build/campaign/ (or CAMPAIGN_OUT). Needs root for partitions, tmpfs and faketime's clock jumps,
# and Debian's etcd for the ha runs. `make test` runs two faults of each (tests/campaign).
campaign: system-deps $(VENV)/.dev bytecode
	$(PY) -m campaign --cycles $${CAMPAIGN_CYCLES:-20} --out $${CAMPAIGN_OUT:-build/campaign}

fuzz: $(VENV)/.dev
	$(PIP) install -e '.[fuzz]'
	$(PY) fuzz/fuzz_parser.py -max_total_time=$${FUZZ_SECONDS:-3600}

# A PNG of the dashboard under live traffic, for a person to look at (Debian's Chromium).
dashboard-screenshot: $(VENV)/.dev bytecode
	$(PY) scripts/dashboard_screenshot.py build/dashboard.png

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
	find src -name "*.so" -delete
