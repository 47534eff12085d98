"""sFlow version 5 decoder (sflow.org "sFlow Version 5", July 2004).

Decodes the datagram header (IPv4 or IPv6 agent), flow samples and counter
samples in both compact (formats 1, 2) and expanded (formats 3, 4) forms, raw
packet header records down to an Ethernet/IPv4/TCP/UDP 5-tuple (and a TCP
segment's sequence number and payload length), and generic
interface counters. Unknown sample and record types are skipped by their
length. Any malformed or truncated input raises ``SFlowDecodeError`` and
nothing else.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

SFLOW_VERSION = 5
MAX_SAMPLES = 1024
MAX_RECORDS = 1024


class SFlowDecodeError(ValueError):
    """The datagram is not valid sFlow v5 (truncated, wrong version, bad lengths)."""


class FiveTuple(NamedTuple):
    """A flow's key. A named tuple, not a dataclass: hashed and compared in C (a period at k=48 looks up tens of
    thousands of them; a dataclass's ``__hash__`` and ``__eq__`` run in Python, about twice as slow)."""

    src: str
    dst: str
    proto: int
    sport: int
    dport: int

    def __str__(self) -> str:
        return f"{self.src}:{self.sport}->{self.dst}:{self.dport}/{self.proto}"


class PacketHeader(NamedTuple):
    """A decoded raw packet header record (Ethernet only; others keep just the lengths). (Named tuples, as
    ``CounterSample``: 1-in-10 sampling at k=8 is 95,000 flow samples a second, and a frozen dataclass cost
    microseconds each to build.)"""

    protocol: int
    frame_length: int
    stripped: int
    header: bytes
    eth_type: int | None = None
    five_tuple: FiveTuple | None = None
    dscp: int | None = None
    tcp: tuple[int, int] | None = None  # a TCP segment's (sequence number, payload bytes)


class FlowSample(NamedTuple):
    sequence: int
    source_id_type: int
    source_id_index: int
    sampling_rate: int
    sample_pool: int
    drops: int
    input_if: int
    output_if: int
    packets: tuple[PacketHeader, ...] = ()
    expanded: bool = False


class IfCounters(NamedTuple):
    """A generic interface counters record. (Named tuples, as ``CounterSample``: a k=48 fabric's agents send
    138,240 of them a second, and a frozen dataclass of 19 fields cost a microsecond each to build.)"""

    if_index: int
    if_type: int
    if_speed: int
    if_direction: int
    if_status: int
    in_octets: int
    in_ucast: int
    in_mcast: int
    in_bcast: int
    in_discards: int
    in_errors: int
    in_unknown: int
    out_octets: int
    out_ucast: int
    out_mcast: int
    out_bcast: int
    out_discards: int
    out_errors: int
    promiscuous: int


class IfOctets(NamedTuple):
    """What the estimator reads of a generic interface counters record (``decode_datagram(lean=True)``):
    four of its 19 fields, read in one unpack."""

    if_index: int
    if_status: int
    in_octets: int
    out_octets: int


class CounterSample(NamedTuple):
    sequence: int
    source_id_type: int
    source_id_index: int
    interfaces: tuple[IfCounters, ...] | tuple[IfOctets, ...] = ()
    expanded: bool = False


@dataclass(frozen=True)
class Datagram:
    agent: str
    sub_agent_id: int
    sequence: int
    uptime_ms: int
    flow_samples: tuple[FlowSample, ...] = field(default_factory=tuple)
    counter_samples: tuple[CounterSample, ...] = field(default_factory=tuple)
    skipped: int = 0  # samples of unknown format


_U32 = struct.Struct("!I")
_U32X2 = struct.Struct("!II")
_U32X3 = struct.Struct("!III")
_U32X4 = struct.Struct("!IIII")


