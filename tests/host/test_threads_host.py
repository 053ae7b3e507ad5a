"""Threads racing over shared verbs objects, on the host's test providers.

The scenarios live in tests/host/thread_stress.py (its docstring says what
each provider gives); each runs in a child interpreter whose ibverbs
loaded the null provider or the recording provider, four threads for
IBVERBS_THREAD_STRESS_SECONDS (default 1).  Every scenario runs twice:
under the interpreter that runs pytest (where the GIL interleaves the
threads) and under a free-threaded CPython (3.14t, the GIL off: nothing
serialises the threads but the extension itself), which skips where there
is none or the extension is not built for it.

A child passes when it checks what moved (requests handed to the
provider, completions delivered once each, states read back), raises
nothing but the documented errors (VerbsError EBADF on a closed object,
EBUSY on one with a call in flight; RuntimeError from a PostList or
WCBuffer used by two threads at once), and ends with every handle class's
_open_count() at zero.  A crash is its signal, named in the failure.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any, Callable, Dict

import pytest

ON_NULL = ["null_posts_and_polls", "null_close_under_use", "null_mr_churn",
           "null_shared_postlist_and_wcbuffer"]
ON_RECORDING = ["rec_posts_counted", "rec_modify_under_use", "rec_requests_rewritten_while_posted",
                "rec_ah_closed_while_posted", "rec_bind_info_rewritten_while_posted",
                "rec_sg_list_swapped_while_a_hold_waits"]

# Run with the repository as its working directory (both provider fixtures).
CHILD = ("import sys; sys.path[:0] = ['tests/host', 'tests/recording']; "
         "import thread_stress; thread_stress.main(sys.argv[1:])")


def outcome(proc: "subprocess.CompletedProcess[str]") -> str:
    if proc.returncode < 0:
        how = f"killed by {signal.Signals(-proc.returncode).name}"
    else:
        how = f"exited {proc.returncode}"
    return f"{how}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}"


def stress(run: Callable[..., Any], scenario: str, interpreter: str) -> Dict[str, Any]:
    """The scenario's report from a child of interpreter; fails on a crash,
    a failed check, or a handle left open."""
    code = CHILD.replace("sys.argv[1:]", repr([scenario]))
    proc = run(code, interpreter=interpreter)
    assert proc.returncode == 0, f"{scenario}: {outcome(proc)}"
    (report,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert report["scenario"] == scenario
    left_open = {name: n for name, n in report["open"].items() if n}
    assert "QP" in report["open"] and not left_open, f"handles left open: {left_open}"
    return report


def provider_for(scenario: str, on_null_provider: Callable[..., Any],
                 on_recording_provider: Callable[..., Any]) -> Callable[..., Any]:
    return on_null_provider if scenario in ON_NULL else on_recording_provider


def check_counts(scenario: str, counts: Dict[str, Any]) -> None:
    """What must have moved in each scenario (its child checked the values;
    this guards against a scenario that did next to nothing)."""
    if scenario == "null_posts_and_polls":
        assert all(n > 0 for n in counts["per_thread_posts"]) and counts["polls"] > 0
    elif scenario in ("null_close_under_use", "rec_modify_under_use"):
        assert counts["rounds"] >= 5 and counts["calls"] >= 4 * counts["rounds"]
    elif scenario == "rec_ah_closed_while_posted":
        assert counts["rounds"] >= 3 and counts["calls"] >= 3 * counts["rounds"]
    elif scenario == "rec_bind_info_rewritten_while_posted":
        assert counts["requests_handed"] > 0 and counts["rewrites"] > 0
    elif scenario == "rec_sg_list_swapped_while_a_hold_waits":
        assert counts["requests_handed"] > 0 and counts["swaps"] > 0
    elif scenario == "null_mr_churn":
        assert counts["registered"] > 0 and counts["pd_close_refused"] > 0
    elif scenario == "null_shared_postlist_and_wcbuffer":
        refused: Dict[str, int] = counts["refused"]
        assert counts["postlist_posts"] + sum(refused.values()) > 0 and counts["poll_into"] > 0
    elif scenario == "rec_posts_counted":
        assert counts["requests_handed"] > 0 and counts["completions_polled"] == 20_000
    elif scenario == "rec_requests_rewritten_while_posted":
        assert counts["requests_handed"] > 0 and counts["rewrites"] > 0
    else:
        raise AssertionError(f"no expectations for {scenario}")


@pytest.mark.parametrize("scenario", ON_NULL + ON_RECORDING)
def test_threads_race_over_shared_objects(scenario: str, on_null_provider: Callable[..., Any],
                                          on_recording_provider: Callable[..., Any]) -> None:
    run = provider_for(scenario, on_null_provider, on_recording_provider)
    report = stress(run, scenario, sys.executable)
    check_counts(scenario, report["counts"])


@pytest.mark.parametrize("scenario", ON_NULL + ON_RECORDING)
def test_threads_race_over_shared_objects_without_the_gil(
        scenario: str, free_threaded_python: str, on_null_provider: Callable[..., Any],
        on_recording_provider: Callable[..., Any]) -> None:
    run = provider_for(scenario, on_null_provider, on_recording_provider)
    report = stress(run, scenario, free_threaded_python)
    assert report["gil_enabled"] is False, "importing ibverbs turned the GIL back on"
    check_counts(scenario, report["counts"])


def test_importing_ibverbs_leaves_the_gil_off(free_threaded_python: str,
                                              on_null_provider: Callable[..., Any]) -> None:
    """The extension declares Py_MOD_GIL_NOT_USED: a free-threaded
    interpreter keeps the GIL off after importing it, and says nothing."""
    proc = on_null_provider(
        "import sys, warnings; warnings.simplefilter('error'); import ibverbs; "
        "print(sys._is_gil_enabled(), ibverbs._ibverbs.__file__)",
        interpreter=free_threaded_python)
    assert proc.returncode == 0, outcome(proc)
    enabled, path = proc.stdout.split()
    assert enabled == "False" and "314t" in path, proc.stdout
    assert "GIL" not in proc.stderr, proc.stderr
