"""Build of the C extension (metadata lives in pyproject.toml).

The extension compiles the hand-written C in ibverbs/src/ and includes the
committed generator output from generated/; building needs a C compiler and
the CPython headers, nothing else: rdma-core's headers are the ones in
third_party/rdma-core (what generated/ is made from), never the machine's,
and libclang is only the generator's.  RDMA_CORE=<prefix> compiles against
other headers (tools/release-check does, with code generated from them).  It is built for the Limited API
(abi3) with 3.9 as the floor, so one wheel serves every CPython >= 3.9.
"""
import glob
import os

from setuptools import Extension, setup

try:  # setuptools >= 70.1 ships its own
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel


class bdist_wheel_abi3(_bdist_wheel):
    def get_tag(self):
        python, abi, plat = super().get_tag()
        if python.startswith("cp"):
            return "cp39", "abi3", plat
        return python, abi, plat


HERE = os.path.dirname(os.path.abspath(__file__))
VENDORED_INCLUDE = os.path.join("third_party", "rdma-core", "include")


def rdma_include_dirs():
    prefix = os.environ.get("RDMA_CORE")
    if not prefix:
        if not os.path.exists(os.path.join(HERE, VENDORED_INCLUDE, "infiniband", "verbs.h")):
            raise SystemExit(f"{VENDORED_INCLUDE}/infiniband/verbs.h is missing from the source tree")
        return [VENDORED_INCLUDE]
    for candidate in ("include", "usr/include"):
        path = os.path.join(prefix, candidate)
        if os.path.exists(os.path.join(path, "infiniband", "verbs.h")):
            return [path]
    raise SystemExit(f"RDMA_CORE={prefix}: no include/infiniband/verbs.h there")


extra_compile_args = ["-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra",
                      "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                      "-Wno-cast-function-type", "-U_FORTIFY_SOURCE",
                      # a function the headers do not declare would return a truncated int
                      "-Werror=implicit-function-declaration"]
if os.environ.get("IBVERBS_WERROR"):
    extra_compile_args.append("-Werror")
extra_link_args = []
# Link-time optimisation inlines the generated method wrappers, the handle
# checks and the data-path functions into one another across files: every
# call and return costs, most under emulation (TCG), and an empty poll gets
# 15-20% cheaper (bench/host_micro.py).  One partition: module.c's
# `.symver dlopen,dlopen@GLIBC_2.2.5` must land in the same assembly as the
# calls it binds, or the wheel needs glibc 2.34 (`make wheel` checks).
if not os.environ.get("IBVERBS_NO_LTO"):
    extra_compile_args.append("-flto=auto")
    extra_link_args += ["-flto=auto", "-flto-partition=one"]
if os.environ.get("IBVERBS_SANITIZE"):
    extra_compile_args += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
    extra_link_args += ["-fsanitize=address,undefined"]
elif not os.environ.get("IBVERBS_DEBUG"):
    # Debug info is two thirds of the module (1.48 MB -> 0.45 MB); the flags
    # come after Python's CFLAGS (-g), so they win.  IBVERBS_DEBUG=1 keeps it.
    extra_compile_args.append("-g0")
    extra_link_args.append("-s")

setup(
    ext_modules=[
        Extension(
            "ibverbs._ibverbs",
            sources=["ibverbs/src/module.c", "ibverbs/src/loader.c",
                     "ibverbs/src/datapath.c", "ibverbs/src/sge.c", "ibverbs/src/wr.c",
                     "ibverbs/src/post.c", "ibverbs/src/postlist.c",
                     "ibverbs/src/postlist_entry.c", "ibverbs/src/wc.c",
                     "ibverbs/src/wcbuffer.c", "ibverbs/src/events.c",
                     "ibverbs/src/errors.c", "ibverbs/src/explain.c", "ibverbs/src/convert.c",
                     "ibverbs/src/handles.c", "ibverbs/src/repr.c",
                     "ibverbs/src/cqex.c", "ibverbs/src/ext.c", "ibverbs/src/qpex.c",
                     "ibverbs/src/cm.c", "ibverbs/src/cm_id.c", "ibverbs/src/cm_addr.c",
                     "ibverbs/src/pymethods.c"],
            include_dirs=["ibverbs/src", "generated"] + rdma_include_dirs(),
            depends=sorted(glob.glob("generated/*.h") + glob.glob("ibverbs/src/*.h")
                           + glob.glob(os.path.join(VENDORED_INCLUDE, "*", "*.h"))),
            define_macros=[("Py_LIMITED_API", "0x03090000")],
            py_limited_api=True,
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        )
    ],
    cmdclass={"bdist_wheel": bdist_wheel_abi3},
)