def decode_datagram(data: bytes, lean: bool = False) -> Datagram:
    """Decode one sFlow v5 UDP payload (``lean``: interface counters as ``IfOctets``, the fields the
    estimator reads; the same checks either way)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SFlowDecodeError("datagram must be bytes")
    buf = bytes(data)
    end = len(buf)  # (the header by offsets too: one unpack for its four counts, not a reader's six calls)
    if end < 4:
        raise _truncated(4, 0, end)
    (version,) = _U32.unpack_from(buf, 0)
    if version != SFLOW_VERSION:
        raise SFlowDecodeError(f"unsupported sFlow version {version}")
    if end < 8:
        raise _truncated(4, 4, end)
    (addr_type,) = _U32.unpack_from(buf, 4)
    if addr_type == 1:
        if end < 12:
            raise _truncated(4, 8, end)
        agent = socket.inet_ntoa(buf[8:12])  # (the dotted quad ``ipaddress`` writes, at a tenth of its cost)
        pos = 12
    elif addr_type == 2:
        if end < 24:
            raise _truncated(16, 8, end)
        agent = str(ipaddress.IPv6Address(buf[8:24]))
        pos = 24
    else:
        raise SFlowDecodeError(f"unknown agent address type {addr_type}")
    if end - pos < 16:  # (the first of the four missing, as a reader taking them one by one says)
        raise _truncated(4, pos + (end - pos) // 4 * 4, end)
    sub_agent, seq, uptime, nsamples = _U32X4.unpack_from(buf, pos)
    pos += 16
    if nsamples > MAX_SAMPLES:
        raise SFlowDecodeError(f"implausible sample count {nsamples}")
    flows, counters, skipped = [], [], 0
    for _ in range(nsamples):  # (offsets, not a reader per sample: a k=48 fabric sends 138,240 a second)
        if end - pos < 8:
            raise _truncated(8, pos, end)
        fmt, length = _U32X2.unpack_from(buf, pos)
        start = pos + 8
        pos = start + ((length + 3) & ~3)  # (4-byte padded, as ``opaque``)
        if pos > end:
            raise _truncated((length + 3) & ~3, start, end)
        enterprise, kind = fmt >> 12, fmt & 0xFFF
        if enterprise == 0 and kind in (2, 4):
            counters.append(_counter_sample(buf, start, start + length, kind == 4, lean))
        elif enterprise == 0 and kind in (1, 3):
            flows.append(_flow_sample(buf, start, start + length, kind == 3))
        else:
            skipped += 1
    if pos != end:
        raise SFlowDecodeError(f"{end - pos} trailing bytes after {nsamples} samples")
    return Datagram(agent, sub_agent, seq, uptime, tuple(flows), tuple(counters), skipped)


def _truncated(need: int, pos: int, end: int) -> SFlowDecodeError:
    return SFlowDecodeError(f"truncated: need {need} bytes at offset {pos}, have {end - pos}")


_FLOW = struct.Struct("!IIIIIIII")  # compact: sequence, source, rate, pool, drops, input, output, records
_FLOW_X = struct.Struct("!IIIIIIIIIII")  # expanded: sequence, source type and index, rate, pool, drops,
#                                          input format and value, output format and value, records


def _flow_sample(buf: bytes, pos: int, end: int, expanded: bool) -> FlowSample:
    """A flow sample read from ``buf[pos:end]`` by offsets (as ``_counter_sample``: 1-in-10 sampling at k=8
    is 95,000 of them a second, and a reader's call per field was most of a worker's time)."""
    if expanded:
        if end - pos < _FLOW_X.size:
            raise _truncated(_FLOW_X.size, pos, end)
        seq, st, si, rate, pool, drops, in_fmt, inp, out_fmt, out, n = _FLOW_X.unpack_from(buf, pos)
        pos += _FLOW_X.size
        inp = inp if in_fmt == 0 else 0x3FFFFFFF
        out = out if out_fmt == 0 else 0x3FFFFFFF
    else:
        if end - pos < _FLOW.size:
            raise _truncated(_FLOW.size, pos, end)
        seq, src, rate, pool, drops, inp, out, n = _FLOW.unpack_from(buf, pos)
        pos += _FLOW.size
        st, si = src >> 24, src & 0xFFFFFF
        inp = inp & 0x3FFFFFFF if inp >> 30 == 0 else 0x3FFFFFFF
        out = out & 0x3FFFFFFF if out >> 30 == 0 else 0x3FFFFFFF
    if rate == 0:
        raise SFlowDecodeError("flow sample with sampling rate 0")
    if n > MAX_RECORDS:
        raise SFlowDecodeError(f"implausible record count {n}")
    packets = []
    for _ in range(n):
        if end - pos < 8:
            raise _truncated(8, pos, end)
        fmt, length = _U32X2.unpack_from(buf, pos)
        start = pos + 8
        pos = start + ((length + 3) & ~3)  # (4-byte padded)
        if pos > end:
            raise _truncated((length + 3) & ~3, start, end)
        if fmt == 1:  # raw packet header
            packets.append(_raw_header(buf, start, start + length))
    return _tuple_new(FlowSample, (seq, st, si, rate, pool, drops, inp, out, tuple(packets), expanded))


def _counter_sample(buf: bytes, pos: int, end: int, expanded: bool, lean: bool = False) -> CounterSample:
    """A counter sample read from ``buf[pos:end]`` by offsets (the common case of the fabric's 138,240 a
    second at k=48: no reader object, one unpack for its header and one for each record)."""
    if expanded:
        if end - pos < 16:
            raise _truncated(16, pos, end)
        seq, st, si, n = _U32X4.unpack_from(buf, pos)
        pos += 16
    else:
        if end - pos < 12:
            raise _truncated(12, pos, end)
        seq, src, n = _U32X3.unpack_from(buf, pos)
        pos += 12
        st, si = src >> 24, src & 0xFFFFFF
    if n > MAX_RECORDS:
        raise SFlowDecodeError(f"implausible record count {n}")
    ifs = []
    for _ in range(n):
        if end - pos < 8:
            raise _truncated(8, pos, end)
        fmt, length = _U32X2.unpack_from(buf, pos)
        start = pos + 8
        pos = start + ((length + 3) & ~3)
        if pos > end:
            raise _truncated((length + 3) & ~3, start, end)
        if fmt == 1:  # generic interface counters
            if length < _IFC.size:
                raise SFlowDecodeError(f"generic interface counters record of {length} bytes (need {_IFC.size})")
            if lean:
                ifs.append(_tuple_new(IfOctets, _IFO.unpack_from(buf, start)))
            else:
                ifs.append(_tuple_new(IfCounters, _IFC.unpack_from(buf, start)))  # (``_make`` without its checks)
    return CounterSample(seq, st, si, tuple(ifs), expanded)


_IFC = struct.Struct("!IIQIIQIIIIIIQIIIIII")  # 88 bytes: IfCounters' 19 fields
_IFO = struct.Struct("!I16xIQ24xQ")  # IfOctets' four of them: ifIndex, ifStatus, ifInOctets, ifOutOctets
_tuple_new = tuple.__new__


def _raw_header(buf: bytes, pos: int, end: int) -> PacketHeader:
    if end - pos < 16:
        raise _truncated(16, pos, end)
    proto, frame_len, stripped, hdr_len = _U32X4.unpack_from(buf, pos)
    pos += 16
    if hdr_len > end - pos:
        raise _truncated(hdr_len, pos, end)
    header = buf[pos:pos + hdr_len]
    if proto != 1:  # not Ethernet: keep the lengths only
        return PacketHeader(proto, frame_len, stripped, header)
    eth_type, ft, dscp, tcp = _parse_ethernet(header)
    return _tuple_new(PacketHeader, (proto, frame_len, stripped, header, eth_type, ft, dscp, tcp))


_U16 = struct.Struct("!H")
_PORTS = struct.Struct("!HH")


def parse_ethernet(h: bytes) -> tuple[int | None, FiveTuple | None, int | None]:
    """(EtherType, IPv4 5-tuple, DSCP) from the start of an Ethernet frame; Nones where absent.

    A header cut short by the agent is normal sFlow, not an error: whatever
    could not be read is None.
    """
    return _parse_ethernet(h)[:3]


_FAST = struct.Struct("!12xHBBH2xHxB2x4s4sHHI4xB")  # an untagged IPv4 frame with a 20-byte IP header, to the
# TCP data offset: EtherType, version and IHL, TOS, total length, flags and fragment offset, protocol, addresses,
# ports, sequence number, data offset
_FIVE: dict[bytes, FiveTuple] = {}  # addresses and ports as sampled -> their five-tuple (bounded: ``FIVE_KEPT``)
FIVE_KEPT = 65_536


def _parse_ethernet(h: bytes) -> tuple[int | None, FiveTuple | None, int | None, tuple[int, int] | None]:
    """parse_ethernet's answer, plus a TCP segment's (sequence number, payload bytes) when the header
    reaches the TCP data offset (the payload length comes from the IP total length, so a header cut
    short by the agent still gives it). Nearly every sampled frame is an untagged IPv4 TCP or UDP frame
    with a plain IP header: those are read with one unpack, their five-tuple looked up by the bytes it is
    made of (the addresses written out and the tuple built were a fifth of a worker's time at k=8 under
    1-in-10, 2026-12-06); ``_parse_any`` reads the rest, and gives the same answer for these
    (``tests/unit/test_sflow_decoder.py``)."""
    if len(h) >= 47:
        eth_type, vihl, tos, total, frag, proto, src, dst, sport, dport, seq, doff = _FAST.unpack_from(h)
        if eth_type == 0x0800 and vihl == 0x45 and (proto == 6 or proto == 17) and not frag & 0x1FFF:
            ft = _FIVE.get(h[26:38])
            if ft is None or ft.proto != proto:
                if len(_FIVE) >= FIVE_KEPT:
                    _FIVE.clear()
                ft = _FIVE[h[26:38]] = _tuple_new(FiveTuple, (socket.inet_ntoa(src), socket.inet_ntoa(dst), proto,
                                                               sport, dport))
            tcp = None
            if proto == 6:
                doff >>= 4
                payload = total - 20 - doff * 4
                if doff >= 5 and payload >= 0:
                    tcp = (seq, payload)
            return eth_type, ft, tos >> 2, tcp
    return _parse_any(h)


def _parse_any(h: bytes) -> tuple[int | None, FiveTuple | None, int | None, tuple[int, int] | None]:
    """``_parse_ethernet`` for any frame: VLAN tags, IP options, fragments, other protocols, headers cut short."""
    if len(h) < 14:
        return None, None, None, None
    off = 12
    (eth_type,) = _U16.unpack_from(h, off)
    off += 2
    while eth_type in (0x8100, 0x88A8) and len(h) >= off + 4:
        (eth_type,) = _U16.unpack_from(h, off + 2)
        off += 4
    if eth_type != 0x0800 or len(h) < off + 20:
        return eth_type, None, None, None
    vihl, tos = h[off], h[off + 1]
    ihl = (vihl & 0x0F) * 4
    if vihl >> 4 != 4 or ihl < 20:
        return eth_type, None, None, None
    proto = h[off + 9]
    src = socket.inet_ntoa(h[off + 12:off + 16])  # (the dotted quad ``ipaddress`` writes, at a tenth of its cost)
    dst = socket.inet_ntoa(h[off + 16:off + 20])
    frag = _U16.unpack_from(h, off + 6)[0] & 0x1FFF
    l4 = off + ihl
    sport = dport = 0
    if proto in (6, 17) and frag == 0 and len(h) >= l4 + 4:
        sport, dport = _PORTS.unpack_from(h, l4)
    tcp = None
    if proto == 6 and frag == 0 and len(h) >= l4 + 13:
        total, doff = _U16.unpack_from(h, off + 2)[0], h[l4 + 12] >> 4
        payload = total - ihl - doff * 4
        if doff >= 5 and payload >= 0:  # else malformed lengths: no segment
            tcp = (_U32.unpack_from(h, l4 + 4)[0], payload)
    return eth_type, FiveTuple(src, dst, proto, sport, dport), tos >> 2, tcp
