"""Flow and group mods encoded by ``ofmsg`` (from parts os-ken serialized once) are os-ken's bytes, byte
for byte, and a switch reading them (``flow_mod_fields``) gets what os-ken's own parser gets."""

import struct

import pytest

from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import ofproto as ofp
from ryu_apps.openflow.framework import parser
from ryu_apps.openflow.intents import (
    Bucket,
    DeleteFlow,
    DeleteFlows,
    DeleteGroup,
    Flow,
    Group,
    GroupModify,
    Output,
    SetField,
    SetQueue,
    ToController,
    ToGroup,
    match,
)
from ryu_apps.simswitch.fabric import SimFabric
from ryu_apps.simswitch.wire import Switch, serialize
from topology.fabric import fattree, leafspine

from .test_simswitch_programs import ISO, MODES, _announce, policy


def _reference(i):
    """The message os-ken's own objects make of an intent."""
    if isinstance(i, Flow):
        return ofmsg.flow_add(i)
    if isinstance(i, DeleteFlows):
        return ofmsg.flows_delete(i)
    if isinstance(i, DeleteFlow):
        return parser.OFPFlowMod(None, table_id=i.table_id, command=ofp.OFPFC_DELETE_STRICT, priority=i.priority,
                                 out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=ofmsg.of_match(i.match))
    if isinstance(i, Group):
        return ofmsg.group_add(i)
    if isinstance(i, GroupModify):
        return ofmsg.group_add(i.group, modify=True)
    if isinstance(i, DeleteGroup):
        return parser.OFPGroupMod(None, ofp.OFPGC_DELETE, ofp.OFPGT_ALL, i.group_id, [])
    return None


def _intents(fabric, mode, iso) -> list:
    """Every switch's program in a mode, and (Freeway) what an announced elephant adds: meters' and
    goto's instructions, exact matches."""
    pol = policy(mode, fabric, iso)
    out = [i for sw in fabric.switches for i in pol.program(sw)]
    if mode == "freeway":
        sim = SimFabric(fabric, pol)
        tors = fabric.tors()
        _announce(sim, pol, fabric.hosts_on(tors[0])[0], fabric.hosts_on(tors[-1])[0], 40001, rate_kbps=3000)
        for s in sim.switches.values():
            out += s.flows() + list(s.groups.values())
    return out


ODD = [
    DeleteFlows(5, 0xFF), DeleteFlows(0x3C00000000000007), DeleteGroup(9),
    DeleteFlow(2, 20, match(ipv4_dst=("10.0.0.0", "255.0.0.0"))),
    GroupModify(Group(7, (Bucket((Output(3),), 4), Bucket((Output(4),), 10)))),
    Group(8, (Bucket((SetField("ip_dscp", 10), SetQueue(1), Output(2))),), "all"),
    Group(11, (Bucket((Output(2),)), Bucket((ToGroup(1),))), "ff"),
    Flow(7, match(eth_type=0x0800, ip_proto=6, ipv4_src="10.0.0.2", tcp_src=5001), (ToController(128),), 1,
         cookie=(1 << 64) - 1, idle_timeout=65535, hard_timeout=3, flags=1, meter_id=0xFFFF0000, goto=2),
    Flow(0, (), ()),
]


@pytest.mark.parametrize("fabric", [fattree(4), leafspine(4, 4, 2)], ids=["k4", "leafspine"])
@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
@pytest.mark.parametrize("mode", MODES)
def test_encoded_messages_are_os_kens_bytes_and_parse_back(fabric, iso, mode):
    compared = 0
    for i in _intents(fabric, mode, iso) + ODD:
        ref = _reference(i)
        if ref is None:
            continue
        (m,) = ofmsg.messages([i])
        assert isinstance(m, ofmsg.Encoded) and m.intent == i
        got = serialize(m, 0x12345678)
        assert got == serialize(ref, 0x12345678), i
        compared += 1
        if got[1] == ofp.OFPT_FLOW_MOD:  # read back as a switch reads it: what os-ken's parser reads
            fields = ofmsg.flow_mod_fields(got)
            osken = parser.OFPFlowMod.parser(None, ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, len(got), 0, got)
            assert (fields.command, fields.cookie, fields.cookie_mask, fields.table_id, fields.priority,
                    fields.out_port, fields.out_group, fields.match) == (
                osken.command, osken.cookie, osken.cookie_mask, osken.table_id, osken.priority, osken.out_port,
                osken.out_group, tuple(sorted(osken.match.items())))
            assert fields.flow == ofmsg.parse_flow(osken)
            if isinstance(i, Flow):
                assert fields.flow == i
    assert compared > len(ODD)


def _flow_mod(f: Flow) -> bytes:
    return serialize(ofmsg.messages([f])[0], 3)


