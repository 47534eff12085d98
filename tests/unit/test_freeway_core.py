"""Freeway mode's pure core: switch programs, handshakes, elephant entries, rerouting, expiry."""

import pytest

from ryu_apps.algorithms.partition import StepResult
from ryu_apps.host import handshake as hs
from ryu_apps.modes.freeway_elephant import cookie_of, eid_of
from ryu_apps.modes.freeway_mice import PRIO_HANDSHAKE
from ryu_apps.modes.freeway_state import PRIO_ELEPHANT, FreewayConfig, FreewayConfigError, FreewayState, active_pairs
from ryu_apps.openflow.intents import SEND_FLOW_REM, DeleteFlows, Flow, GroupModify, Meter, Output, ToController
from ryu_apps.openflow.pipeline import MICE_GROUPS
from ryu_apps.programs.pins import FIN_PUNT_BYTES, PRIO_ELEPHANT_FIN, TCP_FIN
from ryu_apps.simswitch.fabric import SimSwitch
from topology.fabric import fattree
from topology.paths import path_links

SRC, DST = "10.0.0.2", "10.5.2.3"  # h0_0_0 on e0_0, h5_2_1 on e5_2 (k=6)


def _ann(rate_kbps=3000, sports=(40001,), nonce=9, size=10_000_000, src=SRC):
    return hs.encode(hs.Announce(nonce, size, rate_kbps,
                                 tuple(hs.Subflow(src, DST, 6, sp, 5201) for sp in sports)))


def _core(k=6):
    """The paper's Freeway: mice on the low-latency paths only (``mice_paths: all``, the default, is
    tested on the simulated switch in test_simswitch_programs)."""
    return FreewayState(fattree(k, 10), FreewayConfig(mice_paths="lol"))


def test_edge_program_has_mice_groups_punt_meter_and_service_drop():
    core = _core(4)
    groups, flows, extra = core.switch_program("e0_0")
    mice = [g for g in groups if g.group_id >= MICE_GROUPS.first]
    # one group per distinct set of next hops: every other ToR is reached through the LOL uplink to a0_0
    assert len(mice) == 1 and [b.actions[0].port for b in mice[0].buckets] == [3]
    from ryu_apps.modes.freeway_mice import mice_fields
    from ryu_apps.openflow.intents import ToGroup

    to_group = [f for f in flows if f.actions == (ToGroup(mice[0].group_id),)]
    covered = [j for f in to_group for j in core.mice_dsts("e0_0", f.cookie)]
    assert sorted(covered) == sorted(core._tor_index[t] for t in core.fabric.tors() if t != "e0_0")  # the 7 others
    # one entry for each other pod's prefix (its two ToRs share the group), one for e0_1 of its own pod
    assert sorted((f.priority, mice_fields(f.cookie)[0]) for f in to_group) == [
        (19, 1 << 31 | 1), (19, 1 << 31 | 2), (19, 1 << 31 | 3), (20, core._tor_index["e0_1"])]
    assert {dict(f.match)["ipv4_dst"] for f in to_group if f.priority == 19} == {
        (f"10.{p}.0.0", "255.255.0.0") for p in (1, 2, 3)}
    plain = FreewayState(core.fabric, FreewayConfig(mice_prefixes="tor")).switch_program("e0_0")[1]
    assert sorted(mice_fields(f.cookie)[0] for f in plain if f.actions == (ToGroup(mice[0].group_id),)) == sorted(
        covered)  # mice_prefixes=tor: one entry per destination ToR
    assert extra == [Meter(3, 200, 50, pktps=True), Meter(4, 200, 50, pktps=True)]  # one per host port
    punt = [f for f in flows if f.priority == PRIO_HANDSHAKE]
    assert [(dict(f.match)["in_port"], f.meter_id) for f in punt] == [(1, 3), (2, 4)]
    assert all(dict(f.match)["udp_dst"] == hs.SERVICE_PORT for f in punt)
    _, core_flows, core_extra = core.switch_program("c1")
    assert core_extra == [] and not any(f.priority == PRIO_HANDSHAKE for f in core_flows)


def test_announce_is_placed_on_a_hol_path_and_installed_egress_first():
    core = _core()
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann())
    assert out.verdict == "ack"
    ack = hs.decode(out.reply)
    assert isinstance(ack, hs.Ack) and ack.nonce == 9 and ack.rate_kbps == 3000
    (sub, rate, dpids) = ack.allocations[0]
    path = out.elephant.placements[0].path
    assert [core.fabric.switch_by_dpid(d).name for d in dpids] == list(path)
    assert path[1] == "a0_1"  # the first HOL uplink of e0_0 (a0_0 carries the fixed LOL paths)
    assert all(core.partition.is_hol(ln) for ln in zip(path, path[1:], strict=False))
    sws = [sw for sw, _ in out.ops]
    assert sws == ["e5_2", "a5_1", "c4", "a0_1", "e0_0", "e0_0"]  # egress side first, then its FIN's entry
    flows = [f for _, fs in out.ops for f in fs]
    fin = flows.pop()
    assert all(isinstance(f, Flow) and f.priority == PRIO_ELEPHANT for f in flows)
    assert flows[0].actions == (Output(2),)  # egress: h5_2_1 is on port 2 of e5_2
    assert [f.flags for f in flows] == [0, 0, 0, 0, SEND_FLOW_REM]
    # the FIN: above the ingress entry, the same packets plus tcp_flags FIN, sent on and copied to the
    # controller, under the elephant's cookie and with no timeout of its own (it sees nothing until the end)
    assert fin.priority == PRIO_ELEPHANT_FIN and fin.table_id == flows[-1].table_id
    assert dict(fin.match) == {**dict(flows[-1].match), "tcp_flags": (TCP_FIN, TCP_FIN)}
    assert fin.actions == flows[-1].actions + (ToController(FIN_PUNT_BYTES),)
    assert (fin.cookie, fin.idle_timeout, fin.flags) == (flows[-1].cookie, 0, 0)
    m = dict(flows[-1].match)
    assert (m["ipv4_src"], m["ipv4_dst"], m["tcp_src"], m["tcp_dst"], m["ip_proto"]) == (SRC, DST, 40001, 5201, 6)
    # the next elephant from the same edge goes to the other HOL uplink (Bin-Pack sees the allocation)
    out2 = core.handshake(1.1, "e0_0", 2, "10.0.0.3", _ann(nonce=10, src="10.0.0.3"))
    assert out2.elephant.placements[0].path[1] == "a0_2"


def test_subflows_split_over_paths_and_repeat_is_idempotent():
    core = _core()
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann(rate_kbps=8000, sports=(40001, 40002)))
    assert [p.path[1] for p in out.elephant.placements] == ["a0_1", "a0_2"]
    early = core.handshake(1.1, "e0_0", 1, SRC, _ann(rate_kbps=8000, sports=(40001, 40002)))
    assert early.reply is None and early.cause == "pending"  # not installed yet: the ACK is on its way
    core.confirmed(out.elephant.eid)
    again = core.handshake(1.2, "e0_0", 1, SRC, _ann(rate_kbps=8000, sports=(40001, 40002)))
    assert again.verdict == "ack (repeat)" and again.ops == [] and again.reply == out.reply


