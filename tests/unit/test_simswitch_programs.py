"""Every mode's program walked through simulated switches (no Mininet): reachability, Freeway's path
split, placed elephants and isolation marks, on k = 4, 6, 8 fat-trees and a leaf-spine."""

import itertools
import random
from dataclasses import replace

import pytest

from monitoring.sflow import FiveTuple
from ryu_apps import modes
from ryu_apps.algorithms.efm_rounds import EFMConfig
from ryu_apps.host import handshake as hs
from ryu_apps.modes.freeway_state import FreewayConfig
from ryu_apps.openflow.intents import Group
from ryu_apps.simswitch.fabric import SimFabric
from topology.fabric import fattree, leafspine
from topology.queues import ELEPHANT_Q, MICE_Q, IsolationConfig

ISO = IsolationConfig()
FABRICS = {"k4": lambda: fattree(4), "k6": lambda: fattree(6), "k8": lambda: fattree(8),
           "leafspine": lambda: leafspine(4, 4, 2)}
MODES = ("ecmp", "hedera", "efm-biggest", "freeway")


def policy(mode, fabric, iso, cfg=None):
    if mode == "freeway":
        return modes.FreewayPolicy(fabric, iso, cfg or FreewayConfig(), EFMConfig())
    if mode == "hedera":
        return modes.HederaPolicy(fabric, iso)
    if mode == "efm-biggest":
        return modes.EFMPolicy(fabric, iso, EFMConfig())
    return modes.Policy(fabric, iso)


def pairs(fabric, limit=None):
    """Every ordered host pair; on large fabrics every source to a fixed sample of destinations
    that covers every ToR."""
    hosts = fabric.hosts
    if limit is None or len(hosts) ** 2 <= limit:
        return [(a, b) for a, b in itertools.permutations(hosts, 2)]
    dsts = list({h.switch: h for h in hosts}.values())  # one host under every ToR
    return [(a, b) for a in hosts for b in dsts if a is not b]


def unreachable(sim, flows):
    """(src, dst, trace) of every flow that did not reach its destination host."""
    out = []
    for src, dst, ft in flows:
        t = sim.send(src.name, ft)
        if t.delivered_to != dst.name:
            out.append((src.name, dst.name, t))
    return out


def mice_flows(fabric, limit=None, seed=1):
    rnd = random.Random(seed)
    return [(a, b, FiveTuple(a.ip, b.ip, 6, rnd.randrange(20000, 60000), 80)) for a, b in pairs(fabric, limit)]


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FABRICS))
def test_every_host_reaches_every_host(name, mode, iso):
    fabric = FABRICS[name]()
    sim = SimFabric(fabric, policy(mode, fabric, iso))
    bad = unreachable(sim, mice_flows(fabric, limit=3000))
    assert not bad, bad[:3]


@pytest.mark.parametrize("order", ["paper", "spread"])
@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
@pytest.mark.parametrize("name", list(FABRICS))
def test_freeway_mice_on_lol_paths_never_cross_a_hol_link_and_carry_the_mice_marks(name, iso, order):
    fabric = FABRICS[name]()
    pol = policy("freeway", fabric, iso, FreewayConfig(lol_order=order, mice_paths="lol"))
    sim = SimFabric(fabric, pol)
    lol = pol.state.partition.lol_links()
    for src, dst, ft in mice_flows(fabric, limit=3000):
        t = sim.send(src.name, ft)
        assert t.delivered_to == dst.name, t
        assert set(t.links()) <= lol, (src.name, dst.name, t.path, set(t.links()) - lol)
        if iso is not None:  # marked as mice at the ingress ToR, and the mark kept on every hop
            assert t.hops[0].queue == MICE_Q and all(h.dscp == ISO.mice_dscp for h in t.hops), t.hops


def _announce(sim, pol, src, dst, sport, rate_kbps=2000):
    flow = FiveTuple(src.ip, dst.ip, 6, sport, 5001)
    ann = hs.encode(hs.Announce(sport, 10_000_000, rate_kbps, (flow,)))
    svc = FiveTuple(src.ip, hs.SERVICE_IP, 17, sport, hs.SERVICE_PORT)
    sim.send(src.name, svc, payload=ann)  # punted by the ToR, placed, confirmed, answered
    host, answer = sim.to_hosts[-1]
    assert host == src.name and isinstance(hs.decode(answer.payload), hs.Ack), hs.decode(answer.payload)
    return flow, pol.state.elephant_of(flow)


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
@pytest.mark.parametrize("name", list(FABRICS))
def test_a_placed_elephant_follows_its_path_with_elephant_marks(name, iso):
    fabric = FABRICS[name]()
    pol = policy("freeway", fabric, iso)
    sim = SimFabric(fabric, pol)
    tors = fabric.tors()
    src, dst = fabric.hosts_on(tors[0])[0], fabric.hosts_on(tors[-1])[0]
    for sport in (40001, 40002, 40003):
        flow, el = _announce(sim, pol, src, dst, sport)
        t = sim.send(src.name, flow)
        assert t.delivered_to == dst.name and t.path == el.placements[0].path, (t.path, el.placements[0].path)
        assert all(pol.state.partition.is_hol(ln) for ln in t.links())
        assert all(h.cookie == el.cookie for h in t.hops)
        if iso is not None:  # metered at its ingress, elephant DSCP and queue on every hop
            assert t.hops[0].meter == pol.state.meter_of(el).meter_id
            assert all(h.dscp == ISO.elephant_dscp and h.queue == ELEPHANT_Q for h in t.hops), t.hops


