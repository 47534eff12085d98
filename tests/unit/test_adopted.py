"""Adopted elephants (found by monitoring, never announced) in freeway mode (issue 13 items 1 and 3):
their allocation and meter follow the measured rate, and one on a hot link is moved."""

import pytest

from monitoring.sflow import FiveTuple
from monitoring.view import FlowReading
from ryu_apps.modes.freeway_state import SHRINK_TO, FreewayConfig, FreewayState
from ryu_apps.openflow.intents import DeleteFlows, MeterModify
from ryu_apps.programs.isolation import IsolationConfig, elephant_meter
from topology.fabric import fattree
from topology.paths import path_links

ISO = IsolationConfig(meters="all")  # these tests are of the meters that follow an adopted elephant
F = fattree(4, 10)
SRC, DST = F.hosts_on("e0_0")[0], F.hosts_on("e3_1")[0]
FLOW = FiveTuple(SRC.ip, DST.ip, 6, 40001, 5201)
MOUSE = FiveTuple(F.hosts_on("e0_1")[0].ip, DST.ip, 6, 40100, 7100)


def _adopted(rate=1.5e6, cfg=None, held=False):
    """An adopted elephant measured at ``rate`` when found; ``held``: its allocation then brought to
    ``rate`` (lending allocates it its path's room: it is measured sending ``rate / SHRINK_TO`` and shrinks)."""
    core = FreewayState(F, cfg or FreewayConfig(lend_isolated=0), iso=ISO)  # (these: lend_below's thresholds)
    assert core.adopt(0.0, FLOW, rate)
    el = core.elephant_of(FLOW)
    if held and el.rate_bps != rate:
        core.follow_demand(0.0, lambda sub: rate / SHRINK_TO)
        assert el.rate_bps == pytest.approx(rate)
    return core, el


def test_an_adopted_elephant_held_by_its_meter_grows_to_what_its_path_has_and_shrinks_when_it_sends_less():
    core, el = _adopted(cfg=FreewayConfig(lend="off"))
    link = path_links(el.placements[0].path)[1]
    ops = core.follow_demand(1.0, lambda sub: 1.45e6)  # at its 1.5 Mbit/s allocation: the meter holds it
    assert el.rate_bps == 10e6 and core.alloc.link[link] == 10e6  # the whole 10 Mbit/s path was free
    assert ops == [(SRC.switch, [MeterModify(elephant_meter(el.eid, 10e6, ISO))])]
    assert core.follow_demand(2.0, lambda sub: 9.0e6) == []  # using it: nothing changes
    ops = core.follow_demand(3.0, lambda sub: 2.0e6)  # sends less: shrinks to its rate and a half
    assert el.rate_bps == 3.0e6 and core.alloc.link[link] == 3.0e6 and ops
    core.follow_demand(4.0, lambda sub: 0.1e6)
    assert el.rate_bps == 1e6  # never below the elephant threshold (10% of its access link)
    assert core.follow_demand(5.0, lambda sub: None) == []  # not measured: left alone


@pytest.mark.parametrize("rate", [2.0e6, 1.98e6, 2.3e6])
def test_an_adopted_elephant_sending_a_steady_rate_settles_and_its_meter_stays(rate):
    """Shrunk to its rate plus a quarter, a steady rate sat exactly at GROW_AT of the allocation: it grew back to
    its path's room the next period and shrank again the one after, a meter change every period, for as long as
    it lasted (at k=48, 1,977 adopted elephants checked for growth 29,514 times in one run)."""
    core, el = _adopted(cfg=FreewayConfig(lend="off"))
    core.follow_demand(1.0, lambda sub: 1.45e6)  # held by its meter: grows to its path's 10 Mbit/s
    changes = [core.follow_demand(float(t), lambda sub: rate) for t in range(2, 12)]
    assert changes[0] and el.rate_bps == pytest.approx(1.5 * rate)  # sends less: shrinks once...
    assert not any(changes[1:]), [el.rate_bps] + changes  # ... and stays
    assert core.follow_demand(12.0, lambda sub: 1.25 * rate) and el.rate_bps == 10e6  # held again: grows


def test_a_slice_taken_before_its_elephant_was_released_leaves_the_allocation_released():
    """The period follows adopted elephants in parts (``ADOPTED_PART``); a handshake or an end served
    between them may release one of a slice already taken: it must not be allocated again."""
    core, el = _adopted(cfg=FreewayConfig(lend="off"))
    part = [el]
    core.release(el.eid)
    assert core.elephant_of(FLOW) is None and not any(core.alloc.link.values())
    assert core.follow_demand(1.0, lambda sub: 1.45e6, part) == []
    assert not any(core.alloc.link.values())  # (without the check: grown to 10 Mbit/s, held by nothing)
    core2, el2 = _adopted(cfg=FreewayConfig(lend="off"))
    assert core2.follow_demand(1.0, lambda sub: 1.45e6, [el2]) and el2.rate_bps == 10e6  # a live one follows


