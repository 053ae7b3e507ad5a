"""bench/threads.py (`make bench-threads`) says what it measured: its
table and JSON (what bench/report.py puts into BENCHMARKS.md) carry every
implementation's rates at 1 and 2 threads and the ratios side by side, and
without the free-threaded CPython it skips, saying how to get one.  The
numbers themselves are measurements: nothing here asserts a rate."""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "threads.py"


def threads_module():
    spec = importlib.util.spec_from_file_location("bench_threads", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result(rate_1, rate_2):
    return {"rate_1": rate_1, "rate_2": rate_2, "ratio": rate_2 / rate_1,
            "cores_1": 1.0, "cores_2": 1.98}


def part(where):
    return {"where": where, "cpu": "a CPU", "cores": 2, "seconds": 1.0, "rounds": 3,
            "load_before": "load average 0.10, 0.20, 0.30",
            "load_after": "load average 0.40, 0.50, 0.60",
            "results": {"ft": {"plain": result(2e6, 3.8e6), "hot": result(4e6, 8e6)},
                        "gil": {"plain": result(2.5e6, 2.4e6), "hot": result(5e6, 4.9e6)},
                        "C": {"post_poll": result(20e6, 39e6)}}}


def test_the_table_shows_each_rate_and_the_ratios_side_by_side():
    th = threads_module()
    report = {"commit": "abc1234", "ft_python": "/x/python3.14t", "ft_version": "3.14.7t",
              "host": part("host, the null provider"),
              "VM": {"where": "rxe0 in the test VM", "skipped": "no VM here"},
              "instructions": {"python": "3.11.7", "ops": {
                  "post_send_1": {"label": "qp.post_send(wr)", "gil_off": 363.0,
                                  "locks": 66.0, "gil_on": 330.0, "abi3": 250.0}}}}
    text = th.render(report)
    lines = text.splitlines()
    assert "load average 0.10, 0.20, 0.30 before, load average 0.40, 0.50, 0.60 after" in text
    plain_ft = next(x for x in lines if x.startswith("plain") and "GIL off" in x).split()
    assert plain_ft[-6:] == ["2.00M", "3.80M", "1.90", "1.00", "/", "1.98"]
    # C's one loop is the reference of both APIs: one row, both ratio rows
    assert sum(1 for x in lines if x.startswith("verbs")) == 1
    host_plain = next(x for x in lines if x.startswith("host, plain")).split()
    assert host_plain[-4:] == ["1.90", "0.96", "1.95", "0.97"]
    host_hot = next(x for x in lines if x.startswith("host, hot")).split()
    assert host_hot[-4:] == ["2.00", "0.98", "1.95", "1.03"]
    assert "goal host plain: GIL off 2/1 >= 1.8 (or C's own, 1.95, where lower): 1.90 met" in text
    assert "rxe0 in the test VM: not measured: no VM here" in text
    ir = next(x for x in lines if x.startswith("qp.post_send(wr)")).split()
    assert ir[-8:] == ["363", "330", "+10.0%", "66", "(18%)", "297", "(+22%)", "250"]
    json.dumps(report)      # what report.py reads


def test_a_crashed_worker_is_shown_as_crashed_and_the_rest_measured():
    th = threads_module()
    host = part("host, the null provider")
    host["results"]["ft"]["plain"] = {"crashed": "crashed in plain_2 (exit status -6; its "
                                                 "stderr above)"}
    text = th.render({"ft_python": "/x/python3.14t", "ft_version": "3.14.7t", "host": host})
    lines = text.splitlines()
    assert next(x for x in lines if x.startswith("plain") and "GIL off" in x).split()[-4:] == [
        "crashed", "-", "-", "-"]
    assert "  plain, 3.14t, GIL off: crashed in plain_2 (exit status -6; its stderr above)" in lines
    assert next(x for x in lines if x.startswith("host, plain")).split()[-4:] == [
        "-", "0.96", "1.95", "-"]
    assert "goal host plain: not measured" in lines
    assert "goal host hot: GIL off 2/1 >= 1.8 (or C's own, 1.95, where lower): 2.00 met" in text


def test_no_goal_is_judged_where_the_machine_was_busy():
    th = threads_module()
    host = part("host, the null provider")
    host["results"]["C"]["post_poll"]["cores_2"] = 1.2
    text = th.render({"ft_python": "/x/python3.14t", "ft_version": "3.14.7t", "host": host})
    assert ("goal host plain: not judged, the machine was busy (C's 2 threads: 2/1 1.95, "
            "1.20 cores): GIL off 1.90") in text.splitlines()


def test_without_the_interpreter_it_skips_and_says_how_to_get_one(tmp_path):
    out = tmp_path / "threads.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out), "--table", str(tmp_path / "t.txt")],
        env=dict(os.environ, IBVERBS_FT_PYTHON=str(tmp_path / "no-python3.14t")),
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "bench-threads: skipped: no free-threaded CPython at" in proc.stdout
    assert "make ft-python" in proc.stdout and "IBVERBS_FT_PYTHON" in proc.stdout
    report = json.loads(out.read_text())
    assert "no-python3.14t" in report["skipped"]
    assert (tmp_path / "t.txt").read_text().startswith("thread scaling not measured:")


def test_a_short_run_on_the_null_provider_fills_the_json(tmp_path):
    th = threads_module()
    ft, why = th.ft_python()
    if why is not None:
        pytest.skip(why)
    missing = th.ft_extension(ft)
    if missing is not None:
        pytest.skip(missing)
    if shutil.which("gcc") is None:
        pytest.skip("the null provider and c_threads need gcc")
    out = tmp_path / "threads.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--no-vm", "--no-ir", "--seconds", "0.01",
         "--rounds", "1", "--json", str(out), "--table", str(tmp_path / "t.txt")],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    results = report["host"]["results"]
    assert set(results) == {"ft", "gil", "C"}
    assert set(results["ft"]) == set(results["gil"]) == {"plain", "hot"}
    for per_api in results.values():
        for row in per_api.values():
            if "crashed" in row:    # the build's, said in the table: the stress tests' to catch
                assert row["crashed"] in report["table"]
                continue
            assert row["rate_1"] > 0 and row["rate_2"] > 0
            assert row["ratio"] == pytest.approx(row["rate_2"] / row["rate_1"])
    assert report["table"] == (tmp_path / "t.txt").read_text().rstrip("\n")
    assert "host, plain" in report["table"] and "host, hot" in report["table"]


def test_the_lock_column_counts_the_lock_functions_own_instructions_only(tmp_path):
    """host_micro.self_cost, what the "critical sections" column is: a
    matching function's own cost lines, not the inclusive cost of what it
    calls, with names compressed as callgrind writes them (fn= and cfn=)."""
    import re
    hm = threads_module().host_micro
    out = tmp_path / "callgrind.out"
    out.write_text("events: Ir\n"
                   "fn=(1) QP_post_send__locked\n"
                   "10 7\n"
                   "cfn=(2) PyCriticalSection_Begin\n"
                   "calls=1 0\n"
                   "11 20\n"                       # inclusive, counted under (2) itself
                   "cfn=(3) QP_post_send\n"
                   "calls=1 0\n"
                   "12 400\n"                      # the post itself: not a lock's
                   "fn=(2)\n"
                   "5 20\n"
                   "fn=(3)\n"
                   "7 400\n"
                   "fn=(4) PyCriticalSection_End\n"
                   "+1 15\n"
                   "totals: 442\n")
    assert hm.self_cost(out, re.compile(r"CriticalSection|__locked$")) == 7 + 20 + 15
