"""The message-level simulated switch (issue 36): it takes the bytes a real switch is sent, changes its
tables by OpenFlow's rules, and answers as Open vSwitch does; what it answers parses with os-ken's own
parsers, as the controller reads a real switch."""

import struct
from types import SimpleNamespace

import pytest
from os_ken.ofproto import ofproto_parser

from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import ofproto as ofp
from ryu_apps.openflow.framework import parser
from ryu_apps.openflow.intents import (
    Bucket,
    DeleteFlows,
    DeleteGroup,
    Flow,
    Group,
    GroupModify,
    Meter,
    Output,
    PacketOut,
    SetField,
    SetQueue,
    ToGroup,
    match,
)
from ryu_apps.simswitch.fabric import SimError, SimSwitch
from ryu_apps.simswitch.wire import HEADER, Port, Switch, messages, serialize

_DP = SimpleNamespace(ofproto=ofp, ofproto_parser=parser)


def _send(sw: Switch, *msgs):
    """Every reply of a switch to os-ken messages, parsed by os-ken as a controller parses them."""
    data = b"".join(serialize(m, 100 + n) for n, m in enumerate(msgs))
    replies, _ = sw.receive(data)
    out = []
    for r in replies:
        version, mtype, length, xid = HEADER.unpack_from(r)
        out.append(ofproto_parser.msg(_DP, version, mtype, length, xid, r))
    return out


def _errors(replies):
    return [(r.type, r.code) for r in replies if isinstance(r, parser.OFPErrorMsg)]


GROUP = Group(7, (Bucket((Output(1),), 3), Bucket((Output(2),), 1)))
ENTRY = Flow(20, match(eth_type=0x0800, ipv4_dst=("10.1.0.0", "255.255.0.0")), (SetField("ip_dscp", 46),
             SetQueue(0), ToGroup(7)), table_id=2, cookie=0x3C << 56 | 5, meter_id=9)


def test_a_program_sent_as_bytes_is_held_and_read_back_as_it_was_sent():
    sw = Switch("s1", 0x11)
    replies = _send(sw, *ofmsg.messages([Meter(9, 2000, 600), GROUP, ENTRY]), ofmsg.barrier())
    assert [type(r).__name__ for r in replies] == ["OFPBarrierReply"]
    assert sw.tables.flows() == [ENTRY] and sw.tables.groups == {7: GROUP} and sw.tables.meters[9] == Meter(9, 2000, 600)
    assert sw.tables.watch[7] == (1, 2)  # each bucket watches its output port, as ofmsg asks
    flows, groups, meters = (_send(sw, r)[0] for r in ofmsg.state_requests())
    assert [ofmsg.parse_flow(st) for st in flows.body] == [ENTRY]
    assert [ofmsg.parse_group(g) for g in groups.body] == [GROUP]
    assert [ofmsg.parse_meter(m) for m in meters.body] == [Meter(9, 2000, 600)]


def test_changes_a_real_switch_refuses_are_answered_with_its_errors_and_change_nothing():
    sw = Switch("s1")
    assert _errors(_send(sw, *ofmsg.messages([ENTRY]))) == [(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_GROUP)]
    assert _errors(_send(sw, *ofmsg.messages([GROUP, GROUP]))) == [(ofp.OFPET_GROUP_MOD_FAILED,
                                                                       ofp.OFPGMFC_GROUP_EXISTS)]
    assert _errors(_send(sw, *ofmsg.messages([GroupModify(Group(8, ()))]))) == [(ofp.OFPET_GROUP_MOD_FAILED,
                                                                                  ofp.OFPGMFC_UNKNOWN_GROUP)]
    assert _errors(_send(sw, *ofmsg.messages([ENTRY]))) == [(ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_UNKNOWN_METER)]
    assert sw.tables.flows() == [] and list(sw.tables.groups) == [7]
    bad = bytearray(serialize(ofmsg.messages([Meter(3, 10, 10)])[0], 5))
    bad[1] = 99  # an unknown message type
    replies, _ = sw.receive(bytes(bad))
    assert struct.unpack_from("!HH", replies[0], 8) == (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE)
    short = bytearray(serialize(ofmsg.messages([GROUP])[0], 6))[:20]  # a group-mod cut short
    short[2:4] = struct.pack("!H", 20)
    replies, _ = sw.receive(bytes(short))
    assert HEADER.unpack_from(replies[0])[1] == ofp.OFPT_ERROR and 3 not in sw.tables.meters


def test_deletes_follow_openflow_cookie_masks_and_a_groups_entries_go_with_it():
    sw = SimSwitch("s1")
    other = Flow(30, match(eth_type=0x0800, ipv4_dst="10.2.0.2"), (Output(3),), table_id=2, cookie=0xF5 << 56 | 1)
    sw.apply([Meter(9, 2000, 600), GROUP, ENTRY, other])
    sw.apply([DeleteFlows(0x3C << 56, 0xFF << 56)])  # every entry of the mice owner
    assert sw.flows() == [other]
    sw.apply([ENTRY, DeleteGroup(7)])  # OpenFlow: deleting a group deletes the entries that use it
    assert sw.flows() == [other] and 7 not in sw.groups
    with pytest.raises(SimError, match="group 7"):
        sw.apply([ENTRY])


