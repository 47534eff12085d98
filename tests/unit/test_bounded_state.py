"""State that must stay at the size of what is live (issue 13 item 7)."""

import json
import random

from monitoring.sflow import FiveTuple
from ryu_apps import config
from ryu_apps.algorithms.efm_rounds import Move
from ryu_apps.monitor_app import MonitorApp
from ryu_apps.openflow import pipeline
from ryu_apps.simswitch.fabric import frame, packet
from tests.unit.test_simswitch_programs import policy
from topology.fabric import fattree
from topology.paths import tor_paths

F = fattree(4, 10)


def test_hedera_forgets_100000_short_flows_once_no_edge_switch_counts_them():
    pol = policy("hedera", F, None)
    rnd = random.Random(1)
    hosts = F.hosts
    live, sent = [], 0
    for i in range(100_000):
        s, d = rnd.sample(hosts, 2)
        if s.switch == d.switch:
            continue
        ft = FiveTuple(s.ip, d.ip, 6, 10_000 + i % 50_000, 80 + i // 50_000)
        pol.on_packet(0.0, s.switch, s.port, frame(packet(ft), s.mac, d.mac))
        sent += 1
        if i >= 99_990:
            live.append((s.switch, ft))
    assert len(pol.edges) > 90_000  # every flow got its edge entry
    for t in (5.0, 10.0):  # two polls in which the edge switches count only the last ten flows
        pol.on_period(t, pol.view)
        for sw in F.tors():
            entries = [({"ipv4_src": ft.src, "ipv4_dst": ft.dst, "ip_proto": 6, "tcp_src": ft.sport,
                         "tcp_dst": ft.dport}, 1000 * t) for tor, ft in live if tor == sw]
            pol.on_flow_stats(t, sw, entries, False)
    assert len(pol.edges) == len(pol.flow_ids) == len(live)
    assert len(pol.scheduler.counters) == len(live)
    sizes = pol.table_sizes()  # what the events file and `freeway bench state` report
    assert sizes["hedera_edges"] == sizes["hedera_flow_ids"] == sizes["hedera_demand"] == len(live)
    assert pol.counters["hedera-edges"] == sent  # every flow's first packet installed its edge entry


def test_efm_forgets_a_pin_whose_entry_expired():
    pol = policy("efm-biggest", F, None)
    src, dst = F.hosts_on("e0_0")[0], F.hosts_on("e3_1")[0]
    path = tor_paths(F, "e0_0", "e3_1")[1]
    cookies = []
    for i in range(1000):
        ft = FiveTuple(src.ip, dst.ip, 6, 20_000 + i, 80)
        r = pol.rerouter.move(Move(ft, 3e6, frozenset(), path, ("e0_0", "a0_0")))
        pol.rerouter.efm.paths[ft] = path
        pol.rerouter.efm.moved_at[ft] = 0.0
        r.txns[0].done()
        cookies.append(pol.rerouter.pins[ft][2])
    assert len(pol.rerouter.pins) == 1000
    for c in cookies:
        pol.on_flow_removed(30.0, "e0_0", c)
    r = pol.rerouter
    assert not r.pins and not r.entries and not r.efm.paths and not r.efm.moved_at
    assert pipeline.owner_of(cookies[0]) is pipeline.EFM


def _monitor(tmp_path, monkeypatch, max_mb):
    """The monitoring app writing its events to ``tmp_path/ev.jsonl``, rotated at ``max_mb``."""
    F.save(tmp_path / "f.json")
    events = tmp_path / "ev.jsonl"
    monkeypatch.setattr(config, "_active", config.Config(fabric=str(tmp_path / "f.json"), events_file=str(events),
                                                         events_max_mb=max_mb))
    return MonitorApp(), events


def test_the_events_file_is_rotated_by_size(tmp_path, monkeypatch):
    mon, events = _monitor(tmp_path, monkeypatch, 0.01)
    for i in range(1000):
        mon.write_event({"type": "test", "i": i, "pad": "x" * 50})
    assert events.stat().st_size <= 10_000 + 200 and (tmp_path / "ev.jsonl.1").stat().st_size > 9_000
    assert json.loads(events.read_text().splitlines()[-1])["i"] == 999
    assert not (tmp_path / "ev.jsonl.2").exists()


def test_a_failed_rotation_keeps_the_events_file_working(tmp_path, monkeypatch):
    mon, events = _monitor(tmp_path, monkeypatch, 0.001)
    import os

    def refuse(a, b):
        raise OSError("read-only")
    monkeypatch.setattr(os, "replace", refuse)
    for i in range(100):
        mon.write_event({"type": "test", "i": i, "pad": "x" * 50})
    assert json.loads(events.read_text().splitlines()[-1])["i"] == 99


def test_efm_moves_nothing_for_one_hold_down_after_taking_over_a_running_fabric():
    from monitoring.view import FlowReading, LinkReading, View

    pol = policy("efm-biggest", F, None)
    src, dst = F.hosts_on("e0_0")[0], F.hosts_on("e3_1")[0]
    ft = FiveTuple(src.ip, dst.ip, 6, 40001, 80)
    hot = ("a3_1", "e3_1")
    view = View(20.0, {hot: LinkReading(0.95, 9.5e6, 20.0)},
                {ft: FlowReading(6e6, frozenset({hot}), True, 20.0)})
    pol.recover(15.0, "e0_0", [f for f in pol.program("e0_0") if hasattr(f, "match")], [], [])  # a restart
    assert not pol.on_period(20.0, view).txns  # within the hold-down: nothing moves
    later = View(26.0, {hot: LinkReading(0.95, 9.5e6, 26.0)}, {ft: FlowReading(6e6, frozenset({hot}), True, 26.0)})
    assert pol.on_period(26.0, later).txns  # after it, EFM acts as always


def test_efm_acts_on_a_link_its_flow_samples_show_over_the_threshold_before_the_counters_do():
    """The issue "Performance" item 4: an early round (``on_hot``) moves the elephant when the samples' lower
    bound is over 70% and the counters' last delta (straddling the start) is not; a sampled reading whose
    window began before the move does not trigger another."""
    from monitoring.view import FlowReading, LinkReading, View

    src, dst = F.hosts_on("e0_0")[0], F.hosts_on("e3_1")[0]
    ft = FiveTuple(src.ip, dst.ip, 6, 40001, 80)
    hot = ("a3_1", "e3_1")
    ft2 = FiveTuple(F.hosts_on("e0_1")[0].ip, dst.ip, 6, 40002, 80)
    flows = {ft: FlowReading(6e6, frozenset({hot}), True, 20.0), ft2: FlowReading(3e6, frozenset({hot}), True, 20.0)}

    def view(now, sampled):
        return View(now, {hot: LinkReading(0.4, 4e6, 19.6)}, flows, {}, {hot: sampled} if sampled else {})

    pol = policy("efm-biggest", F, None)
    assert pol.hot_threshold() == 0.7 and policy("ecmp", F, None).hot_threshold() is None
    assert not pol.on_hot(20.0, view(20.0, (6.5e6, 19.2))).txns  # 65%: not congested
    assert not pol.on_hot(20.0, view(20.0, None)).txns  # the counters alone: 40%
    moved = pol.on_hot(20.0, view(20.0, (8.2e6, 19.2)))
    assert moved.txns and pol.counters["efm-early-rounds"] == 3
    assert not pol.on_hot(20.5, view(20.5, (9e6, 19.7))).txns  # its window began before the move
    assert not pol.on_hot(20.9, view(20.9, (9e6, 20.1))).txns  # the only other way down to e3_1 holds the
    # first move's 6 Mbit/s, not measured since (efm.RECENT_S): the other elephant does not fit there yet
    assert pol.on_hot(25.5, view(25.5, (9e6, 24.7))).txns  # after RECENT_S the move no longer counts: it moves
