"""Proxy ARP from the host table: the controller answers every ARP request.

Only requests that arrive on a ToR's host port from the host the description
puts there are answered; anything else is refused with a reason the app counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.fabric import Fabric

ARP_REQUEST = 1


@dataclass(frozen=True)
class ArpReply:
    out_port: int
    requester_mac: str
    requester_ip: str
    target_mac: str
    target_ip: str


def answer(fabric: Fabric, switch: str, in_port: int, opcode: int, src_mac: str, src_ip: str,
           dst_ip: str, services: dict[str, str] | None = None) -> tuple[ArpReply | None, str]:
    """Decide the reply to an ARP packet seen at (switch, in_port): (reply, reason).

    ``services`` maps extra addresses the controller answers for (the handshake service) to their MAC.
    """
    if opcode != ARP_REQUEST:
        return None, "not-a-request"
    peer = fabric.peer(switch, in_port)
    host = fabric.host_by_ip(src_ip)
    if peer is None or host is None or host.name != peer[0]:
        return None, "spoofed-or-unknown-sender"
    if host.mac.lower() != src_mac.lower():
        return None, "sender-mac-mismatch"
    if services and dst_ip in services:
        return ArpReply(in_port, host.mac, host.ip, services[dst_ip], dst_ip), "ok"
    target = fabric.host_by_ip(dst_ip)
    if target is None:
        return None, "unknown-target"
    return ArpReply(in_port, host.mac, host.ip, target.mac, target.ip), "ok"


def decode(data: bytes) -> tuple[int, str, str, str] | None:
    """(opcode, sender MAC, sender IP, target IP) of an ARP frame, None if it is not one."""
    from ryu_apps.openflow.framework import pkt_arp, pkt_packet

    try:
        a = pkt_packet.Packet(data).get_protocol(pkt_arp.arp)
    except Exception:  # os-ken's parsers raise assorted errors on truncated frames
        return None
    if a is None:
        return None
    return a.opcode, a.src_mac, a.src_ip, a.dst_ip


def source_mac(frame: bytes) -> str:
    """The source MAC of an Ethernet frame (the caller has decoded the frame, so it is long enough)."""
    return ":".join("%02x" % b for b in frame[6:12])


def decode_udp(data: bytes) -> tuple[str, int, int, bytes] | None:
    """(source IP, source port, destination port, payload) of an Ethernet/IPv4/UDP frame, else None."""
    from ryu_apps.openflow.framework import pkt_ipv4, pkt_packet, pkt_udp

    try:
        pkt = pkt_packet.Packet(data)
        ip, udp = pkt.get_protocol(pkt_ipv4.ipv4), pkt.get_protocol(pkt_udp.udp)
    except Exception:  # os-ken's parsers raise assorted errors on truncated frames
        return None
    if ip is None or udp is None:
        return None
    payload = pkt.protocols[-1] if isinstance(pkt.protocols[-1], (bytes, bytearray)) else b""
    return ip.src, udp.src_port, udp.dst_port, bytes(payload)
