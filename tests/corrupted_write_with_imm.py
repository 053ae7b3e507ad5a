"""examples/write_with_imm.py with rank 1 expecting other data than rank 0
sends: run under examples/run_all.py after the real examples, it must
report a MISMATCH and fail the job (tests/torch_examples.py)."""
import os
import pathlib
import runpy

import _common

real = _common.pattern
if int(os.environ["RANK"]) == 1:
    _common.pattern = lambda numel, seed, device: real(numel, seed + 1000, device)
try:
    runpy.run_path(str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "write_with_imm.py"),
                   run_name="__main__")
finally:
    _common.pattern = real
