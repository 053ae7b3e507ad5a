"""ibverbs.flow packs struct ibv_flow_attr and its specs with verbs.h's layout.

The sizes and offsets come from the IR of the baseline header (the
generator's own parse), so a wrong struct format in flow.py fails here.
And QP._create_flow refuses a packed rule whose specs libibverbs would walk
past its end (issue 35, point 4), before the verb: through the null
provider, whose context has no ibv_create_flow (EOPNOTSUPP once called).
"""
import errno
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def records():
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    prefix = subprocess.run([str(ROOT / "tools" / "rdma-core"), "44.0"], capture_output=True,
                            text=True, cwd=ROOT)
    if prefix.returncode != 0:
        pytest.skip("rdma-core 44.0 headers are not available")
    out = subprocess.run([sys.executable, "-m", "generator", "--rdma-core",
                          prefix.stdout.strip(), "ir", "--json"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return {r["name"]: (r["size"], {f["name"]: f["offset"] for f in r["fields"]})
            for r in json.loads(out)["records"]}


def test_eth_spec_layout(records):
    from ibverbs.flow import FlowSpecEth
    size, off = records["struct ibv_flow_spec_eth"]
    _, filt = records["struct ibv_flow_eth_filter"]
    b = FlowSpecEth(dst_mac="02:00:00:00:00:01", src_mac=b"\x02\0\0\0\0\x02",
                    ether_type=0x0800, vlan_tag=0x0123).pack()
    assert len(b) == size == FlowSpecEth.SIZE
    assert struct.unpack_from("=IH", b) == (0x20, size)
    val, mask = off["val"], off["mask"]
    assert b[val + filt["dst_mac"]:val + filt["dst_mac"] + 6] == bytes.fromhex("020000000001")
    assert b[val + filt["src_mac"]:val + filt["src_mac"] + 6] == bytes.fromhex("020000000002")
    assert struct.unpack_from("!HH", b, val + filt["ether_type"]) == (0x0800, 0x0123)
    assert b[mask:mask + 12] == b"\xff" * 12
    assert struct.unpack_from("!HH", b, mask + filt["ether_type"]) == (0xFFFF, 0xFFFF)


def test_ipv4_and_tcp_udp_spec_layout(records):
    from ibverbs.flow import FlowSpecIPv4, FlowSpecTCPUDP
    size, off = records["struct ibv_flow_spec_ipv4"]
    b = FlowSpecIPv4(src_ip="10.0.0.2", dst_ip="10.0.0.1").pack()
    assert len(b) == size
    assert struct.unpack_from("!II", b, off["val"]) == (0x0A000002, 0x0A000001)
    assert struct.unpack_from("!II", b, off["mask"]) == (0xFFFFFFFF, 0xFFFFFFFF)
    size, off = records["struct ibv_flow_spec_tcp_udp"]
    b = FlowSpecTCPUDP("tcp", dst_port=4791).pack()
    assert len(b) == size and struct.unpack_from("=IH", b) == (0x40, size)
    assert struct.unpack_from("!HH", b, off["val"]) == (4791, 0)
    assert struct.unpack_from("!HH", b, off["mask"]) == (0xFFFF, 0)   # src_port not matched
    assert struct.unpack_from("=I", FlowSpecTCPUDP("udp", inner=True).pack())[0] == 0x141


def test_flow_attr_header(records):
    from ibverbs.flow import FlowAttr, FlowSpecEth, FlowSpecIPv4
    size, off = records["struct ibv_flow_attr"]
    b = FlowAttr([FlowSpecEth(ether_type=0x800), FlowSpecIPv4(dst_ip=1)], port=2,
                 priority=3, type=0, flags=4).pack()
    assert len(b) == size + 40 + 24
    assert struct.unpack_from("=H", b, off["size"])[0] == len(b)
    assert struct.unpack_from("=H", b, off["priority"])[0] == 3
    assert b[off["num_of_specs"]] == 2 and b[off["port"]] == 2
    assert struct.unpack_from("=I", b, off["flags"])[0] == 4


def test_bad_flow_input_is_a_clear_error():
    from ibverbs.flow import FlowAttr, FlowSpecEth, FlowSpecTCPUDP
    with pytest.raises(ValueError, match="6 bytes"):
        FlowSpecEth(dst_mac=b"\1\2").pack()
    with pytest.raises(ValueError, match="65535"):
        FlowSpecTCPUDP(dst_port=70000).pack()
    with pytest.raises(ValueError, match="tcp"):
        FlowSpecTCPUDP("sctp").pack()
    with pytest.raises(TypeError, match="specs\\[0\\]"):
        FlowAttr([object()]).pack()
    with pytest.raises(ValueError, match="port"):
        FlowAttr([], port=0).pack()


def test_a_spec_whose_header_size_is_not_its_packed_length_is_refused():
    from ibverbs.flow import FlowAttr, FlowSpecEth

    class Lying(FlowSpecEth):
        def pack(self):
            packed = super().pack()
            return packed[:4] + struct.pack("=H", 400) + packed[6:]

    class Short:
        def pack(self):
            return b"\x20\0"
    with pytest.raises(ValueError, match=r"specs\[1\]\.pack\(\) gave 40 bytes, but its header's size says 400"):
        FlowAttr([FlowSpecEth(), Lying()]).pack()
    with pytest.raises(ValueError, match=r"specs\[0\]\.pack\(\) gave 2 bytes"):
        FlowAttr([Short()]).pack()


_ATTR = struct.Struct("=IIHHBBxxI")    # struct ibv_flow_attr
_ETH, _INNER, _DROP = 0x20, 0x100, 0x1001

CREATE_FLOWS = """
import json, os
import ibverbs as ib
ctx = ib.get_device_list()[0].open()
pd = ctx.alloc_pd()
cq = ctx.create_cq(4)
qp = pd.create_qp(ib.QPInitAttr(cq, cq))
out = []
for packed in json.loads(os.environ["RULES"]):
    try:
        qp._create_flow(bytes.fromhex(packed))
        out.append("created")
    except ValueError as e:
        out.append("ValueError: " + str(e))
    except ib.VerbsError as e:
        out.append(f"VerbsError {e.errno}")
print(json.dumps(out))
"""


def _rule(num_of_specs, *specs):
    body = b"".join(specs)
    return _ATTR.pack(0, 0, _ATTR.size + len(body), 0, num_of_specs, 1, 0) + body


def _spec(kind, size, length=None):
    """A spec header saying kind and size, padded to length bytes."""
    head = struct.pack("=IHxx", kind, size)
    length = size if length is None else length
    return head[:length] + bytes(max(0, length - len(head)))


def test_create_flow_walks_the_specs_before_the_verb(on_null_provider):
    eth = _spec(_ETH, 40)
    cases = {
        "lying header: 400 of 40": (_rule(1, _spec(_ETH, 400, 40)), False),
        "second spec's header past the end": (_rule(2, eth, _spec(_ETH, 40, 4)), False),
        "fewer specs than num_of_specs": (_rule(2, eth), False),
        "bytes after the last spec": (_rule(1, eth, eth), False),
        "a size of 0": (_rule(1, _spec(_DROP, 0, 8)), False),
        "a size below the header": (_rule(1, _spec(_DROP, 4, 4)), False),
        "an eth spec shorter than its struct": (_rule(1, _spec(_ETH, 8)), False),
        "an inner eth spec shorter than its struct": (_rule(1, _spec(_ETH | _INNER, 8)), False),
        "eth": (_rule(1, eth), True),
        "inner eth then drop": (_rule(2, _spec(_ETH | _INNER, 40), _spec(_DROP, 8)), True),
        "a kind libibverbs does not know": (_rule(1, _spec(0x7777, 12)), True),
        "no specs": (_rule(0), True),
    }
    out = on_null_provider(CREATE_FLOWS, RULES=json.dumps([c.hex() for c, _ in cases.values()]))
    assert out.returncode == 0, out.stderr
    results = dict(zip(cases, json.loads(out.stdout)))
    for name, (_, walkable) in cases.items():
        if walkable:      # reached the verb: the null provider has none
            assert results[name] == f"VerbsError {errno.EOPNOTSUPP}", name
        else:
            assert results[name].startswith("ValueError: QP._create_flow: attr's specs must "
                                            "fill it"), (name, results[name])
