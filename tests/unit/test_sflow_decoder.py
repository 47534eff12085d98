"""sFlow v5 decoding: datagrams captured from this machine's Open vSwitch, hand-built edge cases, fuzz."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitoring.portmap import parse_ovsdb, to_switch_ports
from monitoring.sflow import FiveTuple, SFlowDecodeError, decode_datagram
from ryu_apps.simswitch import sflow as enc
from topology.fabric import Fabric

FIX = Path(__file__).parents[1] / "fixtures" / "sflow"


def _fixture(name):
    return (FIX / name).read_bytes()


def test_real_ovs_flow_datagram():
    d = decode_datagram(_fixture("flow0.bin"))
    assert d.agent == "127.0.0.1" and d.sub_agent_id == 17 and d.sequence == 15
    assert len(d.flow_samples) == 6 and not d.counter_samples
    s = d.flow_samples[0]
    assert (s.source_id_type, s.source_id_index, s.sampling_rate, s.input_if, s.output_if) == (2, 1017, 10, 3395, 3411)
    (p,) = s.packets
    assert p.frame_length == 1518 and p.eth_type == 0x0800 and p.dscp == 0
    assert p.five_tuple == FiveTuple("10.0.0.2", "10.3.1.3", 6, 40001, 5201)


def test_tcp_sequence_numbers_and_payload_lengths_of_real_and_hand_built_segments():
    """The elephant byte bar reads TCP sequence spans: iperf3's data segments carry 1448 bytes, its ACKs 0."""
    segs = [p.tcp for s in decode_datagram(_fixture("flow0.bin")).flow_samples for p in s.packets]
    assert segs[:3] == [(1719739980, 1448), (1719741428, 1448), (1719742876, 1448)] and segs[3] == (2434072372, 0)
    import struct

    def seg(total, doff, seq=0xFFFFFF00, cut=None):
        h = enc.eth_ipv4_tcp()
        h = h[:16] + struct.pack("!H", total) + h[18:34] + h[34:38] + struct.pack("!I", seq) + b"\0" * 4 \
            + bytes([doff << 4]) + b"\0" * 7
        return decode_datagram(enc.datagram([enc.flow_sample([enc.raw_header_record(h[:cut])])])).flow_samples[0]
    assert seg(1500, 5).packets[0].tcp == (0xFFFFFF00, 1460)
    assert seg(1500, 8).packets[0].tcp == (0xFFFFFF00, 1448)
    assert seg(1500, 8, cut=45).packets[0].tcp is None  # cut before the data offset: no segment, still a flow
    assert seg(1500, 8, cut=45).packets[0].five_tuple is not None
    assert seg(1500, 3).packets[0].tcp is None and seg(30, 8).packets[0].tcp is None  # malformed lengths


def test_real_ovs_samples_map_to_fabric_ports():
    fabric = Fabric.load(FIX / "fabric.json")
    ifmap = to_switch_ports(fabric, parse_ovsdb(json.loads((FIX / "ovsdb.json").read_text())))
    assert len(ifmap) == 100  # every switch port of the k=4 fat-tree, and 20 bridge-local ports
    assert sum(1 for sw, port in ifmap.values() if port == 65534) == 20
    s = decode_datagram(_fixture("flow0.bin")).flow_samples[0]
    sw, port = ifmap[s.input_if]
    # the TCP data packet 10.0.0.2 -> 10.3.1.3 was sampled entering a switch on its path
    assert fabric.peer(sw, port) is not None
    dst_sw, _ = ifmap[s.output_if]
    assert dst_sw == sw


def test_real_ovs_counter_datagram():
    d = decode_datagram(_fixture("counters0.bin"))
    assert d.flow_samples == () and len(d.counter_samples) == 6
    ifs = [i for c in d.counter_samples for i in c.interfaces]
    assert ifs and all(i.if_index == c.source_id_index for c in d.counter_samples for i in c.interfaces)
    assert all(i.if_speed == 10_000_000_000 for i in ifs)  # veths report 10G: capacity comes from the fabric


