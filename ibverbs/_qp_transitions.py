"""QP state transitions: ``QP.to_init``, ``QP.to_rtr``, ``QP.to_rts``, and
``QP.reset`` (any state -> RESET, where recovering a QP starts).

Plain functions taking the QP first; the package attaches them as methods.
The attribute masks follow the QP type (the verbs man page of
``ibv_modify_qp`` lists the required attributes per transition):

=========== ================================ ============================== ==================================
QP type     RESET -> INIT                    INIT -> RTR                    RTR -> RTS
=========== ================================ ============================== ==================================
RC          STATE PKEY_INDEX PORT             STATE AV PATH_MTU DEST_QPN     STATE TIMEOUT RETRY_CNT RNR_RETRY
            ACCESS_FLAGS                     RQ_PSN MAX_DEST_RD_ATOMIC      SQ_PSN MAX_QP_RD_ATOMIC
                                             MIN_RNR_TIMER
UC          STATE PKEY_INDEX PORT             STATE AV PATH_MTU DEST_QPN     STATE SQ_PSN
            ACCESS_FLAGS                     RQ_PSN
UD          STATE PKEY_INDEX PORT QKEY        STATE                          STATE SQ_PSN
RAW_PACKET  STATE PORT                        STATE                          STATE
=========== ================================ ============================== ==================================

Arguments a QP type does not use (``access`` for UD, ``qkey`` for RC, the
whole of ``remote`` for UD and RAW_PACKET, ...) are ignored and not passed to
``modify``. Every argument that is used is range-checked first (ValueError;
TypeError for a non-integer), so a bad argument never reaches the verb.

This module is imported with the package, so it imports nothing at load
time; the enums and ``AHAttr`` are imported on first use.
"""

from __future__ import annotations

__all__ = ["to_init", "to_rtr", "to_rts", "query", "reset"]

_PORT_MASK = 1 << 5   # IBV_QP_PORT: to_rtr reads back only the port to_init set


def _index(what: str, value: object) -> int:
    """``value`` as an int (anything with ``__index__``, e.g. numpy ints),
    else TypeError. (operator.index without importing operator.)"""
    try:
        index = type(value).__index__
    except AttributeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    return index(value)


def _check_int(what: str, value: object, lo: int, hi: int) -> int:
    """``value`` as an int in ``lo..hi``: TypeError / ValueError otherwise."""
    v = _index(what, value)
    if not lo <= v <= hi:
        raise ValueError(f"{what} must be in {lo}..{hi}, got {v}")
    return v


_U8, _U16, _U24, _U32 = 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF
_MTU_MIN, _MTU_MAX = 1, 5  # IBV_MTU_256 .. IBV_MTU_4096


def _qp_kind(qp: object, what: str) -> str:
    """The QP's type as "RC", "UC", "UD" or "RAW_PACKET" (else ValueError)."""
    from .enums import QPType

    qp_type = qp.qp_type
    for kind in ("RC", "UC", "UD", "RAW_PACKET"):
        if qp_type == getattr(QPType, kind):
            return kind
    try:
        name = QPType(qp_type).name
    except ValueError:
        name = str(qp_type)
    raise ValueError(f"{what} handles RC, UC, UD and RAW_PACKET QPs, not {name}; use QP.modify")


# Each transition is split into a "request" builder (validate the arguments,
# return (mask, fields)) and the modify call, so that connect_rc can check
# every argument before it changes the QP's state.

def _init_request(kind: str, port, access=0, pkey_index=0, qkey=0):
    from .enums import QPAttrMask as M, QPState

    fields = {"qp_state": QPState.INIT, "port_num": _check_int("port", port, 1, _U8)}
    mask = M.STATE | M.PORT
    if kind != "RAW_PACKET":
        mask |= M.PKEY_INDEX
        fields["pkey_index"] = _check_int("pkey_index", pkey_index, 0, _U16)
    if kind in ("RC", "UC"):
        mask |= M.ACCESS_FLAGS
        fields["qp_access_flags"] = _check_int("access", access, 0, _U32)
    elif kind == "UD":
        mask |= M.QKEY
        fields["qkey"] = _check_int("qkey", qkey, 0, _U32)
    return mask, fields


