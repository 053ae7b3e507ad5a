"""Flow steering rules: QP.create_flow(FlowAttr(specs=[...])).

struct ibv_flow_attr is followed in memory by its specs (struct
ibv_flow_spec_eth, _ipv4, _tcp_udp, ...), each starting with its type and
size; libibverbs takes the whole block.  These classes pack it with the C
layout of verbs.h (tests/host/test_flow.py checks every size and offset
against the IR of the header), and QP.create_flow hands the bytes to
ibv_create_flow (QP._create_flow).

Header fields (MAC addresses, EtherType, VLAN tag, IPv4 addresses, ports)
are given in host order and travel in network order, as on the wire.  A
mask left at None matches the field exactly when it is set (non-zero), and
ignores it otherwise.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, TypeVar, Union

if TYPE_CHECKING:
    from ._ibverbs import QP, Flow

# enum ibv_flow_spec_type (FlowSpecType): fixed by the verbs ABI
_SPEC_ETH, _SPEC_IPV4, _SPEC_TCP, _SPEC_UDP, _SPEC_INNER = 0x20, 0x30, 0x40, 0x41, 0x100

_ATTR = struct.Struct("=IIHHBBxxI")          # struct ibv_flow_attr (20 bytes)
_HEAD = struct.Struct("=IH")                 # type, size of every spec


def _mac(value: Union[bytes, str, None], name: str) -> bytes:
    if value is None:
        return bytes(6)
    if isinstance(value, str):
        value = bytes.fromhex(value.replace(":", "").replace("-", ""))
    value = bytes(value)
    if len(value) != 6:
        raise ValueError(f"{name} must be 6 bytes (or 'aa:bb:cc:dd:ee:ff'), got {len(value)}")
    return value


def _ipv4(value: Union[str, int, None], name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"{name} must fit in 32 bits")
        return value
    return int(ipaddress.IPv4Address(value))


def _u16(value: int, name: str) -> int:
    if not isinstance(value, int) or not 0 <= value <= 0xFFFF:
        raise ValueError(f"{name} must be an int in [0, 65535], got {value!r}")
    return value


_Mask = TypeVar("_Mask", int, bytes)


def _mask_for(value: object, mask: Optional[_Mask], full: _Mask) -> _Mask:
    """mask when given, else full when value is set, else zero (all bits off)."""
    return (full if value else type(full)(0) if isinstance(full, int) else bytes(len(full))) \
        if mask is None else mask


@dataclass
class FlowSpecEth:
    """L2: struct ibv_flow_spec_eth (40 bytes).

    Attributes:
        dst_mac: Destination MAC to match: 6 bytes or "aa:bb:cc:dd:ee:ff" (None:
            any).
        src_mac: Source MAC to match, as dst_mac (None: any).
        ether_type: EtherType to match, host order (0x0800 IPv4; 0: any).
        vlan_tag: VLAN tag (TCI) to match, host order (0: any).
        dst_mac_mask: Which bits of dst_mac must match (None: all of a given
            dst_mac, none otherwise).
        src_mac_mask: Which bits of src_mac must match (None: as dst_mac_mask).
        ether_type_mask: Which bits of ether_type must match (None: all when
            ether_type is set).
        vlan_tag_mask: Which bits of vlan_tag must match (None: all when
            vlan_tag is set).
        inner: Match the inner (tunnelled) header rather than the outer one
            (IBV_FLOW_SPEC_INNER).
        SIZE: Size of the packed spec in bytes (struct ibv_flow_spec_eth).
    """
    #: Destination MAC to match: 6 bytes or "aa:bb:cc:dd:ee:ff" (None: any).
    dst_mac: Union[bytes, str, None] = None
    #: Source MAC to match, as dst_mac (None: any).
    src_mac: Union[bytes, str, None] = None
    #: EtherType to match, host order (0x0800 IPv4; 0: any).
    ether_type: int = 0
    #: VLAN tag (TCI) to match, host order (0: any).
    vlan_tag: int = 0
    #: Which bits of dst_mac must match (None: all of a given dst_mac, none otherwise).
    dst_mac_mask: Union[bytes, str, None] = None
    #: Which bits of src_mac must match (None: as dst_mac_mask).
    src_mac_mask: Union[bytes, str, None] = None
    #: Which bits of ether_type must match (None: all when ether_type is set).
    ether_type_mask: Optional[int] = None
    #: Which bits of vlan_tag must match (None: all when vlan_tag is set).
    vlan_tag_mask: Optional[int] = None
    #: Match the inner (tunnelled) header rather than the outer one (IBV_FLOW_SPEC_INNER).
    inner: bool = False

    #: Size of the packed spec in bytes (struct ibv_flow_spec_eth).
    SIZE = 40

    def pack(self) -> bytes:
        """The spec as the C struct ibv_create_flow reads it (SIZE bytes, masks filled in)."""
        dst, src = _mac(self.dst_mac, "dst_mac"), _mac(self.src_mac, "src_mac")
        val = dst + src + struct.pack("!HH", _u16(self.ether_type, "ether_type"),
                                      _u16(self.vlan_tag, "vlan_tag"))
        full = b"\xff" * 6
        mask = (_mac(self.dst_mac_mask, "dst_mac_mask") if self.dst_mac_mask is not None
                else (full if any(dst) else bytes(6)))
        mask += (_mac(self.src_mac_mask, "src_mac_mask") if self.src_mac_mask is not None
                 else (full if any(src) else bytes(6)))
        mask += struct.pack("!HH",
                            _u16(_mask_for(self.ether_type, self.ether_type_mask, 0xFFFF), "ether_type_mask"),
                            _u16(_mask_for(self.vlan_tag, self.vlan_tag_mask, 0xFFFF), "vlan_tag_mask"))
        kind = _SPEC_ETH | (_SPEC_INNER if self.inner else 0)
        return _HEAD.pack(kind, self.SIZE) + val + mask + bytes(2)


@dataclass
class FlowSpecIPv4:
    """L3: struct ibv_flow_spec_ipv4 (24 bytes); addresses as str or int.

    Attributes:
        src_ip: Source IPv4 address to match: "10.0.0.1" or an int (None: any).
        dst_ip: Destination IPv4 address to match, as src_ip (None: any).
        src_ip_mask: Which bits of src_ip must match ("255.255.255.0" or an int;
            None: all of a given src_ip).
        dst_ip_mask: Which bits of dst_ip must match (None: all of a given
            dst_ip).
        inner: Match the inner (tunnelled) header rather than the outer one.
        SIZE: Size of the packed spec in bytes (struct ibv_flow_spec_ipv4).
    """
    #: Source IPv4 address to match: "10.0.0.1" or an int (None: any).
    src_ip: Union[str, int, None] = None
    #: Destination IPv4 address to match, as src_ip (None: any).
    dst_ip: Union[str, int, None] = None
    #: Which bits of src_ip must match ("255.255.255.0" or an int; None: all of a given src_ip).
    src_ip_mask: Union[str, int, None] = None
    #: Which bits of dst_ip must match (None: all of a given dst_ip).
    dst_ip_mask: Union[str, int, None] = None
    #: Match the inner (tunnelled) header rather than the outer one.
    inner: bool = False

    #: Size of the packed spec in bytes (struct ibv_flow_spec_ipv4).
    SIZE = 24

    def pack(self) -> bytes:
        """The spec as the C struct ibv_create_flow reads it (SIZE bytes, masks filled in)."""
        src, dst = _ipv4(self.src_ip, "src_ip"), _ipv4(self.dst_ip, "dst_ip")
        src_mask = _ipv4(self.src_ip_mask, "src_ip_mask") if self.src_ip_mask is not None \
            else (0xFFFFFFFF if src else 0)
        dst_mask = _ipv4(self.dst_ip_mask, "dst_ip_mask") if self.dst_ip_mask is not None \
            else (0xFFFFFFFF if dst else 0)
        kind = _SPEC_IPV4 | (_SPEC_INNER if self.inner else 0)
        return (_HEAD.pack(kind, self.SIZE) + bytes(2) +
                struct.pack("!II", src, dst) + struct.pack("!II", src_mask, dst_mask))


@dataclass
class FlowSpecTCPUDP:
    """L4: struct ibv_flow_spec_tcp_udp (16 bytes); protocol "tcp" or "udp".

    Attributes:
        protocol: "udp" (IBV_FLOW_SPEC_UDP) or "tcp" (IBV_FLOW_SPEC_TCP).
        dst_port: Destination port to match, host order (0: any).
        src_port: Source port to match, host order (0: any).
        dst_port_mask: Which bits of dst_port must match (None: all when
            dst_port is set).
        src_port_mask: Which bits of src_port must match (None: all when
            src_port is set).
        inner: Match the inner (tunnelled) header rather than the outer one.
        SIZE: Size of the packed spec in bytes (struct ibv_flow_spec_tcp_udp).
    """
    #: "udp" (IBV_FLOW_SPEC_UDP) or "tcp" (IBV_FLOW_SPEC_TCP).
    protocol: str = "udp"
    #: Destination port to match, host order (0: any).
    dst_port: int = 0
    #: Source port to match, host order (0: any).
    src_port: int = 0
    #: Which bits of dst_port must match (None: all when dst_port is set).
    dst_port_mask: Optional[int] = None
    #: Which bits of src_port must match (None: all when src_port is set).
    src_port_mask: Optional[int] = None
    #: Match the inner (tunnelled) header rather than the outer one.
    inner: bool = False

    #: Size of the packed spec in bytes (struct ibv_flow_spec_tcp_udp).
    SIZE = 16

    def pack(self) -> bytes:
        """The spec as the C struct ibv_create_flow reads it (SIZE bytes, masks filled in)."""
        if self.protocol not in ("tcp", "udp"):
            raise ValueError(f"protocol must be 'tcp' or 'udp', got {self.protocol!r}")
        kind = (_SPEC_TCP if self.protocol == "tcp" else _SPEC_UDP) | \
            (_SPEC_INNER if self.inner else 0)
        val = struct.pack("!HH", _u16(self.dst_port, "dst_port"), _u16(self.src_port, "src_port"))
        mask = struct.pack("!HH",
                           _u16(_mask_for(self.dst_port, self.dst_port_mask, 0xFFFF), "dst_port_mask"),
                           _u16(_mask_for(self.src_port, self.src_port_mask, 0xFFFF), "src_port_mask"))
        return _HEAD.pack(kind, self.SIZE) + val + mask + bytes(2)


@dataclass
class FlowAttr:
    """struct ibv_flow_attr and its specs (outermost layer first).

    type is a FlowAttrType (NORMAL: match the specs), priority 0 is the
    highest, flags FlowFlags.

    Attributes:
        specs: The match specs (FlowSpecEth, FlowSpecIPv4, FlowSpecTCPUDP),
            outermost layer first.
        port: The port the rule applies to (from 1).
        priority: Priority: 0 is the highest; among overlapping rules the higher
            one wins.
        type: A FlowAttrType (NORMAL: match the specs; ALL_DEFAULT, MC_DEFAULT,
            SNIFFER).
        flags: FlowFlags (0 for none).
    """
    #: The match specs (FlowSpecEth, FlowSpecIPv4, FlowSpecTCPUDP), outermost layer first.
    specs: List[object] = field(default_factory=list)
    #: The port the rule applies to (from 1).
    port: int = 1
    #: Priority: 0 is the highest; among overlapping rules the higher one wins.
    priority: int = 0
    #: A FlowAttrType (NORMAL: match the specs; ALL_DEFAULT, MC_DEFAULT, SNIFFER).
    type: int = 0
    #: FlowFlags (0 for none).
    flags: int = 0

    def pack(self) -> bytes:
        """struct ibv_flow_attr followed by the packed specs, as ibv_create_flow reads them."""
        body = b""
        for i, spec in enumerate(self.specs):
            pack = getattr(spec, "pack", None)
            if pack is None:
                raise TypeError(f"specs[{i}] must be a FlowSpecEth, FlowSpecIPv4 or "
                                f"FlowSpecTCPUDP, not {type(spec).__name__}")
            packed = bytes(pack())
            # libibverbs steps from spec to spec by the size in each header,
            # not by what was packed: the two must agree
            if len(packed) < _HEAD.size:
                raise ValueError(f"specs[{i}].pack() gave {len(packed)} bytes, less than a "
                                 f"spec header ({_HEAD.size})")
            _, size = _HEAD.unpack_from(packed)
            if size != len(packed):
                raise ValueError(f"specs[{i}].pack() gave {len(packed)} bytes, but its "
                                 f"header's size says {size}")
            body += packed
        if len(self.specs) > 255:
            raise ValueError("at most 255 specs")
        if not 1 <= self.port <= 255:
            raise ValueError(f"port must be in [1, 255], got {self.port}")
        size = _ATTR.size + len(body)
        if size > 0xFFFF:
            raise ValueError("the rule is larger than 65535 bytes")
        return _ATTR.pack(0, self.type, size, _u16(self.priority, "priority"),
                          len(self.specs), self.port, self.flags) + body


def create_flow(qp: QP, attr: FlowAttr) -> Flow:
    """QP.create_flow(attr) -> Flow: attach a steering rule (ibv_create_flow).

    Raw packet QPs on NICs with flow steering; Soft-RoCE: VerbsError
    EOPNOTSUPP.
    """
    if not isinstance(attr, FlowAttr):
        raise TypeError(f"attr must be a FlowAttr, not {type(attr).__name__}")
    return qp._create_flow(attr.pack())