def test_hand_built_compact_and_expanded():
    hdr = enc.eth_ipv4_tcp(vlan=True, dscp=46)
    dg = enc.datagram([
        enc.flow_sample([enc.raw_header_record(hdr)], rate=100, inp=7, out=8),
        enc.flow_sample([enc.raw_header_record(hdr)], expanded=True, inp=9, out=10),
        enc.counter_sample([enc.if_counters(7, 10, 20)]),
        enc.counter_sample([enc.if_counters(8, 30, 40)], expanded=True, source=(0, 8)),
        enc.opaque((4300 << 12) | 1, b"\x01\x02\x03\x04"),  # another enterprise's sample
    ], agent="2001:db8::1")
    d = decode_datagram(dg)
    assert d.agent == "2001:db8::1" and d.skipped == 1
    a, b = d.flow_samples
    assert (a.sampling_rate, a.input_if, a.output_if, a.expanded) == (100, 7, 8, False)
    assert (b.input_if, b.output_if, b.expanded) == (9, 10, True)
    assert a.packets[0].five_tuple == FiveTuple("10.0.0.2", "10.1.0.2", 6, 40000, 5001)
    assert a.packets[0].dscp == 46
    c, e = d.counter_samples
    assert (c.interfaces[0].in_octets, c.interfaces[0].out_octets) == (10, 20)
    assert e.expanded and e.source_id_index == 8 and e.interfaces[0].out_octets == 40


def test_unknown_records_skipped_and_short_headers_tolerated():
    rec_unknown = enc.opaque(1001, b"\0" * 12)  # extended switch data: skipped by length
    short = enc.raw_header_record(enc.eth_ipv4_tcp()[:30])  # IPv4 cut short by the agent
    udp = enc.raw_header_record(enc.eth_ipv4_tcp(proto=17, sport=53, dport=5353))
    d = decode_datagram(enc.datagram([enc.flow_sample([rec_unknown, short, udp])]))
    (s,) = d.flow_samples
    assert len(s.packets) == 2
    assert s.packets[0].five_tuple is None and s.packets[0].eth_type == 0x0800
    assert s.packets[1].five_tuple == FiveTuple("10.0.0.2", "10.1.0.2", 17, 53, 5353)
    for cut in (0, 1, 10, 13):  # shorter than an Ethernet header: the lengths only (once a ValueError)
        (s,) = decode_datagram(enc.datagram([enc.flow_sample([enc.raw_header_record(enc.eth_ipv4_tcp()[:cut])])])
                               ).flow_samples
        assert s.packets[0].eth_type is None and s.packets[0].five_tuple is None and s.packets[0].tcp is None


@pytest.mark.parametrize("data,needle", [
    (b"", "truncated"),
    (enc.u32(4, 1) + b"\0" * 20, "unsupported sFlow version 4"),
    (enc.u32(5, 3) + b"\0" * 20, "unknown agent address type 3"),
    (enc.u32(5, 1) + b"\x7f\0\0\x01" + enc.u32(0, 1, 0, 5000), "implausible sample count"),
    (enc.datagram([enc.flow_sample([])])[:-4], "truncated"),
    (enc.datagram([enc.flow_sample([], rate=0)]), "sampling rate 0"),
    (enc.datagram([enc.counter_sample([enc.opaque(1, b"\0" * 40)])]), "generic interface counters record of 40"),
    (enc.datagram([]) + b"\0\0\0\0", "trailing bytes"),
])
def test_malformed_raise_the_decode_error(data, needle):
    with pytest.raises(SFlowDecodeError, match=needle):
        decode_datagram(data)


