"""Link and switch failures in every mode, walked through simulated switches: every pair reachable
around the dead links, nothing placed on them, and everything back once they return."""

from dataclasses import replace

import pytest

from monitoring.view import View
from ryu_apps import modes
from ryu_apps.algorithms.efm_rounds import EFMConfig
from ryu_apps.algorithms.partition import StepResult
from ryu_apps.control.liveness import Liveness
from ryu_apps.modes.freeway_state import FreewayConfig
from ryu_apps.modes.policy import Reaction
from ryu_apps.openflow import pipeline, reconcile
from ryu_apps.openflow.intents import DeleteFlow, DeleteFlows, Flow, Group, GroupModify, Meter, MeterModify, match
from ryu_apps.programs import forwarding
from ryu_apps.simswitch.fabric import SimFabric
from topology.fabric import fattree, leafspine
from topology.paths import path_links

from .test_simswitch_programs import ISO, MODES, _announce, mice_flows, policy, unreachable

FAILURES = {
    "agg-core": [("a0_0", "c1")],
    "edge-agg": [("e0_0", "a0_0")],
    "aggregation switch": "a1_0",
    "core switch": "c1",
}


def _links(fabric, failure):
    if isinstance(failure, str):  # a whole switch: all its links
        return [(failure, n) for n in fabric.neighbors(failure) if n in fabric.switches]
    return failure


def _crosses(t, dead):
    return set(t.links()) & dead


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("mode", MODES)
def test_every_pair_reachable_around_a_failure_and_the_link_used_again_after(mode, failure, iso):
    fabric = fattree(4)
    sim = SimFabric(fabric, policy(mode, fabric, iso))
    flows = mice_flows(fabric) + mice_flows(fabric, seed=2) + mice_flows(fabric, seed=3)
    cut = _links(fabric, FAILURES[failure])
    used_before = {ln for s, d, ft in flows for ln in sim.send(s.name, ft).links()}
    assert set(cut) & used_before or {(b, a) for a, b in cut} & used_before
    sim.fail(*cut)
    dead = sim.dead()
    assert not unreachable(sim, flows), unreachable(sim, flows)[:3]
    for s, _d, ft in flows:
        assert not _crosses(sim.send(s.name, ft), dead)
    sim.restore(*cut)
    assert not sim.dead()
    used_after = {ln for s, d, ft in flows for ln in sim.send(s.name, ft).links()}
    assert not unreachable(sim, flows)
    assert set(cut) & used_after or {(b, a) for a, b in cut} & used_after


def test_without_the_controller_a_remote_failure_strands_pairs_and_with_it_none():
    """The check above can fail: with only the buckets' port watch (no recomputation), a dead
    aggregation-core link leaves the other pods choosing that core toward pod 0."""
    fabric = fattree(4)
    sim = SimFabric(fabric, policy("ecmp", fabric, None))
    sim.link_down("a0_0", "c1")
    assert len(unreachable(sim, mice_flows(fabric))) > 0
    sim.react(sim.policy.on_links(0.0, sim.dead()))
    assert not unreachable(sim, mice_flows(fabric))


def test_a_dead_agg_core_link_cuts_that_core_off_from_the_pod_for_every_other_pod():
    fabric = fattree(4)
    dead = frozenset({("a0_0", "c1"), ("c1", "a0_0")})
    groups, flows = forwarding.base_program(fabric, "a1_0", dead)
    avoid = [f for f in flows if f.priority == pipeline.prio("ecmp-avoid")]
    assert avoid, "pod 1's a1_0 must stop choosing c1 toward pod 0's ToRs"
    (g,) = [g for g in groups if g.group_id == pipeline.AVOID_GROUPS.id(0)]
    assert [b.actions[0].port for b in g.buckets] == [fabric.port_to("a1_0", "c2")]
    # the edge below it still uses both aggregation switches (a1_0 still reaches pod 0 via c2)
    assert not [f for f in forwarding.base_program(fabric, "e1_0", dead)[1] if f.priority == pipeline.prio("ecmp-avoid")]


def test_freeway_partition_replaces_a_dead_low_latency_path_by_the_next_and_elephants_move():
    fabric = fattree(4)
    pol = policy("freeway", fabric, ISO)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    pair = ("e0_0", "e3_1")
    part = pol.state.partition
    lol_before = [p[3] for p in part.lol_paths(pair)]
    flow, el = _announce(sim, pol, src, dst, 40001)
    path = el.placements[0].path
    cut = (path[1], path[2])  # the elephant's aggregation-core link
    sim.fail(cut)
    dead = sim.dead()
    assert not _crosses(sim.send(src.name, flow), dead)
    assert sim.send(src.name, flow).delivered_to == dst.name
    assert not set(el.placements[0].path) >= set(cut)
    assert all(not (set(zip(p, p[1:], strict=False)) & dead) for p in part.lol_paths(pair) + part.hol_paths(pair))
    assert len(part.lol_paths(pair)) == part.n_lol(pair) == len(lol_before)
    # a LOL path dies: the next path in order takes its place
    lol = part.lol_paths(pair)[0]
    sim.fail((lol[1], lol[2]))
    assert [p[3] for p in part.lol_paths(pair)] != lol_before and len(part.lol_paths(pair)) == 2
    assert not unreachable(sim, mice_flows(fabric))
    assert not any(ln in sim.dead() for ln in part.lol_links())


@pytest.mark.parametrize("lend", ["off", "idle"])
def test_an_elephant_with_no_live_path_left_is_released_and_travels_as_a_mouse(lend):
    """With two spines, one LOL and one HOL path: the HOL spine's link dies. The paper's behaviour
    (lend off) has no path left for the elephant; lending moves it to the low-latency path that mice
    leave idle (confirmed, make-before-break)."""
    fabric = leafspine(2, 2, 1)
    pol = modes.FreewayPolicy(fabric, None, FreewayConfig(lend=lend), EFMConfig())
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("l0")[0], fabric.hosts_on("l1")[0]
    flow, el = _announce(sim, pol, src, dst, 40001)
    spine = el.placements[0].path[1]
    sim.fail(("l0", spine))
    if lend == "off":
        assert pol.state.elephant_of(flow) is None and pol.state.counters["elephant-unroutable"] == 1
    else:
        moved = pol.state.elephant_of(flow)
        assert moved is el and spine not in moved.placements[0].path
        assert not pol.state.partition.is_hol((moved.placements[0].path[0], moved.placements[0].path[1]))
        assert pol.state.counters["elephant-unroutable"] == 0
    t = sim.send(src.name, flow)
    assert t.delivered_to == dst.name and spine not in t.path


