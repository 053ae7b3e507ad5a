#!/usr/bin/env bash
# The thread stress suite, run N times in a row; stops at the first failure.
#
#   tests/threads_stress.sh [-n N] [--python PY] [host] [device]
#
#   -n N         how many runs of each tier (default 20)
#   --python PY  the interpreter that runs pytest (default .venv/bin/python).
#                The host tier's tests run each scenario under PY and under
#                the free-threaded CPython (IBVERBS_FT_PYTHON, default
#                ~/.cache/ibverbs-ft/3.14t/bin/python3.14t; skipped when
#                absent); with --python .venv-ft/bin/python the device tier
#                runs free-threaded too.
#   host         tests/host/test_threads_host.py, here
#   device       tests/device/test_threads.py, in one Soft-RoCE VM
#                (tests/vm/run-in-vm) for all N runs: one boot, not N
#   (neither: both, host first)
#
# Build first: the GIL build (`.venv/bin/python setup.py build_ext --inplace`)
# and, for the free-threaded runs, `IBVERBS_NO_LTO=1 .venv-ft/bin/python setup.py
# build_ext --inplace`.  IBVERBS_THREAD_STRESS_SECONDS (default 1) sets how
# long each host scenario races.  Exit status: 0 when every run passed, else
# that of the first failed run, after a line naming it.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=20
python=.venv/bin/python
tiers=()
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        host|device) tiers+=("$1"); shift ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "threads_stress.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ ${#tiers[@]} -gt 0 ] || tiers=(host device)
case "$runs" in ''|*[!0-9]*) echo "threads_stress.sh: -n needs a number" >&2; exit 2 ;; esac

pytest_args=(-q -p no:cacheprovider --timeout 300)

for tier in "${tiers[@]}"; do
    case "$tier" in
    host)
        for ((i = 1; i <= runs; i++)); do
            echo "== host tier, run $i of $runs ($python)"
            if ! "$python" -m pytest "${pytest_args[@]}" -rs tests/host/test_threads_host.py; then
                echo "== threads_stress.sh: the host tier failed at run $i of $runs" >&2
                exit 1
            fi
        done
        ;;
    device)
        # One guest runs the whole loop: a boot costs a minute under TCG.
        loop='for i in $(seq 1 '"$runs"'); do
                  echo "== device tier, run $i of '"$runs"' ('"$python"')"
                  '"$python"' -m pytest '"${pytest_args[*]}"' --timeout 120 tests/device/test_threads.py ||
                      { status=$?; echo "== threads_stress.sh: the device tier failed at run $i of '"$runs"'" >&2; exit $status; }
              done'
        IBVERBS_REQUIRE_DEVICE=1 tests/vm/run-in-vm --timeout $((runs * 180 + 300)) bash -c "$loop"
        ;;
    esac
done
echo "== threads_stress.sh: ${tiers[*]}: $runs of $runs runs passed"
