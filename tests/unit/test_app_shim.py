"""The os-ken app's handlers with input from a switch the fabric does not describe (issue 13 item 9):
counted and dropped, never an exception."""

import time
from types import SimpleNamespace

from ryu_apps import config
from ryu_apps.controller_app import ControllerApp
from ryu_apps.openflow.framework import ofproto
from topology.fabric import fattree


def _app(tmp_path, monkeypatch, mode="freeway"):
    fattree(4, 10).save(tmp_path / "f.json")
    monkeypatch.setattr(config, "_active", config.Config(fabric=str(tmp_path / "f.json"), mode=mode))
    return ControllerApp()


def _ev(dpid, **msg):
    return SimpleNamespace(msg=SimpleNamespace(datapath=SimpleNamespace(id=dpid), **msg))


def test_messages_from_an_unknown_switch_are_counted_and_dropped(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch)
    app.on_flow_removed(_ev(0xDEAD, reason=ofproto.OFPRR_IDLE_TIMEOUT, cookie=0xF5 << 56 | 1 << 16))
    app.on_packet_in(_ev(0xDEAD, match={"in_port": 1}, data=b"\x00" * 60))
    app.on_flow_stats(_ev(0xDEAD, xid=7, flags=0, body=[]))
    assert app.counters["flow-removed-unknown-switch"] == 1
    assert app.counters["packet-in-dropped"] == 1 and app.counters["stats-late-or-unknown"] == 1


class _Datapath:
    """What the app uses of an os-ken datapath: an id, its ports, xids and a send."""

    def __init__(self, dpid, ports=()):
        self.id, self.ports, self.sent, self._xid = dpid, {p.port_no: p for p in ports}, [], 0

    def set_xid(self, msg):
        self._xid += 1
        msg.xid = self._xid

    def send_msg(self, msg):
        self.sent.append(msg)


def test_a_new_switch_is_read_back_at_once_and_a_reconnecting_one_after_its_links_hold_down(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="ecmp")
    sw = app.fabric.switches["a0_0"]
    port = app.fabric.port_to("a0_0", "c1")
    app.liveness.port(0.0, "a0_0", port, False)  # its link to c1 went down and came back while it connected
    app.liveness.port(0.1, "a0_0", port, True)
    assert app.liveness.settling("a0_0")
    app.switch_up(_Datapath(sw.dpid))
    assert app.syncs["a0_0"].requested  # first connect: no wait (the fabric is starting)
    app.syncs.clear()
    app.liveness.switch(1.0, "a0_0", False)  # it went away ...
    dp = _Datapath(sw.dpid)
    app.switch_up(dp)  # ... and came back: its links are in their hold-down
    assert not app.syncs["a0_0"].requested and not dp.sent
    later = time.monotonic() + app.liveness.hold_down_s + 0.1  # the app runs on the monotonic clock
    app.links_changed(later, app.liveness.tick(later))
    app._read_back_when_settled("a0_0", later)
    assert app.syncs["a0_0"].requested and len(dp.sent) == 3  # flows, groups, meters


def _heard(app, t, skip=()):
    f = app.fabric
    for ln in f.links:
        for (dst, dport), (src, sport) in (((ln.b, ln.b_port), (ln.a, ln.a_port)), ((ln.a, ln.a_port), (ln.b, ln.b_port))):
            if (src, dst) not in skip:
                app.linkwatch.check.heard(t, dst, dport, (f.switches[src].dpid, sport))
    app.linkwatch.check.sent(t)


