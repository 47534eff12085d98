"""The os-ken app's handlers with input from a switch the fabric does not describe (issue 13 item 9):
counted and dropped, never an exception."""

from types import SimpleNamespace

from ryu_apps import config
from ryu_apps.framework import ofproto
from ryu_apps.freeway_app import FreewayApp
from topology.fabric import fattree


def _app(tmp_path, monkeypatch, mode="freeway"):
    fattree(4, 10).save(tmp_path / "f.json")
    monkeypatch.setattr(config, "_active", config.Config(fabric=str(tmp_path / "f.json"), mode=mode))
    return FreewayApp()


def _ev(dpid, **msg):
    return SimpleNamespace(msg=SimpleNamespace(datapath=SimpleNamespace(id=dpid), **msg))


def test_messages_from_an_unknown_switch_are_counted_and_dropped(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch)
    app.on_flow_removed(_ev(0xDEAD, reason=ofproto.OFPRR_IDLE_TIMEOUT, cookie=0xF5 << 56 | 1 << 16))
    app.on_packet_in(_ev(0xDEAD, match={"in_port": 1}, data=b"\x00" * 60))
    app.on_flow_stats(_ev(0xDEAD, xid=7, flags=0, body=[]))
    assert app.counters["flow-removed-unknown-switch"] == 1
    assert app.counters["packet-in-dropped"] == 1 and app.counters["stats-late-or-unknown"] == 1
