"""Build of the C extension (metadata lives in pyproject.toml).

The extension compiles the hand-written C in ibverbs/src/ and includes the
committed generator output from generated/; building needs a C compiler and
the CPython headers, nothing else: rdma-core's headers are the ones in
third_party/rdma-core (what generated/ is made from), never the machine's,
and libclang is only the generator's.  RDMA_CORE=<prefix> compiles against
other headers (tools/release-check does, with code generated from them).

It is built for one target of spec/targets/targets.yaml (generated/targets.py):
under a free-threaded CPython its free-threaded target (cp314t, the full
API); under a GIL build of 3.14 or later the stable ABI at 3.14's level
(cp314-abi3: vectorcall constructors), under 3.9-3.13 the stable ABI at the
3.9 floor (cp39-abi3: one wheel serves every GIL build of CPython >= 3.9);
under 3.15+ of either build PEP 803's abi3t (cp315-abi3t, .abi3t.so).
Of the targets for its kind of build, the newest whose requires_python the
interpreter meets.  IBVERBS_TARGET=<name> names one.
"""
import glob
import os
import runpy
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext

try:  # setuptools >= 70.1 ships its own
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel


HERE = os.path.dirname(os.path.abspath(__file__))


def build_target():
    """The target this interpreter builds (generated/targets.py)."""
    targets = runpy.run_path(os.path.join(HERE, "generated", "targets.py"))["TARGETS"]
    name = os.environ.get("IBVERBS_TARGET")
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    build = "free-threaded" if free_threaded else "gil"
    # the newest first (a stable sort: spec order among equals)
    targets = sorted(targets, key=lambda t: -int(t["requires_python"].split(".")[1]))
    for t in targets:
        if name is not None:
            if t["name"] == name:
                break
            continue
        needs = tuple(int(x) for x in t["requires_python"].split("."))
        if build in t["builds"] and sys.version_info[:2] >= needs:
            break
    else:
        raise SystemExit(f"no build target for this interpreter (IBVERBS_TARGET={name}; "
                         f"spec/targets/targets.yaml has {[t['name'] for t in targets]})")
    needs = tuple(int(x) for x in t["requires_python"].split("."))
    if sys.version_info[:2] < needs:
        raise SystemExit(f"target {t['name']} needs CPython {t['requires_python']} or later, "
                         f"not {sys.version_info[0]}.{sys.version_info[1]}")
    if build not in t["builds"]:
        raise SystemExit(f"target {t['name']} is for a {' or '.join(t['builds'])} build of "
                         f"CPython, and this one is not")
    return t


TARGET = build_target()


class build_ext_target(_build_ext):
    def get_ext_filename(self, fullname):
        """PEP 803's suffix for an abi3t target (setuptools names a stable-ABI
        extension .abi3.so on a GIL build): 3.15+ loads .abi3t.so on both
        builds (importlib.machinery.EXTENSION_SUFFIXES)."""
        name = super().get_ext_filename(fullname)
        if TARGET["abi_tag"].split(".")[-1] == "abi3t":
            name = name[:-len(".so")].rsplit(".", 1)[0] + ".abi3t.so"
        return name


class bdist_wheel_target(_bdist_wheel):
    def get_tag(self):
        python, abi, plat = super().get_tag()
        if python.startswith("cp"):
            return TARGET["python_tag"], TARGET["abi_tag"], plat
        return python, abi, plat

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
if os.environ.get("IBVERBS_TSAN"):
    # make test-tsan-ft: ThreadSanitizer, under a CPython built with it
    extra_compile_args += ["-fsanitize=thread", "-fno-omit-frame-pointer", "-O1", "-g"]
    extra_link_args += ["-fsanitize=thread"]
elif os.environ.get("IBVERBS_SANITIZE"):
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
                     "ibverbs/src/handles.c", "ibverbs/src/tables.c", "ibverbs/src/repr.c",
                     "ibverbs/src/cqex.c", "ibverbs/src/ext.c", "ibverbs/src/qpex.c",
                     "ibverbs/src/cm.c", "ibverbs/src/cm_id.c", "ibverbs/src/cm_addr.c",
                     "ibverbs/src/pymethods.c"],
            include_dirs=["ibverbs/src", "generated"] + rdma_include_dirs(),
            depends=sorted(glob.glob("generated/*.h") + glob.glob("ibverbs/src/*.h")
                           + glob.glob(os.path.join(VENDORED_INCLUDE, "*", "*.h"))),
            # generated/target.h defines Py_LIMITED_API from the target
            define_macros=[(TARGET["macro"], "1")],
            py_limited_api=TARGET["limited_api"] is not None,
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        )
    ],
    cmdclass={"build_ext": build_ext_target, "bdist_wheel": bdist_wheel_target},
)