@pytest.mark.parametrize("mode", ["ecmp", "hedera", "efm-biggest"])
def test_other_modes_mark_mice_at_every_hop_with_isolation(mode):
    fabric = fattree(4)
    sim = SimFabric(fabric, policy(mode, fabric, ISO))
    for src, dst, ft in mice_flows(fabric):
        first, t = sim.send(src.name, ft), sim.send(src.name, ft)  # hedera: the first one is punted
        assert first.delivered_to == t.delivered_to == dst.name
        assert all(h.dscp == ISO.mice_dscp for h in first.hops + t.hops), (mode, first.hops)
        assert t.hops[0].queue == MICE_Q, (mode, t.hops)


@pytest.mark.parametrize("mode", MODES)
def test_a_host_may_demote_its_own_packets_but_never_raise_them(mode):
    """isolation's host_demotion: a host's elephant DSCP is kept and queued with the elephants on every hop;
    the mice's DSCP, or any other, from a host is still marked mice; without host_demotion even the elephant
    DSCP is overwritten."""
    fabric = fattree(4)
    on = replace(ISO, host_demotion=True)
    for cfg, kept in ((on, True), (ISO, False)):
        sim = SimFabric(fabric, policy(mode, fabric, cfg))
        for src, dst, ft in mice_flows(fabric)[::7]:
            sim.send(src.name, ft)  # (hedera: the first packet of a flow is punted)
            t = sim.send(src.name, ft, dscp=cfg.elephant_dscp)
            assert t.delivered_to == dst.name, (mode, t)
            if kept:
                assert all(h.dscp == cfg.elephant_dscp and h.queue in (ELEPHANT_Q, None) for h in t.hops), t.hops
                assert t.hops[0].queue == ELEPHANT_Q, t.hops
            else:
                assert all(h.dscp == cfg.mice_dscp for h in t.hops) and t.hops[0].queue == MICE_Q, t.hops
            for raised in (cfg.mice_dscp, 0, 63):
                t = sim.send(src.name, ft, dscp=raised)
                assert all(h.dscp == cfg.mice_dscp for h in t.hops) and t.hops[0].queue == MICE_Q, (raised, t.hops)


def _demoted_ok(sim, cfg, flows) -> None:
    for src, dst, ft in flows:
        sim.send(src.name, ft)  # (hedera: the first packet of a flow is punted)
        t = sim.send(src.name, ft, dscp=cfg.elephant_dscp)
        assert t.delivered_to == dst.name and t.hops[0].queue == ELEPHANT_Q, t
        assert all(h.dscp == cfg.elephant_dscp for h in t.hops), t.hops


@pytest.mark.parametrize("mode", MODES)
def test_host_demotion_survives_a_link_cut_and_a_switch_that_reconnects_empty(mode):
    """Faults: with a ToR's uplink cut, demoted packets take the paths left, their mark kept; a ToR that
    reconnects with empty tables gets the demoted entry back with its program (as after a controller restart:
    the same program, read back)."""
    from ryu_apps.simswitch.fabric import SimSwitch

    fabric = fattree(4)
    cfg = replace(ISO, host_demotion=True)
    sim = SimFabric(fabric, policy(mode, fabric, cfg))
    flows = [f for f in mice_flows(fabric) if f[0].switch == "e0_0"][::3]
    sim.fail(("e0_0", "a0_0"))
    _demoted_ok(sim, cfg, flows)
    assert all("a0_0" not in sim.send(src.name, ft, dscp=cfg.elephant_dscp).path for src, _, ft in flows)
    sim.restore(("e0_0", "a0_0"))
    sim.switches["e0_0"] = SimSwitch("e0_0", fabric.switches["e0_0"].dpid, sim._ports("e0_0"))
    sim.switches["e0_0"].apply(sim.policy.program("e0_0"))
    _demoted_ok(sim, cfg, flows)


def test_hedera_gives_each_new_flow_its_own_counted_edge_entry():
    fabric = fattree(4)
    pol = policy("hedera", fabric, None)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts[0], fabric.hosts[-1]
    ft = FiveTuple(src.ip, dst.ip, 6, 40000, 5001)
    first = sim.send(src.name, ft)  # punted, given its entry, sent on
    again = sim.send(src.name, ft)  # now matched by the entry at the edge
    assert first.delivered_to == again.delivered_to == dst.name and first.path == again.path
    assert again.hops[0].cookie >> 56 == 0xD5


