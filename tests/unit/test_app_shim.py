"""The os-ken app's handlers with input from a switch the fabric does not describe (issue 13 item 9):
counted and dropped, never an exception."""

import time
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
