"""The handshake wire format: round trips, every malformed case, the sanity checks."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ryu_apps.host.handshake import ACK, MAX_LEN, Ack, Announce, HandshakeError, Nack, Subflow, check, decode, encode

S1 = Subflow("10.0.0.2", "10.3.1.3", 6, 40001, 5201)
S2 = Subflow("10.0.0.2", "10.3.1.3", 6, 40002, 5201)
ANN = Announce(0x1122334455667788, 50_000_000, 4000, (S1, S2))


def test_round_trips():
    assert decode(encode(ANN)) == ANN
    ack = Ack(7, 50_000_000, 4000, ((S1, 2000, (0x3000000000000, 0x2000000000001, 0x1000000000003)), (S2, 2000, ())))
    assert decode(encode(ack)) == ack
    nack = Nack(7, 1, "no high-throughput path has 4.00 Mbit/s free")
    assert decode(encode(nack)) == nack
    assert len(encode(ANN)) == 24 + 4 + 2 * 16  # the documented layout


def test_layout_is_what_the_docstring_says():
    b = encode(Announce(1, 2, 3, (S1,)))
    assert b[:4] == b"FWHS" and b[4] == 1 and b[5] == 1 and b[6] == 1
    assert struct.unpack("!QQI", b[8:28]) == (1, 2, 3)
    assert b[28:32] == bytes([10, 0, 0, 2]) and struct.unpack("!HH", b[38:42]) == (40001, 5201)


@pytest.mark.parametrize("data,needle", [
    (b"", "truncated"),
    (b"FWHS", "truncated"),
    (b"XXXX" + encode(ANN)[4:], "bad magic"),
    (encode(ANN)[:4] + b"\x02" + encode(ANN)[5:], "unsupported version 2"),
    (encode(ANN)[:5] + b"\x09" + encode(ANN)[6:], "unknown message type 9"),
    (encode(ANN)[:6] + b"\x00" + encode(ANN)[7:], "subflow count 0"),
    (encode(ANN)[:6] + b"\x09" + encode(ANN)[7:], "subflow count 9"),
    (encode(ANN)[:-1], "truncated"),
    (encode(ANN) + b"\0", "1 trailing bytes"),
    (encode(ANN) + b"\0" * MAX_LEN, "oversized"),
    (encode(Nack(1, 1, "x"))[:24] + struct.pack("!H", 500) + b"x" * 500, "reason of 500 bytes"),
    (encode(Nack(1, 1, "x"))[:24] + struct.pack("!H", 2) + b"\xff\xfe", "not UTF-8"),
    (encode(Ack(1, 1, 1, ((S1, 1, (1, 2)),)))[:-8], "truncated"),
])
def test_malformed(data, needle):
    with pytest.raises(HandshakeError, match=needle):
        decode(data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_only_handshake_errors(data):
    try:
        decode(data)
    except HandshakeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 59), st.integers(0, 255))
def test_fuzz_mutations_only_handshake_errors(pos, val):
    b = bytearray(encode(ANN))
    b[pos] = val
    try:
        decode(bytes(b))
    except HandshakeError:
        pass


def _known(ip):
    return ip.startswith("10.") and ip != "10.9.9.9"


@pytest.mark.parametrize("ann,why", [
    (Announce(1, 0, 1000, (S1,)), "size must be positive"),
    (Announce(1, 1 << 60, 1000, (S1,)), "not plausible"),
    (Announce(1, 10, 20_000, (S1,)), "rate 20.00 Mbit/s is above the host's link rate 10.00 Mbit/s"),
    (Announce(1, 10, 1000, (Subflow("10.0.0.3", "10.3.1.3", 6, 1, 2),)), "is not the sender 10.0.0.2"),
    (Announce(1, 10, 1000, (Subflow("10.0.0.2", "10.3.1.3", 1, 1, 2),)), "protocol 1"),
    (Announce(1, 10, 1000, (Subflow("10.0.0.2", "10.3.1.3", 6, 0, 2),)), "ports must be non-zero"),
    (Announce(1, 10, 1000, (Subflow("10.0.0.2", "10.9.9.9", 6, 1, 2),)), "not another host"),
    (Announce(1, 10, 1000, (Subflow("10.0.0.2", "10.0.0.2", 6, 1, 2),)), "not another host"),
    (Announce(1, 10, 1000, (S1, S1)), "duplicate subflow"),
])
def test_sanity_checks(ann, why):
    assert why in check(ann, "10.0.0.2", 10_000, _known)


def test_sane_announce_passes():
    assert check(ANN, "10.0.0.2", 10_000, _known) is None
    assert decode(encode(ANN)).subflows[1].sport == 40002 and ACK == 2


def test_the_controller_tells_a_handshake_frame_from_others_by_a_few_bytes():
    from ryu_apps.host.handshake import SERVICE_IP, SERVICE_PORT, is_service_frame
    from ryu_apps.simswitch.fabric import frame

    ann = encode(Announce(7, 50_000_000, 2000, (Subflow("10.0.0.1", "10.0.0.2", 6, 20000, 5001),)))
    udp = {"ipv4_src": "10.0.0.1", "ipv4_dst": SERVICE_IP, "ip_proto": 17, "udp_src": 20000, "udp_dst": SERVICE_PORT}
    f = frame(udp, "00:00:00:00:00:01", "02:fe:ff:ff:ff:fe", ann)
    assert is_service_frame(f)
    assert not is_service_frame(frame({**udp, "udp_dst": 5001}, "00:00:00:00:00:01", "02:fe:ff:ff:ff:fe", ann))
    assert not is_service_frame(frame({**udp, "ip_proto": 6, "tcp_src": 20000, "tcp_dst": SERVICE_PORT},
                                      "00:00:00:00:00:01", "02:fe:ff:ff:ff:fe", b""))
    assert not is_service_frame(f[:12] + b"\x88\xcc" + f[14:])  # LLDP's ethertype
    for n in range(len(f)):  # every prefix: an answer, never an exception
        assert is_service_frame(f[:n]) is (n >= 42)