def test_a_grown_allocation_is_what_bin_pack_sees():
    core, el = _adopted(cfg=FreewayConfig(lend="off"))
    other = FiveTuple(F.hosts_on("e0_0")[1].ip, DST.ip, 6, 40002, 5201)
    core.follow_demand(1.0, lambda sub: 1.45e6)  # the first one grows to its whole path (e0_0's HOL uplink)
    assert core.adopt(0.0, other, 4e6)
    # on k=4 both HOL paths from e0_0 share that uplink: the second is placed seeing 10 + 4 Mbit/s on it
    assert core.elephant_of(other).placements[0].max_util == 1.4


def test_with_the_high_throughput_paths_full_an_adopted_elephant_borrows_idle_low_latency_capacity():
    core, el = _adopted(held=True)  # lending on (the default)
    other = FiveTuple(F.hosts_on("e0_0")[1].ip, DST.ip, 6, 40002, 5201)
    core.follow_demand(1.0, lambda sub: 1.45e6)
    assert core.adopt(0.0, other, 4e6)
    pl = core.elephant_of(other).placements[0]
    assert pl.max_util == 0.4 and not core.partition.is_hol(path_links(pl.path)[0])  # e0_0's LOL uplink, idle
    # mice on it: no longer lent, so a third elephant from e0_0 overbooks the HOL path instead
    up = path_links(pl.path)[0]  # 4 Mbit/s of elephant and 1.5 of mice on it
    core.measure(2.0, {up: 0.4 + 0.15}, {MOUSE: FlowReading(1.5e6, frozenset({up}), False, 2.0),
                                         other: FlowReading(4e6, frozenset({up}), True, 2.0)})
    assert not core.lendable(path_links(pl.path)[0]) and core.lendable(path_links(pl.path)[1])


def test_announced_elephants_keep_their_allocation():
    core, el = _adopted(held=True)
    el.adopted = False
    assert core.follow_demand(1.0, lambda sub: 1.45e6) == [] and el.rate_bps == 1.5e6


def test_an_adopted_elephant_on_a_hot_link_moves_to_a_high_throughput_path_with_room():
    core, el = _adopted(3e6, FreewayConfig(lend="off"))
    old_cookie, hot = el.cookie, path_links(el.placements[0].path)[1]
    core.alloc.link[("c4", "a3_1")] = 5e6  # the other path would go over 70% with it (5 + 3 of 10)
    assert core.hot_adopted(10.0, {hot: 0.85}, 0.7, 10.0) == []  # EFM's rule: it stays
    del core.alloc.link[("c4", "a3_1")]
    (moved, install, after), = core.hot_adopted(10.0, {hot: 0.85}, 0.7, 10.0)
    assert moved is el and hot not in path_links(el.placements[0].path)
    assert after and all(i == DeleteFlows(old_cookie) for _, ops in after for i in ops)
    assert el.cookie != old_cookie and el.adopted
    assert core.hot_adopted(12.0, {path_links(el.placements[0].path)[1]: 0.85}, 0.7, 10.0) == []  # held down
    el.adopted = False  # an announced elephant keeps the path it was given
    assert core.hot_adopted(30.0, {path_links(el.placements[0].path)[1]: 0.85}, 0.7, 10.0) == []


def test_an_adopted_elephant_is_recovered_as_adopted_after_a_restart():
    from ryu_apps.simswitch.fabric import SimFabric
    from tests.unit.test_simswitch_programs import policy

    pol = policy("freeway", F, ISO)
    sim = SimFabric(F, pol)
    from monitoring.events import ElephantStart

    sim.react(pol.on_elephant_start(1.0, ElephantStart(1.0, FLOW, 2e6, SRC.switch, SRC.port)))
    el = pol.state.elephant_of(FLOW)
    assert el is not None and el.adopted
    fresh = policy("freeway", F, ISO)
    for sw in F.switches:
        s = sim.switches[sw]
        fresh.recover(5.0, sw, s.flows(), list(s.meters.values()), list(s.groups.values()))
    back = fresh.state.elephant_of(FLOW)
    assert back.adopted and back.cookie == el.cookie and back.rate_bps == el.rate_bps


