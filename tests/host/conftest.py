"""Fixtures of the host tier."""
from __future__ import annotations

import pathlib
import shutil
import sys
from typing import Any, Callable

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
