"""The Freeway os-ken app: os-ken events in, OpenFlow messages out.

Every handler finds the switch, calls the mode's policy (``policies``) with
``now`` and the parsed input, and carries out the Reaction it returns: send
intents, install and confirm transactions (``txn.Tracker``), write events.
No handler knows which mode runs.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from monitoring.view import View
from topology.fabric import Fabric

from . import config, ofmsg, policies
from .framework import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    app_manager,
    hub,
    ofp_event,
    ofproto,
    set_ev_cls,
)
from .monitor_app import EventElephantEnd, EventElephantStart
from .txn import Failure, Outcome, Tracker, Txn

LOG = logging.getLogger("freeway")
PERIOD_S = 1.0
BARRIER_TIMEOUT_S = 3.0


class FreewayApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.fabric = Fabric.load(self.cfg.fabric)
        self.policy = policies.make(self.cfg, self.fabric)
        self.tracker = Tracker(BARRIER_TIMEOUT_S)
        self.datapaths: dict[int, object] = {}
        self.counters: Counter[str] = Counter()
        self.monitor = None
        LOG.info("freeway: mode %s, fabric %s (%d switches, %d hosts)", self.cfg.mode, self.fabric.topo,
                 len(self.fabric.switches), len(self.fabric.hosts))

    def start(self):
        super().start()
        self.monitor = app_manager.lookup_service_brick("FreewayMonitor")
        if self.monitor is not None:
            self.monitor.add_snapshot_source(self.snapshot)
        if self.policy.periodic:
            self.threads.append(hub.spawn(self._period_loop))

    # ----- carrying out a Reaction --------------------------------------------------------
    def _switch(self, dpid: int, unknown: str = ""):
        """The switch's name; None (counted under ``unknown``) for a datapath not in the description."""
        sw = self.fabric.switch_by_dpid(dpid)
        if sw is None and unknown:
            self.counters[unknown] += 1
        return sw.name if sw is not None else None

    def _dp(self, switch: str):
        return self.datapaths.get(self.fabric.switches[switch].dpid)

    def send_ops(self, ops, tid: int | None = None) -> None:
        """Send (switch, intents) in order; switches that are not connected are skipped."""
        for sw, intents in ops:
            dp = self._dp(sw)
            if dp is None:
                continue
            for m in ofmsg.bind(ofmsg.messages(intents), dp):
                dp.send_msg(m)
                if tid is not None:
                    self.tracker.sent(tid, sw, m.xid)

    def react(self, r: policies.Reaction | None) -> None:
        if not r:
            return
        for ev in r.events:
            if self.monitor is not None:
                self.monitor.write_event(ev)
        self.send_ops(r.ops)
        for t in r.txns:
            self.begin(t)

    def begin(self, t: Txn) -> None:
        """Install, then confirm every switch with a barrier; the tracker decides done or rollback."""
        tid = self.tracker.begin(t, time.monotonic())
        missing = [sw for sw, _ in t.install if self._dp(sw) is None]
        if missing:
            self.finish(self.tracker.fail(tid, Failure(f"switch {missing[0]} is not connected", missing[0])))
            return
        self.send_ops(t.install, tid)
        for sw in dict.fromkeys(sw for sw, _ in t.install):
            dp = self._dp(sw)
            b = ofmsg.bind([ofmsg.barrier()], dp)[0]
            dp.send_msg(b)
            self.tracker.barrier_sent(tid, sw, b.xid)
        self.finish(self.tracker.check(tid))

    def finish(self, o: Outcome | None) -> None:
        if o is None:
            return
        if o.ok:
            self.react(o.txn.done() if o.txn.done else None)
            return
        self.counters["rolled-back"] += 1
        LOG.error("%s rolled back: %s", o.txn.name, o.failure.reason)
        self.send_ops(o.rollback)
        self.react(o.txn.failed(o.failure) if o.txn.failed else None)

    # ----- switches ----------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_switch_features(self, ev):
        dp = ev.msg.datapath
        sw = self._switch(dp.id, "unknown-datapath")
        if sw is None:
            LOG.warning("datapath %016x is not in the fabric description: ignored", dp.id)
            return
        program = self.policy.program(sw)
        for m in ofmsg.bind(ofmsg.program(program), dp):
            dp.send_msg(m)
        self.datapaths[dp.id] = dp
        LOG.info("switch %s (%016x) connected: programmed %d entries", sw, dp.id, len(program))
        self.react(self.policy.on_switch(sw, True))

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def on_switch_gone(self, ev):
        dp = ev.datapath
        if dp.id is None or self.datapaths.get(dp.id) is not dp:
            return  # never programmed, or an old connection of a switch that has reconnected
        del self.datapaths[dp.id]
        sw = self._switch(dp.id)
        LOG.warning("switch %s (%016x) disconnected", sw, dp.id)
        for o in self.tracker.switch_down(sw):
            self.finish(o)
        self.react(self.policy.on_switch(sw, False))

    # ----- messages from the switches ------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        sw = self._switch(msg.datapath.id, "packet-in-dropped")
        if sw is not None:
            self.react(self.policy.on_packet(time.monotonic(), sw, msg.match["in_port"], msg.data))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier_reply(self, ev):
        sw = self._switch(ev.msg.datapath.id)
        if sw is not None:
            self.finish(self.tracker.barrier_reply(sw, ev.msg.xid))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev):
        msg = ev.msg
        self.counters["switch-errors"] += 1
        LOG.error("switch %016x reported error type=%d code=%d", msg.datapath.id, msg.type, msg.code)
        sw = self._switch(msg.datapath.id)
        if sw is not None:
            self.finish(self.tracker.error(sw, msg.xid, msg.type, msg.code))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def on_flow_removed(self, ev):
        sw = self._switch(ev.msg.datapath.id, "flow-removed-unknown-switch")
        if sw is not None:
            self.react(self.policy.on_flow_removed(time.monotonic(), sw, ev.msg.cookie))

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def on_flow_stats(self, ev):
        msg = ev.msg
        sw = self._switch(msg.datapath.id, "stats-late-or-unknown")
        if sw is not None:
            entries = [(st.match, st.byte_count) for st in msg.body]
            more = bool(msg.flags & ofproto.OFPMPF_REPLY_MORE)
            self.react(self.policy.on_flow_stats(time.monotonic(), sw, entries, more))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev):
        msg = ev.msg
        LOG.info("port status on %s: port %d reason %d state %d", self._switch(msg.datapath.id) or msg.datapath.id,
                 msg.desc.port_no, msg.reason, msg.desc.state)

    # ----- monitoring ------------------------------------------------------------------------
    @set_ev_cls(EventElephantStart)
    def on_elephant(self, ev):
        self.react(self.policy.on_elephant_start(time.monotonic(), ev.start))

    @set_ev_cls(EventElephantEnd)
    def on_elephant_end(self, ev):
        self.react(self.policy.on_elephant_end(time.monotonic(), ev.end))

    # ----- the period -----------------------------------------------------------------------
    def _period_loop(self):
        while self.is_active:
            hub.sleep(PERIOD_S)
            try:
                self.period(time.monotonic())
            except Exception:  # a bug here must not stop the loop or the controller
                LOG.exception("freeway period failed")

    def period(self, now: float) -> None:
        view = self.monitor.view(now) if self.monitor is not None else View(now)
        self.react(self.policy.on_period(now, view))
        for o in self.tracker.expire(now):
            self.finish(o)

    def snapshot(self) -> dict:
        return {"controller": dict(self.counters + self.policy.counters)} | self.policy.snapshot()
