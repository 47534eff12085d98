"""Anti-spoofing at the ToRs (issue 13, item 11): a host port's packets go on only with that host's MAC
and IP, in every mode, so a host can neither send as another nor keep another's elephant entries alive;
the handshake checks the sender's MAC as well as its IP."""

from __future__ import annotations

import pytest

from monitoring.sflow import FiveTuple
from ryu_apps.host import handshake as hs
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import Flow
from ryu_apps.simswitch.fabric import SimFabric, frame, packet
from topology.fabric import fattree
from topology.queues import IsolationConfig

from .test_simswitch_programs import MODES, policy

F = fattree(4)
H = {h.name: h for h in F.hosts}
A, B, DST = H["h0_0_0"], H["h0_0_1"], H["h3_1_1"]  # A and B share the ToR e0_0
GUARD_DROP = pipeline.prio("guard-drop")


def _drops(sim: SimFabric, host) -> int:
    return sum(n for (t, p, m), n in sim.switches[host.switch].hits.items()
               if (t, p) == (0, GUARD_DROP) and dict(m)["in_port"] == host.port)


@pytest.mark.parametrize("iso", [None, IsolationConfig()], ids=["plain", "isolation"])
@pytest.mark.parametrize("mode", MODES)
def test_a_host_cannot_send_with_another_hosts_ip_or_mac(mode, iso):
    sim = SimFabric(F, policy(mode, F, iso))
    own = FiveTuple(B.ip, DST.ip, 17, 40000, 5001)
    assert sim.send(B.name, own).delivered_to == DST.name
    assert _drops(sim, B) == 0
    as_a = FiveTuple(A.ip, DST.ip, 17, 40000, 5001)  # B sends with A's address
    t = sim.send(B.name, as_a)
    assert t.delivered_to is None and not t.hops and _drops(sim, B) == 1
    t = sim.send(B.name, own, src_mac=A.mac)  # B's address, A's MAC
    assert t.delivered_to is None and _drops(sim, B) == 2
    outside = FiveTuple("192.0.2.7", DST.ip, 17, 40000, 5001)  # an address no host has
    assert sim.send(B.name, outside).delivered_to is None and _drops(sim, B) == 3
    undescribed = {"in_port": 9, "eth_type": 0x0800, "eth_src": B.mac, "ipv4_src": B.ip, "ipv4_dst": DST.ip,
                   "ip_proto": 17, "udp_src": 1, "udp_dst": 2, "queue": None}
    assert sim.switches[B.switch].process(undescribed) == []  # a port that is neither a host's nor an uplink
    assert sim.send(A.name, as_a).delivered_to == DST.name and _drops(sim, A) == 0


@pytest.mark.parametrize("iso", [None, IsolationConfig()], ids=["plain", "isolation"])
def test_a_spoofed_copy_of_an_announced_elephant_never_reaches_its_entries(iso):
    pol = policy("freeway", F, iso)
    sim = SimFabric(F, pol)
    el = FiveTuple(A.ip, DST.ip, 6, 40001, 5001)
    ann = hs.encode(hs.Announce(7, 10_000_000, 2000, (el,)))
    sim.send(A.name, FiveTuple(A.ip, hs.SERVICE_IP, 17, 40001, hs.SERVICE_PORT), payload=ann)
    (host, ack), = sim.to_hosts
    assert host == A.name and isinstance(hs.decode(ack.payload), hs.Ack)
    (eid,) = pol.state.elephants
    entry_hits = lambda: sum(n for (t, p, m), n in sim.switches[A.switch].hits.items()  # noqa: E731
                             if p == pipeline.prio("elephant") and t == pipeline.INGRESS.table_id)
    assert sim.send(A.name, el).delivered_to == DST.name and entry_hits() == 1  # the elephant's own packet
    t = sim.send(B.name, el)  # the same 5-tuple from the neighbour's port
    assert t.delivered_to is None and entry_hits() == 1 and _drops(sim, B) == 1