def test_a_missing_group_bucket_is_caught():
    """The checks above fail when a program is broken: drop one uplink bucket of one edge switch."""
    fabric = fattree(4)
    sim = SimFabric(fabric, policy("ecmp", fabric, None))
    sw = sim.switches["e0_0"]
    g = sw.groups[1]
    sw.groups[1] = Group(g.group_id, g.buckets[:1] + (replace(g.buckets[1], actions=()),), g.type)
    bad = unreachable(sim, mice_flows(fabric))
    assert bad and all(src in ("h0_0_0", "h0_0_1") for src, _, _ in bad)


def test_a_dead_link_takes_its_buckets_out_of_the_groups():
    fabric = fattree(4)
    sim = SimFabric(fabric, policy("ecmp", fabric, None))
    sim.link_down("e0_0", "a0_0")
    for src, dst, ft in mice_flows(fabric):
        t = sim.send(src.name, ft)
        if src.switch == "e0_0" and dst.switch != "e0_0":
            assert t.delivered_to == dst.name and t.path[1] == "a0_1"


@pytest.mark.parametrize("name", list(FABRICS))
def test_with_mice_on_every_path_every_host_reaches_every_host_around_a_dead_link(name):
    """Issue 58's ``mice_paths: all``: mice spread over every live uplink (their queue keeps them apart with
    isolation), still reach every host, and a dead link takes them off it at once."""
    fabric = FABRICS[name]()
    pol = policy("freeway", fabric, ISO, FreewayConfig(mice_paths="all"))
    sim = SimFabric(fabric, pol)
    flows = mice_flows(fabric, limit=3000)
    assert not unreachable(sim, flows)
    firsts = {sim.send(src.name, ft).path[1] for src, dst, ft in flows if src.switch == fabric.tors()[0]
              and dst.switch != src.switch}
    lol_only = {p[1] for p in pol.state.partition.lol_paths((fabric.tors()[0], fabric.tors()[-1]))}
    assert len(firsts) > len(lol_only)  # more uplinks than the low-latency paths alone would give them
    up = (fabric.tors()[0], fabric.up_neighbors(fabric.tors()[0])[0])
    sim.react(pol.on_links(1.0, frozenset({up, up[::-1]})))
    assert not unreachable(sim, flows)
    assert all(up not in sim.send(src.name, ft).links() for src, _, ft in flows if src.switch == up[0])


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
def test_an_elephants_fin_releases_it_at_once_and_goes_on_to_its_host(iso):
    """Issue 58: a finished elephant held its allocation until its entries idled out (2 s), and new
    elephants were placed around it. Its FIN, copied by its ingress ToR, releases it: the FIN itself
    still reaches the destination, and its data packets before it are never copied."""
    from ryu_apps.programs.pins import TCP_FIN

    fabric = fattree(4)
    pol = policy("freeway", fabric, iso)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    flow, el = _announce(sim, pol, src, dst, 40001)
    assert el.eid in pol.state.alloc.by_flow
    data = sim.send(src.name, flow, tcp_flags=0x010)  # an ACK with data: the elephant's own path, no copy
    assert data.delivered_to == dst.name and data.copied == [] and data.hops[0].cookie == el.cookie
    fin = sim.send(src.name, flow, tcp_flags=TCP_FIN | 0x010)
    assert fin.delivered_to == dst.name and fin.copied == [src.switch]
    assert pol.state.elephant_of(flow) is None and el.eid not in pol.state.alloc.by_flow
    assert pol.state.counters["elephant-finished"] == 1
    # its entries stay until they idle out: a retransmitted segment still takes the elephant's path, and a
    # retransmitted FIN, copied again, changes nothing
    late = sim.send(src.name, flow, tcp_flags=0x010)
    assert late.delivered_to == dst.name and late.hops[0].cookie == el.cookie
    again = sim.send(src.name, flow, tcp_flags=TCP_FIN | 0x010)
    assert again.delivered_to == dst.name and again.copied == [src.switch]
    assert pol.state.counters["fin-unknown"] == 1 and pol.state.counters["elephant-finished"] == 1


def test_a_fin_releases_nothing_when_the_setting_is_off():
    from ryu_apps.programs.pins import PRIO_ELEPHANT_FIN, TCP_FIN

    fabric = fattree(4)
    pol = policy("freeway", fabric, None, FreewayConfig(release_on_fin=False))
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    flow, el = _announce(sim, pol, src, dst, 40001)
    assert not any(f.priority == PRIO_ELEPHANT_FIN for f in sim.switches[src.switch].flows())
    fin = sim.send(src.name, flow, tcp_flags=TCP_FIN)
    assert fin.delivered_to == dst.name and fin.copied == [] and pol.state.elephant_of(flow) is el