def test_a_stale_link_is_not_chosen_by_bin_pack():
    from monitoring.view import LinkReading, make

    fabric = fattree(4)
    pol = policy("freeway", fabric, None)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    hol = pol.state.hol_paths(("e0_0", "e3_1"))
    first = hol[0]
    links = {ln: LinkReading(0.0, 0.0, 100.0) for ln in zip(first[1:3], first[2:4], strict=False)}  # its core: silent since 100
    pol.on_period(110.0, make(110.0, links, {}, {}))
    flow, el = _announce(sim, pol, src, dst, 40001)
    assert el.placements[0].path != first


def test_liveness_takes_links_down_at_once_and_back_after_the_hold_down():
    fabric = fattree(4)
    lv = Liveness(fabric, hold_down_s=2.0)
    p = fabric.port_to("a0_0", "c1")
    ch = lv.port(0.0, "a0_0", p, False)
    assert ch.down == {("a0_0", "c1"), ("c1", "a0_0")} and not lv.is_up(("c1", "a0_0"))
    assert not lv.port(0.5, "c1", fabric.port_to("c1", "a0_0"), False)  # the other end: no change
    lv.port(1.0, "a0_0", p, True)
    assert not lv.tick(1.5) and lv.dead()  # one end still down
    lv.port(1.6, "c1", fabric.port_to("c1", "a0_0"), True)
    assert not lv.tick(3.0) and lv.dead() and lv.settling("c1")  # held down until 3.6
    lv.port(3.2, "c1", fabric.port_to("c1", "a0_0"), False)  # a flap restarts the hold-down
    lv.port(3.3, "c1", fabric.port_to("c1", "a0_0"), True)
    assert not lv.tick(4.0)
    assert lv.tick(5.4).up == {("a0_0", "c1"), ("c1", "a0_0")} and not lv.dead() and not lv.settling("c1")
    # sFlow (unauthenticated) only names a suspect to ask the switch about; OpenFlow decides (issue 60)
    p = fabric.port_to("a2_0", "c1")
    ch = lv.port(7.0, "a2_0", p, False, "sflow")
    assert not ch.down and ch.verify == {("a2_0", p)} and lv.is_up(("a2_0", "c1"))
    assert not lv.port(7.1, "a2_0", p, True, "openflow") and not lv.tick(9.2).down
    assert lv.is_up(("a2_0", "c1"))
    lv.port(10.0, "a2_0", p, False, "openflow")
    lv.port(10.1, "a2_0", p, True, "sflow")  # a late sFlow sample does not bring it back
    assert not lv.tick(13.0) and not lv.is_up(("a2_0", "c1"))
    with pytest.raises(ValueError):
        lv.port(14.0, "a2_0", p, True, "lldp")
    # a switch that disconnects takes all its links down; host ports and unknown ports change nothing
    ch = lv.switch(6.0, "a1_1", False)
    assert ch.down == {(a, b) for n in ("e1_0", "e1_1", "c3", "c4") for a, b in (("a1_1", n), (n, "a1_1"))}
    assert not lv.port(6.0, "e0_0", fabric.hosts_on("e0_0")[0].port, False)
    assert not lv.port(6.0, "e0_0", 99, False)


def test_reconcile_sends_only_the_difference_in_a_safe_order():
    m = match(eth_type=0x0800)
    held = [Meter(1, 100, 10), Group(5, ()), Flow(10, m, table_id=0), Flow(20, m), Meter(2, 5, 5)]
    want = [Meter(1, 200, 10), Group(5, ()), Flow(10, m, table_id=0), Group(6, ()), Flow(30, m)]
    ops = reconcile.diff(held, want)
    assert ops == [MeterModify(Meter(1, 200, 10)), Group(6, ()), Flow(30, m), DeleteFlow(0, 20, m),
                   reconcile.DeleteMeter(2)]
    assert reconcile.diff(want, want) == []
    assert reconcile.diff([Group(5, ())], [Group(5, (1,))]) == [GroupModify(Group(5, (1,)))]
    assert reconcile.diff(held, [], keep=lambda i: isinstance(i, Meter)) == [DeleteFlow(0, 10, m), DeleteFlow(0, 20, m),
                                                                        reconcile.DeleteGroup(5)]


def test_an_unchanged_switch_gets_no_messages_after_a_failure_elsewhere():
    fabric = fattree(4)
    sim = SimFabric(fabric, policy("ecmp", fabric, None))
    before = {sw: len(s.received) for sw, s in sim.switches.items()}
    sim.fail(("e0_0", "a0_0"))
    changed = {sw for sw, s in sim.switches.items() if len(s.received) > before[sw]}
    # e0_0 drops a bucket; pod 0's other edge avoids a0_0 toward e0_0; other pods avoid a*_0 toward e0_0
    assert "e0_0" in changed and "c1" not in changed and "a0_1" not in changed


def _held(sim, sw):
    s = sim.switches[sw]
    return s.flows(), list(s.groups.values()), list(s.meters.values())


