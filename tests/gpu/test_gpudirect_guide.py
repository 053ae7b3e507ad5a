"""The guide "GPUDirect with torch tensors" (docs/guides/gpudirect.md), run
as written: its code block is read from the page and executed here, so the guide cannot drift
from what is tested (tests/host/test_docs.py checks that the guide is the
block this module runs).

Needs an NVIDIA GPU, its driver and a CUDA build of torch (everything skips
elsewhere, saying which is missing), and an RDMA device that can reach GPU
memory (dma-buf or nvidia_peermem); ``python -m pytest tests/gpu``.
"""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "gpudirect.md"     # the page this module runs

pytestmark = pytest.mark.gpu


def guide_code() -> str:
    """The python block of the GPUDirect guide."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(blocks) == 1, "the guide is one python block"
    return blocks[0]


torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda.is_available() is False: no CUDA device, driver or CUDA build of torch",
                allow_module_level=True)


def test_the_readme_gpudirect_guide_runs_as_written(ib, ctx, pd, cq, gid_index, port, access):
    a = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC))
    b = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC))
    try:
        gid = ctx.query_gid(port, gid_index)
        attr = ctx.query_port(port)
        ib.connect_rc(a, ib.local_qp_info(b, attr, gid, port=port), port=port,
                      sgid_index=gid_index, access=access)
        ib.connect_rc(b, ib.local_qp_info(a, attr, gid, port=port), port=port,
                      sgid_index=gid_index, access=access)
        namespace: dict = {"__name__": "readme_gpudirect"}
        exec(compile(guide_code(), "docs/guides/gpudirect.md", "exec"), namespace)
        try:
            namespace["gpu_to_gpu"](pd, a, cq)       # asserts what landed (torch.equal)
        except RuntimeError as exc:
            if str(exc).startswith("GPUDirect registration failed."):
                pytest.skip(f"this RDMA device cannot register GPU memory: {exc}")
            raise
    finally:
        a.close()
        b.close()
