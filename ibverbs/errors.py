"""Exceptions raised by ibverbs.

The C extension raises these by calling the classes, e.g.
``VerbsError("ibv_reg_mr", errno)``; nothing here imports the extension.
"""

from __future__ import annotations

import errno as _errno
import os
# typing costs milliseconds to import: for the type checker only
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

    from ._ibverbs import WC

__all__ = ["VerbsError", "CompletionError", "WaitTimeoutError"]


class VerbsError(OSError):
    """A verb failed.

    ``VerbsError(operation, err, detail=None)``: ``operation`` names the verb
    or method (``"ibv_reg_mr"``), ``err`` is the errno it failed with.

    It reads like any ``OSError`` built as ``OSError(errno, message)``, as
    ibverbs 2026.7.18's did: ``e.args == (errno, message)``,
    ``e.strerror`` is the message, ``str(e)`` is ``"[Errno N] <message>"``.
    The message is ``"<operation> failed: <strerror of err>"``, or
    ``detail`` itself when given.  ``e.operation`` and ``e.detail`` keep the
    constructor's arguments.

    Being an ``OSError``, it can be caught by errno like any other
    (``except OSError as e: if e.errno == errno.EBADF: ...``). It pickles
    (and copies) faithfully, so it crosses process boundaries.
    """

    def __init__(self, operation: str, err: int, detail: object = None) -> None:
        err = int(err)
        message = f"{operation} failed: {os.strerror(err)}" if detail is None else str(detail)
        # OSError.__init__(errno, strerror) fills .errno, .strerror and .args.
        super().__init__(err, message)
        self.operation = operation
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        # .args is (errno, message), not the constructor's arguments.
        state = {k: v for k, v in self.__dict__.items() if k not in ("operation", "detail")}
        return (type(self), (self.operation, self.errno, self.detail), state or None)


# Fields copied from a WC when a CompletionError is pickled: the C WC object
# need not be picklable, the snapshot (a SimpleNamespace) always is.
_WC_FIELDS = ("wr_id", "status", "opcode", "vendor_err", "byte_len", "imm_data",
              "qp_num", "src_qp", "wc_flags", "status_str")


class CompletionError(VerbsError):
    """A work completion came back with a status other than success.

    ``CompletionError(wc)``: ``.wc`` is the completion, ``.status`` and
    ``.vendor_err`` are read from it, ``errno`` is ``EIO`` and ``operation``
    is ``"work completion"``. The message reads e.g.
    ``"work completion failed: remote access error (status=10, vendor_err=0x88)"``
    (ibverbs 2026.7.18's words).

    The verbs spec defines only ``wr_id``, ``status``, ``vendor_err`` and
    ``qp_num`` for a failed completion.

    After pickling, ``.wc`` is a ``types.SimpleNamespace`` snapshot of the
    completion's fields (the C ``WC`` object itself is not picklable).
    """

    wc: WC
    """The failed completion (after unpickling, a SimpleNamespace of its fields)."""

    def __init__(self, wc: WC) -> None:
        status = int(wc.status)
        status_str = getattr(wc, "status_str", None) or f"status {status}"
        detail = (f"work completion failed: {status_str} "
                  f"(status={status}, vendor_err={int(wc.vendor_err):#x})")
        super().__init__("work completion", _errno.EIO, detail)
        self.wc = wc

    @property
    def status(self) -> int:
        """The completion's status (a WCStatus: REM_ACCESS_ERR, RETRY_EXC_ERR, WR_FLUSH_ERR, ...;
        a plain int for a value WCStatus does not know)."""
        from .enums import WCStatus

        try:
            return WCStatus(int(self.wc.status))
        except ValueError:
            return int(self.wc.status)

    @property
    def vendor_err(self) -> int:
        """The provider's own error code of the completion (32 bits; its meaning is the NIC vendor's)."""
        return int(self.wc.vendor_err)

    def __reduce__(self) -> tuple[Any, ...]:
        from types import SimpleNamespace

        snap = SimpleNamespace(**{f: getattr(self.wc, f) for f in _WC_FIELDS if hasattr(self.wc, f)})
        state = {k: v for k, v in self.__dict__.items() if k not in ("wc", "operation", "detail")}
        return (type(self), (snap,), state or None)


class WaitTimeoutError(TimeoutError):
    """``CQ.wait`` ran out of time before n completions arrived.

    Still a ``TimeoutError`` (``except TimeoutError`` catches it);
    ``completions`` holds the ones that did arrive, in order, so none is
    lost.
    """

    completions: list[WC]

    def __init__(self, message: str, completions: Iterable[WC] = ()) -> None:
        super().__init__(message)
        self.completions = list(completions)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.completions))