def _read_back(sim, fresh, sw, now=5.0):
    """A restarted controller ``fresh`` reads ``sw`` back: it recovers from what the switch holds and
    returns what it would send it."""
    flows, groups, meters = _held(sim, sw)
    fresh.recover(now, sw, flows, meters, groups)
    return reconcile.connect_ops(flows + groups + meters, fresh.program(sw), fresh.owned)


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
@pytest.mark.parametrize("mode", MODES)
def test_a_restarted_controller_sends_nothing_and_recovers_announced_elephants(mode, iso):
    fabric = fattree(4)
    pol = policy(mode, fabric, iso)
    sim = SimFabric(fabric, pol)
    el = None
    if mode == "freeway":
        src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
        flow, el = _announce(sim, pol, src, dst, 40001, rate_kbps=3000)
    fresh = policy(mode, fabric, iso)  # the controller after a restart: knows nothing
    for sw in sorted(fabric.switches, reverse=True):  # the ingress ToR last: the path completes late
        ops = _read_back(sim, fresh, sw)
        assert ops == [], (sw, ops[:3])
    if el is not None:
        back = fresh.state.elephant_of(flow)
        assert back is not None and back.cookie == el.cookie and back.placements[0].path == el.placements[0].path
        if iso is not None:
            assert back.rate_bps == el.rate_bps and fresh.state.meter_of(back) == pol.state.meter_of(el)
        # it is released at idle expiry as before, and a new announce does not reuse its id
        assert fresh.state.flow_removed(src.switch, el.cookie)
        assert fresh.state.elephant_of(flow) is None and fresh.state._next_eid > el.eid


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
def test_a_restarted_controller_reads_back_an_elephant_on_a_lent_link_and_sends_nothing(iso):
    """Issue 37: two rate-less elephants from under one k=4 ToR, the second lent the ToR's idle
    low-latency uplink. A restarted controller reads both back from the switches where they are
    (the lent one on its low-latency links) and sends nothing."""
    fabric = fattree(4)
    pol = policy("freeway", fabric, iso)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0"), fabric.hosts_on("e3_1")
    placed = [_announce(sim, pol, src[i], dst[i], 41000 + i, rate_kbps=0) for i in range(2)]
    firsts = {el.placements[0].path[1] for _, el in placed}
    assert firsts == {"a0_0", "a0_1"}  # one on each uplink: the LOL one (to a0_0) is lent
    fresh = policy("freeway", fabric, iso)
    for sw in sorted(fabric.switches, reverse=True):
        ops = _read_back(sim, fresh, sw)
        assert ops == [], (sw, ops[:3])
    for flow, el in placed:
        back = fresh.state.elephant_of(flow)
        assert back is not None and back.placements[0].path == el.placements[0].path
    assert ("e0_0", "a0_0") in fresh.state.lent_links()


def _renumber(sim, sw, new_id):
    """Give ``sw``'s mice groups other ids (``new_id(group id, destination index)``), the entries
    pointing at them following: what another controller's allocation may have left on it."""
    from dataclasses import replace

    from ryu_apps.modes.freeway_mice import mice_fields
    from ryu_apps.openflow.intents import ToGroup

    s = sim.switches[sw]
    mice = pipeline.MICE_GROUPS
    moved: dict = {}
    def renumber(f):
        if f.actions and isinstance(f.actions[0], ToGroup) and mice.first <= f.actions[0].group_id <= mice.last:
            gid = new_id(f.actions[0].group_id, mice_fields(f.cookie)[0])
            moved[gid] = (s.groups[f.actions[0].group_id], s.tables.watch[f.actions[0].group_id])
            return replace(f, actions=(ToGroup(gid),))
        return f

    s.tables.rewrite(renumber)
    for gid in [g for g in s.groups if mice.first <= g <= mice.last]:
        del s.groups[gid], s.tables.watch[gid]
    for gid, (g, watch) in moved.items():
        s.groups[gid], s.tables.watch[gid] = replace(g, group_id=gid), watch


def test_a_restarted_controller_keeps_the_mice_group_ids_the_switches_hold():
    """Shared mice groups get their ids in the order they are needed, so the ids a switch holds are
    not what a fresh controller would choose: it adopts them and sends nothing."""
    fabric = fattree(6)
    pol, sim, _ = _placed_state("freeway", fabric, None)
    for sw in fabric.switches:
        _renumber(sim, sw, lambda gid, j: 5000 - gid)
    fresh = policy("freeway", fabric, None)
    for i, sw in enumerate(sorted(fabric.switches)):
        assert _read_back(sim, fresh, sw, 5.0 + 0.01 * i) == [], sw
    assert not fresh.state.recovering(6.0) and fresh.state.mice_updates() == {}
    assert not unreachable(sim, mice_flows(fabric))


def test_a_switch_read_back_before_the_tors_keeps_its_mice_groups_until_the_partition_is_whole():
    """e0_0's next hop a0_1 toward e4_0 exists only because of e0_1's pair (through a0_1), which is
    read back after e0_0: until every ToR is read back, e0_0 keeps what it holds, and once they are,
    the partition wants what it holds."""
    fabric = fattree(6)
    pol = policy("freeway", fabric, None)
    sim = SimFabric(fabric, pol)
    for pair in [("e0_0", "e3_1"), ("e0_0", "e3_1"), ("e0_1", "e4_0")]:
        assert pol.state.partition.add_path(pair)
    sim.apply(list(pol.state.mice_updates().items()))
    fresh = policy("freeway", fabric, None)
    for i, sw in enumerate(sorted(fabric.switches)):
        assert _read_back(sim, fresh, sw, 5.0 + 0.01 * i) == [], sw
    assert not fresh.state.recovering(6.0) and fresh.state.mice_updates() == {}


def test_a_switch_holding_one_mice_group_per_destination_is_brought_to_shared_groups_without_a_gap():
    """What an older Freeway left on a switch (a group per destination ToR, many with the same next
    hops, and an entry per destination ToR): kept through the read-back after a restart (the partition
    is not whole yet), then at the first update each set of next hops keeps one of its groups, the
    entries of the others are pointed at it before their groups go, the pods whose ToRs share a group
    get one entry before their ToRs' own go, and every host still reaches every host."""
    fabric = fattree(6)
    pol, sim, _ = _placed_state("freeway", fabric, None, FreewayConfig(mice_prefixes="tor", mice_paths="lol"))
    mice = pipeline.MICE_GROUPS
    for sw in fabric.switches:
        _renumber(sim, sw, lambda gid, j: mice.first + j)
    held = {sw: sum(mice.first <= g <= mice.last for g in s.groups) for sw, s in sim.switches.items()}
    assert held["e0_0"] == len(fabric.tors()) - 1
    fresh = policy("freeway", fabric, None, FreewayConfig(mice_paths="lol"))
    for i, sw in enumerate(sorted(fabric.switches)):
        ops = _read_back(sim, fresh, sw, 5.0 + 0.01 * i)
        sim.switches[sw].apply(ops)  # in order: an entry pointing at a missing group fails here
        assert not unreachable(sim, mice_flows(fabric, limit=200)), sw
    assert not fresh.state.recovering(6.0)
    sim.apply(list(fresh.state.mice_updates().items()))  # in order, as above
    assert not unreachable(sim, mice_flows(fabric))
    for sw, s in sim.switches.items():
        sets = [tuple(b.actions for b in g.buckets) for gid, g in s.groups.items() if mice.first <= gid <= mice.last]
        assert len(sets) == len(set(sets)) and len(sets) <= held[sw], sw
    distinct = {tuple(b.actions for b in bs) for bs in fresh.state.fresh_mice("e0_0").values()}
    assert len([g for g in sim.switches["e0_0"].groups if mice.first <= g <= mice.last]) == len(distinct) == 2
    assert fresh.state.mice_updates() == {}
    pods = {f.cookie for f in sim.switches["e0_0"].flows() if f.priority == pipeline.prio("mice-pod")}
    assert len(pods) == 6  # every pod, its own (e0_1, e0_2) too; in pod 3, e0_0's pair with e3_1 has one path more
    own = sorted(f.cookie & 0xFFFFFFFF for f in sim.switches["e0_0"].flows() if f.priority == pipeline.prio("mice"))
    assert own == [fabric.tors().index("e3_1")]


