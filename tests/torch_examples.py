"""What one torchrun job of examples/run_all.py must show, the same in one
VM (tests/device/test_examples.py, two ranks on rxe0 and rxe1) and across
the two nodes (tests/cluster/test_torch_cross_node.py, a rank on each
node's rxe0): each example moved what its defaults say, and a copy of
example 2 whose receiver expects other data (CORRUPTED) fails, and fails
the job."""
from __future__ import annotations

import pathlib
import re
from typing import Dict, Tuple

CORRUPTED = pathlib.Path(__file__).resolve().parent / "corrupted_write_with_imm.py"

# What each example moves with its default arguments: {role: (rank, bytes)},
# and a word its human-readable line must carry; run_all's order.
MIB = 1 << 20
EXPECTED: Dict[str, Tuple[Dict[str, Tuple[int, int]], str]] = {
    "rc_bootstrap": ({"writer": (0, MIB), "target": (1, MIB)}, "RDMA_WRITE to rank 1"),
    "write_with_imm": ({"writer": (0, MIB), "receiver": (1, MIB)},
                       "in 8 RDMA_WRITE_WITH_IMM from rank 0, immediates 0..7"),
    "rdma_read": ({"reader": (1, MIB)}, "RDMA_READ from rank 0"),
    "send_recv_striped": ({"sender": (0, 4 * MIB), "receiver": (1, 4 * MIB)},
                          "in 64 SENDs over 4 QPs (depth 4)"),
}
# run_all's summary line of each rank after EXPECTED and CORRUPTED.
SUMMARY = "run_all: 4 of 5 examples passed; failed: corrupted_write_with_imm"

RESULT = re.compile(r"^RESULT example=(\w+) rank=(\d+) role=(\w+) bytes=(\d+) "
                    r"seconds=([0-9.]+) ok=([01])$", re.M)


def results(output: str, name: str) -> Dict[str, Tuple[int, int, float, bool]]:
    """{role: (rank, bytes, seconds, ok)} of the RESULT lines of example NAME."""
    return {m.group(3): (int(m.group(2)), int(m.group(4)), float(m.group(5)), m.group(6) == "1")
            for m in RESULT.finditer(output) if m.group(1) == name}


def tail(text: str, n: int = 8000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


def check_example(output: str, name: str) -> None:
    """Example NAME's lines (both ranks): every role moved its bytes, ok,
    and said what it did."""
    roles, words = EXPECTED[name]
    got = results(output, name)
    assert set(got) == set(roles), f"{name}: RESULT lines {got}\n{tail(output)}"
    for role, (rank, nbytes) in roles.items():
        got_rank, got_bytes, seconds, ok = got[role]
        assert (got_rank, got_bytes, ok) == (rank, nbytes, True), f"{name} {role}: {got[role]}"
        assert seconds > 0
    assert words in output, f"{name}: no line saying {words!r}\n{tail(output)}"
    assert "MISMATCH" not in output, tail(output)


def check_corrupted(output: str) -> None:
    """CORRUPTED's lines (both ranks): rank 1 saw the mismatch, rank 0's
    write itself succeeded."""
    assert "[rank 1] write_with_imm: MISMATCH: the written tensor differs from the source" in output
    got = results(output, "write_with_imm")
    assert got["receiver"][3] is False and got["writer"][3] is True, got


def segments(output: str) -> Dict[str, str]:
    """The lines of each example, both ranks, from run_all's output (one
    job's, or the two nodes' outputs joined). Each rank's lines come in
    order; run_all's "<name> passed|FAILED in" line closes an example."""
    seg: Dict[str, list] = {}
    for rank in (0, 1):
        lines: list = []
        for line in output.splitlines():
            if not (line.startswith(f"[rank {rank}] ") or f" rank={rank} " in line):
                continue
            m = re.match(rf"\[rank {rank}\] run_all: (\w+) (passed|FAILED) in ", line)
            if m:
                seg.setdefault(m.group(1), []).extend(lines + [line])
                lines = []
            else:
                lines.append(line)
    return {name: "\n".join(lines) for name, lines in seg.items()}
