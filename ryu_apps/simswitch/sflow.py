"""The simulated switch's sFlow v5 agent: the datagrams a switch exports (flow samples with a raw header record,
counter samples with generic interface counters), encoded as the decoder reads them. The tests build their
datagrams with it and the fabric-scale bench's switches export with it."""

import ipaddress
import struct


def u32(*vs):
    return b"".join(struct.pack("!I", v) for v in vs)


def opaque(fmt, body):
    pad = (-len(body)) % 4
    return u32(fmt, len(body)) + body + b"\0" * pad


def eth_ipv4_tcp(src="10.0.0.2", dst="10.1.0.2", sport=40000, dport=5001, proto=6, vlan=False, dscp=0,
                 tcp_seq=None, payload=0):
    """The first bytes of a frame: Ethernet, IPv4 and the first 20 bytes of its transport header. With
    ``tcp_seq``, a TCP segment of ``payload`` bytes (the IPv4 total length says so) at that sequence number;
    without it, a 40-byte packet whose transport header is zero past the ports."""
    eth = b"\x02" * 6 + b"\x04" * 6
    if vlan:
        eth += b"\x81\x00" + struct.pack("!H", 10)
    eth += b"\x08\x00"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2, 40 + (payload if tcp_seq is not None else 0), 0, 0, 64,
                     proto, 0, ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    if tcp_seq is None:
        return eth + ip + struct.pack("!HH", sport, dport) + b"\0" * 16
    return eth + ip + struct.pack("!HHIIBBHHH", sport, dport, tcp_seq & 0xFFFFFFFF, 0, 0x50, 0x10, 65535, 0, 0)


def raw_header_record(header, frame_length=1518):
    return opaque(1, u32(1, frame_length, 4, len(header)) + header + b"\0" * ((-len(header)) % 4))


def flow_sample(records, rate=10, inp=5, out=6, seq=1, expanded=False, source=(0, 5)):
    if expanded:
        body = u32(seq, source[0], source[1], rate, 100, 0, 0, inp, 0, out, len(records))
    else:
        body = u32(seq, (source[0] << 24) | source[1], rate, 100, 0, inp, out, len(records))
    return opaque(3 if expanded else 1, body + b"".join(records))


def if_counters(ifindex, in_octets=0, out_octets=0, speed_bps=10**7, status=3):
    """A generic interface counters record (status 3: admin and operationally up)."""
    return opaque(1, struct.pack("!IIQIIQIIIIIIQIIIIII", ifindex, 6, speed_bps, 1, status, in_octets, 1, 0, 0, 0, 0, 0,
                                 out_octets, 1, 0, 0, 0, 0, 0))


def counter_sample(records, seq=1, source=(0, 5), expanded=False):
    if expanded:
        body = u32(seq, source[0], source[1], len(records))
    else:
        body = u32(seq, (source[0] << 24) | source[1], len(records))
    return opaque(4 if expanded else 2, body + b"".join(records))


def datagram(samples, agent="127.0.0.1", seq=1, uptime=1000, sub_agent=0):
    a = ipaddress.ip_address(agent)
    head = u32(5, 1 if a.version == 4 else 2) + a.packed + u32(sub_agent, seq, uptime, len(samples))
    return head + b"".join(samples)