def test_a_switch_that_lost_its_tables_gets_them_back_and_a_wrong_entry_is_replaced():
    fabric = fattree(4)
    pol = policy("ecmp", fabric, None)
    sim = SimFabric(fabric, pol)
    flows, groups, meters = _held(sim, "e0_0")
    assert len(reconcile.connect_ops([], pol.program("e0_0"))) == len(pol.program("e0_0"))
    wrong = [Flow(f.priority, f.match, (), f.table_id) if f.priority == pipeline.prio("host") else f for f in flows]
    stray = Flow(pipeline.prio("down"), match(eth_type=0x0800, ipv4_dst="10.9.9.9"))
    ops = reconcile.connect_ops(wrong + [stray] + groups + meters, pol.program("e0_0"))
    assert len([o for o in ops if isinstance(o, Flow)]) == 2 and ops[-1] == DeleteFlow(0, stray.priority, stray.match)


def test_what_a_switch_reports_parses_back_to_the_intents_that_installed_it():
    """The read-back is only hitless if every entry Freeway sends parses back equal (else it is re-sent)."""
    from ryu_apps.openflow import ofmsg
    from ryu_apps.openflow.framework import ofproto as ofp
    from ryu_apps.openflow.framework import parser

    fabric = fattree(4)
    pol = policy("freeway", fabric, ISO)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    _announce(sim, pol, src, dst, 40001, rate_kbps=3000)
    flows, groups, meters = _held(sim, "e0_0")
    assert any(f.meter_id for f in flows) and any(f.goto is not None for f in flows) and groups and meters
    for f in flows:
        m = ofmsg.flow_add(f)
        st = parser.OFPFlowStats(table_id=m.table_id, priority=m.priority, idle_timeout=m.idle_timeout,
                                 hard_timeout=m.hard_timeout, flags=m.flags, cookie=m.cookie, match=m.match,
                                 instructions=m.instructions)
        assert ofmsg.parse_flow(st) == f
    for g in groups:
        m = ofmsg.group_add(g)
        assert ofmsg.parse_group(parser.OFPGroupDescStats(m.type, m.group_id, m.buckets)) == g
    for mt in meters:
        m = ofmsg.meter_add(mt)
        assert ofmsg.parse_meter(parser.OFPMeterConfigStats(m.flags, m.meter_id, m.bands)) == mt
    # an entry Freeway never sends (another controller's) is refused by the parser, not misread
    odd = parser.OFPFlowStats(table_id=0, priority=5, idle_timeout=0, hard_timeout=0, flags=0, cookie=0,
                              match=parser.OFPMatch(), instructions=[parser.OFPInstructionActions(
                                  ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionPopVlan()])])
    with pytest.raises(ValueError):
        ofmsg.parse_flow(odd)


def _placed_state(mode, fabric, iso, cfg=None):
    """A policy and simulated fabric holding each kind of placement the mode makes: an EFM pin, a
    Hedera edge entry and placement, isolation's mark on a detected elephant, a grown partition."""
    from monitoring.events import ElephantStart
    from monitoring.sflow import FiveTuple
    from ryu_apps.algorithms.efm_rounds import Move
    from topology.paths import tor_paths

    pol = policy(mode, fabric, iso, cfg)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[1]
    pinned = FiveTuple(src.ip, dst.ip, 6, 40100, 5001)
    path = tor_paths(fabric, "e0_0", "e3_1")[2]
    if mode in ("efm-biggest", "freeway"):
        sim.react(pol.rerouter.move(Move(pinned, 3e6, frozenset(), path, ("e0_0", "a0_0"))))
        pol.rerouter.efm.paths[pinned] = path
    if mode == "hedera":
        sim.send(src.name, pinned)  # its first packet: an edge entry
        pol.scheduler.gff.hold(pinned, path, 2e6)
        sim.react(pol._pin(pinned, path))
    if iso is not None and mode != "freeway":
        marked = FiveTuple(src.ip, dst.ip, 6, 40200, 5001)
        sim.react(pol.on_elephant_start(1.0, ElephantStart(1.0, marked, 2e6, src.switch, src.port)))
    if mode == "freeway":
        pol.state.partition.add_path(("e0_0", "e3_1"))
        sim.apply(list(pol.state.mice_updates().items()))
    return pol, sim, pinned


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
@pytest.mark.parametrize("mode", ["hedera", "efm-biggest", "freeway"])
def test_a_restarted_controller_recovers_pins_marks_and_the_partition(mode, iso):
    fabric = fattree(6)  # on k=4 the partition has no room to grow (2 fixed LOL + 2 fixed HOL paths)
    pol, sim, pinned = _placed_state(mode, fabric, iso)
    fresh = policy(mode, fabric, iso)
    for i, sw in enumerate(sorted(fabric.switches)):  # switches come back one by one, ToRs in between
        ops = _read_back(sim, fresh, sw, 5.0 + 0.01 * i)
        assert ops == [], (sw, ops[:3])
    assert fresh.marks == pol.marks
    if mode in ("efm-biggest", "freeway"):
        assert fresh.rerouter.pins == pol.rerouter.pins and fresh.rerouter.efm.paths == pol.rerouter.efm.paths
        assert fresh.next_id() > pol.rerouter.pins[pinned][0]  # a new pin does not reuse its id
    if mode == "hedera":
        assert fresh.pins[pinned][0] == pol.pins[pinned][0] and fresh.edges == pol.edges
        assert fresh.scheduler.gff.placed[pinned].path == pol.scheduler.gff.placed[pinned].path
        # the first poll after the restart has no rates yet: the placement stays; measured small, it goes
        assert fresh.scheduler.schedule(10.0, {pinned: 1000}) == ({}, [])
        assert fresh.scheduler.schedule(15.0, {pinned: 2000}) == ({}, [pinned])
    if mode == "freeway":
        pair = ("e0_0", "e3_1")
        assert fresh.state.partition.n == pol.state.partition.n == {pair: pol.state.partition.n_min + 1}
        assert fresh.state.partition.counter == pol.state.partition.counter
        assert not fresh.state.recovering(6.0)  # every ToR read back: the partition steps again
        assert fresh.state.mice_updates() == {}  # and the switches already hold what it wants