@pytest.mark.parametrize("payload,port,ip,verdict", [
    (b"\x00" * 10, 1, SRC, "dropped: malformed"),
    (_ann(), 2, SRC, "dropped: spoofed"),  # SRC lives on port 1
    (_ann(src="10.0.0.3"), 1, "10.0.0.3", "dropped: spoofed"),
    (_ann(rate_kbps=20000), 1, SRC, "nack: rate 20.00 Mbit/s is above the host's link rate"),
    (_ann(size=0), 1, SRC, "nack: size must be positive"),
])
def test_bad_handshakes_change_nothing(payload, port, ip, verdict):
    core = _core()
    out = core.handshake(1.0, "e0_0", port, ip, payload)
    assert out.verdict.startswith(verdict) and out.ops == [] and not core.elephants and not core.alloc.link
    if verdict.startswith("nack"):
        assert isinstance(hs.decode(out.reply), hs.Nack)
    else:
        assert out.reply is None


def test_no_room_is_a_nack_with_the_reason():
    core = _core()
    for i, port in enumerate((1, 2, 3)):
        core.handshake(1.0, "e0_0", port, f"10.0.0.{port + 1}",
                       _ann(rate_kbps=9000, nonce=i, src=f"10.0.0.{port + 1}", sports=(40001 + i,)))
    out = core.handshake(1.0, "e0_1", 1, "10.0.1.2", _ann(rate_kbps=9000, src="10.0.1.2"))
    assert out.verdict.startswith("nack: no high-throughput path has 9.00 Mbit/s free")


def test_a_refusal_says_whether_the_paths_hold_low_latency_links_or_are_not_measured_lately():
    """Issue 63's finding: while a restarted sFlow worker had not yet measured its links, announces were refused
    for paths that "hold low-latency links", which they did not. Links measured too long ago (``stale``) are
    still not placed on, and the NACK says so, naming them; nothing is installed (the paper's Freeway: no
    lending, which would take an idle low-latency path instead)."""
    core = FreewayState(fattree(6, 10), FreewayConfig(mice_paths="lol", lend="off"))
    pair = ("e0_0", "e5_2")
    hol = [p for p in core.partition.live_paths(pair) if all(core.partition.is_hol(ln) for ln in path_links(p))]
    assert len(hol) == 6
    core.stale = frozenset(ln for p in hol for ln in path_links(p[1:4]))  # each one's aggregation-core links
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann())
    assert out.verdict.startswith("nack: no freshly measured high-throughput path between these ToRs: each of its 6 "
                                  "crosses a link whose last measurement is too old"), out.verdict
    assert "a0_" in out.verdict and not core.elephants and not out.ops and out.cause == "no-room"
    core.stale = frozenset(ln for p in hol[1:] for ln in path_links(p[1:4]))  # one path measured again: on it
    out = core.handshake(1.5, "e0_0", 1, SRC, _ann(nonce=10))
    assert out.verdict == "ack" and len(core.elephants) == 1, out.verdict
    (el,) = core.elephants.values()
    assert [pl.path for pl in el.placements] == [hol[0]]


def test_flow_removed_releases_and_clears():
    core = _core()
    el = core.handshake(1.0, "e0_0", 1, SRC, _ann()).elephant
    assert eid_of(el.cookie) == el.eid
    ops = core.flow_removed("e0_0", el.cookie)
    assert set(ops) == set(el.placements[0].path) and all(v == [DeleteFlows(el.cookie)] for v in ops.values())
    assert not core.elephants and not core.alloc.link and core.flow_removed("e0_0", el.cookie) == {}


def _mice_on(core, links, util: float, now: float) -> None:
    """Mice measured at ``util`` on ``links`` (the links' load, and a flow that is no elephant sampled on
    each at that rate, as monitoring reports them)."""
    from monitoring.sflow import FiveTuple
    from monitoring.view import FlowReading

    cap = core.capacity_bps(links[0])
    core.measure(now, dict.fromkeys(links, util),
                 {FiveTuple(SRC, DST, 6, 50000 + i, 7100): FlowReading(util * cap, frozenset({ln}), False, now)
                  for i, ln in enumerate(links)})


def test_new_lol_links_push_elephants_to_other_hol_paths_make_before_break():
    core = _core()
    for sw in core.fabric.switches:  # the switches connected and hold their programs
        core.switch_program(sw)
    el = core.handshake(1.0, "e0_0", 1, SRC, _ann()).elephant
    old = el.placements[0].path
    assert old[1:3] == ("a0_1", "c4")
    _mice_on(core, [ln for p in core.partition.lol_paths(("e0_0", "e5_2")) for ln in zip(p, p[1:], strict=False)],
             0.5, 2.0)
    res, ops = core.period(2.0, active_pairs(core.fabric, [(SRC, DST)]))
    assert res.added == [("e0_0", "e5_2")] and ("a0_1", "c4") in res.became_lol
    assert ops == []  # issue 13 item 4: no mice group changes while the elephant is still on the link
    (moved, install, after), = core.take_moves()  # a confirmed transaction: install, barriers, then after
    new = el.placements[0].path
    assert moved is el and new[1] == "a0_2" and el.gen == 1
    assert all(isinstance(i, Flow) for _, intents in install for i in intents)  # new entries only ...
    assert [sw for sw, _ in install][-1] == "e0_0"  # ... ingress last
    assert after and all(i == DeleteFlows(cookie_of(el.eid, 0)) for _, intents in after for i in intents)
    assert core.period(3.0, active_pairs(core.fabric, [(SRC, DST)])) == (StepResult(), [])  # still moving
    # confirmed: now the mice groups of e0_0 include the new LOL uplink toward e5_2
    ops = core.move_finished()
    from ryu_apps.modes.freeway_mice import mice_fields
    from ryu_apps.openflow.intents import Group, ToGroup

    e00 = [i for sw, intents in ops if sw == "e0_0" for i in intents]
    two = [g for g in (i.group if isinstance(i, GroupModify) else i for i in e00)
           if isinstance(g, Group) and len(g.buckets) == 2]
    j = core._tor_index["e5_2"]
    assert len(two) == 1 and [f for f in e00 if isinstance(f, Flow) and f.actions == (ToGroup(two[0].group_id),)
                              and mice_fields(f.cookie)[0] == j]