def test_a_select_group_hashes_over_the_buckets_whose_watched_port_is_up():
    sw = SimSwitch("s1")
    sw.apply([GROUP, Flow(1, match(), (ToGroup(7),))])
    ports = {sw.process({"ipv4_src": "10.0.0.2", "ipv4_dst": "10.1.0.2", "ip_proto": 6, "tcp_src": p,
                         "tcp_dst": 80})[0][0] for p in range(40000, 40200)}
    assert ports == {1, 2}
    sw.down_ports.add(1)
    ports = {sw.process({"ipv4_src": "10.0.0.2", "ipv4_dst": "10.1.0.2", "ip_proto": 6, "tcp_src": p,
                         "tcp_dst": 80})[0][0] for p in range(40000, 40200)}
    assert ports == {2}


def test_switches_with_different_salts_pick_buckets_independently():
    """Two switches on one path, each choosing one of two buckets: with independent hashes a flow's
    two choices agree about half the time. FNV-1a alone agrees every time (its low bit is the bytes' low
    bits XORed), so every flow took the same side at every switch: polarized paths."""
    from ryu_apps.simswitch.tables import flow_hash

    flows = [{"ipv4_src": f"10.0.{s}.2", "ipv4_dst": "10.3.1.3", "ip_proto": 6, "tcp_src": p, "tcp_dst": 5001}
             for s in range(4) for p in range(32768, 32768 + 250)]
    agree = sum(flow_hash(0x1234, f) % 2 == flow_hash(0x9ABC, f) % 2 for f in flows) / len(flows)
    assert 0.4 < agree < 0.6
    spread = [sum(flow_hash(0x1234, f) % 4 == b for f in flows) / len(flows) for b in range(4)]
    assert all(0.2 < s < 0.3 for s in spread)


def test_a_packet_out_leaves_by_its_actions_and_the_rest_of_the_protocol_is_answered():
    sw = Switch("s1", 0xABC, {1: Port(1, "s1-eth1"), 2: Port(2, "s1-eth2", up=False)})
    replies, sent = sw.receive(serialize(ofmsg.messages([PacketOut(2, b"\x02" * 60)])[0], 1))
    assert replies == [] and [(o.port, data) for o, data in sent] == [(2, b"\x02" * 60)]
    feats, = _send(sw, parser.OFPFeaturesRequest(None))
    assert feats.datapath_id == 0xABC
    desc, = _send(sw, ofmsg.port_desc_request())
    assert [(p.port_no, p.name, bool(p.state & ofp.OFPPS_LINK_DOWN)) for p in desc.body] == [
        (1, b"s1-eth1", False), (2, b"s1-eth2", True)]
    echo, = _send(sw, parser.OFPEchoRequest(None, data=b"ping"))
    assert echo.data == b"ping"


def test_a_slave_takes_no_change_and_a_stale_generation_is_refused():
    sw = Switch("s1")
    role, = _send(sw, ofmsg.role_request(True, 5))
    assert role.role == ofp.OFPCR_ROLE_MASTER and role.generation_id == 5
    assert _errors(_send(sw, ofmsg.role_request(True, 4))) == [(ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_STALE)]
    _send(sw, ofmsg.role_request(False, 6))
    assert _errors(_send(sw, *ofmsg.messages([GROUP]))) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE)]
    assert sw.tables.groups == {}


def test_a_byte_stream_is_cut_into_whole_messages():
    one = serialize(ofmsg.barrier(), 1)
    two = serialize(ofmsg.barrier(), 2)
    whole, rest = messages(one + two[:5])
    assert whole == [one] and rest == two[:5]
    with pytest.raises(ValueError):
        messages(b"\x04\x00\x00\x02" + b"\x00" * 4)  # a length below the header's


def test_a_long_read_back_comes_in_several_replies_flagged_more():
    sw = SimSwitch("s1")
    sw.apply([Flow(10, match(eth_type=0x0800, ipv4_dst=f"10.{i // 250}.{i % 250}.1"), (Output(1),)) for i in range(900)])
    replies = _send(sw, ofmsg.state_requests()[0])
    assert len(replies) > 1 and all(r.flags & ofp.OFPMPF_REPLY_MORE for r in replies[:-1])
    assert not replies[-1].flags & ofp.OFPMPF_REPLY_MORE
    assert sum(len(r.body) for r in replies) == 900


def test_a_packet_in_the_emulated_switches_send_parses_as_the_controller_parses_it():
    from experiments.benches.fabricscale import packet_in
    from ryu_apps.openflow.framework import ofproto as ofp
    from ryu_apps.openflow.framework import parser

    frame = bytes(range(60))
    msg = packet_in(7, frame, table_id=0, cookie=0x42)
    version, mtype, length, xid = struct.unpack_from("!BBHI", msg)
    assert (version, mtype, length) == (4, ofp.OFPT_PACKET_IN, len(msg))
    stub = SimpleNamespace(ofproto=ofp, ofproto_parser=parser)
    pi = parser.OFPPacketIn.parser(stub, version, mtype, length, xid, msg)
    assert pi.match["in_port"] == 7 and pi.data == frame and pi.cookie == 0x42 and pi.buffer_id == ofp.OFP_NO_BUFFER
