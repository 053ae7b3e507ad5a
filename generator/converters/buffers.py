"""Parameters from a bytes-like Python argument, copied: any size (`bytes`,
with an optional `max`) or exactly N bytes (`buffer:N`)."""
from __future__ import annotations

from typing import Any, List

from ..ctext import c_format_text
from ..ir import Type
from .args import ArgParam
from .registry import BUFFER_LIKE, Context, PARAMS


@PARAMS.register("bytes")
class BytesParam(ArgParam):
    """Any bytes-like object, copied; other parameters and `checks` may use
    it as {cname}_c_bytes and its size as {cname}_c_size (QP._create_flow:
    struct ibv_flow_attr and its specs)."""
    base_pytype = BUFFER_LIKE
    keys = ArgParam.keys | {"max", "hint"}

    @classmethod
    def describe(cls, convert: str) -> str:
        return "bytes-like data"

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        super().__init__(ctx, cname, t, pspec)
        self.max = pspec.get("max")
        self.hint = pspec.get("hint")     # why the bound, in the error: "(<hint>)"

    def own_declarations(self) -> List[str]:
        return [f"PyObject *{self.local}_bytes = NULL;", f"Py_ssize_t {self.local}_size = 0;"]

    def parse(self) -> List[str]:
        local = self.local
        lines = [f"{local}_bytes = PyBytes_FromObject({self.var});",
                 f"if ({local}_bytes == NULL)", "    goto exit;",
                 f"{local}_size = PyBytes_Size({local}_bytes);",
                 f"(void){local}_size;   /* for the parameters and checks that want it */"]
        if self.max is not None:
            hint = f" ({c_format_text(self.hint)})" if self.hint else ""
            lines += [f"if ({local}_size > (Py_ssize_t)({self.max})) {{",
                      f'    PyErr_Format(PyExc_ValueError, "{self.name} must be at most %lld '
                      f'bytes{hint}, got %zd", (long long)({self.max}), {local}_size);',
                      "    goto exit;", "}"]
        return lines

    def cleanup(self) -> List[str]:
        return [f"Py_XDECREF({self.local}_bytes);"]

    def call_arg(self) -> str:
        spelling = self.t.spelling
        cast = "(void *)" if spelling.replace(" ", "") == "void*" else f"({spelling})(void *)"
        return f"{cast}PyBytes_AsString({self.local}_bytes)"


@PARAMS.register("buffer")
class BufferParam(ArgParam):
    """Exactly N bytes of a bytes-like object (`buffer:16`), copied."""
    base_pytype = BUFFER_LIKE

    @classmethod
    def describe(cls, convert: str) -> str:
        return f"{convert.split(':', 1)[1]} bytes (bytes-like)"

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        super().__init__(ctx, cname, t, pspec)
        self.size = int(pspec["convert"].split(":", 1)[1])

    def own_declarations(self) -> List[str]:
        return [f"PyObject *{self.local}_bytes = NULL;"]

    def parse(self) -> List[str]:
        local, size = self.local, self.size
        return [f"{local}_bytes = PyBytes_FromObject({self.var});",
                f"if ({local}_bytes == NULL)", "    goto exit;",
                f"if (PyBytes_Size({local}_bytes) != {size}) {{",
                f'    PyErr_Format(PyExc_ValueError, "{self.name} must be exactly {size} bytes, '
                f'got %zd", PyBytes_Size({local}_bytes));',
                "    goto exit;", "}"]

    def cleanup(self) -> List[str]:
        return [f"Py_XDECREF({self.local}_bytes);"]

    def call_arg(self) -> str:
        return f"({self.t.spelling})(void *)PyBytes_AsString({self.local}_bytes)"