def test_a_switch_gaining_or_losing_its_only_low_latency_hop_gets_a_group_or_loses_the_entries():
    """k=6: the fixed low-latency paths all cross a*_0, so a0_1 holds no mice group at first. When a
    dynamic path through a0_1 opens, it must get a group (added, not modified: the switch does not
    have it) and the entries pointing to it; when the path closes, the entries go, then the group
    (deleting a group first would delete the entries with it)."""
    from ryu_apps.modes.freeway_mice import MICE_COOKIE_MASK, mice_cookie, mice_fields
    from ryu_apps.openflow.intents import DeleteGroup, Group, ToGroup

    core = _core()
    for sw in core.fabric.switches:
        core.switch_program(sw)
    dst_index = core.fabric.tors().index("e5_2")
    assert not core.mice["a0_1"].groups and dst_index not in core.mice["a0_1"].gid_of
    _mice_on(core, [ln for p in core.partition.lol_paths(("e0_0", "e5_2")) for ln in zip(p, p[1:], strict=False)],
             0.5, 2.0)
    pairs = active_pairs(core.fabric, [(SRC, DST)])
    _, ops = core.period(2.0, pairs)
    a01 = [i for sw, intents in ops if sw == "a0_1" for i in intents]
    (add,) = [i for i in a01 if isinstance(i, Group)]
    gid = add.group_id
    entries = [i for i in a01 if isinstance(i, Flow) and i.actions == (ToGroup(gid),)]
    assert not any(isinstance(i, GroupModify) for i in a01)
    assert entries and all(f.cookie == mice_cookie(dst_index) and f.table_id == 0 for f in entries)
    assert a01.index(add) < a01.index(entries[0])  # the group exists before anything points to it
    # the source ToR's entries toward e5_2 are sent again with the pair's new count in their cookie
    e00 = [i for sw, intents in ops if sw == "e0_0" for i in intents if isinstance(i, Flow)
           and i.actions and isinstance(i.actions[0], ToGroup) and mice_fields(i.cookie)[0] == dst_index]
    n = core.partition.n_lol(("e0_0", "e5_2"))
    assert n == core.partition.n_min + 1 and e00 and all(mice_fields(f.cookie) == (dst_index, n) for f in e00)
    # nothing changed: nothing sent
    _, again = core.period(3.0, pairs)
    assert not [i for sw, intents in again if sw == "a0_1" for i in intents if isinstance(i, (Group, Flow))]
    # the mice load goes away: the dynamic path closes, a0_1's entries toward e5_2 go, then its group
    core.measure(4.0, {}, {})
    t, gone = 4.0, []
    while not gone and t < 200:
        _, ops = core.period(t, pairs)
        gone = [i for sw, intents in ops if sw == "a0_1" for i in intents if isinstance(i, (DeleteFlows, DeleteGroup))]
        t += 1.0
    assert gone == [DeleteFlows(mice_cookie(dst_index), MICE_COOKIE_MASK), DeleteGroup(gid)]
    assert dst_index not in core.mice["a0_1"].gid_of and gid not in core.mice["a0_1"].groups


def _steps(steps, between=lambda: None):
    """Run a stepped period to its end, ``between`` called at each pause: (pauses, its result)."""
    pauses = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return pauses, done.value
        pauses += 1
        between()


def test_the_period_in_steps_answers_a_handshake_between_them_and_ends_as_the_whole_period():
    """At k=48 the period held the controller's loop for up to 120 ms at a time (2026-12-02). In steps (the
    mice loads; the partition step with its moves; the mice groups) it ends with the whole period's result
    (a pair's new path, the mice groups it asks for), and lets a handshake in between, placed on the
    partition as it stands then: an elephant on the path the step then turns low-latency moves off it
    first, and the mice groups follow it."""
    whole, stepped, busy = _core(), _core(), _core()
    pairs = active_pairs(whole.fabric, [(SRC, DST)])
    for core in (whole, stepped, busy):
        for sw in core.fabric.switches:
            core.switch_program(sw)
        _mice_on(core, [ln for p in core.partition.lol_paths(("e0_0", "e5_2")) for ln in path_links(p)], 0.5, 2.0)
    res, ops = whole.period(2.0, pairs)
    assert res.added and ops
    assert _steps(stepped.period_steps(2.0, pairs)) == (2, (res, ops))
    answers = []
    pauses, done = _steps(busy.period_steps(2.0, pairs),
                          lambda: answers.append(busy.handshake(2.0, "e0_0", 1, SRC, _ann())) if not answers else None)
    (el,) = busy.elephants.values()
    assert answers[0].verdict == "ack" and (pauses, done) == (1, (res, []))
    (move,) = busy.take_moves()
    assert move[0] is el and not any(ln in res.became_lol for pl in el.placements for ln in path_links(pl.path))
    assert busy.move_finished() == ops
    assert busy.partition.n_lol(("e0_0", "e5_2")) == whole.partition.n_lol(("e0_0", "e5_2"))


def test_a_read_back_that_begins_the_recovery_between_the_periods_steps_stops_the_period_there():
    """A restarted controller's first read-back opens the recovery, during which the partition does not step
    and no mice group is sent (the switches' own are being read back). Arriving between the period's steps
    (a helper's review, 2026-12-02) it stopped nothing: the step went on and its groups were sent."""
    pair = ("e0_0", "e5_2")
    for pause in (1, 2):
        core = _core()
        for sw in core.fabric.switches:
            core.switch_program(sw)
        _mice_on(core, [ln for p in core.partition.lol_paths(pair) for ln in path_links(p)], 0.5, 2.0)
        before, seen = core.partition.n_lol(pair), []

        def read_back(core=core, pause=pause, seen=seen):
            seen.append(None)
            if len(seen) == pause:
                core.recover(2.0, "a0_1", [], [], [])

        pauses, (res, ops) = _steps(core.period_steps(2.0, active_pairs(core.fabric, [(SRC, DST)])), read_back)
        assert core.recovering(2.0) and ops == [], (pause, ops)
        assert pauses == pause and bool(res.added) == (pause == 2), (pause, res)
        assert core.partition.n_lol(pair) == before + (pause == 2)


def test_config_errors_name_the_key():
    with pytest.raises(FreewayConfigError, match="punt_pps"):
        FreewayConfig(punt_pps=0)
    with pytest.raises(FreewayConfigError, match="lol_low: must be below lol_high/2"):
        FreewayConfig(lol_low=0.2)
    with pytest.raises(FreewayConfigError, match="lend_below: must be below reclaim_above"):
        FreewayConfig(lend_below=0.1, reclaim_above=0.1)
    with pytest.raises(FreewayConfigError, match="lend: must be one of idle, off"):
        FreewayConfig(lend="always")


def test_mice_groups_follow_big_load_changes_not_jitter():
    """Weights track the link load, which jitters every second: a group is rewritten only when a
    bucket's weight moves by mice_weight_step (3) or its next hops change."""
    core = _core(4)
    for sw in core.fabric.switches:
        core.switch_program(sw)
    up = ("a0_0", "c1")  # an LOL uplink: a0_0's mice groups toward other pods have buckets c1 and c2

    def mods(load):
        core.link_util = {up: load}
        return [i for i in core.mice_updates().get("a0_0", []) if isinstance(i, GroupModify)]

    def weights(ms):
        return {tuple(b.weight for b in m.group.buckets) for m in ms}

    assert weights(mods(0.44)) == {(6, 10)}  # from 10 to 6: rewritten (six groups toward pods 1-3)
    assert mods(0.46) == [] and mods(0.40) == [] and mods(0.55) == []  # 5, 6, 4 against the held 6: jitter
    assert weights(mods(0.75)) == {(2, 10)}  # 2 against 6: rewritten
    assert mods(0.72) == []  # 3 against 2
    with pytest.raises(FreewayConfigError, match="mice_weight_step"):
        FreewayConfig(mice_weight_step=0)


def test_one_host_cannot_hold_more_than_its_caps():
    """Issue 13 item 12: a host's concurrent announced elephants and their total allocation are capped;
    the NACK names the cap."""
    core = FreewayState(fattree(6, 10), FreewayConfig(host_elephants=3))
    for i in range(3):
        assert core.handshake(1.0, "e0_0", 1, SRC, _ann(1000, (40001 + i,), nonce=i)).verdict == "ack"
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann(1000, (40010,), nonce=10))
    assert out.verdict.startswith("nack: host cap") and "host_elephants=3" in out.verdict
    assert len(core.elephants) == 3
    core = _core()  # the total: 10 Mbit/s link, host_share 1.0
    assert core.handshake(1.0, "e0_0", 1, SRC, _ann(6000, (40001,), nonce=1)).verdict == "ack"
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann(5000, (40002,), nonce=2))
    assert "host_share" in out.verdict and "4.00 Mbit/s left" in out.verdict
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann(0, (40003,), nonce=3))  # rate-less: what is left
    assert out.verdict == "ack" and out.elephant.rate_bps == pytest.approx(4e6)
    other = "10.0.0.3"  # the neighbour under the same ToR is not affected by this host's cap
    assert core.handshake(1.0, "e0_0", 2, other, _ann(1000, (40004,), nonce=4, src=other)).verdict == "ack"


