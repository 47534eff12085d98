"""The elephant handshake: Freeway's wire format, version 1.

A host announces an elephant before sending it: one UDP datagram to the
service address (``SERVICE_IP``:``SERVICE_PORT``, answered by the controller;
the host's edge switch punts it through a rate-limiting meter). The
controller places the flow, installs its path, and only then answers on the
same UDP port pair with an ACK, or a NACK with a reason.

All integers are big-endian. Every message starts with a 24-byte header:

    offset size  field
    0      4     magic  "FWHS"
    4      1     version (1)
    5      1     type: 1 ANNOUNCE, 2 ACK, 3 NACK
    6      1     count: number of subflows (ANNOUNCE, ACK: 1..8; NACK: 0)
    7      1     flags (0)
    8      8     nonce, chosen by the host, echoed in the answer
    16     8     size of the whole flow in bytes (echoed in the answer)

ANNOUNCE then carries ``rate_kbps`` (u32: expected total rate; 0 = as fast as
the path allows) and ``count`` subflows of 16 bytes each:

    src IPv4 (4), dst IPv4 (4), protocol (1: 6 TCP or 17 UDP), 0 (1),
    src port (2), dst port (2), 0 (2)

ACK carries the allocated total ``rate_kbps`` (u32), then for each subflow:
the 16-byte subflow, its ``rate_kbps`` (u32), the number of switches on its
path (u8), three zero bytes, and that many datapath ids (u64 each).

NACK carries a reason: length (u16) and that many bytes of UTF-8 (at most 200).

A datagram longer than ``MAX_LEN`` or with trailing bytes is malformed.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

MAGIC = b"FWHS"
VERSION = 1
ANNOUNCE, ACK, NACK = 1, 2, 3
SERVICE_IP = "10.255.255.254"
SERVICE_MAC = "02:fe:ff:ff:ff:fe"
SERVICE_PORT = 7070
MAX_SUBFLOWS = 8
MAX_LEN = 1024
MAX_REASON = 200

_HDR = struct.Struct("!4sBBBBQQ")
_SUB = struct.Struct("!4s4sBBHHH")


def is_service_frame(data: bytes) -> bool:
    """Whether an Ethernet frame is IPv4/UDP to the handshake service's port: a look at a few bytes, no
    parsing (the controller asks it of every packet-in, to answer handshakes ahead of its other work)."""
    if len(data) < 42 or data[12:14] != b"\x08\x00" or data[23] != 17:
        return False
    at = 14 + (data[14] & 0x0F) * 4  # the UDP header, after the IPv4 header and its options
    return len(data) >= at + 8 and data[at + 2:at + 4] == SERVICE_PORT.to_bytes(2, "big")


class HandshakeError(ValueError):
    """A malformed handshake datagram; the message says what is wrong."""


@dataclass(frozen=True)
class Subflow:
    src: str
    dst: str
    proto: int
    sport: int
    dport: int


@dataclass(frozen=True)
class Announce:
    nonce: int
    size: int
    rate_kbps: int
    subflows: tuple[Subflow, ...]


@dataclass(frozen=True)
class Ack:
    nonce: int
    size: int
    rate_kbps: int
    allocations: tuple[tuple[Subflow, int, tuple[int, ...]], ...]  # (subflow, rate_kbps, dpids)


@dataclass(frozen=True)
class Nack:
    nonce: int
    size: int
    reason: str


def _sub(s: Subflow) -> bytes:
    return _SUB.pack(ipaddress.IPv4Address(s.src).packed, ipaddress.IPv4Address(s.dst).packed, s.proto, 0,
                     s.sport, s.dport, 0)


def encode(msg: Announce | Ack | Nack) -> bytes:
    if isinstance(msg, Announce):
        body = struct.pack("!I", msg.rate_kbps) + b"".join(_sub(s) for s in msg.subflows)
        return _HDR.pack(MAGIC, VERSION, ANNOUNCE, len(msg.subflows), 0, msg.nonce, msg.size) + body
    if isinstance(msg, Ack):
        body = struct.pack("!I", msg.rate_kbps)
        for sub, rate, dpids in msg.allocations:
            body += _sub(sub) + struct.pack("!IB3x", rate, len(dpids)) + b"".join(struct.pack("!Q", d) for d in dpids)
        return _HDR.pack(MAGIC, VERSION, ACK, len(msg.allocations), 0, msg.nonce, msg.size) + body
    reason = msg.reason.encode()[:MAX_REASON]
    return _HDR.pack(MAGIC, VERSION, NACK, 0, 0, msg.nonce, msg.size) + struct.pack("!H", len(reason)) + reason


def decode(data: bytes) -> Announce | Ack | Nack:
    """Parse one handshake datagram; raise HandshakeError on anything malformed."""
    if len(data) > MAX_LEN:
        raise HandshakeError(f"oversized: {len(data)} bytes (at most {MAX_LEN})")
    if len(data) < _HDR.size:
        raise HandshakeError(f"truncated: {len(data)} bytes, header needs {_HDR.size}")
    magic, version, mtype, count, _flags, nonce, size = _HDR.unpack_from(data)
    if magic != MAGIC:
        raise HandshakeError("bad magic")
    if version != VERSION:
        raise HandshakeError(f"unsupported version {version}")
    off = _HDR.size

    def need(n: int) -> None:
        if len(data) < off + n:
            raise HandshakeError(f"truncated: need {off + n} bytes, have {len(data)}")

    def sub_at(o: int) -> Subflow:
        src, dst, proto, _z, sport, dport, _z2 = _SUB.unpack_from(data, o)
        return Subflow(str(ipaddress.IPv4Address(src)), str(ipaddress.IPv4Address(dst)), proto, sport, dport)

    if mtype == ANNOUNCE:
        if not 1 <= count <= MAX_SUBFLOWS:
            raise HandshakeError(f"subflow count {count} not in 1..{MAX_SUBFLOWS}")
        need(4 + count * _SUB.size)
        (rate,) = struct.unpack_from("!I", data, off)
        off += 4
        subs = []
        for _ in range(count):
            subs.append(sub_at(off))
            off += _SUB.size
        msg: Announce | Ack | Nack = Announce(nonce, size, rate, tuple(subs))
    elif mtype == ACK:
        if not 1 <= count <= MAX_SUBFLOWS:
            raise HandshakeError(f"subflow count {count} not in 1..{MAX_SUBFLOWS}")
        need(4)
        (rate,) = struct.unpack_from("!I", data, off)
        off += 4
        allocs = []
        for _ in range(count):
            need(_SUB.size + 8)
            sub = sub_at(off)
            srate, hops = struct.unpack_from("!IB3x", data, off + _SUB.size)
            off += _SUB.size + 8
            need(8 * hops)
            dpids = struct.unpack_from(f"!{hops}Q", data, off)
            off += 8 * hops
            allocs.append((sub, srate, tuple(dpids)))
        msg = Ack(nonce, size, rate, tuple(allocs))
    elif mtype == NACK:
        need(2)
        (n,) = struct.unpack_from("!H", data, off)
        off += 2
        if n > MAX_REASON:
            raise HandshakeError(f"reason of {n} bytes (at most {MAX_REASON})")
        need(n)
        try:
            reason = data[off:off + n].decode()
        except UnicodeDecodeError:
            raise HandshakeError("reason is not UTF-8") from None
        off += n
        msg = Nack(nonce, size, reason)
    else:
        raise HandshakeError(f"unknown message type {mtype}")
    if off != len(data):
        raise HandshakeError(f"{len(data) - off} trailing bytes")
    return msg


MAX_SIZE = 1 << 50  # 1 PiB: anything larger is not a real flow


def check(ann: Announce, sender_ip: str, access_rate_kbps: float, known_dst) -> str | None:
    """Why an announce from ``sender_ip`` must be refused (None if it is sane).

    ``known_dst(ip)`` says whether an address is a host of the fabric.
    """
    if ann.size <= 0:
        return "size must be positive"
    if ann.size > MAX_SIZE:
        return f"size {ann.size} bytes is not plausible"
    if ann.rate_kbps > access_rate_kbps:
        return (f"rate {ann.rate_kbps / 1000:.2f} Mbit/s is above the host's link rate "
                f"{access_rate_kbps / 1000:.2f} Mbit/s")
    seen = set()
    for s in ann.subflows:
        if s.src != sender_ip:
            return f"subflow source {s.src} is not the sender {sender_ip}"
        if s.proto not in (6, 17):
            return f"protocol {s.proto} is neither TCP nor UDP"
        if not (0 < s.sport < 65536 and 0 < s.dport < 65536):
            return "ports must be non-zero"
        if not known_dst(s.dst) or s.dst == sender_ip:
            return f"destination {s.dst} is not another host of this fabric"
        if s in seen:
            return "duplicate subflow"
        seen.add(s)
    return None
