"""The controller app's links: port status, LLDP probes and the isolation queues (part of ``ControllerApp``).

What is up is decided by the liveness model (``control.liveness``) from OpenFlow port status, LLDP
(``control.linkwatch``) and sFlow's word checked against the switch; the isolation queues are kept on each
switch's OVSDB (``control.queue_keeper``). Each handler hands its input to those and the policy's
``on_links`` to the executor.
"""

from __future__ import annotations

import logging
import time

from monitoring import portmap
from ryu_apps.control import queue_keeper
from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import MAIN_DISPATCHER, hub, ofp_event, ofproto, run_blocking, set_ev_cls

LOG = logging.getLogger("freeway")
VERIFY_EVERY_S = 0.5  # a switch is asked for its ports' state at most this often on sFlow's word


class LinksMixin:
    """Part of ``ControllerApp`` (see the module's docstring)."""

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
