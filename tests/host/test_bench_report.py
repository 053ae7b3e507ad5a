"""bench/report.py's instruction counts (BENCHMARKS.md, `make bench`): the
budgeted operations on CPython 3.11 (cp39-abi3), 3.14 (cp314-abi3) and 3.15
(cp315-abi3t) side by side, each beside its own floor, read from
bench/host_micro.py --json; a column not measured says why.  The counts
here are made up: nothing measures."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def report(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))     # report.py imports host_micro
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counts(python, target, base):
    """host_micro.py --json's shape: the budgeted operations (wc.status, the
    last, first) at base, base + 1, ...; each floor 50 below."""
    names = ["sendwr_build", "sge_build", "mr_sge", "post_send_1", "post_send_32",
             "post_recv_1", "poll_empty", "poll_1", "poll_16", "wc_status"]
    ours = {n: float(base + i) for i, n in enumerate(reversed(names))}
    return {"python": python, "target": target, "ours": ours,
            "floor": {n: v - 50 for n, v in ours.items()},
            "seed": {}, "c": {"c_post_send_1": 40.0, "c_poll_1": 38.0}}


def write(tmp_path, suffix, data):
    (tmp_path / f"counts{suffix}.json").write_text(json.dumps(data))


def table_of(section):
    """{operation: its cells}, and the lines under the table (one per
    interpreter).  Cells are two or more spaces apart."""
    table = section.split("```\n")[1]
    lines = table.splitlines()
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in lines[2:])
            if len(cells) > 1}
    return lines[0], rows, [line for line in lines if line.startswith("3.1")]


def test_three_interpreters_each_with_its_floor(report, tmp_path):
    (tmp_path / "counts.txt").write_text("the 3.11 text table\n")
    write(tmp_path, "", counts("3.11.7", "cp39-abi3", 1000))
    write(tmp_path, "-314", counts("3.14.10", "cp314-abi3", 2000))
    write(tmp_path, "-315", counts("3.15.2", "cp315-abi3t", 3000))
    section = report.counts_section(str(tmp_path / "counts.txt"))
    header, rows, notes = table_of(section)
    assert re.split(r"\s{2,}", header) == [
        "operation", "3.11 cp39-abi3", "floor", "3.14 cp314-abi3", "floor", "3.15 cp315-abi3t",
        "floor", "seed", "ours/seed", "C", "ours/C", "floor+C", "goal", "budget"]
    # each interpreter's count, then its own floor
    assert rows["wc.status"][:6] == ["1000", "950", "2000", "1950", "3000", "2950"]
    assert rows["cq.poll(1), per completion"][:6] == ["1002", "952", "2002", "1952", "3002",
                                                      "2952"]
    # seed, ours/seed, C, ours/C, floor+C, goal, status, budget: 3.11's, with
    # 3.14's budget after a slash where it has one
    assert rows["qp.post_send(wr)"][6:] == ["-", "-", "40.0", f"{1006 / 40:.1f}", "996",
                                            "<= 250", "below floor", "250 / 296"]
    assert rows["SGE(addr, length, lkey)"][6:] == ["-", "-", "-", "-", "-", "<= 700",
                                                   "below floor", "1333 / 884"]
    assert notes == ["3.11 cp39-abi3: CPython 3.11.7", "3.14 cp314-abi3: CPython 3.14.10",
                     "3.15 cp315-abi3t: CPython 3.15.2"]
    assert "CPython 3.11.7 (cp39-abi3), CPython 3.14.10 (cp314-abi3), " \
        "CPython 3.15.2 (cp315-abi3t)" in section


def test_a_column_not_measured_says_why(report, tmp_path):
    (tmp_path / "counts.txt").write_text("the 3.11 text table\n")
    write(tmp_path, "", counts("3.11.7", "cp39-abi3", 1000))
    write(tmp_path, "-314", {"skipped": "not measured: no Debian sid root (tools/sid-root failed)"})
    section = report.counts_section(str(tmp_path / "counts.txt"))
    _, rows, notes = table_of(section)
    assert rows["wc.status"][:6] == ["1000", "950", "-", "-", "-", "-"]
    assert notes == ["3.11 cp39-abi3: CPython 3.11.7",
                     "3.14 cp314-abi3: not measured: no Debian sid root (tools/sid-root failed)",
                     f"3.15 cp315-abi3t: not measured: no {tmp_path / 'counts-315.json'}"]


def test_without_the_json_the_text_table_as_it_was(report, tmp_path):
    """A run from before --json (no counts.json): COUNTS' own table."""
    text = "operation  ours  floor\nSGE(addr, length, lkey)  1336  925"
    (tmp_path / "counts.txt").write_text(text + "\n")
    section = report.counts_section(str(tmp_path / "counts.txt"))
    assert section.endswith("```\n" + text + "\n```")
    assert "3.14 cp314-abi3" not in section
