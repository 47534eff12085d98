"""The controller app: os-ken events in, OpenFlow messages out.

Every handler finds the switch, calls the mode's policy (``modes``) with ``now`` and the parsed input,
and carries out the Reaction it returns: send intents, install and confirm transactions
(``txn.Tracker``), write decision records. No handler knows which mode runs. What is not translation
lives in its own object: the link check (``control.linkwatch.LinkWatch``), the queue keeper
(``control.queue_keeper.QueueKeeper``), the cluster handover (``control.handover.Handover``) and what
the operator sees (``operators.surface.Surface``). A Reaction is carried out by the ``Executor``
(``openflow.executor``) that the ns-3 engine and the simulated fabric use too; this app is its carrier
(the wall clock, each switch's channel). The app keeps its loops here; the switches' connections and
read-back, the links and the cluster are its parts beside it (``controller_switches``,
``controller_links``, ``controller_cluster``).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections import Counter

from monitoring.view import View
from ryu_apps import config, modes, ofchannel
from ryu_apps.control import linkwatch, queue_keeper, schedule
from ryu_apps.control.liveness import Liveness
from ryu_apps.controller_cluster import ClusterMixin
from ryu_apps.controller_links import LinksMixin
from ryu_apps.controller_switches import SwitchesMixin
from ryu_apps.host import handshake as hs
from ryu_apps.launcher import CollectorPace
from ryu_apps.monitor_app import EventElephantEnd, EventElephantStart, EventPortState
from ryu_apps.openflow import ofmsg, reconcile
from ryu_apps.openflow.executor import Executor
from ryu_apps.openflow.framework import (
    CONFIG_DISPATCHER,
    MAIN_DISPATCHER,
    app_manager,
    hub,
    ofp_event,
    ofproto,
    run_blocking,
    set_ev_cls,
)
from ryu_apps.openflow.txn import Outcome
from ryu_apps.operators import opstate
from ryu_apps.operators.decision_log import DecisionLog
from ryu_apps.operators.metrics import Metrics
from ryu_apps.operators.surface import Surface
from topology.fabric import Fabric

LOG = logging.getLogger("freeway")
DECISIONS = logging.getLogger("freeway.decisions")  # one record per decision (shown by --log-format json)
LAG_WARN_S = 1.0  # the event loop held this long is logged (``loop_lag``)
ANSWER_POLL_S = 0.001  # background work giving way to an awaited answer looks again this often (``give_way``)
BARRIER_TIMEOUT_S = 3.0
OFP_ERROR_TYPES = {getattr(ofproto, n): n[len("OFPET_"):] for n in dir(ofproto) if n.startswith("OFPET_")}


class ControllerApp(SwitchesMixin, LinksMixin, ClusterMixin,
                    app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.fabric = Fabric.load(self.cfg.fabric)
        self.policy = modes.make(self.cfg, self.fabric)
        self.executor = Executor(self, BARRIER_TIMEOUT_S, self._durable, self._confirmed)  # (this app carries)
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
        self._events_turn, self._events_were_empty = 0.0, True  # the handler loop's turn (``schedule.events_turn``)
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
            self.monitor.between_parts = self.give_way
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

    # ----- carrying out a Reaction --------------------------------------------------------
    def _switch(self, dpid: int, unknown: str = ""):
        """The switch's name; None (counted under ``unknown``) for a datapath not in the description."""
        sw = self.fabric.switch_by_dpid(dpid)
        if sw is None and unknown:
            self.counters[unknown] += 1
        return sw.name if sw is not None else None

    def _dp(self, switch: str):
        return self.datapaths.get(self.fabric.switches[switch].dpid)

    # the Carrier an Executor is handed: the wall clock, each switch's channel
    def clock(self) -> float:
        return time.monotonic()

    def connected(self, switch: str) -> bool:
        return self._dp(switch) is not None

    def send(self, switch: str, intents):
        """Each message's xid is told before the message goes out: sending can wait for room in a switch's
        send queue, and meanwhile a channel's reader may hand the executor a switch's error (``_send_event``)."""
        dp = self._dp(switch)
        for m in ofmsg.bind(ofmsg.messages(intents), dp):
            yield m.xid
            dp.send_msg(m)

    def barrier(self, switch: str) -> int:
        """(Its reply cannot be handled before the executor has the xid: os-ken's ``send_msg`` waits, if at all,
        only for room in the send queue, before the message is queued.)"""
        dp = self._dp(switch)
        b = ofmsg.bind([ofmsg.barrier()], dp)[0]
        dp.send_msg(b)
        return b.xid

    def react(self, r: modes.Reaction | None) -> None:
        self.executor.react(r)

    def _confirmed(self, o: Outcome) -> None:
        self.metrics.install_confirm.observe(time.monotonic() - o.started)

    def _durable(self, o: Outcome) -> bool:
        """A cluster's member writes what a confirmed install's answer relies on to its store first."""
        if o.txn.store and self.member is not None:
            hub.spawn(self._store_then_done, o)
            return True
        return False

    # ----- what does not wait in the app's queue ------------------------------------------------
    def _send_event(self, ev, state):
        """os-ken queues every event an app observes for its one handler loop (128 places; a full queue holds
        whoever sends, each switch's channel reader among them). A handshake's answer waits for its packet-in
        and for each switch's confirmation; behind monitoring's elephants and thousands of switches' messages
        that wait was seconds at k=48 (issue 63). So a barrier reply, an error and a handshake's packet-in are
        handled at once by the channel's reader that parsed them, in the order the switch sent them (an error
        before the barrier reply that follows it); the executor is told each xid before its message goes out
        (``send``). Everything else is queued, stamped, and its wait shown (``freeway_event_wait_seconds``)."""
        kind = self._event_kind(ev)
        if kind in ("barrier_reply", "error", "handshake"):
            self.counters[f"handled-at-once-{kind}"] += 1
            for handler in self.get_handlers(ev, state):
                try:
                    handler(ev)
                except hub.TaskExit:
                    raise
                except Exception:  # the channel's reader goes on, as the app's loop would
                    LOG.exception("handling %s failed", type(ev).__name__)
            return
        ev.fw_queued = (kind, time.monotonic())
        super()._send_event(ev, state)

    def get_handlers(self, ev, state=None):
        """(os-ken's handler loop asks this as it takes an event from the queue: the event's wait ends.)"""
        queued = ev.__dict__.pop("fw_queued", None)
        if queued is not None:
            now = time.monotonic()
            self.metrics.event_wait.labels(queued[0]).observe(now - queued[1])
            self._events_turn, let_go = schedule.events_turn(now, self._events_turn, self._events_were_empty,
                                                             not self.events.empty())
            if let_go:  # what waits on the loop (a barrier reply, a handshake) goes first
                hub.sleep(0)
                self._events_turn = time.monotonic()
            self._events_were_empty = self.events.empty()
        return super().get_handlers(ev, state)

    @staticmethod
    def _event_kind(ev) -> str:
        t = type(ev)
        if t is ofp_event.EventOFPBarrierReply:
            return "barrier_reply"
        if t is ofp_event.EventOFPErrorMsg:
            return "error"
        if t is ofp_event.EventOFPPacketIn:
            return "handshake" if hs.is_service_frame(ev.msg.data) else "packet_in"
        if t is EventElephantStart or t is EventElephantEnd:
            return "elephant"
        return "other"

    # ----- switches ----------------------------------------------------------------------
    # ----- links ------------------------------------------------------------------------------
    # ----- LLDP: the links as the fabric is wired (``LinkWatch`` decides) ---------------------------
    # ----- the isolation queues, through each switch's OVSDB (``QueueKeeper`` decides) -----------------
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
            self.executor.barrier_reply(sw, ev.msg.xid)

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
        self.executor.error(sw, msg.xid, msg.type, msg.code)

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
            self.give_way()
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
                self.give_way()
                if self.collector.tick(time.monotonic()) is not None:
                    hub.sleep(0)  # a collection (a middle one up to 84 ms at k=48): what waits goes on first
                self.linkwatch.loop_held(now, lag)  # late probes are not silence: LLDP judges nothing for a while
                if config.take_reload_request():
                    self.reload()
                self.links_changed(now, self.liveness.tick(now))
                self.lldp_tick(now)
                self.early_round(now)
                self._readback_tick(now)
            except Exception:
                LOG.exception("freeway tick failed")

    def give_way(self) -> None:
        """Between two pieces of background work (the period's parts, the tick's collection, monitoring's
        round): what waits on the loop goes on, and while a host awaits a handshake's answer the next piece
        waits for it, up to ``schedule.ANSWER_WAIT_S`` (``schedule.gives_way``)."""
        hub.sleep(0)
        t = time.monotonic()
        if not self.executor.awaited(t - schedule.ANSWER_FRESH_S):
            return
        self.counters["gave-way-to-answers"] += 1
        while schedule.gives_way(time.monotonic() - t, self.executor.awaited(t - schedule.ANSWER_FRESH_S)):
            hub.sleep(ANSWER_POLL_S)

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
            policy = self.policy
            parts = iter(policy.period_parts(now, view))
            while True:
                self.give_way()  # between the parts, what waits on the loop (a handshake, a barrier) goes on
                if self.policy is not policy or not self.master():  # handed over meanwhile: it decides no more
                    break
                t = time.monotonic()
                part = next(parts, None)
                if part is None:
                    break
                self.react(part)
                busy += time.monotonic() - t
        t = time.monotonic()
        self.executor.expire(now)
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
    def snapshot(self) -> dict:
        return ({"controller": dict(self.counters + self.executor.counters + self.linkwatch.counters + self.queues.counters
                                    + self.policy.counters + ofchannel.STATS),
                 "state": self.policy.table_sizes() | {"transactions": len(self.executor)}}
                | self.policy.snapshot())