def test_the_per_host_and_rate_less_index_follows_every_change_of_the_table():
    """An announce looks only at its own host's elephants and the rate-less ones (issue 16, the
    handshake at 500/s): the index must agree with a scan of the whole table after every change."""
    from ryu_apps.modes.freeway_elephant import Elephants

    core = _core()
    other = "10.0.0.3"

    def agrees():
        for h in {el.src.name for el in core.elephants.values()} | {"h0_0_0", "h0_0_1"}:
            assert {el.eid for el in core.elephants.of_host(h)} == {
                el.eid for el in core.elephants.values() if el.src.name == h}
            mine = [el for el in core.elephants.values() if el.src.name == h and not el.adopted]
            n, used = core.elephants.host_use(h)
            assert n == len(mine) and used == pytest.approx(sum(
                core._min_rate(el) * len(el.subflows) if el.rateless else el.rate_bps for el in mine))
        assert {el.eid for el in core.elephants.rateless()} == {
            el.eid for el in core.elephants.values() if el.rateless}

    assert isinstance(core.elephants, Elephants)
    assert core.handshake(1.0, "e0_0", 1, SRC, _ann(1000, (40001,), nonce=1)).verdict == "ack"
    assert core.handshake(1.0, "e0_0", 1, SRC, _ann(0, (40002,), nonce=2)).verdict == "ack"
    assert core.handshake(1.0, "e0_0", 2, other, _ann(0, (40003,), nonce=3, src=other)).verdict == "ack"
    agrees()
    assert len(list(core.elephants.rateless())) == 2 and len(list(core.elephants.of_host("h0_0_0"))) == 2
    # an announce sharing a subflow replaces the placed one (released, then a new one placed)
    assert core.handshake(1.0, "e0_0", 1, SRC, _ann(2000, (40002, 40009), nonce=4)).verdict == "ack"
    agrees()
    assert len(list(core.elephants.rateless())) == 1
    flow = type("F", (), {"src": SRC, "dst": DST, "proto": 6, "sport": 40077, "dport": 5201})()
    assert core.adopt(2.0, flow, 2e6) and core.elephants.host_use("h0_0_0")[0] == 2  # adopted: not counted
    agrees()
    for eid in list(core.elephants):
        core.release(eid)
        agrees()
    assert list(core.elephants.of_host("h0_0_0")) == [] and list(core.elephants.rateless()) == []
    with pytest.raises(TypeError):
        core.elephants.update({})


def _metered_kbps(core) -> int:
    """What the meters of every placed elephant let through, in all (kbit/s)."""
    return sum(core.meter_of(el).rate for el in core.elephants.values())


def _rate_less_announcer(host_share: float, lend: str = "off"):
    """A k=4 core with isolation and ``host_share``, and a function announcing elephant ``i`` from
    ``ip`` (a host under e0_0; ``rate_kbps`` 0: rate-less) to 10.3.1.3. Lending off by default (the
    paper's behaviour: every high-throughput path from e0_0 crosses its one HOL uplink)."""
    from ryu_apps.programs.isolation import IsolationConfig

    core = FreewayState(fattree(4, 10), FreewayConfig(host_share=host_share, lend=lend), iso=IsolationConfig(meters="all"))
    ports = {"10.0.0.2": 1, "10.0.0.3": 2}

    def announce(i, ip, rate_kbps=0):
        ann = hs.encode(hs.Announce(i, 10_000_000, rate_kbps, (hs.Subflow(ip, "10.3.1.3", 6, 41000 + i, 5201),)))
        return core.handshake(1.0, "e0_0", ports[ip], ip, ann)

    return core, announce


def test_rate_less_elephants_share_max_min_fairly_and_explicit_rates_take_from_them():
    """Issue 13 item 2: rate-less announces from one ToR all get an ACK and a fair share (on k=4 every
    high-throughput path from a ToR crosses one uplink); the earlier ones shrink, their meters follow;
    an explicit rate takes from them down to their floor, and only beyond that is refused. Their meters
    (share x ``meter_headroom``) fill the uplink they share and no more: above it, the TCP flow losing the
    contention got only what the others' meters left."""
    from ryu_apps.algorithms.binpack import links
    from ryu_apps.openflow.intents import MeterModify

    core, announce_from = _rate_less_announcer(1.0)
    iso = core.iso

    def share(room_bps):  # a share in whole kbit/s, of the room its meter may fill
        return room_bps / iso.meter_headroom // 1000 * 1000

    def announce(i, rate_kbps=0):  # from the two hosts under e0_0 in turn
        return announce_from(i, ("10.0.0.2", "10.0.0.3")[i % 2], rate_kbps)

    first = announce(0)
    assert first.verdict == "ack" and first.elephant.rate_bps == share(10e6)
    assert 0.99 * 10_000 <= _metered_kbps(core) <= 10_000
    second = announce(1)
    assert second.verdict == "ack" and second.elephant.rate_bps == share(5e6)
    assert first.elephant.rate_bps == share(5e6)
    assert [type(i) for _, ops in second.replaced for i in ops] == [MeterModify]  # the first one's meter
    outs = [announce(i) for i in (2, 3)]
    assert all(o.verdict == "ack" for o in outs)
    assert all(el.rate_bps == share(2.5e6) for el in core.elephants.values())
    assert 0.99 * 10_000 <= _metered_kbps(core) <= 10_000
    uplink = next(iter(links(first.elephant.placements[0].path)))
    # the uplink measured carrying all their meters let through: that does not stop them shrinking
    core.link_util[uplink] = _metered_kbps(core) / 10_000
    explicit = announce(4, 6000)  # 6 Mbit/s: the four rate-less ones go down to 1 each
    assert explicit.verdict == "ack" and explicit.elephant.rate_bps == 6e6
    assert sorted(round(el.rate_bps) for el in core.elephants.values()) == [1_000_000] * 4 + [6_000_000]
    assert announce(5, 1000).verdict.startswith("nack")  # they are at their floor: full
    core.flow_removed("e0_0", explicit.elephant.cookie)  # it ends: the rate-less ones grow back
    ops = core.reshare()
    assert all(el.rate_bps == share(2.5e6) for el in core.elephants.values()) and len(ops) == 4
    assert 0.99 * 10_000 <= _metered_kbps(core) <= 10_000


def test_rate_less_meters_leave_an_explicit_ones_meter_room_on_the_link():
    """Beside an explicit 2 Mbit/s elephant, three rate-less ones share what its meter (2.1 Mbit/s) leaves
    of the uplink."""
    core, announce = _rate_less_announcer(1.0)
    assert announce(0, "10.0.0.2", 2000).verdict == "ack"
    assert all(announce(i, ("10.0.0.2", "10.0.0.3")[i % 2]).verdict == "ack" for i in (1, 2, 3))
    assert 0.99 * 10_000 <= _metered_kbps(core) <= 10_000