def test_a_recovered_mark_goes_when_monitoring_does_not_report_its_elephant():
    from monitoring.view import View

    fabric = fattree(4)
    pol, sim, _ = _placed_state("ecmp", fabric, ISO)
    fresh = policy("ecmp", fabric, ISO)
    for sw in fabric.switches:
        flows, groups, meters = _held(sim, sw)
        fresh.recover(5.0, sw, flows, meters, groups)
    (flow, (sw, mark)), = fresh.marks.items()
    assert not fresh.on_period(10.0, View(10.0))  # within the grace period: kept
    out = fresh.on_period(16.0, View(16.0))
    assert out.ops == [(sw, [DeleteFlows(mark.cookie)])] and not fresh.marks


def test_an_allocation_read_back_from_its_meter_gives_the_same_meter_and_whole_announced_rates():
    from ryu_apps.modes.freeway_state import FreewayState
    from ryu_apps.programs.isolation import elephant_meter

    core = FreewayState(fattree(4), iso=ISO)
    for rate in [1e6, 2.5e6, 4e6, 9.999e6, 1234567.0, 333.3e3, 7777777.0]:
        kbps = elephant_meter(1, rate, ISO).rate
        back = core._rate_of_meter(kbps)
        assert elephant_meter(1, back, ISO).rate == kbps, rate
        if rate % 1000 == 0:
            assert back == rate


def test_meters_and_entries_do_not_leak_over_re_announces_and_rollbacks():
    """Issue 13 item 5: 100 cycles of announce, re-announce with an overlapping subflow (the old
    elephant is replaced) and an announce whose install a switch refuses (rolled back): the switches
    end up holding the meters and elephant entries of the live elephants only."""
    from monitoring.sflow import FiveTuple
    from ryu_apps.host import handshake as hs
    from ryu_apps.openflow.txn import Failure, rollback_of
    from ryu_apps.simswitch.fabric import frame, packet

    fabric = fattree(4)
    pol = policy("freeway", fabric, ISO)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]

    def announce(sports, rate_kbps, refuse=False):
        subs = tuple(FiveTuple(src.ip, dst.ip, 6, p, 5001) for p in sports)
        ann = hs.encode(hs.Announce(sports[0], 1_000_000, rate_kbps, subs))
        svc = FiveTuple(src.ip, hs.SERVICE_IP, 17, sports[0], hs.SERVICE_PORT)
        if not refuse:
            sim.send(src.name, svc, payload=ann)
            return
        r = pol.on_packet(sim.now, src.switch, src.port, frame(packet(svc), src.mac, hs.SERVICE_MAC, ann))
        sim.apply(r.ops)
        for t in r.txns:  # the switch refuses: what was installed is rolled back
            sim.apply(t.install)
            sim.apply(rollback_of(t.install))
            sim.react(t.failed(Failure("refused", src.switch)) if t.failed else None)

    for i in range(100):
        base = 20000 + 10 * i
        announce([base], 1000)
        announce([base, base + 1], 2000)  # overlaps: replaces the first
        announce([base + 2], 1000, refuse=True)
    live_meters = {pol.state.meter_of(el).meter_id for el in pol.state.elephants.values()}
    held_meters = {m for s in sim.switches.values() for m in s.meters if m >= pipeline.ELEPHANT_METERS.first}
    assert held_meters == live_meters, (len(held_meters), len(live_meters))
    live = {el.cookie for el in pol.state.elephants.values()}
    held = {f.cookie for s in sim.switches.values() for f in s.flows() if f.priority == pipeline.prio("elephant")}
    assert held == live, (len(held), len(live))


def test_a_draining_link_carries_no_mouse_at_once_it_only_stays_closed_to_elephants():
    """Issue 13 item 6: the select-group change moves every mouse off a link whose counter fell to 0 at
    once (a mouse is not pinned to its link); draining only keeps elephants off it for a while (the
    paper's mice, on the low-latency paths only)."""
    from monitoring.sflow import FiveTuple

    fabric = fattree(6)
    pol = policy("freeway", fabric, None, FreewayConfig(mice_paths="lol"))
    sim = SimFabric(fabric, pol)
    part, pair = pol.state.partition, ("e0_0", "e3_1")
    part.add_path(pair)
    sim.apply(list(pol.state.mice_updates().items()))
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    mice = [FiveTuple(src.ip, dst.ip, 6, 30000 + i, 80) for i in range(200)]
    new_links = set(path_links(part.live_paths(pair)[part.n_min]))
    assert any(set(sim.send(src.name, m).links()) & new_links for m in mice)  # the added path carries mice
    res = StepResult()
    part.remove_path(pair, 10.0, res)
    sim.apply(list(pol.state.mice_updates().items()))
    draining = {ln for ln in res.began_draining if ln in part.draining}
    assert draining and all(part.is_lol(ln) and not part.is_hol(ln) for ln in draining)
    assert not any(set(sim.send(src.name, m).links()) & draining for m in mice)


def test_review_fixes_ids_after_a_partial_read_back_and_a_rolled_back_move():
    """Found in review: after a restart that has read back only the ingress ToR, a new announce must not
    take the unrecovered elephant's id (same cookie, same meter); a move that a switch does not confirm
    releases the elephant instead of leaving the state on a path the switches do not hold."""
    fabric = fattree(4)
    pol = policy("freeway", fabric, ISO)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    _, el = _announce(sim, pol, src, dst, 40001, rate_kbps=3000)
    fresh = policy("freeway", fabric, ISO)
    flows, groups, meters = _held(sim, "e0_0")
    fresh.recover(5.0, "e0_0", flows, meters, groups)  # only the ingress ToR so far
    assert fresh.state.elephant_of(next(iter(el.subflows))) is None and fresh.state._next_eid > el.eid
    # a rolled-back move: released, and the ops remove both generations' entries and the meter
    core = pol.state
    install, after = core.reroute_plan(el, set())
    ops = core.abandon(el, after)
    assert core.elephant_of(next(iter(el.subflows))) is None
    kinds = {type(i).__name__ for _, intents in ops for i in intents}
    assert kinds == {"DeleteFlows", "DeleteMeter"} and core.abandon(el, after) == []