def test_lldp_applies_one_silent_link_refuses_a_mass_silence_and_forgets_on_a_change_of_leader(tmp_path, monkeypatch):
    """Issue 15 review: a silent link goes down; every link silent at once is taken for a fault on the
    controller's side (not applied); a member that starts or stops leading judges afresh."""
    app = _app(tmp_path, monkeypatch, mode="ecmp")
    now = time.monotonic()
    app.linkwatch._next = now + 1e6  # no probes to send (no datapaths anyway)
    for sw in app.fabric.switches:
        app.linkwatch.check.watch(now - 10, sw)
    for t in range(10, 0, -1):
        _heard(app, now - t, skip={("c1", "a0_0")})
    app.lldp_tick(now)
    assert app.liveness.lldp_down == {("a0_0", "c1"), ("c1", "a0_0")}
    assert not app.liveness.is_up(("a0_0", "c1"))
    assert app.surface.lldp_doc()["links"]["a0_0-c1"] == "missing"
    app.reset_linkcheck(now)  # e.g. this member stopped leading
    assert app.liveness.lldp_down == set() and app.linkwatch._states == {}
    assert set(app.surface.lldp_doc()["links"].values()) == {"waiting"}
    later = now + 20
    for sw in app.fabric.switches:
        app.linkwatch.check.watch(later - 10, sw)
    _heard(app, later - 9)
    for t in range(8, 0, -1):
        app.linkwatch.check.sent(later - t)  # then nothing is heard from anyone: the controller's own fault
    app.linkwatch._judge = 0.0
    app.lldp_tick(later)
    assert app.liveness.lldp_down == set() and app.snapshot()["controller"]["lldp-breaker"] == 1


def test_without_probes_lldp_says_nothing(tmp_path, monkeypatch):
    fattree(4, 10).save(tmp_path / "f.json")
    monkeypatch.setattr(config, "_active", config.Config(fabric=str(tmp_path / "f.json"), lldp_interval_s=0))
    app = ControllerApp()
    assert app.surface.lldp_doc()["links"] is None
    assert all(ln["lldp"] is None for ln in app.surface.api_fabric()["links"])


def test_a_held_event_loop_is_measured_and_a_long_stall_logged(tmp_path, monkeypatch, caplog):
    from prometheus_client import generate_latest

    app = _app(tmp_path, monkeypatch, mode="ecmp")
    app.loop_lag(0.003)
    app.loop_lag(-0.001)  # woke early (clock granularity): counted as no lag
    assert app.counters["event-loop-stalled"] == 0 and "held for" not in caplog.text
    app.loop_lag(2.4)
    assert app.counters["event-loop-stalled"] == 1 and "held for 2.4 s" in caplog.text
    text = generate_latest(app.metrics.registry).decode()
    assert 'freeway_event_loop_lag_seconds_count 3.0' in text
    assert 'freeway_event_loop_lag_seconds_bucket{le="0.005"} 2.0' in text
    assert 'freeway_event_loop_lag_seconds_bucket{le="2.5"} 3.0' in text


