"""The controller app: os-ken events in, OpenFlow messages out.

Every handler finds the switch, calls the mode's policy (``modes``) with ``now`` and the parsed input,
and carries out the Reaction it returns: send intents, install and confirm transactions
(``txn.Tracker``), write decision records. No handler knows which mode runs. What is not translation
lives in its own object: the link check (``control.linkwatch.LinkWatch``), the queue keeper
(``control.queue_keeper.QueueKeeper``), the cluster handover (``control.handover.Handover``) and what
the operator sees (``operators.surface.Surface``). The app keeps the loops and the switches' read-back.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections import Counter

from monitoring import portmap
from monitoring.view import View
from ryu_apps import config, modes, ofchannel
from ryu_apps.control import linkwatch, queue_keeper, schedule
from ryu_apps.control.liveness import Liveness
from ryu_apps.launcher import CollectorPace
from ryu_apps.monitor_app import EventElephantEnd, EventElephantStart, EventPortState
from ryu_apps.openflow import ofmsg, reconcile
from ryu_apps.openflow.framework import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    app_manager,
    hub,
    ofp_event,
    ofproto,
    run_blocking,
    set_ev_cls,
)
from ryu_apps.openflow.txn import Failure, Outcome, Tracker, Txn
from ryu_apps.operators import opstate
from ryu_apps.operators.decision_log import DecisionLog
from ryu_apps.operators.metrics import Metrics
from ryu_apps.operators.surface import Surface
from topology.fabric import Fabric

LOG = logging.getLogger("freeway")
DECISIONS = logging.getLogger("freeway.decisions")  # one record per decision (shown by --log-format json)
VERIFY_EVERY_S = 0.5  # a switch is asked for its ports' state at most this often on sFlow's word
LAG_WARN_S = 1.0  # the event loop held this long is logged (``loop_lag``)
BARRIER_TIMEOUT_S = 3.0
SYNC_TIMEOUT_S = 5.0  # a switch that does not answer the read-back in time is programmed from scratch
# (in time: a part of it within SYNC_TIMEOUT_S, unless other switches' read-backs are still flowing: at
# k=48 a restart's answers queued behind each other, and 11 ToRs were reprogrammed, ``ReadBack.late``)
SYNC_CAP_S = 30.0  # ... even while the controller is behind (``_behind``)
# read-backs asked at once, at most; the others wait their turn (the tick asks them, in the order the
# switches connected). A restart's whole fabric asked at once (k=32: 1,280 dumps of up to 664 entries)
# made the answers queue behind each other past SYNC_TIMEOUT_S, and those switches were reprogrammed
# (at k=48, 64 at once still left one ToR's 1,376-entry dump more than 5 s behind the emulator's others).
READBACK_WINDOW = 32
FOLLOWER_LOOK_S = 0.25  # how often a cluster's follower looks for a lapsed leader
OFP_ERROR_TYPES = {getattr(ofproto, n): n[len("OFPET_"):] for n in dir(ofproto) if n.startswith("OFPET_")}


class ControllerApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.fabric = Fabric.load(self.cfg.fabric)
        self.policy = modes.make(self.cfg, self.fabric)
        self.tracker = Tracker(BARRIER_TIMEOUT_S)
        self.liveness = Liveness(self.fabric, self.cfg.link_hold_down_s)
        self.linkwatch = linkwatch.LinkWatch(self.fabric, self.cfg.lldp_interval_s, self.cfg.lldp_timeout_s,
                                             os.urandom(16), self.cfg.lldp_budget_pps)
        self.queues = queue_keeper.QueueKeeper()
        self.syncs: dict[str, reconcile.ReadBack] = {}  # switches being read back
        self.asking: set[str] = set()  # those asked and not yet answered (at most READBACK_WINDOW)
        self.readback_seen = 0.0  # when the last part of any switch's read-back came
        self.datapaths: dict[int, object] = {}  # every switch this controller programs
        self.watching: dict[str, object] = {}  # every connected switch's datapath, whatever this member's role
        self._verified_at: dict[str, float] = {}  # when each switch was last asked for its ports on sFlow's word
        self.counters: Counter[str] = Counter()
        self.monitor = None
        self.decisions = DecisionLog()
        self.switch_states = {name: opstate.SwitchState() for name in self.fabric.switches}
        self.surface = Surface(self)
        self.metrics = Metrics(self.surface)
        self._gc_observer = self.metrics.gc_callback()
        self.collector = CollectorPace()  # the young generations collected every tick, not left to pile up
        self.started = time.time()
        self.config_loaded = self.started
        self.restart_needed: list = []  # settings changed in the file that a reload could not apply
        self.periods = self.reloads = self.switch_changes = 0
        self._early_at = -1e9  # the latest early round
        self._view: View | None = None  # the view the latest period decided on (the API shows the same)
        self.member = self.handover = None
        from ryu_apps import ofchannel

        self.channel_guard = ofchannel.GUARD  # the OpenFlow channel's gate (its refusals, for the operator)
        if self.cfg.cluster:
            from ryu_apps.control.cluster import Member

            self.member = Member(self.cfg.cluster, self.cfg.cluster_name, self.cfg.node_id or self.cfg.listen,
                                 self.cfg.cluster_ttl_s, run_blocking,
                                 (self.cfg.cluster_ca, self.cfg.cluster_cert, self.cfg.cluster_key),
                                 (self.cfg.cluster_user, self.cfg.cluster_password()))
            self.handover = self.member.handover
            LOG.info("cluster %s: member %s, etcd %s (%s), lease %.1f s", self.cfg.cluster_name,
                     self.handover.state.node, self.cfg.cluster,
                     "TLS" + (", client certificate" if self.cfg.cluster_cert else "") if self.cfg.cluster_ca
                     else "plain", self.cfg.cluster_ttl_s)
        LOG.info("freeway: mode %s, fabric %s (%d switches, %d hosts)", self.cfg.mode, self.fabric.topo,
                 len(self.fabric.switches), len(self.fabric.hosts))

    def start(self):
        super().start()
        gc.callbacks.append(self._gc_observer)  # the collector's pauses hold the loop: /metrics shows them
        self.monitor = app_manager.lookup_service_brick("MonitorApp")
        if self.monitor is not None:
            self.monitor.add_snapshot_source(self.snapshot)
            self.monitor.estimator.hot_threshold = self.policy.hot_threshold()
        self.threads.append(hub.spawn(self._period_loop))
        self.threads.append(hub.spawn(self._tick_loop))
        if self.cfg.isolation:
            self.threads.append(hub.spawn(self._queue_loop))
        if self.cfg.api:
            from ryu_apps.operators.api import serve

            c = self.cfg
            self.threads.append(hub.spawn(serve, self.surface, c.api, c.api_token_file, c.api_read_token_file, True,
                                          c.api_cert, c.api_key))
        if self.handover is not None:
            self.threads.append(hub.spawn(self._cluster_loop))
            from ryu_apps.launcher import ON_TERMINATE

            ON_TERMINATE.append(self._resign)

    def stop(self):
        if self._gc_observer in gc.callbacks:
            gc.callbacks.remove(self._gc_observer)
        super().stop()

    def _resign(self) -> None:
        """A clean stop (SIGTERM) hands the leadership on at once (a crash: after the lease)."""
        if self.master():
            LOG.info("cluster: %s resigns", self.handover.state.node)
            self.member.elector.resign()

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

    def react(self, r: modes.Reaction | None) -> None:
        if not r:
            return
        for ev in r.events:
            self.record(ev)
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
            self.metrics.install_confirm.observe(time.monotonic() - o.started)
            if o.txn.store and self.member is not None:  # durable in the cluster's store before what it backs
                hub.spawn(self._store_then_done, o)
                return
            self.react(o.txn.done() if o.txn.done else None)
            return
        self.counters["rolled-back"] += 1
        LOG.error("%s rolled back: %s", o.txn.name, o.failure.reason)
        self.record({"type": "rollback", "txn": o.txn.name, "reason": o.failure.reason, "switch": o.failure.switch})
        self.send_ops(o.rollback)
        self.react(o.txn.failed(o.failure) if o.txn.failed else None)

    # ----- switches ----------------------------------------------------------------------
    def _state(self, sw: str, state: str) -> None:
        """A switch's connection as the operator sees it: never, syncing, connected, standby, disconnected."""
        self.switch_states[sw] = opstate.SwitchState(state, time.time())
        self.switch_changes += 1

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state(self, ev):
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self.switch_up(dp)
        else:
            self.switch_down(dp)

    def switch_up(self, dp) -> None:
        """A switch connected and described its ports: its links' state goes to the liveness model, and
        its tables are read back so that it is sent only the difference (no delete-all). A member of a
        cluster first tells the switch its role; a follower only watches."""
        sw = self._switch(dp.id, "unknown-datapath")
        if sw is None:
            LOG.warning("datapath %016x is not in the fabric description: ignored", dp.id)
            return
        self.watching[sw] = dp
        if self.handover is not None:
            self._send_role(dp)
            if not self.master():
                now = time.monotonic()
                self._state(sw, "standby")
                self.links_changed(now, self.liveness.switch(now, sw, True))
                for port in getattr(dp, "ports", {}).values():
                    self.port_changed(now, sw, port)
                return
        self._adopt(sw, dp)

    def _adopt(self, sw: str, dp) -> None:
        """Start programming a connected switch: read it back, then send the difference."""
        now = time.monotonic()
        self._state(sw, "syncing")
        sync = reconcile.ReadBack(dp, now, reconnect=sw in self.liveness.switch_down)
        self.links_changed(now, self.liveness.switch(now, sw, True))
        for port in getattr(dp, "ports", {}).values():
            self.port_changed(now, sw, port)
        self.asking.discard(sw)  # (a read-back of an earlier connection no longer holds a place)
        self.syncs[sw] = sync
        self._read_back_when_settled(sw, now)

    def _read_back_when_settled(self, sw: str, now: float) -> None:
        """Ask a connecting switch for its tables; one that reconnects, once none of its links is in its
        hold-down (its links are re-admitted first, so that what it is sent is computed with them: until
        then it keeps forwarding with what it holds, and the others avoid it). A switch seen for the first
        time is asked at once (its ports coming up as the fabric starts must not delay its program),
        unless ``READBACK_WINDOW`` read-backs are out: then at a later tick, in turn."""
        sync = self.syncs[sw]
        if sync.requested or (sync.reconnect and self.liveness.settling(sw)) or len(self.asking) >= READBACK_WINDOW:
            return
        self.asking.add(sw)
        reqs = ofmsg.bind(ofmsg.state_requests(), sync.dp)
        for r in reqs:
            sync.dp.set_xid(r)
        sync.asked([r.xid for r in reqs], now)
        for r in reqs:
            sync.dp.send_msg(r)

    def synced(self, sw: str, sync: reconcile.ReadBack, complete: bool = True) -> None:
        """The read-back is in (or timed out): recover what the mode placed, send the difference."""
        del self.syncs[sw]
        self.asking.discard(sw)
        dp = sync.dp
        if complete:
            tor = self.fabric.switches[sw].is_tor
            self.policy.recover(time.monotonic(), sw, reconcile.rehome(sync.flows, tor, self.policy.owned),
                                sync.meters, sync.groups)
            ops = reconcile.connect_ops(sync.held(), self.policy.program(sw), self.policy.owned, tor)
            msgs, how = ofmsg.messages(ops) + [ofmsg.barrier()], sync.summary(ops)
        else:
            program = self.policy.program(sw)
            msgs = ofmsg.program(program)
            how = f"no read-back within {SYNC_TIMEOUT_S:.0f} s: reprogrammed from scratch ({len(program)} entries)"
            self.counters["switch-reprogrammed"] += 1
        for m in ofmsg.bind(msgs, dp):
            dp.send_msg(m)
        self.datapaths[dp.id] = dp
        self.linkwatch.check.watch(time.monotonic(), sw)  # its links are judged from now (it punts probes now)
        self.queues.connected(time.monotonic())  # a switch's queues: soon after it connects
        self._state(sw, "connected")
        self.counters["switch-connects"] += 1
        LOG.info("switch %s (%016x) connected: %s", sw, dp.id, how)
        self.react(self.policy.on_switch(sw, True))
        if not self.syncs:
            self.settle_heap()

    def settle_heap(self) -> None:
        """No read-back is pending: what programming the switches built (at k=48 some 1.2 million objects:
        the mice tables, the partition, what each switch holds) lives on, so the cyclic collector stops
        walking it (``gc.freeze``, after collecting what is garbage now). The heap was frozen at launch only,
        before any switch came, so all of that stayed in the collector's oldest generation, and each
        collection of it would hold the loop (this one took 0.61 s at k=48). Cheap when little was built
        since the last time. What is frozen is never collected as a cycle: an object alive now that later
        becomes cyclic garbage stays (freed objects without cycles go as usual)."""
        t = time.monotonic()
        gc.collect()
        gc.freeze()
        self.collector.frozen()
        self.counters["heap-frozen"] += 1
        LOG.info("no read-back pending: the heap frozen (%d objects) in %.2f s", gc.get_freeze_count(),
                 time.monotonic() - t)

    def switch_down(self, dp) -> None:
        sw = self._switch(dp.id) if dp.id is not None else None
        if sw is not None and self.watching.get(sw) is dp:
            self.linkwatch.check.forget(sw)
        if sw is not None and self.watching.get(sw) is dp:
            del self.watching[sw]
            if not self.master():  # a follower only watched it
                now = time.monotonic()
                self._state(sw, "disconnected")
                self.links_changed(now, self.liveness.switch(now, sw, False))
                return
        if sw is not None and sw in self.syncs and self.syncs[sw].dp is dp:
            del self.syncs[sw]
            self.asking.discard(sw)
            self._state(sw, "disconnected")
        if dp.id is None or self.datapaths.get(dp.id) is not dp:
            return  # never programmed, or an old connection of a switch that has reconnected
        del self.datapaths[dp.id]
        self._state(sw, "disconnected")
        LOG.warning("switch %s (%016x) disconnected", sw, dp.id)
        now = time.monotonic()
        for o in self.tracker.switch_down(sw):
            self.finish(o)
        self.react(self.policy.on_switch(sw, False))
        self.links_changed(now, self.liveness.switch(now, sw, False))

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def on_group_desc(self, ev):
        self._read_back(ev.msg, "groups", ofmsg.parse_group)

    @set_ev_cls(ofp_event.EventOFPMeterConfigStatsReply, MAIN_DISPATCHER)
    def on_meter_config(self, ev):
        self._read_back(ev.msg, "meters", ofmsg.parse_meter)

    def _read_back(self, msg, what: str, parse) -> bool:
        """One reply of a connecting switch's read-back; False if it is not one."""
        sw = self._switch(msg.datapath.id)
        sync = self.syncs.get(sw) if sw is not None else None
        if sync is None or msg.xid not in sync.waiting:
            return False
        self.readback_seen = now = time.monotonic()
        if sync.take(msg.xid, what, msg.body, parse, bool(msg.flags & ofproto.OFPMPF_REPLY_MORE), now):
            self.synced(sw, sync)
        return True

    # ----- links ------------------------------------------------------------------------------
    def port_changed(self, now: float, sw: str, port) -> None:
        up = not (port.state & ofproto.OFPPS_LINK_DOWN or port.config & ofproto.OFPPC_PORT_DOWN)
        if up and (sw, port.port_no) in self.liveness.port_down:
            self.linkwatch.check.watch(now, sw, port.port_no)  # back up: judged by LLDP after its grace
        self.links_changed(now, self.liveness.port(now, sw, port.port_no, up))

    def links_changed(self, now: float, change) -> None:
        if change.verify:
            self._verify_ports(now, change.verify)
        if not change:
            return
        for a, b in sorted(ln for ln in change.down if ln[0] < ln[1]):
            LOG.warning("link %s-%s is down", a, b)
        for a, b in sorted(ln for ln in change.up if ln[0] < ln[1]):
            LOG.info("link %s-%s is up again (held down %.1f s)", a, b, self.liveness.hold_down_s)
        t = time.monotonic()
        reaction = self.policy.on_links(now, self.liveness.dead())
        decided = time.monotonic() - t
        self.react(reaction)
        LOG.info("links changed: decided in %.3f s, handed to the switches in %.3f s (%d switches, %d changes, "
                 "%d transactions)", decided, time.monotonic() - t - decided, len({sw for sw, _ in reaction.ops}),
                 sum(len(ops) for _, ops in reaction.ops), len(reaction.txns))

    # ----- LLDP: the links as the fabric is wired (``LinkWatch`` decides) ---------------------------
    def lldp_tick(self, now: float) -> None:
        """Probe every programmed switch when a round is due; apply what LLDP judges (``LinkWatch.judge``)."""
        if not self.master():
            return
        self.linkwatch.round_due(now, lambda: [self._switch(dpid) for dpid in self.datapaths])
        self.send_probes(self.linkwatch.to_probe(now))
        judged = self.linkwatch.judge(now)
        if judged is None:
            return
        if judged.faults is not None:
            self.links_changed(now, self.liveness.lldp(now, judged.faults))
        for rec in judged.records:
            self.record(rec)

    def reset_linkcheck(self, now: float) -> None:
        """A member that starts or stops leading judges links afresh: nothing it saw before counts."""
        self.linkwatch.reset()
        self.links_changed(now, self.liveness.lldp(now, set()))

    def send_probes(self, switches) -> None:
        """The probes of the switches whose turn it is (``LinkWatch.to_probe`` paces a round to the
        budget); one that has gone since the round began is skipped."""
        for sw in switches:
            dp = self._dp(sw) if sw is not None else None
            if dp is None:
                continue
            for port, frame in self.linkwatch.probes(dp.id, sw, getattr(dp, "ports", {})):
                dp.send_msg(ofmsg.bind([ofmsg.packet_out(port, frame)], dp)[0])

    # ----- the isolation queues, through each switch's OVSDB (``QueueKeeper`` decides) -----------------
    def _queue_loop(self):
        while self.is_active:
            hub.sleep(0.5)
            now = time.monotonic()
            if not self.master() or not self.queues.due(now):
                continue
            try:
                connected = {sw for sw in self.fabric.switches if self._dp(sw) is not None}
                done, errors, seen = run_blocking(queue_keeper.keep, self.fabric, self.cfg.isolation_config(),
                                                  portmap.parse_endpoints(self.cfg.ovsdb), 10, connected)
            except Exception as e:  # ovs-vsctl missing, a bug: said, counted, tried again soon
                done, errors, seen = [], [str(e)], set()
            for rec in self.queues.checked(time.monotonic(), time.time(), done, errors, seen):
                self.record(rec)

    # ----- messages from the switches ------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        if not self.master():  # a follower answers nothing (the host retries; the leader answers)
            self.counters["packet-in-not-leader"] += 1
            return
        sw = self._switch(msg.datapath.id, "packet-in-dropped")
        if sw is not None and linkwatch.is_lldp(msg.data):
            self.linkwatch.heard(time.monotonic(), sw, msg.match["in_port"], msg.data)
        elif sw is not None:
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
        self.metrics.openflow_error(OFP_ERROR_TYPES.get(msg.type, "unknown"))  # (labels from a closed set)
        sw = self._switch(msg.datapath.id)
        if sw is None or self.watching.get(sw) is not msg.datapath:  # not the connection it was admitted on
            self.counters["error-not-admitted"] += 1
            return
        if self.handover is not None and (msg.type == ofproto.OFPET_ROLE_REQUEST_FAILED or (
                msg.type == ofproto.OFPET_BAD_REQUEST and msg.code == ofproto.OFPBRC_IS_SLAVE)):
            self._stale(f"switch {msg.datapath.id:016x} refused us as master (error type {msg.type} code "
                        f"{msg.code}): another member leads with a newer generation")
            return
        LOG.error("switch %016x reported error type=%d code=%d", msg.datapath.id, msg.type, msg.code)
        self.finish(self.tracker.error(sw, msg.xid, msg.type, msg.code))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def on_flow_removed(self, ev):
        if not self.master():
            return
        sw = self._switch(ev.msg.datapath.id, "flow-removed-unknown-switch")
        if ev.msg.reason == ofproto.OFPRR_DELETE:
            self.counters["flow-removed-by-us"] += 1  # our own delete (a move, a release): nothing to release
            return
        if sw is not None:
            self.react(self.policy.on_flow_removed(time.monotonic(), sw, ev.msg.cookie))

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def on_flow_stats(self, ev):
        msg = ev.msg
        if self._read_back(msg, "flows", ofmsg.parse_flow):
            return
        sw = self._switch(msg.datapath.id, "stats-late-or-unknown")
        if sw is not None:
            entries = [(st.match, st.byte_count, (st.table_id, st.priority, st.cookie)) for st in msg.body]
            more = bool(msg.flags & ofproto.OFPMPF_REPLY_MORE)
            self.react(self.policy.on_flow_stats(time.monotonic(), sw, entries, more))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev):
        msg = ev.msg
        sw = self._switch(msg.datapath.id)
        if sw is not None:
            if msg.reason == ofproto.OFPPR_DELETE:
                self.links_changed(time.monotonic(), self.liveness.port(time.monotonic(), sw, msg.desc.port_no, False))
            else:
                self.port_changed(time.monotonic(), sw, msg.desc)

    def _verify_ports(self, now: float, ports) -> None:
        """sFlow says these ports are down: ask their switches (a port description over the switch's own
        channel, at most once a switch every ``VERIFY_EVERY_S``); their answer, not sFlow, decides."""
        for sw in sorted({s for s, _ in ports}):
            dp = self._dp(sw)
            if dp is None or now - self._verified_at.get(sw, -1e9) < VERIFY_EVERY_S:
                continue
            self._verified_at[sw] = now
            self.counters["sflow-port-verify"] += 1
            dp.send_msg(ofmsg.bind([ofmsg.port_desc_request()], dp)[0])

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def on_port_desc(self, ev):
        """A port description asked for (``_verify_ports``): every port's state, from the switch itself."""
        sw = self._switch(ev.msg.datapath.id)
        if sw is None:
            return
        now = time.monotonic()
        for port in ev.msg.body:
            if port.port_no < ofproto.OFPP_MAX:
                self.port_changed(now, sw, port)

    # ----- monitoring ------------------------------------------------------------------------
    @set_ev_cls(EventPortState)
    def on_sflow_port(self, ev):
        """sFlow's interface status is one more input of the liveness model (a change, not a state)."""
        st = ev.state
        self.counters[f"sflow-port-{'up' if st.up else 'down'}"] += 1
        self.links_changed(time.monotonic(), self.liveness.port(time.monotonic(), st.switch, st.port, st.up, "sflow"))

    @set_ev_cls(EventElephantStart)
    def on_elephant(self, ev):
        if not self.master():
            return
        self.react(self.policy.on_elephant_start(time.monotonic(), ev.start))

    @set_ev_cls(EventElephantEnd)
    def on_elephant_end(self, ev):
        if not self.master():
            return
        self.react(self.policy.on_elephant_end(time.monotonic(), ev.end))

    # ----- the period -----------------------------------------------------------------------
    def _period_loop(self):
        while self.is_active:
            hub.sleep(schedule.PERIOD_S)
            try:
                self.period(time.monotonic())
            except Exception:  # a bug here must not stop the loop or the controller
                LOG.exception("freeway period failed")

    def _tick_loop(self):
        """Link hold-downs ending, and read-backs that never completed."""
        while self.is_active:
            asleep = time.monotonic()
            hub.sleep(schedule.TICK_S)
            try:
                now = time.monotonic()
                lag = now - asleep - schedule.TICK_S
                self.loop_lag(lag)
                self.collector.tick(now)
                self.linkwatch.loop_held(now, lag)  # late probes are not silence: LLDP judges nothing for a while
                if config.take_reload_request():
                    self.reload()
                self.links_changed(now, self.liveness.tick(now))
                self.lldp_tick(now)
                self.early_round(now)
                for sw, sync in list(self.syncs.items()):
                    if self.syncs.get(sw) is not sync:  # finished (or replaced) by what this loop did before
                        continue
                    if not sync.requested:
                        self._read_back_when_settled(sw, now)
                    elif sync.late(now, self.readback_seen, SYNC_TIMEOUT_S, SYNC_CAP_S) and (
                            now - sync.started > SYNC_CAP_S or not self._behind(sync.dp)):
                        self.synced(sw, sync, complete=False)
            except Exception:
                LOG.exception("freeway tick failed")

    def _behind(self, dp) -> bool:
        """Whether what a switch sent may still wait on this side: events not yet handled, or its bytes
        unread. A read-back is then not late (at k=32 a restart's 1,280 read-backs come back faster than
        they are handled); it is reprogrammed from scratch only once the controller has caught up, or
        after ``SYNC_CAP_S``."""
        return not self.events.empty() or bool(ofchannel.unread(getattr(dp, "socket", None)))

    def loop_lag(self, lag: float) -> None:
        """How late the tick loop woke: the time the process's single event loop spent on something
        else (a long handler, a burst of messages) beyond its sleep. Every greenthread waits as long:
        OpenFlow echo replies, LLDP probes, barriers. A stall over a second is logged."""
        lag = max(0.0, lag)
        self.metrics.loop_lag.observe(lag)
        if lag >= LAG_WARN_S:
            self.counters["event-loop-stalled"] += 1
            LOG.warning("the controller's event loop was held for %.1f s (echo replies, probes and barriers "
                        "waited as long)", lag)

    def period(self, now: float) -> None:
        if config.active() is not self.cfg:  # reloaded: the live settings take effect from this period
            self.reconfigure(config.active())
        if not self.master():  # a follower keeps watching, decides nothing
            self._view = self.view(now)
            self.periods += 1
            return
        view = self._view = self.view(now)
        busy = time.monotonic() - now  # the period's own time, not what runs between its parts
        if self.policy.periodic or self.monitor is not None:
            parts = iter(self.policy.period_parts(now, view))
            while True:
                hub.sleep(0)  # between the parts, what waits on the loop (a handshake, a barrier) goes on
                t = time.monotonic()
                part = next(parts, None)
                if part is None:
                    break
                self.react(part)
                busy += time.monotonic() - t
        t = time.monotonic()
        for o in self.tracker.expire(now):
            self.finish(o)
        self.metrics.period.observe(busy + time.monotonic() - t)
        self.periods += 1

    def early_round(self, now: float) -> None:
        """A link newly over EFM's threshold (a counter delta, or its flow samples' lower bound) gets its
        round now rather than at the next period: up to a second sooner (at most one every ``schedule.EARLY_ROUND_S``)."""
        if self.monitor is None or not self.master() or not schedule.early_round_due(now, self._early_at):
            return
        if self.monitor.estimator.take_hot():
            self._early_at = now
            self.react(self.policy.on_hot(now, self.view(now)))

    def view(self, now: float) -> View:
        return self.monitor.view(now) if self.monitor is not None else View(now)

    def shown_view(self) -> View:
        """What the operator is shown: the view the latest period decided on (one per epoch, shared by the
        API's documents and the metrics), or a fresh one before the first period."""
        return self._view if self._view is not None else self.view(time.monotonic())

    # ----- decisions, reloads --------------------------------------------------------------
    def record(self, ev: dict) -> None:
        """A decision carried out: into the decision log (API), the metrics, the JSON log and the events
        file. A decision that answers a handshake says how long the answer took (``latency_s``)."""
        now = time.monotonic()
        received = ev.pop("received", None)
        if received is not None:
            ev["latency_s"] = round(now - received, 6)
        rec = self.decisions.add(ev, time.time())
        self.metrics.decided(rec)
        DECISIONS.info("%s", rec["type"], extra={"decision": rec})
        if self.monitor is not None:
            self.monitor.write_event(ev)

    def reconfigure(self, cfg: config.Config) -> None:
        self.cfg = cfg
        self.policy.reconfigure(cfg)
        if self.monitor is not None:
            self.monitor.estimator.hot_threshold = self.policy.hot_threshold()
        self.liveness.hold_down_s = cfg.link_hold_down_s
        self.linkwatch.configure(cfg.lldp_interval_s, cfg.lldp_timeout_s, cfg.lldp_budget_pps)

    def reload(self) -> None:
        """SIGHUP: read the configuration again; the live settings that changed take effect at the next
        period (both apps), the others are named and kept; an invalid file changes nothing."""
        res = config.reload_active()
        self.reloads += 1
        if res.cfg is not None:
            self.config_loaded = time.time()
            self.restart_needed = res.restart
            self.reconfigure(res.cfg)  # in force for the next period (monitoring takes it within its 0.1 s tick)
        self.record(res.report())

    # ----- a cluster of controllers (etcd; ``Handover`` decides) ---------------------------------
    def master(self) -> bool:
        """Whether this controller programs the switches: a lone one always, a cluster's leader only."""
        return self.handover is None or self.handover.leads()

    def _programming(self) -> bool:
        return bool(self.datapaths or self.syncs)

    def _send_role(self, dp) -> None:
        role = self.handover.role()
        if role is not None:
            dp.send_msg(ofmsg.bind([ofmsg.role_request(*role)], dp)[0])

    def _cluster_loop(self):
        """The election (etcd is called in an OS thread); what changed is carried out here."""
        while self.is_active:
            try:
                for step in self.member.step(time.monotonic(), time.time(), self._programming()):
                    self.carry_out(step)
                if self.master():
                    self.member.sync(self.policy.records(time.monotonic()))
            except Exception:  # a bug here must not stop the election
                LOG.exception("cluster loop failed")
            hub.sleep(self.member.pause(FOLLOWER_LOOK_S))

    def carry_out(self, step) -> None:
        """What a ``handover.Step`` says: records, refusals, stopping, taking over, the switches' roles."""
        for rec in step.records:
            self.record(rec)
        if step.refusing is not None:
            self.policy.refusing = step.refusing
        if step.stop:
            self._stop_programming(step.stop)
        if step.take_over:
            self._take_over()
        elif step.roles:
            for dp in self.watching.values():
                self._send_role(dp)

    def _fresh_policy(self) -> None:
        refusing = self.policy.refusing
        self.policy = modes.make(self.cfg, self.fabric)
        self.policy.refusing = refusing
        self.tracker = Tracker(BARRIER_TIMEOUT_S)
        self.surface.forget()

    def _take_over(self) -> None:
        """Elected: what the switches cannot tell comes from the store; then every connected switch is read
        back and sent only the difference."""
        records = self.member.read_records()
        self._fresh_policy()
        self.reset_linkcheck(time.monotonic())
        self.policy.take_records(records)
        for sw, dp in list(self.watching.items()):
            self._send_role(dp)
            self._adopt(sw, dp)
        LOG.info("cluster: taking over %d connected switches (%d elephant records)", len(self.watching),
                 len(records))

    def _stale(self, why: str) -> None:
        self.carry_out(self.handover.refused(why, self._programming()))

    def _stop_programming(self, why: str) -> None:
        LOG.warning("cluster: %s stops programming the switches: %s", self.handover.state.node, why)
        self.datapaths.clear()
        self.syncs.clear()
        self._fresh_policy()
        self.reset_linkcheck(time.monotonic())
        for sw in self.watching:
            self._state(sw, "standby")

    def _store_then_done(self, o: Outcome) -> None:
        """Write what a confirmed install's answer relies on, then answer; a store that does not take it
        undoes the install (the answer becomes a NACK that says why)."""
        from ryu_apps.openflow.txn import rollback_of

        why = self.member.put_first(o.txn.store)
        if why:
            LOG.error("%s: the cluster store did not take its record: %s", o.txn.name, why)
            self.send_ops(rollback_of(o.txn.install))
            self.react(o.txn.failed(Failure(f"cluster store (etcd) unreachable, not placed: {why}"[:180]))
                       if o.txn.failed else None)
            return
        self.react(o.txn.done() if o.txn.done else None)

    def snapshot(self) -> dict:
        return ({"controller": dict(self.counters + self.linkwatch.counters + self.queues.counters
                                    + self.policy.counters + ofchannel.STATS),
                 "state": self.policy.table_sizes() | {"transactions": len(self.tracker)}}
                | self.policy.snapshot())