def test_rate_less_meters_fill_their_hosts_budget_and_no_more():
    """With host_share 0.5, two rate-less elephants from one host share what its budget's meters may carry."""
    core, announce = _rate_less_announcer(0.5)
    assert all(announce(i, "10.0.0.2").verdict == "ack" for i in (0, 1))
    assert 0.99 * 5_000 <= _metered_kbps(core) <= 5_000


@pytest.mark.parametrize("meter_headroom", [1.0, 1.05, 1.1])
def test_an_elephant_rate_in_whole_kbit_s_is_read_back_from_its_meter(meter_headroom):
    """A restarted controller reads an elephant's allocation back from its meter: every whole kbit/s rate
    comes back exactly (with headroom 1 the middle of a meter's range is a half kbit/s, which rounding to
    even took up for odd rates)."""
    from ryu_apps.programs.isolation import IsolationConfig, elephant_meter

    iso = IsolationConfig(meter_headroom=meter_headroom, meters="all")
    core = FreewayState(fattree(4, 10), iso=iso)
    for kbit in range(1, 20_000, 7):
        assert core._rate_of_meter(elephant_meter(1, kbit * 1000, iso).rate) == kbit * 1000, kbit


class _Switches:
    """What the switches hold, built only from the ops they were sent, in their order, through the message
    builder into message-level simulated switches (``simswitch``): a group is added once, modified only if
    it exists, an entry may point only at a group that exists, and deleting a group deletes the entries
    pointing at it (a switch that would answer with an error raises)."""

    def __init__(self, fabric):
        self.fabric = fabric
        self.switches = {sw: SimSwitch(sw, fabric.switches[sw].dpid) for sw in fabric.switches}

    def apply(self, updates) -> None:
        for sw, ops in (updates.items() if isinstance(updates, dict) else updates):
            self.switches[sw].apply(ops)

    def reconnect(self, sw: str) -> None:
        """The switch comes back empty."""
        self.switches[sw] = SimSwitch(sw, self.fabric.switches[sw].dpid)

    @property
    def groups(self) -> dict:
        """(switch, group id) -> buckets of every mice group held."""
        return {(sw, gid): g.buckets for sw, s in self.switches.items() for gid, g in s.groups.items()
                if MICE_GROUPS.first <= gid <= MICE_GROUPS.last}

    def entries_of(self, core) -> dict:
        """(switch, destination index) -> (group id, cookie) of the mice entries its mice follow (all point at
        one group): its own, else its pod's (the cookie as its own would be). A ToR has its own entries
        only where they differ from its pod's."""
        from ryu_apps.modes.freeway_mice import PRIO_MICE, PRIO_MICE_POD, mice_fields
        from ryu_apps.openflow.intents import ToGroup

        own: dict = {}
        pod: dict = {}
        for sw, s in self.switches.items():
            for f in s.flows():
                if f.priority in (PRIO_MICE, PRIO_MICE_POD) and f.actions and isinstance(f.actions[0], ToGroup):
                    into = own if f.priority == PRIO_MICE else pod
                    for j in core.mice_dsts(sw, f.cookie):
                        cookie = f.cookie & ~0xFFFFFFFF | j
                        into.setdefault((sw, j), set()).add((f.actions[0].group_id, cookie))
                        if f.priority == PRIO_MICE_POD:
                            assert mice_fields(f.cookie)[0] != j
        for found in (own, pod):
            assert all(len(v) == 1 for v in found.values()), {k: v for k, v in found.items() if len(v) > 1}
        same = [k for k in set(own) & set(pod) if own[k] == pod[k]]  # an own entry only where it differs
        assert not same, ("own entries the pod's covers", sorted(same)[:5])
        return {k: next(iter(v)) for k, v in (pod | own).items()}


def _check_switches(core, held: _Switches, where) -> None:
    """Every switch holds, from the ops it was sent, what computing every group afresh gives; one group
    per distinct set of next hops, none that no entry points at."""
    step = core.cfg.mice_weight_step
    groups, entries = held.groups, held.entries_of(core)
    for sw in core.fabric.switches:
        fresh = core.fresh_mice(sw)  # computed from scratch (Reachability), every ToR
        for dst in core.fabric.tors():
            j = core._tor_index[dst]
            want = fresh.get(dst)
            if want is None:
                assert (sw, j) not in entries, (where, sw, dst)
                continue
            assert (sw, j) in entries, (where, sw, dst)
            gid, cookie = entries[(sw, j)]
            got = groups.get((sw, gid))
            assert got is not None and [b.actions for b in got] == [b.actions for b in want], (where, sw, dst)
            # weights: within the step of where the switch last followed the link, itself within the step of now
            assert all(abs(a.weight - b.weight) <= 2 * (step - 1) for a, b in zip(got, want, strict=True)), \
                (where, sw, dst)
            assert cookie == core._mice_cookie(sw, dst), (where, sw, dst)
        gids = {g for s, g in groups if s == sw}
        assert gids == {g for (s, _), (g, _) in entries.items() if s == sw}, (where, sw, "a group nothing uses")
        sets = [tuple(b.actions for b in bs) for (s, _), bs in groups.items() if s == sw]
        assert len(sets) == len(set(sets)), (where, sw, "two groups with the same next hops")


