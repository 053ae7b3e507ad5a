"""``PD.reg_mr(buffer, access)``: register any writable Python buffer.

The generated ``PD.reg_mr(addr, length, access)`` takes a raw address; this
form takes an object with the buffer protocol (bytearray, writable
memoryview, numpy array, mmap, array.array, ...) and keeps it usable only
as long as it is safe:

* the exporter is kept alive (``mr.owner`` is the object passed);
* a buffer export is held while the MR is open, so the exporter cannot move
  or free the memory under the device: resizing a bytearray, closing an
  mmap or releasing a memoryview raise ``BufferError`` until ``mr.close()``.

``PyObject_GetBuffer`` is in the Limited API only from 3.11, and the
extension's floor is 3.9, so the export is taken in Python: a ctypes array
made with ``(c_char * n).from_buffer(obj)`` holds a writable, C-contiguous
export of ``obj`` for its lifetime and gives its address.  The MR keeps
that array in its ``_buffer_export`` slot, which the extension drops as
soon as the MR is deregistered (close(), or garbage collection); the export
is then released.  This works the same on every CPython the wheel supports.

ctypes is imported on first use only.
"""

from __future__ import annotations

from typing import Any, Tuple

__all__ = ["reg_mr", "reg_mr_any"]


def _export(buffer: Any) -> Tuple[Any, int, int]:
    """(ctypes array holding a writable export of buffer, address, length)."""
    try:
        view = memoryview(buffer)
    except TypeError:
        raise TypeError(f"reg_mr needs an int address or a writable buffer, "
                        f"not {type(buffer).__name__}") from None
    with view:
        if view.readonly:
            raise TypeError(f"reg_mr needs a writable buffer; this {type(buffer).__name__} "
                            "is read-only")
        if not view.c_contiguous:
            raise ValueError("reg_mr needs a C-contiguous buffer")
        nbytes = view.nbytes
    if nbytes == 0:
        raise ValueError("reg_mr cannot register an empty buffer")
    import ctypes

    array = (ctypes.c_char * nbytes).from_buffer(buffer)
    return array, ctypes.addressof(array), nbytes


def _is_index(value: Any) -> bool:
    """True for integer-likes (numpy integers): an address, not a buffer."""
    try:
        type(value).__index__(value)
    except (AttributeError, TypeError):
        return False
    return True


def reg_mr_any(pd: Any, *args: Any, **kwargs: Any) -> Any:
    # PD.reg_mr: its docstring is the spec's (spec/pd.yaml), its signature this def.
    # ``PD.reg_mr``: ``(addr, length, access)`` goes to the generated
    # ``PD._reg_mr`` (ibv_reg_mr), ``(buffer, access)`` to ``reg_mr``.
    if len(args) + len(kwargs) < 2:
        raise TypeError("PD.reg_mr() takes (addr, length, access) or (buffer, access), "
                        f"got {len(args) + len(kwargs)} argument(s)")
    first = args[0] if args else kwargs.get("buffer", kwargs.get("addr"))
    if "buffer" in kwargs or (args and not isinstance(first, int) and not _is_index(first)):
        if "buffer" in kwargs:
            args = (kwargs.pop("buffer"),) + args
        return reg_mr(pd, *args, **kwargs)
    try:
        return pd._reg_mr(*args, **kwargs)
    except TypeError as exc:       # the public name in the message, not the private one
        text = str(exc)
        if "_reg_mr" not in text:
            raise
        raise TypeError(text.replace("PD._reg_mr", "PD.reg_mr").replace("_reg_mr", "PD.reg_mr")) \
            from None


def reg_mr(pd: Any, buffer: Any, access: int) -> Any:
    """Register the whole of ``buffer`` (see the module docstring)."""
    array, addr, nbytes = _export(buffer)
    try:
        mr = pd._reg_mr(addr, nbytes, access)
    except BaseException:
        del array  # release the export at once: the buffer is usable again
        raise
    mr.owner = buffer
    mr._buffer_export = array
    return mr