def _rtr_request(kind: str, remote, sgid_index, *, port, active_mtu=None, mtu=None,
                 hop_limit=1, min_rnr_timer=12, max_dest_rd_atomic=1, sl=0, traffic_class=0):
    """For RC/UC, ``port`` is the local port.  ``mtu=None`` takes
    ``remote.mtu``, or min(``active_mtu``, ``remote.mtu``) when the local
    port's ``active_mtu`` is given (connect_rc's rule)."""
    from .enums import QPAttrMask as M, QPState

    if kind in ("UD", "RAW_PACKET"):
        return M.STATE, {"qp_state": QPState.RTR}
    try:
        remote_qpn, remote_psn, remote_lid, remote_gid = remote.qp_num, remote.psn, remote.lid, remote.gid
    except AttributeError:
        raise TypeError(f"remote must be a QPInfo, not {type(remote).__name__}") from None
    if mtu is None:
        try:
            remote_mtu = _check_int("remote.mtu", remote.mtu, _MTU_MIN, _MTU_MAX)
        except AttributeError:
            raise TypeError(f"remote must be a QPInfo, not {type(remote).__name__}") from None
        path_mtu = remote_mtu if active_mtu is None else min(
            _check_int("the local port's active_mtu", active_mtu, _MTU_MIN, _MTU_MAX), remote_mtu)
    else:
        path_mtu = _check_int("mtu", mtu, _MTU_MIN, _MTU_MAX)
    from ._ibverbs import AHAttr

    ah_attr = AHAttr(
        dgid=remote_gid,
        sgid_index=_check_int("sgid_index", sgid_index, 0, _U8),
        dlid=_check_int("remote.lid", remote_lid, 0, _U16),
        is_global=1,
        port_num=_check_int("port", port, 1, _U8),
        hop_limit=_check_int("hop_limit", hop_limit, 0, _U8),
        traffic_class=_check_int("traffic_class", traffic_class, 0, _U8),
        sl=_check_int("sl", sl, 0, 15),
    )
    mask = M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN
    fields = {
        "qp_state": QPState.RTR,
        "path_mtu": path_mtu,
        "dest_qp_num": _check_int("remote.qp_num", remote_qpn, 0, _U24),
        "rq_psn": _check_int("remote.psn", remote_psn, 0, _U24),
    }
    if kind == "RC":
        mask |= M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER
        fields["max_dest_rd_atomic"] = _check_int("max_dest_rd_atomic", max_dest_rd_atomic, 0, _U8)
        fields["min_rnr_timer"] = _check_int("min_rnr_timer", min_rnr_timer, 0, 31)
    return mask, {"ah_attr": ah_attr, **fields}


def _rts_request(kind: str, psn, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=1):
    from .enums import QPAttrMask as M, QPState

    fields = {"qp_state": QPState.RTS}
    psn = _check_int("psn", psn, 0, _U24)
    if kind == "RAW_PACKET":
        return M.STATE, fields
    fields["sq_psn"] = psn
    mask = M.STATE | M.SQ_PSN
    if kind == "RC":
        mask |= M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC
        fields["timeout"] = _check_int("timeout", timeout, 0, 31)
        fields["retry_cnt"] = _check_int("retry_cnt", retry_cnt, 0, 7)
        fields["rnr_retry"] = _check_int("rnr_retry", rnr_retry, 0, 7)
        fields["max_rd_atomic"] = _check_int("max_rd_atomic", max_rd_atomic, 0, _U8)
    return mask, fields


def _modify(qp, state: str, mask, fields) -> None:
    """qp.modify, a failure named after the transition (the seed's
    ``ibv_modify_qp(->RTR)``)."""
    from .errors import VerbsError

    operation = f"ibv_modify_qp(->{state})"
    try:
        qp.modify(mask, **fields)
    except VerbsError as exc:
        # the cause the binding found (the GID index, the port, the state)
        # stays in the message, under the transition's name
        detail = exc.detail
        if isinstance(detail, str) and detail.startswith("ibv_modify_qp failed: "):
            detail = operation + detail[len("ibv_modify_qp"):]
        raise VerbsError(operation, exc.errno, detail) from exc


