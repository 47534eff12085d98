"""Proxy-ARP decisions and the OpenFlow messages they become (serialised for real)."""

import struct
from types import SimpleNamespace

import pytest

from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import ofproto, parser
from ryu_apps.programs import arp
from ryu_apps.programs.forwarding import base_program
from topology.fabric import fattree

F = fattree(4)
DP = SimpleNamespace(ofproto=ofproto, ofproto_parser=parser, id=1)


def test_answer_from_host_table():
    reply, why = arp.answer(F, "e0_0", 1, 1, "02:00:0a:00:00:02", "10.0.0.2", "10.3.1.3")
    assert why == "ok"
    assert (reply.out_port, reply.target_mac, reply.target_ip) == (1, "02:00:0a:03:01:03", "10.3.1.3")


@pytest.mark.parametrize("args,why", [
    (("e0_0", 1, 2, "02:00:0a:00:00:02", "10.0.0.2", "10.3.1.3"), "not-a-request"),
    (("e0_0", 2, 1, "02:00:0a:00:00:02", "10.0.0.2", "10.3.1.3"), "spoofed-or-unknown-sender"),
    (("e0_0", 3, 1, "02:00:0a:00:00:02", "10.0.0.2", "10.3.1.3"), "spoofed-or-unknown-sender"),
    (("e0_0", 1, 1, "02:00:0a:00:00:99", "10.0.0.2", "10.3.1.3"), "sender-mac-mismatch"),
    (("e0_0", 1, 1, "02:00:0a:00:00:02", "10.0.0.2", "10.9.9.9"), "unknown-target"),
])
def test_refusals(args, why):
    assert arp.answer(F, *args) == (None, why)


def test_reply_packet_decodes_and_malformed_is_none():
    data = ofmsg.arp_reply_packet("02:00:0a:00:00:02", "10.0.0.2", "02:00:0a:03:01:03", "10.3.1.3")
    assert arp.decode(data) == (2, "02:00:0a:03:01:03", "10.3.1.3", "10.0.0.2")
    assert arp.decode(data[:20]) is None
    assert arp.decode(b"") is None
    assert arp.decode(b"\xff" * 60) is None


def test_program_serialises_and_parses_back():
    groups, flows = base_program(F, "a0_0")
    msgs = ofmsg.bind(ofmsg.program([*groups, *flows]), DP)
    for m in msgs:
        m.serialize()
    kinds = [m.cls_msg_type for m in msgs]
    assert kinds[:2] == [ofproto.OFPT_FLOW_MOD, ofproto.OFPT_GROUP_MOD] and kinds[-1] == ofproto.OFPT_BARRIER_REQUEST
    assert kinds.count(ofproto.OFPT_FLOW_MOD) == len(flows) + 1 and kinds.count(ofproto.OFPT_GROUP_MOD) == len(groups) + 1
    # every flow mod's match parses back (offset 48 in ofp_flow_mod) to what the intent said
    for m, f in zip(msgs[2 + len(groups):-1], flows, strict=True):
        back = parser.OFPMatch.parser(bytes(m.buf), 48)
        assert dict(back.items()) == {k: v for k, v in f.match}
        assert m.intent == f and struct.unpack_from("!H", m.buf, 8 + 22)[0] == f.priority