def test_a_spoofed_packet_with_the_elephant_mark_is_dropped_before_host_demotion_keeps_it():
    """host_demotion trusts a host's elephant DSCP only on its own packets: with another host's address the
    guard drops it first, so a host cannot demote (or keep alive) another's flow."""
    from dataclasses import replace

    cfg = replace(IsolationConfig(), host_demotion=True)
    sim = SimFabric(F, policy("freeway", F, cfg))
    as_a = FiveTuple(A.ip, DST.ip, 6, 40001, 5001)
    t = sim.send(B.name, as_a, dscp=cfg.elephant_dscp)
    assert t.delivered_to is None and not t.hops and _drops(sim, B) == 1
    t = sim.send(A.name, as_a, dscp=cfg.elephant_dscp)
    assert t.delivered_to == DST.name and t.hops[0].dscp == cfg.elephant_dscp


def test_the_handshake_refuses_a_sender_whose_mac_is_not_its_hosts():
    pol = policy("freeway", F, None)
    ann = hs.encode(hs.Announce(7, 10_000_000, 2000, (FiveTuple(A.ip, DST.ip, 6, 40001, 5001),)))
    pkt = packet(FiveTuple(A.ip, hs.SERVICE_IP, 17, 40001, hs.SERVICE_PORT))
    r = pol.on_packet(1.0, A.switch, A.port, frame(pkt, B.mac, hs.SERVICE_MAC, ann))
    assert not r.ops and not r.txns and not pol.state.elephants and pol.state.counters["handshake-spoofed"] == 1
    assert [(e["type"], e["cause"], e["answered"]) for e in r.events] == [("refusal", "spoofed", False)]
    r = pol.on_packet(1.0, A.switch, A.port, frame(pkt, A.mac, hs.SERVICE_MAC, ann))
    assert r.txns and pol.state.elephants


def test_every_tor_entry_sits_in_its_bands_table_and_guards_every_host_port():
    for mode in MODES:
        for iso in (None, IsolationConfig()):
            pol = policy(mode, F, iso)
            for sw in F.switches:
                flows = [f for f in pol.program(sw) if isinstance(f, Flow)]
                tor = F.switches[sw].is_tor
                placed = [f for f in flows if f.priority]  # every band but the misses has one table
                want = [pipeline.table_for(f.priority, True) if tor else 0 for f in placed]
                assert [f.table_id for f in placed] == want, (mode, sw)
                guard = [f for f in flows if f.table_id == 0 and f.priority == pipeline.prio("guard-pass")]
                hosts = [f for f in guard if "eth_src" in dict(f.match)]
                assert sorted(dict(f.match)["in_port"] for f in hosts) == sorted(
                    2 * [h.port for h in F.hosts_on(sw)]), (mode, sw)
                assert all(dict(f.match)["eth_src"] == H[F.peer(sw, dict(f.match)["in_port"])[0]].mac
                           for f in hosts)
                ups = sorted(dict(f.match)["in_port"] for f in guard if f not in hosts)
                assert ups == sorted(F.port_to(sw, n) for n in F.up_neighbors(sw)) if tor else not guard
                misses = sorted((f.table_id, f.goto) for f in flows if f.priority == 0)
                assert misses == ([(0, None), (1, 2), (2, None)] if tor else [(0, None)]), (mode, sw)


def test_the_guard_lets_arp_through_only_with_the_hosts_sender_mac_and_ip():
    from os_ken.lib.packet import arp as pkt_arp
    from os_ken.lib.packet import ethernet
    from os_ken.lib.packet import packet as pk

    pol = policy("ecmp", F, None)
    sim = SimFabric(F, pol)
    sw = sim.switches[B.switch]
    for spa, sha, want in ((B.ip, B.mac, "controller"), (A.ip, B.mac, None), (B.ip, A.mac, None)):
        outs = sw.process({"in_port": B.port, "eth_type": 0x0806, "eth_src": sha.lower(), "arp_spa": spa,
                           "arp_tpa": DST.ip, "queue": None})
        assert (outs[0][0] if outs else None) == want, (spa, sha)
    p = pk.Packet()
    p.add_protocol(ethernet.ethernet("ff:ff:ff:ff:ff:ff", A.mac, 0x0806))
    p.add_protocol(pkt_arp.arp(src_mac=A.mac, src_ip=B.ip, dst_ip=DST.ip))  # a claim reaches the controller: refused
    p.serialize()
    assert not pol.on_packet(1.0, B.switch, B.port, bytes(p.data)).ops