def test_a_live_reload_of_efms_threshold_rearms_the_early_rounds_at_the_new_one(tmp_path, monkeypatch):
    """SIGHUP with a new efm.threshold: from the next period the policy and the links monitoring reports
    as newly hot (the early rounds) both use it."""
    from monitoring.estimator import Estimator
    from monitoring.sflow import CounterSample, IfOctets

    app = _app(tmp_path, monkeypatch, mode="efm-biggest")
    est = Estimator(app.fabric)
    app.monitor = SimpleNamespace(estimator=est, view=est.view)
    app.monitor.estimator.hot_threshold = app.policy.hot_threshold()
    assert app.monitor.estimator.hot_threshold == 0.7
    (tmp_path / "freeway.conf").write_text("efm:\n  threshold: 0.5\n")
    new = config.Config.from_mapping({**config.load_file(tmp_path / "freeway.conf"), "fabric": app.cfg.fabric,
                                      "mode": "efm-biggest"})
    monkeypatch.setattr(config, "_active", new)
    app.period(time.monotonic())  # the period takes the live settings
    assert app.policy.hot_threshold() == 0.5 and app.monitor.estimator.hot_threshold == 0.5
    link = ("e0_0", "a0_0")
    est.set_ifmap({7: ("e0_0", est.fabric.port_to("e0_0", "a0_0"))})
    assert est.on_counters(0.0, CounterSample(0, 0, 7, (IfOctets(7, 3, 0, 0),))) == []
    est.on_counters(1.0, CounterSample(0, 0, 7, (IfOctets(7, 3, 0, 6_000_000 // 8),)))  # 60% of 10 Mbit/s: over 50%,
    assert est.take_hot() == {link}  # not 70%


def test_tune_gc_freezes_what_start_up_built_and_raises_the_young_threshold():
    """The launcher calls it once the apps are built: every object alive then leaves the collector's
    generations, and the youngest is collected every 50,000 allocations."""
    import gc

    from ryu_apps.launcher import GC_OLDEST_PACED, GC_THRESHOLDS, tune_gc

    before = gc.get_threshold()
    kept = [[i] for i in range(1000)]  # some long-lived containers
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS == (50_000, 20, 100)
        tune_gc(paced=True)  # the controller: the oldest generation is its pace's alone
        assert gc.get_threshold() == (50_000, 20, GC_OLDEST_PACED) and GC_OLDEST_PACED >= 1 << 30
        assert gc.get_freeze_count() >= len(kept)
        assert gc.get_count()[0] < 100  # the generations were emptied into the permanent one
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_collector_pace_says_which_generation_is_due():
    """The youngest every tick, the middle one once its count reaches threshold1, the oldest once
    threshold2 middle ones have passed and only if it grew by a quarter since its last collection."""
    from ryu_apps.launcher import CollectorPace

    p = CollectorPace(young_s=1.0, middle_every=20, old_every=100)
    assert p.due(0.0, (0, 0, 0)) == 0
    assert p.due(0.5, (0, 1, 0)) is None  # not a tick later yet
    assert p.due(1.0, (10, 19, 0)) == 0
    assert p.due(2.0, (10, 20, 0)) == 1
    p.old_after = 1000
    assert p.due(3.0, (0, 5, 100), old_size=lambda: 1300) == 2  # grew by 30%
    assert p.due(4.0, (0, 5, 100), old_size=lambda: 1200) == 0  # by 20%: not yet...
    asked = []
    assert p.due(5.0, (0, 20, 150), old_size=lambda: asked.append(1) or 5000) == 1  # ... nor asked again soon
    assert asked == []
    assert p.due(6.0, (0, 0, 200), old_size=lambda: 5000) == 2  # another threshold2 later


def test_the_controllers_pace_walks_the_middle_generation_every_other_tick_and_the_oldest_every_10_min():
    """A middle pass walks what the young passes since the last one left: five of them made passes of 35 ms
    on average at k=48, over 50 ms four or five times in 15 s; one makes them a pass of two ticks' worth."""
    from ryu_apps.launcher import GC_YOUNG_S, CollectorPace

    p = CollectorPace()
    counts, seen = [0, 0, 0], []
    for i in range(8):
        g = p.due(i * GC_YOUNG_S, tuple(counts))
        seen.append(g)
        if g == 0:
            counts[1] += 1
        elif g == 1:
            counts[1], counts[2] = 0, counts[2] + 1
    assert seen == [0, 1] * 4
    assert p.old_every * 2 * GC_YOUNG_S == 600  # the oldest considered every 10 minutes, as before


def test_the_handler_loop_lets_the_event_loop_go_after_a_turn_of_events():
    """A burst of queued events (monitoring's elephants, each placed) is handled EVENT_TURN_S at a time;
    an event the loop woke for starts a turn."""
    from ryu_apps.control.schedule import EVENT_TURN_S, events_turn

    assert events_turn(5.0, 0.0, waited=True) == (5.0, False)  # the queue was empty: a new turn
    assert events_turn(5.0 + EVENT_TURN_S / 2, 5.0, waited=False) == (5.0, False)  # within the turn
    assert events_turn(5.0 + 2 * EVENT_TURN_S, 5.0, waited=False) == (5.0 + 2 * EVENT_TURN_S, True)  # let go
    assert events_turn(9.0, 5.0, waited=True) == (9.0, False)  # however long ago: it waited


def test_background_work_gives_way_to_an_awaited_answer_for_a_while_only():
    """Between two pieces of background work the controller waits while a host awaits a handshake's answer
    (its entries sent, not yet confirmed), never longer than ANSWER_WAIT_S; with none awaited, not at all."""
    from ryu_apps.control.schedule import ANSWER_WAIT_S, gives_way

    assert not gives_way(0.0, 0)
    assert gives_way(0.0, 1) and gives_way(ANSWER_WAIT_S / 2, 3)
    assert not gives_way(ANSWER_WAIT_S, 1) and not gives_way(10.0, 5)


def test_the_app_gives_way_to_a_fresh_awaited_answer_and_not_to_an_old_one():
    """``ControllerApp.give_way`` on the real event loop: with an answer awaited since just now it waits about
    ANSWER_WAIT_S (until the answer goes, if sooner); with none, or only one awaited for longer than
    ANSWER_FRESH_S (a switch that does not confirm), it goes on at once."""
    from collections import Counter

    from ryu_apps.control.schedule import ANSWER_FRESH_S, ANSWER_WAIT_S
    from ryu_apps.openflow.executor import Executor
    from ryu_apps.openflow.txn import Txn

    def app(begun_s_ago):
        ex = Executor(SimpleNamespace(clock=time.monotonic), 3.0)
        if begun_s_ago is not None:
            ex.tracker.begin(Txn("elephant 10.0.0.1 5001", [("e0_0", [])], answers=True), time.monotonic() - begun_s_ago)
        return SimpleNamespace(executor=ex, counters=Counter())

    def waited(a) -> float:
        t = time.monotonic()
        ControllerApp.give_way(a)
        return time.monotonic() - t

    fresh = app(0.0)
    assert ANSWER_WAIT_S * 0.9 <= waited(fresh) < ANSWER_WAIT_S + 0.05 and fresh.counters["gave-way-to-answers"] == 1
    for a in (app(None), app(ANSWER_FRESH_S + 0.1)):
        assert waited(a) < ANSWER_WAIT_S / 2 and not a.counters["gave-way-to-answers"]


def test_collector_pace_keeps_the_young_generation_small_when_the_count_does_not():
    """A process that replaces what it holds (an old object freed for each new one) never reaches
    Python's allocation threshold, so its young objects pile up until something else starts a pass;
    ticked, the pace collects them every tick. A caller's ``gc.disable`` is left alone."""
    import gc

    from ryu_apps.launcher import CollectorPace

    before = gc.get_threshold()
    held = {i: [i] for i in range(20_000)}  # long-lived records...
    gc.collect()
    gc.freeze()
    try:
        gc.set_threshold(50_000, 20, 100)
        for i in range(20_000):
            held[i] = [i]  # ... each replaced by a new one: the count stays near 0
        young = len(gc.get_objects(generation=0))
        assert young >= 20_000 and gc.get_count()[0] < 1000  # piled up without a pass
        pace = CollectorPace(young_s=0.1, middle_every=5)
        assert pace.tick(0.0) == 0 and pace.passes == [1, 0, 0]
        assert len(gc.get_objects(generation=0)) < 1000
        for i in range(20_000):
            held[i] = [i]
        assert pace.tick(0.1) == 0 and len(gc.get_objects(generation=0)) < 1000
        gc.disable()
        try:
            assert pace.tick(0.2) is None and pace.passes == [2, 0, 0]
        finally:
            gc.enable()
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_sflow_saying_a_port_is_down_asks_the_switch_and_its_answer_decides(tmp_path, monkeypatch):
    """Issue 60 item 1: forged sFlow counters (ifOperStatus down) took links down. Now sFlow only names a
    suspect: the app asks the switch for its ports over the switch's own channel (once per switch per
    ``VERIFY_EVERY_S``), and only the switch's answer takes a link down."""
    from monitoring.events import PortState
    from ryu_apps.controller_links import VERIFY_EVERY_S
    from ryu_apps.openflow.framework import parser

    app = _app(tmp_path, monkeypatch, mode="ecmp")
    sw = app.fabric.switches["e0_0"]
    port = app.fabric.port_to("e0_0", "a0_0")
    dp = _Datapath(sw.dpid)
    app.watching["e0_0"] = dp
    monkeypatch.setattr(app, "_dp", lambda name: dp if name == "e0_0" else None)
    for _ in range(40):  # a forger's datagrams, one after another
        app.on_sflow_port(SimpleNamespace(state=PortState(time.monotonic(), "e0_0", port, False)))
    assert app.liveness.dead() == frozenset()  # nothing taken down on sFlow's word
    asked = [m for m in dp.sent if isinstance(m, parser.OFPPortDescStatsRequest)]
    assert len(asked) == 1 and VERIFY_EVERY_S > 0  # one question, not one per datagram

    def desc(state):
        return SimpleNamespace(port_no=port, state=state, config=0)

    app.on_port_desc(_ev(sw.dpid, body=[desc(0)]))  # the switch: it is up
    assert app.liveness.dead() == frozenset()
    app.on_port_desc(_ev(sw.dpid, body=[desc(ofproto.OFPPS_LINK_DOWN)]))  # the switch: it is down
    assert ("e0_0", "a0_0") in app.liveness.dead()


def test_an_error_is_heard_only_from_the_connection_a_switch_was_admitted_on(tmp_path, monkeypatch):
    """Issue 60 item 2: an error message names its datapath only by the connection it came on; one from
    any other connection than the switch's admitted one (a second connection claiming its id) is counted
    and changes nothing (it had demoted a cluster's leader)."""
    app = _app(tmp_path, monkeypatch, mode="ecmp")
    sw = app.fabric.switches["e0_0"]
    real, other = _Datapath(sw.dpid), _Datapath(sw.dpid)
    app.watching["e0_0"] = real
    seen = []
    monkeypatch.setattr(app.executor, "error", lambda *a: seen.append(a))
    msg = SimpleNamespace(datapath=other, type=ofproto.OFPET_ROLE_REQUEST_FAILED, code=0, xid=1)
    app.on_error(SimpleNamespace(msg=msg))
    assert app.counters["error-not-admitted"] == 1 and not seen
    app.on_error(SimpleNamespace(msg=SimpleNamespace(datapath=real, type=ofproto.OFPET_BAD_REQUEST, code=1, xid=2)))
    assert seen and app.counters["error-not-admitted"] == 1
    app.on_error(SimpleNamespace(msg=SimpleNamespace(datapath=real, type=999, code=0, xid=3)))
    assert app.metrics.counts[("openflow_errors", "unknown")] == 1  # a label from a closed set


def test_a_period_stops_between_its_parts_once_the_controller_no_longer_leads(tmp_path, monkeypatch):
    """The loop runs other green threads between a period's parts; one of them may hand the fabric over
    (the cluster's lease lost). The parts left were the old leader's decisions, sent to switches that now
    follow another controller: no part runs after it (a helper's review, 2026-12-02)."""
    from ryu_apps.modes.policy import Reaction

    app = _app(tmp_path, monkeypatch)
    ran, reacted = [], []

    def parts(now, view):
        for n in (1, 2, 3):
            ran.append(n)
            yield Reaction()

    def react(r):
        reacted.append(r)
        app.handover = SimpleNamespace(leads=lambda: False)  # lost while the first part was carried out

    monkeypatch.setattr(app.policy, "period_parts", parts)
    monkeypatch.setattr(app, "react", react)
    assert app.master()
    app.period(time.monotonic())
    assert ran == [1] and len(reacted) == 1
