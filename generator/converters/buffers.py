"""Parameters from a bytes-like Python argument, copied: any size (`bytes`,
with an optional `max`) or exactly N bytes (`buffer:N`)."""
from __future__ import annotations

from typing import Any, List, Optional

from ..rule_data import ArgBytes, ArgSize
from ..ctext import c_format_text
from ..ir import Type
from .args import ArgParam
from .registry import BUFFER_LIKE, Context, PARAMS
from .rule_c import c_of


@PARAMS.register("bytes")
class BytesParam(ArgParam):
    """Any bytes-like object, copied; other parameters and `checks` may use
    its size (a rule's `size_of:`, generator/rule_data.py ArgSize; QP._create_flow:
    struct ibv_flow_attr and its specs)."""
    base_pytype = BUFFER_LIKE
    keys = ArgParam.keys | {"max", "hint"}

    @classmethod
    def describe(cls, convert: str) -> str:
        return "bytes-like data"

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        super().__init__(ctx, cname, t, pspec)
        self.max_value = pspec.max      # a number, a constant or a rule's value
        ctx.check_refs(self.max_value)
        self.refs = ctx.refs
        self.hint = pspec.hint     # why the bound, in the error: "(<hint>)"
        self.size = self.size_local(cname)

    @classmethod
    def size_local(cls, cname: str) -> str:
        """The local holding the argument's size in bytes."""
        return f"{cls.local_name(cname)}_size"

    @classmethod
    def c_ref(cls, cname: str, ref: Any) -> Optional[str]:
        if isinstance(ref, ArgSize):
            return cls.size_local(cname)
        if isinstance(ref, ArgBytes):
            return f"{cls.local_name(cname)}_bytes"
        return None

    def own_declarations(self) -> List[str]:
        return [f"PyObject *{self.local}_bytes = NULL;", f"Py_ssize_t {self.size} = 0;"]

    def parse(self) -> List[str]:
        local, size = self.local, self.size
        lines = [f"{local}_bytes = PyBytes_FromObject({self.var});",
                 f"if ({local}_bytes == NULL)", "    goto exit;",
                 f"{size} = PyBytes_Size({local}_bytes);",
                 f"(void){size};   /* for the parameters and checks that want it */"]
        if self.max_value is not None:
            most = c_of(self.max_value, self.refs.spell)
            hint = f" ({c_format_text(self.hint)})" if self.hint else ""
            lines += [f"if ({size} > (Py_ssize_t)({most})) {{",
                      f'    PyErr_Format(PyExc_ValueError, "{self.name} must be at most %lld '
                      f'bytes{hint}, got %zd", (long long)({most}), {size});',
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
        self.size = int(pspec.convert.split(":", 1)[1])

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