@pytest.mark.parametrize("k,seed", [(4, 1), (6, 2), (6, 3), (8, 4), (0, 5)])
def test_mice_updates_looked_at_incrementally_leave_every_switch_as_a_fresh_computation_would(k, seed):
    """Random periods (loads moving paths in and out, links dying and coming back, up-link weights
    moving, switches reprogrammed; k=0: a leaf-spine): after each, what the switches hold, built from
    the ops they were sent alone, equals what computing every group afresh gives."""
    import random

    from topology.fabric import leafspine

    rng = random.Random(seed)
    core = FreewayState(fattree(k, 10) if k else leafspine(4, 6, 2))
    fab = core.fabric
    held = _Switches(fab)
    held.apply(core.mice_updates())
    tors = fab.tors()
    switch_links = [(ln.a, ln.b) for ln in fab.links if ln.a in fab.switches and ln.b in fab.switches]
    pairs = [(s, d) for s in tors for d in tors if core.partition.is_partitioned((s, d))]
    dead: set = set()
    for period in range(40):
        hot = rng.uniform(0, 1)  # some periods push pairs over the top, others let them idle
        core.link_util = {(a, b): min(1.0, rng.uniform(0, 2 * hot)) for a, b in switch_links
                          for a, b in ((a, b), (b, a)) if rng.random() < 0.5}
        if rng.random() < 0.2:  # a link dies or comes back
            a, b = rng.choice(switch_links)
            dead ^= {(a, b), (b, a)}
            core.partition.set_dead(float(period), dead)
        if rng.random() < 0.3:  # several steps before the switches hear of it
            core.partition.step(float(period) - 0.5, rng.sample(pairs, len(pairs) // 4),
                                lambda ln: core.link_util.get(ln, 0.0))
        if rng.random() < 0.15:  # a switch reconnects and is reprogrammed with what the core holds now
            sw = rng.choice(sorted(fab.switches))
            held.reconnect(sw)
            held.apply([(sw, core.dynamic_program(sw))])
        core.partition.step(float(period), rng.sample(pairs, len(pairs) // 3), lambda ln: core.link_util.get(ln, 0.0))
        held.apply(core.mice_updates())
        _check_switches(core, held, period)


def test_a_switch_reprogrammed_under_load_has_its_groups_followed_when_the_load_goes():
    """dynamic_program writes a switch's groups outside the periodic updates (a reconnect): the next
    update looks at all of that switch's groups, so weights written under a load that then went are
    brought back."""
    core = _core(4)
    held = _Switches(core.fabric)
    held.apply(core.mice_updates())
    core.link_util = {("e0_0", "a0_0"): 0.6}
    held.reconnect("e0_0")  # it reconnects empty
    held.apply([("e0_0", core.dynamic_program("e0_0"))])
    assert {b.weight for g, bs in held.groups.items() if g[0] == "e0_0" for b in bs} == {4}
    core.link_util = {}
    held.apply(core.mice_updates())
    assert {b.weight for g, bs in held.groups.items() if g[0] == "e0_0" for b in bs} == {10}
    _check_switches(core, held, "after")


def test_a_split_elephant_keeps_its_subflow_rates_across_a_take_over():
    core = FreewayState(fattree(6, 10), FreewayConfig(mice_paths="lol", place_load="measured"))
    load = {("e0_0", "a0_1"): 6e6}
    core.link_util = {ln: v / 10e6 for ln, v in load.items()}
    out = core.handshake(0.0, "e0_0", 1, SRC, _ann(rate_kbps=8000, sports=(40001, 40002)))
    assert out.verdict == "ack"
    rates = sorted(pl.rate_bps for pl in out.elephant.placements)
    assert rates == pytest.approx([1e6, 7e6])  # both uplinks at 70%
    rec = core.record(out.elephant)
    assert sorted(rec["subflow_rates_bps"]) == pytest.approx(rates)


def test_the_period_s_inline_weight_is_the_mice_bucket_weight():
    """The period reads every up link's weight in arrays (55,296 links at k=48, ``_weights_moved``): it must follow
    the same links as ``_weight`` would, at rounding edges, under 0, at 0.9 and beyond 1."""
    import random

    rng = random.Random(3)
    core = FreewayState(fattree(4, 10))
    edges = [x / 20 for x in range(-2, 24)] + [0.9, 0.85, 0.95, 1.5, -0.3]
    for _ in range(40):
        core.link_util = {ln: rng.choice(edges + [rng.uniform(-0.1, 1.2)]) for ln in core._up_links}
        ref = dict(core._wref)
        want = {ln for ln in core._up_links
                if abs(core._weight(ln) - ref.get(ln, 10)) >= core.cfg.mice_weight_step}
        core._weight_moves()
        got = {ln for ln in core._up_links if core._wref.get(ln, 10) != ref.get(ln, 10)}
        assert got <= want and all(core._wref.get(ln, 10) == core._weight(ln) for ln in want)


@pytest.mark.parametrize("lend", ["off", "idle"])
def test_a_move_with_nowhere_to_go_changes_nothing_and_one_may_overbook_a_low_latency_path(lend):
    """``reroute_plan`` asks only whether one open path is left (the first found: at k=48 every path of
    the pair checked link by link was half a move's cost): with none, it answers None and the elephant
    keeps its placement and allocation; allowed to overbook, it takes a live low-latency path."""
    from topology.paths import path_links

    core = FreewayState(fattree(6, 10), FreewayConfig(lend=lend))
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann())
    el, pair = out.elephant, ("e0_0", "e5_2")
    placements, alloc = el.placements, dict(core.alloc.link)
    lol = core.partition.live_paths(pair)[0]  # (a partitioned pair's low-latency paths come first)
    assert not all(core.partition.is_hol(ln) for ln in path_links(lol))
    for ln in path_links(lol):  # just taken back from elephants: not lent meanwhile (with lending)
        core.reclaimed[ln] = core.now
    assert lol not in core.elephant_paths(pair)
    # every link of every open path but those the low-latency path takes: no open path is left whole
    avoid = {ln for p in core.elephant_paths(pair) for ln in path_links(p)} - set(path_links(lol))
    assert core.reroute_plan(el, avoid) is None
    assert el.placements is placements and dict(core.alloc.link) == alloc
    assert core.counters["elephant-rerouted"] == 0
    install, after = core.reroute_plan(el, avoid, overbook_lol=True)
    assert [pl.path for pl in el.placements] == [lol] and core.counters["reroute-overbooked"] == 1
    assert {sw for sw, _ in install} == set(lol) and {sw for sw, _ in after} == set(placements[0].path)
    # one link of its path to avoid: a move onto another open path
    moved = el.placements
    plan = core.reroute_plan(el, {path_links(lol)[1]})
    assert plan is not None and el.placements is not moved
    assert path_links(lol)[1] not in set(path_links(el.placements[0].path))


@pytest.mark.parametrize("seed", range(6))
def test_a_move_overbooked_takes_the_hol_path_bin_pack_takes_over_every_hol_path(seed):
    """No path has room: the move is overbooked onto the high-throughput path whose busiest link is least
    busy, as Bin-Pack over every one of them (without headroom) would choose, found without building
    them all."""
    import random

    from ryu_apps.algorithms.binpack import bin_pack

    rng = random.Random(seed)
    core = FreewayState(fattree(6, 10), FreewayConfig(lend="off"))
    el = core.handshake(1.0, "e0_0", 1, SRC, _ann()).elephant
    pair = ("e0_0", "e5_2")
    core.link_util = {(a, b): rng.choice([0.97, 1.0, 1.05, 1.1, 1.2]) for ln in core.fabric.links
                      for a, b in ((ln.a, ln.b), (ln.b, ln.a))}
    core.alloc.release(el.eid)
    want = bin_pack(core.hol_paths(pair), el.rate_bps, core.load_bps, core.capacity_bps, float("inf")).path
    core.alloc.add(el.eid, el.placements)
    assert core.reroute_plan(el, set()) is not None and core.counters["reroute-overbooked"] == 1
    assert [pl.path for pl in el.placements] == [want]


def test_a_move_counts_the_elephant_where_it_stood_in_this_measurements_mice_loads():
    """The mice loads are worked out once per measurement; a move must not be what decides whether they
    count the elephant on its old links or its new ones (here no path check reads them before the move:
    the low-latency uplink was just taken back, and the first HOL path has room)."""
    from monitoring.sflow import FiveTuple
    from monitoring.view import FlowReading
    from topology.paths import path_links

    core = FreewayState(fattree(6, 10), FreewayConfig(lend="idle"))
    el = core.handshake(1.0, "e0_0", 1, SRC, _ann()).elephant  # 3 Mbit/s on 10 Mbit/s links
    old = path_links(el.placements[0].path)
    up = old[0]  # its ToR's uplink, which it leaves
    mouse = FiveTuple("10.0.0.3", DST, 6, 40009, 80)
    core.measure(2.0, {(a, b): 0.5 for ln in core.fabric.links for a, b in ((ln.a, ln.b), (ln.b, ln.a))},
                 {mouse: FlowReading(4e6, frozenset([up]), False, 2.0)})
    core.reclaimed[("e0_0", "a0_0")] = 2.0  # (the LOL uplink: no LOL path is looked at past it)
    assert core._mice_of is None or core._mice_of[0][0] is not core.link_util  # not worked out yet
    assert core.reroute_plan(el, {up}) is not None and up not in set(path_links(el.placements[0].path))
    # the measured 50% less the elephant's 30% where it stood: 20% (not 40%, the mouse's rate, as if
    # the elephant had never been on it)
    assert core.mice_seen[up] == pytest.approx(0.2)


def _announcer(iso=None, **cfg):
    """A k=4 core (lending off: every high-throughput path from e0_0 crosses its one HOL uplink) and a
    function announcing elephant ``i`` from a host under e0_0 to 10.3.1.3."""
    from ryu_apps.programs.isolation import IsolationConfig

    core = FreewayState(fattree(4, 10), FreewayConfig(lend="off", **cfg), iso=iso or IsolationConfig())
    ports = {"10.0.0.2": 1, "10.0.0.3": 2}

    def announce(i, ip="10.0.0.2", rate_kbps=0):
        ann = hs.encode(hs.Announce(i, 10_000_000, rate_kbps, (hs.Subflow(ip, "10.3.1.3", 6, 41000 + i, 5201),)))
        return core.handshake(1.0, "e0_0", ports[ip], ip, ann)

    return core, announce


@pytest.mark.parametrize("meters", ["all", "explicit", "off"])
def test_meters_hold_the_elephants_the_setting_names(meters):
    """Issue 58: a meter at a rate-less elephant's share dropped what the fabric could carry (53,754 packets
    a SWIM run); by default only an elephant announced with a rate is metered (it asked for that rate)."""
    from ryu_apps.openflow.intents import Meter
    from ryu_apps.programs.isolation import IsolationConfig

    core, announce = _announcer(IsolationConfig(meters=meters))

    def metered(out):
        return [i for _, ops in out.ops for i in ops if isinstance(i, Meter)]

    rateless, explicit = announce(1), announce(2, "10.0.0.3", rate_kbps=2000)
    assert rateless.verdict == explicit.verdict == "ack"
    assert len(metered(rateless)) == (meters == "all")
    assert len(metered(explicit)) == (meters != "off")
    assert (core.meter_of(rateless.elephant) is None) == (meters != "all")


@pytest.mark.parametrize("when_full", ["overbook", "nack"])
def test_a_rate_less_announce_past_its_hosts_budget_is_placed_with_what_is_left(when_full):
    """Issue 58: past its host's budget (``host_share``) a rate-less announce was refused, and the host sent
    the elephant anyway, with the mice. Overbooked, it is placed with the floor the budget has left (down to
    nothing) and shares by TCP in the elephant band; an explicit rate past the budget is still refused."""
    core, announce = _announcer(host_share=0.25, when_full=when_full)  # 2.5 Mbit/s: two floors and a half
    outs = [announce(i) for i in range(4)]
    assert [o.verdict for o in outs[:2]] == ["ack", "ack"]
    if when_full == "nack":
        assert outs[2].verdict.startswith("nack: host cap") and outs[3].verdict.startswith("nack: host cap")
        return
    assert [o.verdict for o in outs] == ["ack"] * 4
    assert [core._min_rate(o.elephant) for o in outs] == [1e6, 1e6, 0.5e6, 0.0]
    assert core.counters["handshake-floor-shrunk"] == 2
    assert announce(9, rate_kbps=100).verdict.startswith("nack: host cap")


@pytest.mark.parametrize("when_full", ["overbook", "nack"])
def test_a_rate_less_announce_with_no_room_left_takes_the_best_high_throughput_path(when_full):
    """Every high-throughput path full (e0_0's HOL uplink measured at its rate): a rate-less announce
    goes on the best one all the same (as an adopted elephant does), not to the mice with a NACK."""
    core, announce = _announcer(when_full=when_full, place_load="measured")  # (full by the measurement)
    hol_up = ("e0_0", "a0_1")
    core.measure(1.0, {hol_up: 1.0})
    out = announce(1)
    if when_full == "nack":
        assert out.verdict.startswith("nack: no high-throughput path"), out.verdict
        return
    assert out.verdict == "ack" and core.counters["handshake-overbooked"] == 1
    assert out.elephant.placements[0].path[:2] == ("e0_0", "a0_1")


def test_an_announced_reservation_decays_to_what_it_sends_and_grows_back_to_what_it_asked():
    """Issue 60 item 5: a host could announce its link's full rate, send almost nothing and hold the
    reservation (its entries kept alive), pushing the rate-less elephants around it to their floors. After
    ``decay_after_s`` of sending under half of it (unsampled counts as nothing) it is held to what it sends
    plus a quarter, never under the threshold; sending at its reservation again, it grows back to what it
    asked, as the room on its path allows."""
    from ryu_apps.algorithms.binpack import links

    core, announce = _announcer(decay_after_s=2.0)
    out = announce(1, rate_kbps=8000)
    el = out.elephant
    assert out.verdict == "ack" and el.rate_bps == 8e6 and el.asked_bps == 8e6
    link = next(iter(links(el.placements[0].path)))
    silent = lambda sub: None  # noqa: E731  (not sampled: sending nothing)
    assert core.follow_demand(2.5, silent) == [] and el.rate_bps == 8e6  # low since 2.5 s: not yet
    core.follow_demand(4.6, silent)
    assert el.rate_bps == 1e6 and core.alloc.link[link] == pytest.approx(1e6)  # the 10% floor
    core.follow_demand(5.0, lambda sub: 0.9e6)  # sending at its reservation: it grows by the room there is
    assert el.rate_bps == 8e6 and core.counters["reservation-regrown"] == 1
    core2, announce2 = _announcer(decay_after_s=0.0)
    el2 = announce2(1, rate_kbps=8000).elephant
    core2.follow_demand(60.0, silent)
    assert el2.rate_bps == 8e6  # 0: never


def test_a_host_changing_its_elephants_faster_than_its_rate_is_refused():
    """Issue 60 item 5: announces that replace each other each reinstall a path, a meter and a barrier (and
    write to etcd in a cluster); a host may make ``host_changes_per_s`` a second, as many at once."""
    core, announce = _announcer(host_changes_per_s=5.0)
    verdicts = [announce(i, rate_kbps=100).verdict for i in range(7)]  # all at t=1.0
    assert verdicts[:5] == ["ack"] * 5 and all(v.startswith("nack: host rate") for v in verdicts[5:])
    assert core.counters["handshake-host-rate"] == 2


def test_a_refusal_gives_the_reason_of_a_walk_of_every_path_and_judges_each_link_once():
    """Issue 63: at k=48 a refusal for stale links took 5.3 ms (each of the pair's 552 paths walked three times,
    once more for lending), 25 times a placement; while a worker's links are stale, every announce is one. The
    reason is now found in one walk that asks about each link once, and must be the one a plain reading of
    every path gives (random low-latency, stale and dead links, k=6)."""
    import random

    from ryu_apps.algorithms.binpack import NoRoom

    core = FreewayState(fattree(6, 10), FreewayConfig(mice_paths="lol", lend="off"))
    pair = ("e0_0", "e5_2")
    every = sorted({ln for p in core.partition.paths(pair) for ln in path_links(p)})
    seen = set()
    for seed in range(60):
        rnd = random.Random(seed)
        closed = set(rnd.sample(every, rnd.randrange(0, 12)))
        core.stale = frozenset(rnd.sample(every, rnd.randrange(0, 10)))
        asked = []

        def open_(ln, closed=closed, asked=asked):
            asked.append(ln)
            return ln not in closed

        got = str(core._no_path(pair, open_, frozenset()))
        live = core.partition.live_paths(pair)
        open_paths = [p for p in live if all(ln not in closed for ln in path_links(p))]
        if not open_paths:
            want = "no high-throughput path between these ToRs (all paths hold low-latency links)"
        elif all(any(ln in core.stale for ln in path_links(p)) for p in open_paths):
            old = sorted({ln for p in open_paths for ln in path_links(p) if ln in core.stale})
            want = (f"no freshly measured high-throughput path between these ToRs: each of its {len(open_paths)} "
                    "crosses a link whose last measurement is too old to place on ("
                    f"{', '.join('%s>%s' % ln for ln in old[:4])}{' ...' if len(old) > 4 else ''})")
        else:
            want = (f"no usable high-throughput path between these ToRs: its {len(open_paths)} cross links "
                    "being moved off or not measured lately")
        assert got == want, (seed, got, want)
        assert len(asked) == len(set(asked)), seed  # each link asked about once
        seen.add(want.split(":")[0].split(" (")[0])
    assert len(seen) == 3  # the three reasons all came up
    # the lending attempt, whose reason is never shown, works none out
    with pytest.raises(NoRoom) as e:
        core._place_on(pair, 1e6, 1, core.load_bps, 0.0, lambda ln: False, frozenset(), explain=False)
    assert str(e.value) == ""


def test_a_fin_releases_only_its_own_confirmed_elephant_from_its_hosts_port():
    """A FIN copied from the elephant's ingress ToR releases it once every subflow sent one; one from
    another port (a host forging its neighbour's FIN), of an unknown flow, or before the install is
    confirmed changes nothing and is counted."""
    core = _core()
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann(rate_kbps=8000, sports=(40001, 40002)))
    el = out.elephant
    assert core.fin("e0_0", 1, SRC, DST, 40001, 5201) == (None, {})  # not confirmed yet
    assert core.counters["fin-before-confirmed"] == 1
    core.confirmed(el.eid)
    assert core.fin("e0_0", 2, SRC, DST, 40001, 5201) == (None, {})  # another host's port
    assert core.fin("e0_1", 1, SRC, DST, 40001, 5201) == (None, {})  # another ToR
    assert core.counters["fin-not-from-its-host"] == 2
    assert core.fin("e0_0", 1, SRC, DST, 40009, 5201) == (None, {})
    assert core.counters["fin-unknown"] == 1
    assert core.fin("e0_0", 1, SRC, DST, 40001, 5201) == (None, {})  # one subflow of two finished
    assert core.elephants.get(el.eid) is el
    gone, ops = core.fin("e0_0", 1, SRC, DST, 40002, 5201)
    assert gone is el and core.elephants.get(el.eid) is None and el.eid not in core.alloc.by_flow
    # its entries stay until they idle out (its last packets and retransmissions keep its path); then
    # their removal clears the rest of them, with nothing left to release
    assert ops == {} and core.finished(el.cookie)
    cleared = core.flow_removed("e0_0", el.cookie)
    assert set(cleared) == {sw for pl in el.placements for sw in pl.path}
    assert all(cleared[sw] == [DeleteFlows(el.cookie)] for sw in cleared)
    assert not core.finished(el.cookie) and core.flow_removed("e0_0", el.cookie) == {}
    assert core.counters["elephant-finished"] == 1 and core.counters["elephant-expired"] == 0


def test_fin_of_reads_only_a_tcp_fin():
    from ryu_apps.programs.pins import fin_of
    from ryu_apps.simswitch.fabric import frame

    pkt = {"ipv4_src": SRC, "ipv4_dst": DST, "ip_proto": 6, "tcp_src": 40001, "tcp_dst": 5201}
    fin = frame({**pkt, "tcp_flags": 0x011}, "02:00:00:00:00:01", "02:00:00:00:00:02")
    assert fin_of(fin) == (SRC, DST, 40001, 5201)
    assert fin_of(fin[:54]) == (SRC, DST, 40001, 5201)  # truncated after the TCP header: enough
    assert fin_of(fin[:47]) is None  # the flags cut off
    assert fin_of(frame({**pkt, "tcp_flags": 0x010}, "02:00:00:00:00:01", "02:00:00:00:00:02")) is None
    udp = frame({"ipv4_src": SRC, "ipv4_dst": DST, "ip_proto": 17, "udp_src": 1, "udp_dst": 2},
                "02:00:00:00:00:01", "02:00:00:00:00:02")
    assert fin_of(udp) is None
    later = bytearray(fin)
    later[20:22] = (0x2000 | 100).to_bytes(2, "big")  # a fragment past the first: no TCP header
    assert fin_of(bytes(later)) is None
    for junk in (b"", b"\x00" * 13, fin[:14] + b"\x45", b"\xff" * 80):
        assert fin_of(junk) is None


def _finished_and_mice(cfg):
    """k=6, e0_0's two high-throughput uplinks after the last period: a0_1's carried 9 Mbit/s of an elephant now
    gone (no allocation, flagged when it was sampled), a0_2's 3 Mbit/s of mice."""
    from monitoring.sflow import FiveTuple
    from monitoring.view import FlowReading

    core = FreewayState(fattree(6, 10), cfg)
    up1, up2 = ("e0_0", "a0_1"), ("e0_0", "a0_2")
    gone = FiveTuple("10.0.0.3", DST, 6, 40100, 5201)
    mouse = FiveTuple("10.0.0.4", DST, 6, 40200, 5201)
    core.measure(1.0, {up1: 0.9, up2: 0.3}, {gone: FlowReading(9e6, frozenset({up1}), True, 1.0),
                                            mouse: FlowReading(3e6, frozenset({up2}), False, 1.0)})
    return core


@pytest.mark.parametrize("place_load", ["held", "measured"])
def test_an_announce_is_placed_by_what_is_held_and_the_mice_not_by_a_finished_elephants_measurement(place_load):
    """Issue 58: a finished elephant's traffic stays in its links' 1-s, smoothed measurement for seconds; a
    new elephant placed by the measurement (``measured``) goes around it. By what is held (``held``: the
    allocations and the mice load) it does not, and the mice sampled on a link still count there.
    k=6, e0_0's two high-throughput uplinks (to a0_1 and a0_2), rate-less announces, lending off."""
    core = _finished_and_mice(FreewayConfig(lend="off", place_load=place_load))
    out = core.handshake(1.0, "e0_0", 1, SRC, _ann(rate_kbps=0))
    assert out.verdict == "ack"
    assert out.elephant.placements[0].path[1] == ("a0_1" if place_load == "held" else "a0_2")


@pytest.mark.parametrize("adopt_load", ["held", "measured"])
def test_an_adopted_elephant_is_placed_by_what_is_held_when_adopt_load_says_so(adopt_load):
    """Issue 58: as an announce (the test above), an elephant monitoring found is placed by what is held on each
    link (``adopt_load: held``) or by the measurement (``measured``, the default), in which a finished
    elephant's traffic stays for seconds. k=6, e0_0's two high-throughput uplinks, lending off."""
    from monitoring.sflow import FiveTuple

    core = _finished_and_mice(FreewayConfig(lend="off", adopt_load=adopt_load))
    flow = FiveTuple(SRC, DST, 6, 40001, 5201)
    assert core.adopt(1.0, flow, 2e6)
    assert core.elephant_of(flow).placements[0].path[1] == ("a0_1" if adopt_load == "held" else "a0_2")
    # a second one from the same host: by what is held, the first one's allocation (2 Mbit/s) is on a0_1's
    # uplink against the 3 Mbit/s of mice on a0_2's, so it goes to a0_1 too; the measurement sends it to a0_2
    second = FiveTuple(SRC, DST, 6, 40002, 5201)
    assert core.adopt(1.0, second, 2e6)
    assert core.elephant_of(second).placements[0].path[1] == ("a0_1" if adopt_load == "held" else "a0_2")
