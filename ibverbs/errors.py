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
    from typing import Any

__all__ = ["VerbsError", "CompletionError"]


class VerbsError(OSError):
    """A verb failed.

    ``VerbsError(operation, err, detail=None)``: ``operation`` names the verb
    or method (``"ibv_reg_mr"``), ``err`` is the errno it failed with.

    Attributes: ``errno`` (``err``), ``strerror`` (``os.strerror(err)``),
    ``operation``, ``detail``.

    ``str(e)`` is ``"<operation> failed: <strerror>"``; when ``detail`` is
    given it replaces the strerror text: ``"<operation> failed: <detail>"``
    (the errno stays available as ``e.errno`` / ``e.strerror``).

    Being an ``OSError``, it can be caught by errno like any other
    (``except OSError as e: if e.errno == errno.EBADF: ...``). It pickles
    (and copies) faithfully, so it crosses process boundaries.
    """

    def __init__(self, operation: str, err: int, detail: object = None) -> None:
        err = int(err)
        # OSError.__init__(errno, strerror) fills .errno and .strerror.
        super().__init__(err, os.strerror(err))
        self.operation = operation
        self.detail = detail
        # The constructor's own arguments, for repr() and pickling.
        self.args = (operation, err) if detail is None else (operation, err, detail)

    def __str__(self) -> str:
        reason = self.strerror if self.detail is None else self.detail
        return f"{self.operation} failed: {reason}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation, self.errno, self.detail), self.__dict__ or None)


# Fields copied from a WC when a CompletionError is pickled: the C WC object
# need not be picklable, the snapshot (a SimpleNamespace) always is.
_WC_FIELDS = ("wr_id", "status", "opcode", "vendor_err", "byte_len", "imm_data",
              "qp_num", "src_qp", "wc_flags", "status_str")


def _enum_name(value: object) -> str:
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


class CompletionError(VerbsError):
    """A work completion came back with a status other than success.

    ``CompletionError(wc)``: ``.wc`` is the completion, ``.status`` and
    ``.vendor_err`` are read from it, ``errno`` is ``EIO`` and ``operation``
    names the work request. The message reads e.g.
    ``"work request 7 (opcode RDMA_WRITE) failed: remote access error
    (status 10, vendor_err 0x88)"``.

    The verbs spec defines only ``wr_id``, ``status``, ``vendor_err`` and
    ``qp_num`` for a failed completion; ``opcode`` is shown as the provider
    reported it and may not describe the failed request.

    After pickling, ``.wc`` is a ``types.SimpleNamespace`` snapshot of the
    completion's fields (the C ``WC`` object itself is not picklable).
    """

    def __init__(self, wc: Any) -> None:
        status = wc.status
        status_str = getattr(wc, "status_str", None) or f"status {int(status)}"
        operation = f"work request {wc.wr_id} (opcode {_enum_name(wc.opcode)})"
        detail = f"{status_str} (status {int(status)}, vendor_err {int(wc.vendor_err):#x})"
        super().__init__(operation, _errno.EIO, detail)
        self.wc = wc
        self.args = (wc,)

    @property
    def status(self) -> Any:
        return self.wc.status

    @property
    def vendor_err(self) -> Any:
        return self.wc.vendor_err

    def __reduce__(self) -> tuple[Any, ...]:
        from types import SimpleNamespace

        snap = SimpleNamespace(**{f: getattr(self.wc, f) for f in _WC_FIELDS if hasattr(self.wc, f)})
        state = {k: v for k, v in self.__dict__.items() if k != "wc"}
        return (type(self), (snap,), state or None)