def test_review_fixes_a_move_that_never_reports_back_does_not_freeze_the_partition():
    from ryu_apps.modes.freeway_state import MOVE_WAIT_S

    pol = policy("freeway", fattree(6), None)
    core = pol.state
    core.moving, core._moving_since = 1, 0.0
    _, ops = core.period(1.0, set())
    assert ops == [] and core.moving == 1  # waiting for the move
    core.period(MOVE_WAIT_S + 1.0, set())
    assert core.moving == 0 and core.counters["moves-never-finished"] == 1


def test_review_fixes_a_recovered_hedera_placement_released_around_a_failure():
    from monitoring.sflow import FiveTuple
    from topology.paths import tor_paths

    fabric = fattree(4)
    pol = policy("hedera", fabric, None)
    flow = FiveTuple(fabric.hosts_on("e0_0")[0].ip, fabric.hosts_on("e3_1")[0].ip, 6, 40001, 80)
    pol.scheduler.recover(flow, tor_paths(fabric, "e0_0", "e3_1")[0])
    pol.scheduler.gff.release(flow)  # as after_links does when no live path has room
    pol.scheduler.rates(0.0, {flow: 0})
    assert pol.scheduler.schedule(5.0, {flow: 10_000_000})  # large now: no KeyError


@pytest.mark.parametrize("iso", [None, ISO, replace(ISO, meters="all")], ids=["plain", "isolation", "metered"])
def test_rate_less_elephants_are_recovered_rate_less_and_keep_sharing_after_a_restart(iso):
    """The rate-less bit of an elephant's cookie is all a restarted controller has to tell a rate-less
    elephant from one with an explicit rate: read back, two rate-less elephants from one ToR are
    rate-less again, keep their shares, and a third one shares with them."""
    fabric = fattree(4, 10)
    cfg = FreewayConfig(lend="off")  # (all three on e0_0's one HOL uplink: lending would spread them)
    pol = modes.FreewayPolicy(fabric, iso, cfg, EFMConfig())
    sim = SimFabric(fabric, pol)
    src = fabric.hosts_on("e0_0")
    dsts = fabric.hosts_on("e3_0") + fabric.hosts_on("e3_1")
    placed = [_announce(sim, pol, src[i % 2], dsts[i], 41000 + i, rate_kbps=0) for i in range(2)]
    assert all(el.rateless for _, el in placed)
    fresh = modes.FreewayPolicy(fabric, iso, cfg, EFMConfig())
    for sw in fabric.switches:
        flows, groups, meters = _held(sim, sw)
        fresh.recover(5.0, sw, flows, meters, groups)
    back = [fresh.state.elephant_of(f) for f, _ in placed]
    assert all(b is not None and b.rateless for b in back)
    if iso is not None and iso.meters == "all":  # read back from their meters
        assert [b.rate_bps for b in back] == [el.rate_bps for _, el in placed]
    sim.react(fresh.on_period(6.0, View(6.0)))  # without meters: their floor until the period reshares
    assert [b.rate_bps for b in back] == pytest.approx([el.rate_bps for _, el in placed], rel=0.01)
    sim.policy = fresh
    flow3, el3 = _announce(sim, fresh, src[0], dsts[2], 41002, rate_kbps=0)
    shares = [fresh.state.elephant_of(f).rate_bps for f, _ in placed] + [el3.rate_bps]
    assert el3.rateless and max(shares) - min(shares) <= 0.01 * max(shares), shares
    assert sum(shares) <= 10e6 * 1.001, shares


