"""The release a missing verb names (spec/symbols.yaml) against the
libibverbs.so.1 of each release tools/rdma-core fetches.

spec/symbols.yaml gives each optional symbol its ELF symbol version
(IBVERBS_1.N) and dates each version by the rdma-core release that added
it; the generated RuntimeError says "added in rdma-core 36 (IBVERBS_1.14)".
Here both facts are read back from the shared objects: every optional
symbol a release exports carries the version named for it, and a release
defines a version exactly when it is at least the release given for it (a
release not fetched yet is skipped: `make check-releases` fetches them).
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from generator import spec as spec_mod
from generator.cli import SPEC_DIR

RELEASES = ("33.2", "44.0", "56.1", "65.0")
CACHE = pathlib.Path(os.environ.get("IBVERBS_RDMA_CACHE")
                     or pathlib.Path(os.environ.get("XDG_CACHE_HOME")
                                     or pathlib.Path.home() / ".cache") / "ibverbs-rdma-core")
DYNSYM = re.compile(r"\s(\w+)@@?(IBVERBS_[\w.]+)")


@pytest.fixture(scope="module")
def the_spec():
    return spec_mod.load(SPEC_DIR)


def exported(release: str) -> dict:
    """{symbol: ELF version} of the release's libibverbs.so.1 (defined symbols)."""
    root = CACHE / release
    if not (root / ".complete").exists():
        pytest.skip(f"rdma-core {release} is not fetched (tools/rdma-core {release})")
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    (lib,) = sorted(root.glob("usr/lib/*/libibverbs.so.1.*"))
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[6] != "UND":
            m = DYNSYM.search(" " + fields[7])
            if m:
                syms[m.group(1)] = m.group(2)
    # the file name carries the newest version of the map: libibverbs.so.1.14.44.0
    newest = int(lib.name.split(".")[3])
    assert max(int(v.rsplit(".", 1)[1]) for v in syms.values() if v.startswith("IBVERBS_1.")) \
        == newest, lib.name
    return syms


def major(release: str) -> int:
    return int(release.split(".")[0])


@pytest.mark.parametrize("release", RELEASES)
def test_a_release_has_a_symbol_version_exactly_from_its_first_release(the_spec, release):
    versions = set(exported(release).values())
    for version, first in the_spec.symbol_versions.items():
        assert (version in versions) == (major(release) >= first), \
            f"rdma-core {release} {'has' if version in versions else 'lacks'} {version}, " \
            f"which spec/symbols.yaml dates {first}"


@pytest.mark.parametrize("release", RELEASES)
def test_each_optional_symbol_carries_its_version_from_its_release_on(the_spec, release):
    syms = exported(release)
    for sym, text in the_spec.optional.items():
        first, version = re.fullmatch(r"(\d+) \((IBVERBS_[\w.]+)\)", text).groups()
        assert (sym in syms) == (major(release) >= int(first)), \
            f"{sym} (added in {text}) {'is' if sym in syms else 'is not'} in rdma-core {release}"
        if sym in syms and version != "IBVERBS_PRIVATE":
            assert syms[sym] == version, f"{sym}: {syms[sym]} in rdma-core {release}"
        elif sym in syms:
            assert syms[sym].startswith("IBVERBS_PRIVATE_")


def test_every_public_version_of_an_optional_symbol_is_dated(the_spec):
    """The messages the generated code gives (added in rdma-core N
    (IBVERBS_1.M)) come from the table, one release per version."""
    assert the_spec.optional["ibv_query_qp_data_in_order"] == "36 (IBVERBS_1.14)"
    assert the_spec.optional["ibv_reg_mr_ex"] == "59 (IBVERBS_1.15)"
    assert the_spec.optional["ibv_query_port_speed"] == "62 (IBVERBS_1.16)"
    assert the_spec.optional["ibv_alloc_buf"] == "64 (IBVERBS_1.17)"


def test_an_undated_version_is_a_spec_error(tmp_path):
    for name in os.listdir(SPEC_DIR):
        if not name.endswith(".yaml"):
            continue
        text = (pathlib.Path(SPEC_DIR) / name).read_text()
        if name == "symbols.yaml":
            text = text.replace("    IBVERBS_1.16: 62\n", "")
        (tmp_path / name).write_text(text)
    with pytest.raises(spec_mod.SpecError, match=r"symbols.yaml:\d+: symbols.optional: "
                                                 r"ibv_dm_export_dmabuf_fd: 'IBVERBS_1.16'"):
        spec_mod.load(str(tmp_path))