def test_a_malformed_flow_mod_is_refused_and_changes_nothing():
    f = Flow(20, match(eth_type=0x0800, ipv4_dst=("10.1.0.0", "255.255.0.0")), (ToGroup(1000),), 2, cookie=5)
    good = _flow_mod(f)
    at = 8 + 40  # the match, after the header and the fixed part
    long_match = bytearray(good)
    struct.pack_into("!H", long_match, at + 2, len(good))  # a match longer than the message
    short = good[:at + 2]  # cut inside the match's header
    bad_instruction = bytearray(good)
    mlen = struct.unpack_from("!H", good, at + 2)[0]
    struct.pack_into("!HH", bad_instruction, at + (mlen + 7) // 8 * 8, ofp.OFPIT_APPLY_ACTIONS, 0)  # length 0
    written = bytearray(good)  # an instruction Freeway never sends (WRITE_ACTIONS): refused as well
    struct.pack_into("!H", written, at + (mlen + 7) // 8 * 8, ofp.OFPIT_WRITE_ACTIONS)
    for bad in (bytes(long_match), short, bytes(bad_instruction), bytes(written)):
        with pytest.raises((ValueError, struct.error)):
            ofmsg.flow_mod_fields(bad)
        fixed = bytearray(bad)
        struct.pack_into("!H", fixed, 2, len(bad))
        sw = Switch("s1", 1)
        replies, _ = sw.receive(bytes(fixed))
        assert [(r[1], struct.unpack_from("!H", r, 8)[0]) for r in replies] == [(ofp.OFPT_ERROR, ofp.OFPET_BAD_REQUEST)]
        assert sw.tables.flows() == []
    sw = Switch("s1", 1)  # the good one is taken (its group first)
    sw.receive(serialize(ofmsg.messages([Group(1000, (Bucket((Output(1),)),))])[0], 2) + good)
    assert sw.tables.flows() == [f]


def test_flow_stats_are_read_once_per_match_as_os_ken_reads_them():
    """A restart's read-back (``FlowStatsOnce``): every entry of every program, as a switch answers it, reads
    as os-ken's own parser reads it; a truncated entry is refused."""
    from ryu_apps.simswitch.wire import flow_stats, multipart_reply

    flows = [i for mode in MODES for i in _intents(fattree(4), mode, ISO) if isinstance(i, Flow)]
    flows.append(Flow(5, match(eth_type=0x0800), (SetField("ip_dscp", 46), Output(1)), 1, cookie=3, goto=2))
    replies = multipart_reply(9, ofp.OFPMP_FLOW, [flow_stats(f, packets=n, octets=7 * n) for n, f in enumerate(flows)])

    def read(body_cls):
        saved = parser.OFPFlowStatsReply.cls_stats_body_cls
        parser.OFPFlowStatsReply.cls_stats_body_cls = body_cls
        try:
            return [st for r in replies
                    for st in parser.OFPMultipartReply.parser(None, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY,
                                                              len(r), 9, r).body]
        finally:
            parser.OFPFlowStatsReply.cls_stats_body_cls = saved

    theirs, ours = read(parser.OFPFlowStats), read(ofmsg.FlowStatsOnce)
    assert len(ours) == len(theirs) == len(flows) > 100
    for a, b, f in zip(ours, theirs, flows, strict=True):
        assert ofmsg.parse_flow(a) == ofmsg.parse_flow(b) == f
        assert (a.length, a.table_id, a.priority, a.cookie, a.packet_count, a.byte_count, dict(a.match.items()),
                [type(i) for i in a.instructions]) == (b.length, b.table_id, b.priority, b.cookie, b.packet_count,
                                                       b.byte_count, dict(b.match.items()),
                                                       [type(i) for i in b.instructions])
    one = flow_stats(flows[0])
    with pytest.raises((ValueError, struct.error)):
        ofmsg.FlowStatsOnce.parser(one[:-8], 0)  # its instructions cut short
    f = Flow(20, match(eth_type=0x0800), (Output(2),), 2)
    written = bytearray(flow_stats(f))  # the same entry with WRITE_ACTIONS, an instruction Freeway never sends
    mlen = struct.unpack_from("!H", written, ofp.OFP_FLOW_STATS_0_SIZE + 2)[0]
    struct.pack_into("!H", written, ofp.OFP_FLOW_STATS_0_SIZE + (mlen + 7) // 8 * 8, ofp.OFPIT_WRITE_ACTIONS)
    assert ofmsg.parse_flow(ofmsg.FlowStatsOnce.parser(flow_stats(f), 0)) == f
    with pytest.raises(ValueError):
        ofmsg.parse_flow(ofmsg.FlowStatsOnce.parser(bytes(written), 0))