def test_with_lending_a_hot_adopted_elephant_moves_to_idle_low_latency_capacity_and_back_when_mice_return():
    core, el = _adopted(3e6, held=True)
    hot = path_links(el.placements[0].path)[1]
    core.alloc.link[("c4", "a3_1")] = 5e6  # the other HOL path would go over 70% with it
    (moved, _install, _after), = core.hot_adopted(10.0, {hot: 0.85}, 0.7, 10.0)
    lent = [ln for ln in path_links(el.placements[0].path) if not core.partition.is_hol(ln)]
    assert moved is el and hot not in path_links(el.placements[0].path) and lent  # onto idle LOL links
    # mice come back on one of them (its load beyond the elephant's 3 Mbit/s): the link is taken back
    core.measure(11.0, {lent[0]: 0.3 + 0.25}, {MOUSE: FlowReading(2.5e6, frozenset({lent[0]}), False, 11.0)})
    core.period(11.0, [])
    (back, _i, _a), = core.take_moves()
    assert back is el and not set(lent) & set(path_links(el.placements[0].path))
    assert core.why_moved(el.eid) == "mice came back to a lent link" and not core.lendable(lent[0])
    core.move_finished()
    core.measure(15.0, {})  # mice gone again: not lent before lend_hold_s has passed
    assert not core.lendable(lent[0])
    core.measure(21.0, {})
    assert core.lendable(lent[0])


def test_a_lent_link_is_taken_back_only_when_mice_are_sampled_on_it():
    """The smoothed load of a lent link an elephant just left still holds the elephant for a few periods:
    with no mouse sampled on it, that is not mice coming back. Nor is a flow not yet flagged an elephant
    on a link whose load the placed elephants explain."""
    core, el = _adopted(3e6, held=True)
    hot = path_links(el.placements[0].path)[1]
    core.alloc.link[("c4", "a3_1")] = 5e6
    core.hot_adopted(10.0, {hot: 0.85}, 0.7, 10.0)
    lent = next(ln for ln in path_links(el.placements[0].path) if not core.partition.is_hol(ln))
    young = FiveTuple(F.hosts_on("e0_0")[1].ip, DST.ip, 6, 40200, 5201)
    core.measure(11.0, {lent: 0.9}, {young: FlowReading(0.2e6, frozenset({lent}), False, 11.0)})
    seen = core._mice_loads()
    assert core.less_elephants(lent) == pytest.approx(0.6)  # 9 Mbit/s measured, the placed elephant's 3 (its allocation) taken off
    assert seen[lent] == pytest.approx(0.02)  # ... but only 0.2 Mbit/s of flows that are not elephants
    assert core.mice_seen[lent] == core.mice_util[lent] == seen[lent]  # what lending and the partition use
    core.period(11.0, [])
    assert core.take_moves() == [] and core.lendable(lent)
    sub = el.subflows[0]  # the elephant sampled at 5 Mbit/s, read before any period worked the mice loads out
    own = FiveTuple(sub.src, sub.dst, sub.proto, sub.sport, sub.dport)
    core.measure(11.5, {lent: 0.6}, {own: FlowReading(5e6, frozenset({lent}), True, 11.5)})
    assert core.less_elephants(lent) == pytest.approx(0.1)  # of this measurement: 6 Mbit/s less its 5, not its 3
    core.measure(12.0, {lent: 0.9}, {young: FlowReading(2.5e6, frozenset({lent}), False, 12.0)})
    core.period(12.0, [])
    (back, _i, _a), = core.take_moves()  # now both say mice are there (0.25 > reclaim_above)
    assert back is el and not core.lendable(lent)


def test_with_lending_an_adopted_elephant_starts_with_the_room_its_path_has():
    """Placed for its demand (its host's link), it is allocated what its path has at once: a meter at the
    rate of TCP's first fraction of a second held it there, and it shrank before TCP sped up."""
    core, el = _adopted(1.5e6)
    assert el.rate_bps == 10e6 and core.meter_of(el).rate == elephant_meter(el.eid, 10e6, ISO).rate
    other = FiveTuple(F.hosts_on("e0_0")[1].ip, DST.ip, 6, 40002, 5201)
    assert core.adopt(0.0, other, 2e6)  # the HOL uplink is taken: lent e0_0's idle LOL uplink, all of it
    second = core.elephant_of(other)
    assert second.rate_bps == 10e6 and not core.partition.is_hol(path_links(second.placements[0].path)[0])


