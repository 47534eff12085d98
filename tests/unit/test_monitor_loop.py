"""The monitoring app's periodic loop: a failing round is logged and counted, and the next one runs
(issue 13 item 8; the Freeway period loop was already guarded)."""

from ryu_apps import config
from ryu_apps.monitor_app import MonitorApp
from topology.fabric import fattree


def test_a_failing_monitoring_round_is_logged_and_the_loop_goes_on(tmp_path, caplog, monkeypatch):
    fattree(4, 10).save(tmp_path / "f.json")
    monkeypatch.setattr(config, "_active", config.Config(fabric=str(tmp_path / "f.json"), monitor="none"))
    mon = MonitorApp()
    calls = []

    def tick(now):
        calls.append(now)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return []
    mon.estimator.tick = tick
    mon._refresh_portmap = lambda now: None  # no OVSDB here
    mon.step(1.0)
    mon.step(1.1)
    assert calls == [1.0, 1.1] and mon.loop_errors == 1
    assert any("monitoring loop failed" in r.message for r in caplog.records)


def test_link_loads_reach_an_app_that_observes_them_and_cost_nothing_when_none_does(tmp_path, monkeypatch):
    """A counter sample's link load is published as EventLinkLoad only when some app observes it (at
    k=48 there are 138,240 a second, and no app of Freeway's own observes them)."""
    from monitoring.events import LinkLoad
    from ryu_apps.monitor_app import EventLinkLoad

    fattree(4, 10).save(tmp_path / "f.json")
    monkeypatch.setattr(config, "_active", config.Config(fabric=str(tmp_path / "f.json"), monitor="none"))
    mon = MonitorApp()
    sent = []
    mon.send_event_to_observers = lambda ev, state=None: sent.append(ev)
    load = LinkLoad(1.0, ("e0_0", "a0_0"), 5e6, 0.5)
    mon.publish(load)
    assert sent == []
    mon.register_observer(EventLinkLoad, "some_app")
    mon.publish(load)
    assert len(sent) == 1 and isinstance(sent[0], EventLinkLoad) and sent[0].load == load