def test_every_prefix_of_a_datagram_is_refused_never_decoded_short():
    """Samples and their records are read by offsets within the datagram (no reader object per sample):
    cut anywhere, compact or expanded, counter or flow sample, the datagram is refused as truncated or
    with trailing bytes, never decoded with a sample or an interface less."""
    data = enc.datagram([
        enc.counter_sample([enc.if_counters(5, 10, 20), enc.opaque(7, b"\1" * 12), enc.if_counters(6, 1, 2)]),
        enc.counter_sample([enc.if_counters(8, 30, 40)], expanded=True, source=(0, 8)),
        enc.flow_sample([enc.raw_header_record(enc.eth_ipv4_tcp())], expanded=True, inp=9, out=10),
    ])
    whole = decode_datagram(data)
    assert [len(c.interfaces) for c in whole.counter_samples] == [2, 1] and len(whole.flow_samples) == 1
    header = 28  # version, address type, IPv4 address, sub-agent, sequence, uptime, sample count
    for cut in range(header, len(data)):
        with pytest.raises(SFlowDecodeError, match="truncated|trailing"):
            decode_datagram(data[:cut])


REAL = [_fixture(n) for n in ("flow0.bin", "flow1.bin", "flow2.bin", "counters0.bin", "counters1.bin")]


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_random_bytes_only_raise_decode_error(data):
    try:
        decode_datagram(data)
    except SFlowDecodeError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=120),  # any bytes, or a real frame's start cut anywhere, then any bytes
                 st.tuples(st.integers(0, 54), st.binary(max_size=60)).map(
                     lambda t: enc.eth_ipv4_tcp(vlan=t[0] % 2 == 1)[:t[0]] + t[1])),
       st.integers(0, 0xFFFF), st.sampled_from([1, 2, 11]))
def test_fuzz_any_sampled_header_in_a_well_formed_datagram_decodes(header, frame_length, proto):
    """Whatever bytes the agent copied (any length, from none), a well-formed record decodes."""
    body = enc.u32(proto, frame_length, 0, len(header)) + header + b"\0" * (-len(header) % 4)
    (s,) = decode_datagram(enc.datagram([enc.flow_sample([enc.opaque(1, body)])])).flow_samples
    assert s.packets[0].header == header


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(REAL), st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=6),
       st.integers(0, 2000))
def test_fuzz_mutated_real_datagrams_only_raise_decode_error(base, flips, cut):
    data = bytearray(base)
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    try:
        decode_datagram(bytes(data[: max(0, len(data) - cut)] if cut % 3 == 0 else data))
    except SFlowDecodeError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([6, 17, 1, 47]), st.booleans(), st.integers(0, 63), st.integers(0, 1600),
       st.integers(0, 0xFFFFFFFF), st.lists(st.tuples(st.integers(12, 60), st.integers(0, 255)), max_size=3),
       st.integers(0, 70), st.sampled_from(["10.0.0.2", "10.1.0.2"]))
def test_the_fast_read_of_a_plain_ipv4_header_answers_as_the_general_one(proto, vlan, dscp, payload, seq, flips,
                                                                       cut, src):
    """Untagged IPv4 TCP and UDP frames with a 20-byte IP header are read by one unpack and their five-tuple
    looked up by its bytes: the answer is the general reader's for any frame (tagged, other protocols, bytes
    changed anywhere in the headers: the IP header length, fragments, the data offset, the addresses; cut
    short anywhere), and a five-tuple seen before under another protocol is not taken for it."""
    from monitoring.sflow import _parse_any, _parse_ethernet

    h = bytearray(enc.eth_ipv4_tcp(src=src, proto=proto, vlan=vlan, dscp=dscp, tcp_seq=seq, payload=payload))
    for pos, val in flips:
        if pos < len(h):
            h[pos] = val
    h = bytes(h[:len(h) - cut] if cut < len(h) else h)
    assert _parse_ethernet(h) == _parse_any(h)
    assert _parse_ethernet(h)[1] == _parse_any(h)[1]  # (twice: the second from the lookup, if it was read fast)
    other = bytearray(h)
    if len(other) > 23:
        other[23] = 17 if other[23] == 6 else 6  # the same addresses and ports, the other protocol
        assert _parse_ethernet(bytes(other)) == _parse_any(bytes(other))
