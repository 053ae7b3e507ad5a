"""Small pieces of C text shared by the converters and the emitter:
declarations from a type spelling, range-checked integer conversion, the
getter of an integer.  No knowledge of the spec or of the model here.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .ir import Type

INT_LIMITS = {  # (size, signed) -> (min, max) as C expressions
    (1, False): ("0", "UINT8_MAX"), (2, False): ("0", "UINT16_MAX"),
    (4, False): ("0", "UINT32_MAX"), (8, False): ("0", "UINT64_MAX"),
    (1, True): ("INT8_MIN", "INT8_MAX"), (2, True): ("INT16_MIN", "INT16_MAX"),
    (4, True): ("INT32_MIN", "INT32_MAX"), (8, True): ("INT64_MIN", "INT64_MAX"),
}

UINT32 = Type("uint32_t", "int", 4, False)
UINT64 = Type("uint64_t", "int", 8, False)


def c_text(text: str) -> str:
    """*text* for inside a C string literal."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def c_format_text(text: str) -> str:
    """*text* for inside a printf-style format literal (PyErr_Format's)."""
    return c_text(text).replace("%", "%%")


def declare(spelling: str, name: str) -> str:
    """`name` declared with the C type *spelling* ("uint8_t [16]" puts the
    array bound after the name; a pointer needs no space)."""
    spelling = spelling.strip()
    if spelling.endswith("]") and "[" in spelling:
        at = spelling.rindex("[")
        bound = spelling[at + 1:-1]
        if bound == "" or bound.isdigit():
            return f"{spelling[:at].rstrip()} {name}{spelling[at:]}"
    if spelling.endswith("*"):
        return f"{spelling}{name}"
    return f"{spelling} {name}"


def is_int(t: Type) -> bool:
    return t.kind in ("int", "enum", "bool")


def int_getter(expr: str, t: Type, target: str = "result") -> str:
    """`target = <Python int of expr>;`"""
    return f"{target} = {wide_int_to_py(expr, bool(t.signed))};"


def int_to_py(expr: str, signed: bool, bits: int) -> str:
    """The Python int of a C integer expression, through the narrowest C
    type that holds it (a long is 64 bits on every target we build)."""
    if signed:
        return f"PyLong_FromLong((long){expr})"
    if bits < 64:
        return f"PyLong_FromUnsignedLong({expr})"
    return f"PyLong_FromUnsignedLongLong({expr})"


def wide_int_to_py(expr: str, signed: bool) -> str:
    """The Python int of a C integer expression of any width (through long long)."""
    if signed:
        return f"PyLong_FromLongLong((long long)({expr}))"
    return int_to_py(f"(unsigned long long)({expr})", False, 64)


def int_convert(obj: str, target: str, t: Type, name: str,
                lo: Optional[str] = None, hi: Optional[str] = None,
                fail: str = "goto exit;") -> List[str]:
    """Range-checked conversion of PyObject *obj into the C lvalue target;
    *fail* leaves on error."""
    size = t.size or 4
    signed = bool(t.signed)
    tmin, tmax = INT_LIMITS[(size, signed)]
    if signed or (lo not in (None, "0")):
        low = lo if lo is not None else tmin
        hi_c = "INT64_MAX" if tmax == "UINT64_MAX" else tmax
        lines = ["{", "    int64_t v;",
                 f'    if (ibp_conv_signed({obj}, "{name}", {low}, {hi_c}, &v) < 0)',
                 f"        {fail}"]
        var = "v"
    else:
        lines = ["{", "    uint64_t v;",
                 f'    if (ibp_conv_unsigned({obj}, "{name}", {tmax}, &v) < 0)',
                 f"        {fail}"]
        var = "(int64_t)v"
    if hi is not None:
        lines += runtime_max(var, hi, name, obj, "    ", fail)
    return lines + [f"    {target} = v;", "}"]


def runtime_max(var: str, hi: str, name: str, obj: str, indent: str,
                fail: str = "goto exit;") -> List[str]:
    return [f"{indent}if ({var} > (int64_t)({hi})) {{",
            f'{indent}    PyErr_Format(PyExc_ValueError, "{name} must be at most %lld, got %S",',
            f"{indent}                 (long long)({hi}), {obj});",
            f"{indent}    {fail}",
            f"{indent}}}"]


def value_runs(values: List[int]) -> List[Tuple[int, int]]:
    """Sorted values as (lo, hi) runs of consecutive ones (an enum's members)."""
    runs: List[Tuple[int, int]] = []
    for v in values:
        if runs and runs[-1][1] == v - 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def in_runs(var: str, runs: List[Tuple[int, int]], unsigned: bool) -> str:
    """The C test that *var* is in one of *runs* (a run from 0 of an
    unsigned *var* needs no lower bound)."""
    return " || ".join(f"{var} == {lo}" if lo == hi else
                       f"{var} <= {hi}" if unsigned and lo == 0 else
                       f"({var} >= {lo} && {var} <= {hi})" for lo, hi in runs)


# A __be32 (network order) and its host-order value: the one spelling of
# the conversion every converter uses (verb parameters and results, data-path
# fields); glibc's <endian.h>, which ibverbs/src/common.h includes.
def be32_to_host(expr: str) -> str:
    return f"be32toh({expr})"


def host_to_be32(expr: str) -> str:
    return f"htobe32({expr})"


def indented(lines: List[str], by: str = "    ") -> List[str]:
    return [by + line for line in lines]


def if_given(var: str, lines: List[str]) -> List[str]:
    """*lines* run only when the optional argument *var* was passed."""
    return [f"if ({var} != NULL) {{"] + indented(lines) + ["}"]


def c_default(value: Any) -> str:
    """A spec default as a C initializer."""
    if value is None:
        return "0"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def py_repr_default(value: Any) -> str:
    """A spec default as Python shows it (signatures, stubs)."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    return repr(value)


# The locals every generated wrapper shares.
#: the local a method of a class holds its own verbs object in
#: (generator/emit.py declares and sets it)
SELF_PTR = "self_ptr"
#: the local the mask bits of the optional struct members given add up in
#: (the first member with a `mask:` declares it; spec `mask` passes it)
MASK_BITS = "mask_bits"


