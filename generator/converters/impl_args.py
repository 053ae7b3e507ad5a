"""Parameters of a hand-written `_impl` function (spec `impl:` of a hand
method, generator/impl.py): the generated wrapper converts each Python
argument with one of these (or with a verb parameter's converter, such as
`int` with a `ctype:`) and passes the C value on.  `impl_ctype` is the C type
the `_impl` function takes it as."""
from __future__ import annotations

from typing import List

from .args import ArgParam
from .registry import PARAMS


@PARAMS.register("object")
class ObjectParam(ArgParam):
    """Any object, passed on as it is (post_send's `wrs`: a SendWR, a list
    of them or a PostList, which the hand-written loop tells apart); NULL
    when an optional one is not given."""
    base_pytype = "Any"
    impl_ctype = "PyObject *"

    def call_arg(self) -> str:
        return self.var


@PARAMS.register("positive_int")
class PositiveIntParam(ArgParam):
    """An int in 1..INT32_MAX (poll's num_entries); ibp_conv_positive_int
    remembers the last int object converted, which a polling loop passes
    again and again."""
    impl_ctype = "int"

    def own_declarations(self) -> List[str]:
        return [f"int {self.local} = {self.default if self.optional else 0};"]

    def parse(self) -> List[str]:
        return self.when_given([f'if (ibp_conv_positive_int({self.var}, "{self.name}", '
                                f'&{self.local}) < 0)', "    goto exit;"])

    def call_arg(self) -> str:
        return self.local


@PARAMS.register("bool")
class BoolParam(ArgParam):
    """Any object, by its truth (PyArg's "p")."""
    base_pytype = "bool"
    impl_ctype = "int"

    def own_declarations(self) -> List[str]:
        return [f"int {self.local} = {1 if self.optional and self.default else 0};"]

    def parse(self) -> List[str]:
        return self.when_given(["{", f"    int v = PyObject_IsTrue({self.var});",
                                "    if (v < 0)", "        goto exit;",
                                f"    {self.local} = v;", "}"])

    def call_arg(self) -> str:
        return self.local


@PARAMS.register("instance")
class InstanceParam(ArgParam):
    """An object of one of our types (`instance:WCBuffer`), passed on as
    its object struct; `exact: true` refuses subclasses, `message:` begins
    the TypeError ("<message>, not <type>"; default "expected a <Type>")."""

    def __init__(self, ctx, cname: str, t, pspec):
        self.cls = pspec["convert"].split(":", 1)[1]
        self.exact = bool(pspec.get("exact", False))
        article = "an" if self.cls[0] in "AEIOU" else "a"
        self.message = str(pspec.get("message") or f"expected {article} {self.cls}")
        super().__init__(ctx, cname, t, pspec)

    def pytype_of(self, pspec) -> str:
        return self.cls

    @property
    def impl_ctype(self) -> str:
        return f"{self.cls}Object *"

    def own_declarations(self) -> List[str]:
        return [f"{self.cls}Object *{self.local} = NULL;"]

    def parse(self) -> List[str]:
        test = (f"Py_IS_TYPE({self.var}, {self.cls}_Type)" if self.exact
                else f"PyObject_TypeCheck({self.var}, {self.cls}_Type)")
        return [f"if (!{test}) {{",
                f'    PyErr_Format(PyExc_TypeError, "{self.message}, not %s", '
                f"ibp_type_name({self.var}));",
                "    goto exit;", "}", f"{self.local} = ({self.cls}Object *){self.var};"]

    def call_arg(self) -> str:
        return self.local
