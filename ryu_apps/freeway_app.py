"""The Freeway os-ken app: thin handlers over the pure modules.

Each handler finds the switch in the fabric description, calls a pure function
and sends the messages it returns. In mode ``ecmp`` switches get the base
program; in mode ``freeway`` the FreewayCore adds the path partition, mice
groups and the elephant handshake.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from topology.fabric import Fabric

from . import arp, config, forwarding, ofmsg
from . import handshake as hs
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
from .freeway_core import FreewayCore, active_pairs

LOG = logging.getLogger("freeway")
PERIOD_S = 1.0
BARRIER_TIMEOUT_S = 3.0


class _Pending:
    """A handshake whose entries are being installed: answer once every switch confirmed."""

    def __init__(self, outcome, dp, port, host, sport, started):
        self.outcome, self.dp, self.port, self.host, self.sport = outcome, dp, port, host, sport
        self.waiting: set[tuple[int, int]] = set()  # (dpid, xid) of barriers not yet answered
        self.started = started


class FreewayApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.fabric = Fabric.load(self.cfg.fabric)
        self.datapaths: dict[int, object] = {}
        self.counters: Counter[str] = Counter()
        self.core = FreewayCore(self.fabric, self.cfg.freeway_config()) if self.cfg.mode == "freeway" else None
        self.services = {hs.SERVICE_IP: hs.SERVICE_MAC} if self.core else {}
        self.pending: dict[tuple[int, int], _Pending] = {}
        self._lol_reported: dict = {}
        LOG.info("freeway: mode %s, fabric %s (%d switches, %d hosts)", self.cfg.mode, self.fabric.topo,
                 len(self.fabric.switches), len(self.fabric.hosts))

    def start(self):
        super().start()
        if self.core is not None:
            self.threads.append(hub.spawn(self._period_loop))
            mon = app_manager.lookup_service_brick("FreewayMonitor")
            if mon is not None:
                mon.snapshot_extra.append(self._snapshot)

    def send(self, dp, msgs) -> None:
        for m in ofmsg.bind(msgs, dp):
            dp.send_msg(m)

    def send_ops(self, ops) -> list[str]:
        """Send (switch, intents) in order; return the switches that are not connected."""
        missing = []
        for sw, intents in ops:
            dp = self.datapaths.get(self.fabric.switches[sw].dpid)
            if dp is None:
                missing.append(sw)
                continue
            self.send(dp, ofmsg.messages(intents))
        return missing

    # ----- switches --------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_switch_features(self, ev):
        dp = ev.msg.datapath
        sw = self.fabric.switch_by_dpid(dp.id)
        if sw is None:
            self.counters["unknown-datapath"] += 1
            LOG.warning("datapath %016x is not in the fabric description: ignored", dp.id)
            return
        if self.core is not None:
            groups, flows, extra = self.core.switch_program(sw.name)
        else:
            (groups, flows), extra = forwarding.base_program(self.fabric, sw.name), []
        self.send(dp, ofmsg.program(groups, flows, extra))
        self.datapaths[dp.id] = dp
        LOG.info("switch %s (%016x) connected: programmed %d flows, %d groups", sw.name, dp.id, len(flows),
                 len(groups))

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def on_switch_gone(self, ev):
        dp = ev.datapath
        if dp.id is not None and self.datapaths.pop(dp.id, None) is not None:
            sw = self.fabric.switch_by_dpid(dp.id)
            LOG.warning("switch %s (%016x) disconnected", sw.name if sw else "?", dp.id)

    # ----- packets from the switches ------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        sw = self.fabric.switch_by_dpid(msg.datapath.id)
        if sw is None:
            self.counters["packet-in-dropped"] += 1
            return
        in_port = msg.match["in_port"]
        fields = arp.decode(msg.data)
        if fields is not None:
            reply, reason = arp.answer(self.fabric, sw.name, in_port, *fields, services=self.services)
            self.counters[f"arp-{reason}"] += 1
            if reply is not None:
                data = ofmsg.arp_reply_packet(reply.requester_mac, reply.requester_ip, reply.target_mac,
                                              reply.target_ip)
                self.send(msg.datapath, [ofmsg.packet_out(reply.out_port, data)])
            return
        udp = arp.decode_udp(msg.data) if self.core is not None else None
        if udp is None or udp[2] != hs.SERVICE_PORT:
            self.counters["packet-in-dropped"] += 1
            return
        self.on_handshake(msg.datapath, sw.name, in_port, *udp)

    def on_handshake(self, dp, switch, in_port, ip_src, sport, _dport, payload):
        out = self.core.handshake(time.monotonic(), switch, in_port, ip_src, payload)
        host = self.fabric.host_by_ip(ip_src)
        if out.verdict != "ack":
            LOG.info("handshake from %s on %s port %d: %s", ip_src, switch, in_port, out.verdict)
        if out.reply is None:
            return
        p = _Pending(out, dp, in_port, host, sport, time.monotonic())
        missing = self.send_ops(out.ops)
        if missing:
            LOG.error("handshake from %s: switches %s not connected", ip_src, ", ".join(missing))
        for sw in dict.fromkeys(s for s, _ in out.ops):
            sdp = self.datapaths.get(self.fabric.switches[sw].dpid)
            if sdp is None:
                continue
            b = ofmsg.bind([ofmsg.barrier()], sdp)[0]
            sdp.send_msg(b)
            p.waiting.add((sdp.id, b.xid))
            self.pending[(sdp.id, b.xid)] = p
        if not p.waiting:
            self._answer(p)
        elif out.elephant is not None:
            LOG.info("elephant %s -> %s placed via %s (%.2f Mbit/s); waiting for %d switches",
                     ip_src, out.elephant.dst.ip, ", ".join(pl.path[len(pl.path) // 2] for pl in out.elephant.placements),
                     out.elephant.rate_bps / 1e6, len(p.waiting))

    def _answer(self, p: _Pending) -> None:
        data = ofmsg.udp_packet(hs.SERVICE_MAC, p.host.mac, hs.SERVICE_IP, p.host.ip, hs.SERVICE_PORT, p.sport,
                                p.outcome.reply)
        self.send(p.dp, [ofmsg.packet_out(p.port, data)])
        self.counters["handshake-answered"] += 1

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier_reply(self, ev):
        key = (ev.msg.datapath.id, ev.msg.xid)
        p = self.pending.pop(key, None)
        if p is None:
            return
        p.waiting.discard(key)
        if not p.waiting:
            self._answer(p)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def on_flow_removed(self, ev):
        if self.core is None:
            return
        sw = self.fabric.switch_by_dpid(ev.msg.datapath.id)
        ops = self.core.flow_removed(sw.name if sw else "", ev.msg.cookie)
        if ops:
            LOG.info("elephant entry %x expired on %s: allocation released", ev.msg.cookie, sw.name)
            self.send_ops(list(ops.items()))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev):
        msg = ev.msg
        self.counters["switch-errors"] += 1
        LOG.error("switch %016x reported error type=%d code=%d", msg.datapath.id, msg.type, msg.code)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev):
        msg = ev.msg
        sw = self.fabric.switch_by_dpid(msg.datapath.id)
        LOG.info("port status on %s: port %d reason %d state %d", sw.name if sw else msg.datapath.id,
                 msg.desc.port_no, msg.reason, msg.desc.state)

    # ----- the Freeway period ----------------------------------------------------------
    def _period_loop(self):
        while self.is_active:
            hub.sleep(PERIOD_S)
            try:
                self._period()
            except Exception:  # a bug here must not stop the loop or the controller
                LOG.exception("freeway period failed")

    def _period(self):
        now = time.monotonic()
        mon = app_manager.lookup_service_brick("FreewayMonitor")
        pairs = set()
        if mon is not None:
            self.core.link_util = dict(mon.estimator.link_util)
            pairs = active_pairs(self.fabric, mon.estimator.recent_mice(now, self.core.cfg.active_s))
        res, ops = self.core.period(now, pairs)
        for pair in res.added:
            LOG.info("partition: %s -> %s now has %d low-latency paths (added)", *pair, self.core.partition.n_lol(pair))
        for pair in res.removed:
            LOG.info("partition: %s -> %s now has %d low-latency paths (removed)", *pair,
                     self.core.partition.n_lol(pair))
        if res.became_hol:
            LOG.info("partition: %d drained links are HOL again", len(res.became_hol))
        self.send_ops(ops)
        for (dpid, xid), p in list(self.pending.items()):
            if now - p.started > BARRIER_TIMEOUT_S:
                del self.pending[(dpid, xid)]
                LOG.warning("handshake: switch %016x did not confirm within %.0f s", dpid, BARRIER_TIMEOUT_S)

    def _snapshot(self) -> dict:
        part = self.core.partition
        return {"lol_paths": {f"{s}>{d}": n for (s, d), n in sorted(part.n.items())},
                "lol_links": len(part.lol_links()), "draining": len(part.draining),
                "allocated": {str(e.eid): round(e.rate_bps) for e in self.core.elephants.values()},
                "freeway": dict(self.core.counters)}
