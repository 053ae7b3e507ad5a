"""Fixtures of the host tier."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any, Callable, Optional

import pytest

RECORDING = pathlib.Path(__file__).resolve().parents[1] / "recording"
if str(RECORDING) not in sys.path:
    sys.path.insert(0, str(RECORDING))


@pytest.fixture(scope="session")
def recording_library() -> str:
    if shutil.which("gcc") is None:
        pytest.skip("the recording provider needs gcc (make venv-test installs it)")
    import recording
    return recording.build()


@pytest.fixture
def recording(recording_library: str) -> Callable[..., Any]:
    """recording(body, *args): body(Recorder, *args) run in a child Python
    whose ibverbs loaded the recording provider (tests/recording/recording.py
    says how to write a body and what a Recorder offers); its return value."""
    import recording as rec

    def run(body: Callable[..., Any], *args: Any, timeout: float = 300) -> Any:
        return rec.run(body, *args, timeout=timeout, lib=recording_library)
    return run


@pytest.fixture(scope="session")
def on_recording_provider(recording_library: str) -> Callable[..., Any]:
    """run(code, interpreter=None, **env): as on_null_provider, with the
    recording provider loaded (`import recording` in the child gives its
    Recorder: tests/recording/recording.py)."""
    import recording as rec

    def run(code: str, interpreter: Optional[str] = None,
            **env: str) -> "subprocess.CompletedProcess[str]":
        full = dict(rec.environment(recording_library), **env)
        return subprocess.run([interpreter or sys.executable, "-c", code], capture_output=True,
                              text=True, env=full, cwd=str(rec.ROOT), timeout=120)
    return run


FREE_THREADED_PYTHON = "/root/.cache/ibverbs-ft/3.14t/bin/python3.14t"


@pytest.fixture(scope="session")
def free_threaded_python() -> str:
    """A free-threaded CPython (IBVERBS_FT_PYTHON, else the one
    shared/NOTES.md's recipe installs) for which the extension is built in
    place; skips, saying which is missing, otherwise."""
    path = os.environ.get("IBVERBS_FT_PYTHON", FREE_THREADED_PYTHON)
    if not os.access(path, os.X_OK):
        pytest.skip(f"no free-threaded CPython at {path} (set IBVERBS_FT_PYTHON)")
    probe = subprocess.run(
        [path, "-c", "import importlib.machinery, sysconfig; "
                     "print(sysconfig.get_config_var('Py_GIL_DISABLED'), "
                     "importlib.machinery.EXTENSION_SUFFIXES[0])"],
        capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"{path} does not run: {probe.stderr.strip()[-300:]}")
    gil_disabled, suffix = probe.stdout.split()
    if gil_disabled != "1":
        pytest.skip(f"{path} is not a free-threaded build (Py_GIL_DISABLED={gil_disabled})")
    root = pathlib.Path(__file__).resolve().parents[2]
    built = root / "ibverbs" / f"_ibverbs{suffix}"
    if not built.exists():
        # Without it the interpreter would fall back to the abi3 build.
        pytest.skip(f"the extension is not built for {path} ({built.name} missing): "
                    f"IBVERBS_NO_LTO=1 {path} setup.py build_ext --inplace")
    return path


@pytest.fixture(scope="session")
def irs() -> Any:
    """verbs.h's IR and rdma_cma.h's, parsed once (RDMA_CORE: another
    rdma-core's headers); skips without libclang."""
    pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")
    from generator import parse, rdmacm
    prefix = os.environ.get("RDMA_CORE") or None
    return parse.parse(prefix), parse.parse(prefix, rdmacm.HEADER)