def to_init(qp, port, access=0, pkey_index=0, qkey=0):
    # QP.to_init: its docstring is the spec's (spec/qp.yaml), its signature this def.
    # RESET -> INIT on local ``port``. ``access`` (AccessFlags) is used by
    # RC/UC QPs, ``qkey`` by UD QPs.
    mask, fields = _init_request(_qp_kind(qp, "to_init"), port, access, pkey_index, qkey)
    _modify(qp, "INIT", mask, fields)


def to_rtr(qp, remote, sgid_index, mtu=None, hop_limit=1, min_rnr_timer=12,
           max_dest_rd_atomic=1, sl=0, traffic_class=0):
    # QP.to_rtr: its docstring is the spec's (spec/qp.yaml), its signature this def.
    # INIT -> RTR towards ``remote`` (a QPInfo), addressed through the local
    # GID at ``sgid_index`` of the port ``to_init`` chose.
    #
    # ``mtu=None`` takes ``remote.mtu`` (the seed's rule; ``connect_rc`` takes
    # the smaller of it and the local port's active MTU).
    # UD and RAW_PACKET QPs only change state (``remote`` is not used).
    kind = _qp_kind(qp, "to_rtr")
    port = None
    if kind in ("RC", "UC"):
        # the port to_init set, as the QP holds it
        read_port = getattr(qp, "_query", None)
        if read_port is not None:           # a QP: read back only IBV_QP_PORT
            port = read_port(_PORT_MASK).port_num
        else:                               # a wrapper offering the seed's query()
            port = qp.query()[0]["port_num"]
        if not port:
            raise ValueError("to_rtr needs the QP's port; move the QP to INIT with to_init first")
    mask, fields = _rtr_request(
        kind, remote, sgid_index, port=port, mtu=mtu, hop_limit=hop_limit,
        min_rnr_timer=min_rnr_timer, max_dest_rd_atomic=max_dest_rd_atomic, sl=sl,
        traffic_class=traffic_class)
    _modify(qp, "RTR", mask, fields)


def to_rts(qp, psn, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=1):
    # QP.to_rts: its docstring is the spec's (spec/qp.yaml), its signature this def.
    # RTR -> RTS with send PSN ``psn``. ``timeout``, ``retry_cnt``,
    # ``rnr_retry`` and ``max_rd_atomic`` apply to RC QPs only.
    mask, fields = _rts_request(_qp_kind(qp, "to_rts"), psn, timeout, retry_cnt, rnr_retry, max_rd_atomic)
    _modify(qp, "RTS", mask, fields)


def query(qp, attr_mask=0x1FFFFF):
    # QP.query: its docstring is the spec's (spec/qp.yaml), its signature this def.
    # ``QP.query(attr_mask=all) -> (dict, QPCap)`` (ibv_query_qp).
    #
    # The dict is the seed's: plain ints, where QPAttr's getters give enum
    # members (qp_state, path_mtu, qp_access_flags, ...).
    from enum import Enum

    attr = qp._query(attr_mask)
    fields = {name: int(value) if isinstance(value, Enum) else value
              for name, value in attr._asdict().items()}
    return fields, attr.cap


def reset(qp):
    # QP.reset: its docstring is the spec's (spec/qp.yaml), its signature this def.
    # Any state -> RESET: the first step of recovering a QP in place.
    #
    # A QP that met a fatal error (a dead peer, a retry or RNR limit, a remote
    # access error) sits in ERR and stays there; from RESET, ``to_init``,
    # ``to_rtr`` and ``to_rts`` (or ``connect_rc``) bring it back with a fresh
    # PSN, towards the same peer or a new one. The peer's QP must be
    # reconnected too: an RC connection resynchronises both ends.
    #
    # RESET discards the work requests still queued, without completions, and
    # may drop the completions still in the CQ for this QP. To account for
    # every request, wait for the ERR state's flush completions
    # (``WCStatus.WR_FLUSH_ERR``: one per outstanding request) and poll them
    # before calling this.
    from .enums import QPAttrMask, QPState

    qp.modify(QPAttrMask.STATE, qp_state=QPState.RESET)
