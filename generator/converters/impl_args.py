"""Parameters of a hand-written `_impl` function (spec `impl:` of a hand
method, generator/impl.py): the generated wrapper converts each Python
argument with one of these (or with a verb parameter's converter, such as
`int` with a `ctype:`) and passes the C value on.  `impl_ctype` is the C type
the `_impl` function takes it as."""
from __future__ import annotations

from typing import Any, List, Optional

from ..ctext import c_format_text, indented
from .args import ArgParam, ClassArgParam, HeldStructHandles
from .buffers import BytesParam
from .registry import Context, PARAMS


@PARAMS.register("object")
class ObjectParam(ArgParam):
    """Any object, passed on as it is (post_send's `wrs`: a SendWR, a list
    of them or a PostList, which the hand-written loop tells apart); NULL
    when an optional one is not given."""
    base_pytype = "Any"
    impl_ctype = "PyObject *"
    parse_can_fail = False     # nothing to convert

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
class InstanceParam(ClassArgParam):
    """An object of one of our types (`instance:WCBuffer`) or of a subclass
    (the seed's classes can be subclassed, and a subclass's object has the
    same struct), passed on as its object struct; `message:` begins the
    TypeError ("<message>, not <type>"; default "expected a <Type>")."""
    keys = ClassArgParam.keys | {"message"}

    def __init__(self, ctx: Context, cname: str, t: Any, pspec: Any) -> None:
        super().__init__(ctx, cname, t, pspec)
        article = "an" if self.cls[0] in "AEIOU" else "a"
        self.message = str(pspec.message or f"expected {article} {self.cls}")

    @classmethod
    def describe(cls, convert: str) -> Optional[str]:
        return None     # the TypeError's message says it

    @property
    def object_ctype(self) -> str:
        """The C type of its object struct (the data-path records' typedef)."""
        return f"{self.cls}Object"

    @property
    def impl_ctype(self) -> str:
        return f"{self.object_ctype} *"

    def own_declarations(self) -> List[str]:
        return [f"{self.object_ctype} *{self.local} = NULL;"]

    def parse(self) -> List[str]:
        return [f"if (!PyObject_TypeCheck({self.var}, {self.cls}_Type)) {{",
                f'    PyErr_Format(PyExc_TypeError, "{c_format_text(self.message)}, not %s", '
                f"ibp_type_name({self.var}));",
                "    goto exit;", "}", f"{self.local} = ({self.object_ctype} *){self.var};"]

    def call_arg(self) -> str:
        return self.local


@PARAMS.register("struct_instance")
class StructInstanceParam(HeldStructHandles, InstanceParam):
    """An object of a verbs struct class (`struct_instance:QPInitAttr`),
    passed on as its `struct <Class>Object *` (objects.h), for hand
    functions outside the verbs spec (rdma_cm's create_qp).  As a verb's
    struct argument (`struct:`), its handles are held and it is prepared
    (`<Class>_prepare`) in its critical section before the `_impl` runs,
    which reads it there until it returns."""

    def __init__(self, ctx: Context, cname: str, t: Any, pspec: Any) -> None:
        super().__init__(ctx, cname, t, pspec)
        self._held_struct_model(ctx)

    @property
    def struct_var(self) -> str:
        return self.local

    @property
    def object_ctype(self) -> str:
        return f"struct {self.cls}Object"

    def own_declarations(self) -> List[str]:
        return super().own_declarations() + self.lock_declarations()


@PARAMS.register("handle_object")
class HandleObjectParam(ClassArgParam):
    """An open object of a handle class (`handle_object:PD`), passed on as
    the object (the `_impl` function may keep it as a parent); None too, as
    NULL, when the default is None.  ibp_conv_handle: a TypeError naming
    the argument, EBADF when it is closed.  Unlike `handle:`, no context is
    checked: the `_impl` function knows which one it must be."""
    impl_ctype = "PyObject *"

    def own_declarations(self) -> List[str]:
        return [f"PyObject *{self.local} = NULL;"]

    def parse(self) -> List[str]:
        none_ok = 1 if self.default is None else 0
        return self.when_given([f'if (ibp_conv_handle({self.var}, "{self.name}", '
                                f'{self.cls}_Type, {none_ok}, &{self.local}) < 0)',
                                "    goto exit;"])

    def call_arg(self) -> str:
        return self.local


@PARAMS.register("sockaddr")
class SockaddrParam(ArgParam):
    """An rdma_cm address, (host, port) or host, the host numeric IPv4 or
    IPv6 ('' for any) (ibp_cm_conv_addr, cm_addr.c), passed on as a
    `struct sockaddr *`; None too, as NULL, when the default is None."""
    base_pytype = "_Addr"
    impl_ctype = "struct sockaddr *"

    @classmethod
    def describe(cls, convert: str) -> str:
        return "an address: (host, port) or host"

    def own_declarations(self) -> List[str]:
        return [f"struct sockaddr_storage {self.local};", f"int {self.local}_set = 0;"]

    def parse(self) -> List[str]:
        none_ok = 1 if self.default is None else 0
        return self.when_given([f'if (ibp_cm_conv_addr({self.var}, "{self.name}", '
                                f'&{self.local}, {none_ok}, &{self.local}_set) < 0)',
                                "    goto exit;"])

    def call_arg(self) -> str:
        return f"{self.local}_set ? (struct sockaddr *)&{self.local} : NULL"


@PARAMS.register("data")
class DataParam(BytesParam):
    """Bytes-like data or None (rdma_cm's private_data), copied into a bytes
    object that the `_impl` function gets as it is: NULL when not given or
    None.  `max` bounds its size and `hint` says why, as for `bytes`."""
    impl_ctype = "PyObject *"

    def parse(self) -> List[str]:
        return ([f"if ({self.var} != NULL && {self.var} != Py_None) {{"]
                + indented(super().parse()) + ["}"])

    def call_arg(self) -> str:
        return f"{self.local}_bytes"


@PARAMS.register("handles")
class HandleSequenceParam(ClassArgParam):
    """A sequence of open objects of a handle class (`handles:WQ`: an RSS
    table's WQs), passed on as a new tuple of them (ibp_conv_handles: a
    TypeError naming the item, EBADF for a closed one).  A method that
    releases the GIL holds each of them (spec `holds:`, ibp_hold_each)."""
    impl_ctype = "PyObject *"
    #: generator/hand_gil.py holds each item, not the tuple
    sequence = True

    def pytype_of(self, pspec: Any) -> str:
        return f"Sequence[{self.cls}]"

    @classmethod
    def describe(cls, convert: str) -> Optional[str]:
        return f"a sequence of {convert.split(':', 1)[1]}s"

    def own_declarations(self) -> List[str]:
        return [f"PyObject *{self.local} = NULL;"]

    def parse(self) -> List[str]:
        return [f'{self.local} = ibp_conv_handles({self.var}, "{self.name}", {self.cls}_Type);',
                f"if ({self.local} == NULL)", "    goto exit;"]

    def cleanup(self) -> List[str]:
        return [f"Py_XDECREF({self.local});"]

    def call_arg(self) -> str:
        return self.local