@pytest.mark.parametrize("mode", MODES)
def test_a_link_that_fails_while_a_restarted_controller_reads_the_switches_back(mode):
    """Half the switches read back, then a link on the announced elephant's path dies, then the rest
    come back: every pair is reachable around the dead link, nothing uses it, and the elephant is on a
    live path (or released) once every switch is back."""
    fabric = fattree(4)
    pol = policy(mode, fabric, ISO)
    sim = SimFabric(fabric, pol)
    el = None
    if mode == "freeway":
        src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
        flow, el = _announce(sim, pol, src, dst, 40001, rate_kbps=3000)
        cut = tuple(el.placements[0].path[1:3])  # its aggregation-core link
    else:
        cut = ("a0_0", "c1")
    fresh = policy(mode, fabric, ISO)
    sim.policy = fresh
    order = sorted(fabric.switches)
    first, rest = order[: len(order) // 2], order[len(order) // 2:]

    connected: set[str] = set()  # as the app does, nothing is sent to a switch before it connects
    sim.apply = lambda ops: SimFabric.apply(sim, [(sw, i) for sw, i in ops if sw in connected])

    def read_back(switches, now):
        for sw in switches:
            connected.add(sw)
            sim.apply([(sw, _read_back(sim, fresh, sw, now))])

    read_back(first, 5.0)
    sim.fail(cut)
    read_back(rest, 5.5)
    sim.react(fresh.on_period(6.0, View(6.0)))  # switches were read back a moment ago: nothing moves yet
    if mode == "freeway":
        assert fresh.state.elephant_of(flow).placements[0].path == el.placements[0].path
    sim.react(fresh.on_period(16.0, View(16.0)))  # the read-back is over
    bad = unreachable(sim, mice_flows(fabric))
    assert not bad, bad[:3]
    dead = {cut, cut[::-1]}
    used = {ln for s, d, ft in mice_flows(fabric) for ln in sim.send(s.name, ft).links()}
    assert not used & dead
    if el is not None:  # k=4 with one aggregation-core link cut still has a live HOL path
        back = fresh.state.elephant_of(flow)
        assert back is not None and not set(path_links(back.placements[0].path)) & dead
        t = sim.send(src.name, flow)
        assert t.delivered_to == dst.name and not set(t.links()) & dead


def test_an_efm_move_that_is_rolled_back_unpins_the_flow_instead_of_leaving_its_old_pin():
    """The old pin may cross the link the move was leaving (a dead one): unpinned, the flow is back on
    base forwarding, which avoids dead links; before, its old entries stayed and EFM forgot them."""
    from monitoring.sflow import FiveTuple
    from ryu_apps.algorithms.efm_rounds import Move
    from ryu_apps.openflow.txn import Failure
    from topology.paths import tor_paths

    fabric = fattree(4, 10)
    pol = policy("efm-biggest", fabric, None)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    ft = FiveTuple(src.ip, dst.ip, 6, 20000, 80)
    first, second = tor_paths(fabric, "e0_0", "e3_1")[:2]
    r = pol.rerouter
    r.move(Move(ft, 3e6, frozenset(), first, ("e0_0", "a0_0"))).txns[0].done()
    cookie = r.pins[ft][2]
    (t,) = r.move(Move(ft, 3e6, frozenset(path_links(first)), second, ("a0_0", "c1"))).txns
    out = t.failed(Failure("switch a0_1 is not connected", "a0_1"))
    assert ft not in r.pins and ft not in r.entries and ft not in r.efm.paths
    assert {(sw, tuple(ops)) for sw, ops in out.ops} == {(sw, (DeleteFlows(cookie),)) for sw in fabric.switches}


@pytest.mark.parametrize("iso", [None, ISO], ids=["plain", "isolation"])
def test_a_controller_upgraded_from_the_two_table_layout_moves_live_elephants_into_their_table(iso):
    """Before the guard table a ToR's elephant entries sat in table 0 (table 1 was forward). Taking over
    such a fabric, the controller recovers the elephant, adds its entries in ingress (table 1) and deletes
    the old ones: left in table 0 they would bypass the guard, catch its packets and let the new entry
    idle out, releasing a live elephant."""
    from dataclasses import replace

    fabric = fattree(4)
    pol = policy("freeway", fabric, iso)
    sim = SimFabric(fabric, pol)
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
    flow, el = _announce(sim, pol, src, dst, 40001, rate_kbps=3000)
    fresh = policy("freeway", fabric, iso)
    moved = 0
    for sw in fabric.switches:
        flows, groups, meters = _held(sim, sw)
        tor = fabric.switches[sw].is_tor
        old = [replace(f, table_id=0) if tor and f.cookie == el.cookie else f for f in flows]  # the old layout
        fresh.recover(5.0, sw, reconcile.rehome(old, tor, fresh.owned), meters, groups)
        ops = reconcile.connect_ops(old + groups + meters, fresh.program(sw), fresh.owned, tor)
        if tor and any(f.cookie == el.cookie for f in flows):
            mine = [f for f in old if f.cookie == el.cookie]
            adds = [o for o in ops if isinstance(o, Flow) and o.cookie == el.cookie]
            gone = [o for o in ops if isinstance(o, DeleteFlow)]
            assert adds == [replace(f, table_id=1) for f in mine]  # as it was (actions, meter, timeout), in ingress
            assert [(d.table_id, d.match) for d in gone] == [(0, f.match) for f in mine]
            assert len(mine) == (2 if sw == src.switch else 1)  # (at the source, its FIN's entry too)
            assert len(ops) == 2 * len(mine)  # new entries first, then the old go
            assert max(ops.index(a) for a in adds) < min(ops.index(g) for g in gone)
            sim.switches[sw].apply(ops)
            moved += 1
        else:
            assert ops == [], (sw, ops[:3])
    assert moved == 2  # the source and destination ToRs
    back = fresh.state.elephant_of(flow)
    assert back is not None and back.cookie == el.cookie and back.placements[0].path == el.placements[0].path
    sim.policy = fresh
    t = sim.send(src.name, flow)
    assert t.delivered_to == dst.name and t.hops[0].cookie == el.cookie  # through its moved entry
    for sw in fabric.switches:  # and the switches now hold exactly what the recovered controller wants
        flows, groups, meters = _held(sim, sw)
        assert reconcile.connect_ops(flows + groups + meters, fresh.program(sw), fresh.owned,
                                     fabric.switches[sw].is_tor) == [], sw


@pytest.mark.parametrize("with_record", [True, False], ids=["cluster-record", "switches-only"])
def test_a_split_elephant_read_back_keeps_its_subflow_rates_when_a_record_has_them(with_record):
    """An elephant split unevenly over two subflows: a controller taking over with the cluster's record
    gives each subflow its rate again; from the switches alone (only the total) they get equal shares."""
    from monitoring.sflow import FiveTuple
    from ryu_apps.host import handshake as hs

    fabric = fattree(6)
    pol = policy("freeway", fabric, ISO, FreewayConfig(place_load="measured"))  # (placed by the measurement)
    sim = SimFabric(fabric, pol)
    pol.state.link_util = {("e0_0", "a0_1"): 0.6}  # one uplink busier: the LP gives it less
    src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e5_2")[0]
    subs = tuple(FiveTuple(src.ip, dst.ip, 6, sp, 5001) for sp in (40001, 40002))
    sim.send(src.name, FiveTuple(src.ip, hs.SERVICE_IP, 17, 40001, hs.SERVICE_PORT),
             payload=hs.encode(hs.Announce(7, 10_000_000, 8000, subs)))
    el = pol.state.elephant_of(subs[0])
    want = {sub: pl.rate_bps for sub, pl in zip(el.subflows, el.placements, strict=True)}
    assert sorted(want.values()) == pytest.approx([1e6, 7e6])
    fresh = policy("freeway", fabric, ISO)
    if with_record:
        fresh.state.records = {el.eid: pol.state.record(el)}
    for sw in sorted(fabric.switches, reverse=True):
        _read_back(sim, fresh, sw)
    back = fresh.state.elephant_of(subs[0])
    got = {sub: pl.rate_bps for sub, pl in zip(back.subflows, back.placements, strict=True)}
    assert sum(got.values()) == pytest.approx(8e6)
    if with_record:
        assert got == pytest.approx(want)
    else:
        assert all(v == pytest.approx(4e6) for v in got.values())


@pytest.mark.parametrize("layout", ["pod", "tor"])
def test_a_read_back_with_garbage_mice_groups_is_replaced_without_a_gap(layout):
    """A switch read back with a mice group on a port that is no up link, one destination's entries
    (or its pod's) pointing at it, and a stray group nothing uses: the restarted controller does not
    fail on them; the stray group goes at the read-back, and at the first update after it the
    destination gets a group of its next hops before its entries are re-pointed, then the garbage group
    goes; every host reaches every host."""
    from dataclasses import replace

    from ryu_apps.openflow.intents import Bucket, Output, ToGroup

    fabric = fattree(4)
    pol = policy("freeway", fabric, None, FreewayConfig(mice_prefixes=layout))
    sim = SimFabric(fabric, pol)
    s = sim.switches["e0_0"]
    s.groups[5000] = Group(5000, (Bucket((Output(99),), 10),))  # port 99: no such up link
    s.groups[5001] = Group(5001, (Bucket((Output(3),), 10),))  # nothing points at it
    j = fabric.tors().index("e3_1")
    s.tables.rewrite(lambda f: replace(f, actions=(ToGroup(5000),)) if f.actions and isinstance(f.actions[0], ToGroup)
                     and pipeline.owner_of(f.cookie) is pipeline.FREEWAY_MICE
                     and j in pol.state.mice_dsts("e0_0", f.cookie) else f)
    assert unreachable(sim, mice_flows(fabric))  # the garbage group sends e0_0's mice for e3_1 nowhere
    fresh = policy("freeway", fabric, None)
    for i, sw in enumerate(sorted(fabric.switches)):
        sim.switches[sw].apply(_read_back(sim, fresh, sw, 5.0 + 0.01 * i))  # in order: no entry left dangling
    assert not fresh.state.recovering(6.0)
    sim.apply(list(fresh.state.mice_updates().items()))
    assert not unreachable(sim, mice_flows(fabric))
    assert 5000 not in s.groups and 5001 not in s.groups
    assert fresh.state.mice_updates() == {}


def test_a_read_back_with_a_mice_entry_for_no_tor_of_this_fabric_deletes_it_and_fails_nothing():
    """A mice entry whose cookie names a ToR index or a pod past this fabric's (another description's,
    or garbage), pointing at a group the switch holds: the restarted controller does not fail on it and
    the read-back deletes it; every host reaches every host."""
    from ryu_apps.modes.freeway_mice import mice_cookie, mice_pod_cookie
    from ryu_apps.openflow.intents import ToGroup

    fabric = fattree(4)
    pol = policy("freeway", fabric, None)
    sim = SimFabric(fabric, pol)
    s = sim.switches["e0_0"]
    gid = next(g for g in s.groups if pipeline.MICE_GROUPS.first <= g <= pipeline.MICE_GROUPS.last)
    strays = [Flow(pipeline.prio("mice"), match(eth_type=0x0800, ipv4_dst=("10.77.0.0", "255.255.0.0")),
                   (ToGroup(gid),), table_id=2, cookie=mice_cookie(9999, 2)),
              Flow(pipeline.prio("mice-pod"), match(eth_type=0x0800, ipv4_dst=("10.78.0.0", "255.255.0.0")),
                   (ToGroup(gid),), table_id=2, cookie=mice_pod_cookie(77, 2))]
    s.apply(strays)
    fresh = policy("freeway", fabric, None)
    for i, sw in enumerate(sorted(fabric.switches)):
        ops = _read_back(sim, fresh, sw, 5.0 + 0.01 * i)
        sim.switches[sw].apply(ops)
        if sw == "e0_0":
            assert {(o.table_id, o.priority, o.match) for o in ops if isinstance(o, DeleteFlow)} == {
                (f.table_id, f.priority, f.match) for f in strays}
        else:
            assert ops == [], sw
    assert not fresh.state.recovering(6.0)
    sim.apply(list(fresh.state.mice_updates().items()))
    assert not unreachable(sim, mice_flows(fabric))
    assert not [f for f in s.flows() if f.cookie in {x.cookie for x in strays}]


@pytest.mark.parametrize("mode", MODES)
def test_a_link_change_sends_what_recomputing_every_switch_would(mode):
    """``on_links`` recomputes only the switches whose dead uplinks or detours moved
    (``forwarding.dead_key``); for a run of random link changes on a k=6 fat-tree, what it sends to
    each switch is exactly the difference between that switch's whole base program before and after."""
    import random

    fabric = fattree(6)
    p = policy(mode, fabric, None)
    rng = random.Random(3)
    links = [(ln.a, ln.b) for ln in fabric.links]
    dead: frozenset = frozenset()
    for _ in range(12):
        cut = rng.sample(links, rng.choice((1, 2, 4)))
        dead = (dead ^ {*cut, *((b, a) for a, b in cut)}) if rng.random() < 0.7 else frozenset()
        before = {sw: p.static_program(sw) for sw in fabric.switches}
        full = forwarding.Reachability(fabric, lambda ln, d=dead: ln not in d)
        want = {}
        for sw in fabric.switches:
            groups, flows = forwarding.base_program(fabric, sw, dead, full)
            old_dead, p.dead, p._reach = p.dead, dead, full
            after = p.static_program(sw)
            p.dead, p._reach = old_dead, None
            if ops := reconcile.diff(before[sw], after):
                want[sw] = ops
        p.after_links = lambda now, went_down: Reaction()  # (the mode's moves are not this test's)
        got: dict = {}
        for sw, ops in p.on_links(0.0, dead).ops:
            got.setdefault(sw, []).extend(ops)
        assert got == want, sorted(set(want) ^ set(got))
        assert p.dead == dead


def test_a_read_back_is_late_only_when_nothing_of_it_came_while_no_other_was_flowing():
    """Issue 41, k=48 restart: 32 read-backs asked at once queue behind each other at the switches' side;
    11 ToRs whose turn came after 5 s were reprogrammed from scratch (8,434 changes sent for nothing). A
    read-back is late after 5 s without a part of it while no other read-back flows, or after the cap."""
    rb = reconcile.ReadBack(None, 0.0)
    rb.asked([1, 2, 3], 10.0)
    assert not rb.late(14.0, 0.0, 5.0, 30.0)  # asked 4 s ago
    assert rb.late(16.0, 0.0, 5.0, 30.0)  # 6 s, nothing flowing anywhere
    assert not rb.late(16.0, 15.5, 5.0, 30.0)  # others' parts came half a second ago: its turn will come
    assert not rb.take(1, "flows", [], None, True, 20.0)  # a part of its own, more to come
    assert not rb.late(24.0, 0.0, 5.0, 30.0) and rb.late(25.5, 0.0, 5.0, 30.0)
    assert rb.late(40.5, 40.4, 5.0, 30.0)  # the cap, however busy the others are
