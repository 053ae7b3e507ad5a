# Types of ibverbs/helpers.py (kept beside it; tests/host/test_typing.py
# checks the README examples and the test helpers against them).
from typing import Any

from ._gid import Gid
from ._ibverbs import CQ, MR, PD, QP, WC, Context, PortAttr

__all__ = ["QPInfo", "RemoteBuffer", "local_qp_info", "connect_rc", "tensor_addr_len",
           "reg_tensor"]

class QPInfo:
    __match_args__ = ("qp_num", "psn", "lid", "gid", "port", "mtu")
    qp_num: int
    psn: int
    lid: int
    gid: bytes
    port: int
    mtu: int
    def __init__(self, qp_num: int, psn: int, lid: int, gid: bytes | bytearray | Gid,
                 port: int, mtu: int) -> None: ...
    def to_bytes(self) -> bytes: ...
    @classmethod
    def from_bytes(cls, data: Any) -> QPInfo: ...

class RemoteBuffer:
    __match_args__ = ("addr", "rkey", "length")
    addr: int
    rkey: int
    length: int
    def __init__(self, addr: int, rkey: int, length: int) -> None: ...
    def to_bytes(self) -> bytes: ...
    @classmethod
    def from_bytes(cls, data: Any) -> RemoteBuffer: ...
    def slice(self, offset: int, length: int | None = ...) -> RemoteBuffer: ...

def local_qp_info(qp: QP, port_attr: PortAttr, gid: Gid | bytes, *, port: int,
                  psn: int = ...) -> QPInfo: ...
def connect_rc(qp: QP, remote: QPInfo, *, port: int, sgid_index: int, access: int,
               local_psn: int = ..., mtu: int | None = ..., **rts_kwargs: int) -> None: ...
def tensor_addr_len(t: Any) -> tuple[int, int]: ...
def reg_tensor(pd: PD, tensor: Any, access: int) -> MR: ...

# the Python side of Context.find_gid, CQ.wait and MR.remote (call the methods)
def find_gid(ctx: Context, port: int, *, gid_type: int | None = ..., family: int | str | None = ...,
             netdev: str | None = ...) -> tuple[int, Gid]: ...
def cq_wait(cq: CQ, n: int = ..., timeout: float | None = ..., *, raise_on_error: bool = ...,
            sleep: bool = ...) -> list[WC]: ...
def mr_remote(mr: MR, offset: int = ..., length: int | None = ...) -> RemoteBuffer: ...