def test_with_isolation_a_low_latency_link_is_lent_while_its_mice_leave_it_half_idle():
    """Issue 58: with isolation mice keep their queue, their priority and their buffer on a lent link, so a
    low-latency link is lent up to a mice load of ``lend_isolated`` (0.5), not ``lend_below`` (0.05), and
    taken back above 0.55; without isolation the thresholds stay 0.05 and 0.1."""
    core, el = _adopted(held=True, cfg=FreewayConfig())
    up = ("e0_0", "a0_0")  # e0_0's LOL uplink
    assert core.lend_below() == 0.5 and abs(core.reclaim_above() - 0.55) < 1e-9
    core.measure(2.0, {up: 0.3}, {MOUSE: FlowReading(3e6, frozenset({up}), False, 2.0)})
    assert core.lendable(up)  # mice at 0.3: lent with isolation
    plain = FreewayState(F, FreewayConfig(), iso=None)
    plain.measure(2.0, {up: 0.3}, {MOUSE: FlowReading(3e6, frozenset({up}), False, 2.0)})
    assert plain.lend_below() == 0.05 and not plain.lendable(up)


def _plain_hot_adopted(core, now, util, threshold, hold_down_s):
    """EFM for adopted elephants as written before it looked for a path first: for every candidate, every
    link of the pair's paths that it would make hot, then whether a path avoids them."""
    from ryu_apps.modes.freeway_state import links

    moves = []
    for link in sorted((ln for ln, u in util.items() if u > threshold), key=lambda ln: -util[ln]):
        cands = sorted((core.elephants[e] for e in core.alloc.crossing(link) if e in core.elephants
                        and core.elephants[e].adopted and now - core.elephants[e].moved_at >= hold_down_s),
                       key=lambda el: -el.rate_bps)
        for el in cands:
            mine = {ln for pl in el.placements for ln in links(pl.path)}
            paths = core.elephant_paths((el.src.switch, el.dst.switch))
            too_hot = {ln for p in paths for ln in links(p)
                       if ln not in mine and core.load_bps(ln) + el.rate_bps > threshold * core.capacity_bps(ln)}
            avoid = {link} | too_hot
            if not any(not set(links(p)) & avoid for p in paths):
                continue
            plan = core.reroute_plan(el, avoid)
            if plan is not None:
                el.moved_at = now
                moves.append((el, *plan))
                break
    return moves


@pytest.mark.parametrize("lend", ["off", "idle"])
@pytest.mark.parametrize("seed", [*range(12), 13, 66])  # (13 and 66: a move changes what a later candidate may do)
def test_hot_adopted_elephants_move_as_a_plain_walk_of_every_candidates_paths_would_move_them(seed, lend):
    """``hot_adopted`` looks for a path that avoids the hot link and every link the elephant would make hot
    before it works out the whole set (at k=16 the set for every candidate that could not move was half of
    the period, 2026-12-02), and builds a pair's paths from the halves (up, down) of its paths, each
    asked once whether it is open (2026-12-05), and finds the paths on which a candidate would make no link
    hot once for all the hot links it crosses until a move (2026-12-06). Over random fabrics of adopted elephants and hot links,
    with lending or without, a link down and links whose measurement is stale, the moves, their new paths
    and the state after are those of the plain walk over ``elephant_paths``."""
    import random

    def build():
        rng = random.Random(seed)
        fabric = fattree(6, 10)
        core = FreewayState(fabric, FreewayConfig(lend=lend))
        hosts = fabric.hosts
        for i in range(60):
            a, b = rng.sample(hosts, 2)
            if a.switch != b.switch:
                core.adopt(0.0, FiveTuple(a.ip, b.ip, 6, 40000 + i, 5201), rng.uniform(0.5e6, 4e6))
        links_ = sorted({ln for el in core.elephants.values() for pl in el.placements for ln in path_links(pl.path)})
        util = {ln: rng.uniform(0.6, 1.0) for ln in rng.sample(links_, min(len(links_), 25))}
        every = sorted({ln for p in core.partition.paths(("e0_0", "e5_2")) for ln in path_links(p)})
        core.set_dead(1.0, {rng.choice(every)})
        core.measure(1.0, {**{ln: rng.uniform(0.0, 0.1) for ln in every}, **util})  # (some LOL links idle: lent)
        core.stale = frozenset(rng.sample(links_, len(links_) // 5))
        return core, util

    a, util = build()
    b, _ = build()
    assert len(a.elephants) > 30
    new = a.hot_adopted(20.0, util, 0.7, 10.0)
    old = _plain_hot_adopted(b, 20.0, util, 0.7, 10.0)
    assert [(el.eid, [pl.path for pl in el.placements]) for el, *_ in new] == \
           [(el.eid, [pl.path for pl in el.placements]) for el, *_ in old]
    assert {e: [pl.path for pl in el.placements] for e, el in a.elephants.items()} == \
           {e: [pl.path for pl in el.placements] for e, el in b.elephants.items()}
    assert dict(a.alloc.link) == dict(b.alloc.link)
