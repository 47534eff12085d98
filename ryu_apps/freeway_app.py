"""The Freeway os-ken app: thin handlers over the pure modules.

Each handler finds the switch in the fabric description, calls a pure function
and sends the messages it returns. In mode ``ecmp`` switches get the base
program; ``hedera`` adds per-flow edge entries polled for Global First Fit;
``efm-biggest``/``efm-smallest`` reroute elephants off congested links; in
mode ``freeway`` the FreewayCore adds the path partition, mice groups and the
elephant handshake (and EFM serves the elephants that did not announce).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from monitoring.sflow import parse_ethernet
from topology.fabric import Fabric

from . import arp, baselines, config, forwarding, ofmsg
from . import handshake as hs
from .efm import EFM, EFMConfig
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
from .hedera import HederaScheduler, ingress_counts
from .intents import DeleteFlows, ToGroup
from .isolation import mark_detected, tor_program
from .monitor_app import EventElephantEnd, EventElephantStart

LOG = logging.getLogger("freeway")
PERIOD_S = 1.0
BARRIER_TIMEOUT_S = 3.0


class _Txn:
    """Entries being installed: when every switch has confirmed (barrier), run ``done``; if a switch
    reports an error for one of them, send ``rollback`` and run ``failed`` instead."""

    def __init__(self, name, rollback, done, failed, started):
        self.name, self.rollback, self.done, self.failed, self.started = name, rollback, done, failed, started
        self.waiting: set[tuple[int, int]] = set()  # (dpid, xid) of barriers not yet answered
        self.xids: set[tuple[int, int]] = set()  # (dpid, xid) of every message sent
        self.broken = False


class FreewayApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.fabric = Fabric.load(self.cfg.fabric)
        self.datapaths: dict[int, object] = {}
        self.counters: Counter[str] = Counter()
        self.iso = self.cfg.isolation_config()
        self.core = FreewayCore(self.fabric, self.cfg.freeway_config(), self.iso) if self.cfg.mode == "freeway" \
            else None
        self.marks: dict[object, tuple[str, int]] = {}  # detected elephant -> (ingress ToR, cookie of its mark)
        self.services = {hs.SERVICE_IP: hs.SERVICE_MAC} if self.core else {}
        self.txns: dict[tuple[int, int], _Txn] = {}
        mode = self.cfg.mode
        self.efm = None
        if mode.startswith("efm-") or mode == "freeway":
            pick = "smallest" if mode == "efm-smallest" else "biggest"
            self.efm = EFM(self.fabric, EFMConfig(self.cfg.efm_threshold, pick, self.cfg.efm_hold_down_s))
        self.efm_pins: dict[object, tuple[int, int, int]] = {}  # flow -> (ident, gen, cookie)
        self._efm_said: dict[tuple[str, str], tuple[str, float]] = {}  # link -> (reason logged, when)
        self.hedera = HederaScheduler(self.fabric) if mode == "hedera" else None
        self.hedera_ids: dict[object, int] = {}
        self.hedera_pins: dict[object, int] = {}  # flow -> cookie of its placed entries
        self.hedera_round: dict = {}
        self._ids = 1
        LOG.info("freeway: mode %s, fabric %s (%d switches, %d hosts)", self.cfg.mode, self.fabric.topo,
                 len(self.fabric.switches), len(self.fabric.hosts))

    def start(self):
        super().start()
        if self.core is not None or self.efm is not None or self.hedera is not None:
            self.threads.append(hub.spawn(self._period_loop))
        mon = app_manager.lookup_service_brick("FreewayMonitor")
        if mon is not None:
            mon.snapshot_extra.append(self._snapshot)

    def send(self, dp, msgs) -> None:
        for m in ofmsg.bind(msgs, dp):
            dp.send_msg(m)

    def send_ops(self, ops, txn: _Txn | None = None) -> list[str]:
        """Send (switch, intents) in order; return the switches that are not connected."""
        missing = []
        for sw, intents in ops:
            dp = self.datapaths.get(self.fabric.switches[sw].dpid)
            if dp is None:
                missing.append(sw)
                continue
            for m in ofmsg.bind(ofmsg.messages(intents), dp):
                dp.send_msg(m)
                if txn is not None:
                    txn.xids.add((dp.id, m.xid))
                    self.txns[(dp.id, m.xid)] = txn
        return missing

    def transact(self, name, install, rollback, done, failed) -> None:
        """Install, then confirm with barriers; ``done()`` on success, rollback + ``failed(reason)`` on error."""
        t = _Txn(name, rollback, done, failed, time.monotonic())
        missing = self.send_ops(install, t)
        if missing:
            self._fail(t, f"switch {missing[0]} is not connected")
            return
        for sw in dict.fromkeys(s for s, _ in install):
            dp = self.datapaths[self.fabric.switches[sw].dpid]
            b = ofmsg.bind([ofmsg.barrier()], dp)[0]
            dp.send_msg(b)
            t.waiting.add((dp.id, b.xid))
            self.txns[(dp.id, b.xid)] = t
        if not t.waiting:
            done()

    def _fail(self, t: _Txn, reason: str) -> None:
        if t.broken:
            return
        t.broken = True
        for key in t.waiting | t.xids:
            self.txns.pop(key, None)
        self.send_ops(t.rollback)
        self.counters["rolled-back"] += 1
        LOG.error("%s rolled back: %s", t.name, reason)
        t.failed(reason)

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
        if self.hedera is not None:
            flows += baselines.hedera_edge_flows(self.fabric, sw.name)
        if self.iso is not None and sw.is_tor:
            flows, meters = tor_program(self.fabric, sw.name, flows, self.iso)
            extra = list(extra) + meters
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
        if self.hedera is not None:
            self.on_new_flow(msg.datapath, sw.name, in_port, msg.data)
            return
        udp = arp.decode_udp(msg.data) if self.core is not None else None
        if udp is None or udp[2] != hs.SERVICE_PORT:
            self.counters["packet-in-dropped"] += 1
            return
        self.on_handshake(msg.datapath, sw.name, in_port, *udp)

    def on_new_flow(self, dp, switch, in_port, data):
        """Hedera: a new TCP flow's first packet: give it its own edge entry (ECMP, counted), send it on."""
        _, ft, _ = parse_ethernet(data)
        if ft is None or ft.proto != 6 or self.fabric.peer(switch, in_port) is None:
            self.counters["packet-in-dropped"] += 1
            return
        ident = self.hedera_ids.setdefault(ft, self._next_id())
        entry = baselines.hedera_edge_entry(ft, ident, 10)
        self.send(dp, ofmsg.messages([entry]) + [ofmsg.packet_out_actions([ToGroup(forwarding.UPLINK_GROUP)],
                                                                              data, in_port)])

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def on_handshake(self, dp, switch, in_port, ip_src, sport, _dport, payload):
        out = self.core.handshake(time.monotonic(), switch, in_port, ip_src, payload)
        host = self.fabric.host_by_ip(ip_src)
        if out.verdict != "ack":
            LOG.info("handshake from %s on %s port %d: %s", ip_src, switch, in_port, out.verdict)
        if out.reply is None:
            return

        def answer(reply=out.reply):
            data = ofmsg.udp_packet(hs.SERVICE_MAC, host.mac, hs.SERVICE_IP, host.ip, hs.SERVICE_PORT, sport, reply)
            self.send(dp, [ofmsg.packet_out(in_port, data)])
            self.counters["handshake-answered"] += 1

        if not out.ops:
            answer()
            return
        el = out.elephant

        def failed(reason):
            if "type=12" in reason and el.src.switch not in self.core.no_meters:  # OFPET_METER_MOD_FAILED
                self.core.no_meters.add(el.src.switch)
                LOG.error("%s refused a meter: forwarding elephants from it without meters", el.src.switch)
                ops = self.core._install(el)
                self.transact(f"elephant {ip_src}:{sport} (no meter)", ops,
                              [(sw, [DeleteFlows(el.cookie)]) for sw, _ in ops], answer, failed)
                return
            self.core._release(el.eid)
            answer(hs.encode(hs.Nack(el.nonce, el.size, f"the switches refused the path: {reason}")))

        LOG.info("elephant %s -> %s placed via %s (%.2f Mbit/s)", ip_src, el.dst.ip,
                 ", ".join(pl.path[len(pl.path) // 2] for pl in el.placements), el.rate_bps / 1e6)
        rollback = [(sw, [DeleteFlows(el.cookie)]) for sw, _ in out.ops]
        self.transact(f"elephant {ip_src}:{sport}", out.ops, rollback, answer, failed)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier_reply(self, ev):
        key = (ev.msg.datapath.id, ev.msg.xid)
        t = self.txns.pop(key, None)
        if t is None or t.broken:
            return
        t.waiting.discard(key)
        if not t.waiting:
            for k in t.xids:
                self.txns.pop(k, None)
            t.done()

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
        t = self.txns.get((msg.datapath.id, msg.xid))
        if t is not None:
            self._fail(t, f"switch {msg.datapath.id:016x} error type={msg.type} code={msg.code}")

    @set_ev_cls(EventElephantStart)
    def on_elephant(self, ev):
        """Freeway mode: an elephant monitoring found that never announced itself goes to a HOL path.
        Other modes with isolation: the detected elephant is marked at its ingress ToR."""
        if self.core is None:
            self._mark(ev.start)
            return
        if self.core.is_announced(ev.start.flow):
            return
        ops = self.core.adopt(time.monotonic(), ev.start.flow, max(ev.start.rate_bps, 1.0))
        if ops:
            el = self.core.elephants[self.core.by_subflow[hs.Subflow(*_tuple(ev.start.flow))]]
            LOG.info("unannounced elephant %s adopted onto %s", ev.start.flow, el.placements[0].path)
            self.transact(f"adopt {ev.start.flow}", ops, [(sw, [DeleteFlows(el.cookie)]) for sw, _ in ops],
                          lambda: None, lambda reason: self.core._release(el.eid))

    def _mark(self, start) -> None:
        f = start.flow
        if self.iso is None or f in self.marks or f.proto not in (6, 17) or not start.switch:
            return
        from .elephant_entries import flow_match

        cookie = baselines.cookie(0xC1, 1, self._next_id())
        entry = mark_detected(flow_match(f.src, f.dst, f.proto, f.sport, f.dport), start.port, self.iso, cookie)
        self.marks[f] = (start.switch, cookie)
        self.send_ops([(start.switch, [entry])])

    @set_ev_cls(EventElephantEnd)
    def on_elephant_end(self, ev):
        mark = self.marks.pop(ev.end.flow, None)
        if mark is not None:
            self.send_ops([(mark[0], [DeleteFlows(mark[1])])])

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def on_flow_stats(self, ev):
        """Hedera: collect edge byte counters for the current poll; late or malformed replies are skipped."""
        msg = ev.msg
        rnd = self.hedera_round
        key = (msg.datapath.id, msg.xid)
        if self.hedera is None or key not in rnd.get("waiting", set()):
            self.counters["stats-late-or-unknown"] += 1
            return
        sw = self.fabric.switch_by_dpid(msg.datapath.id)
        self.counters["stats-malformed"] += ingress_counts(self.fabric, sw.name,
                                                           [(st.match, st.byte_count) for st in msg.body],
                                                           rnd["counts"])
        if not (msg.flags & ofproto.OFPMPF_REPLY_MORE):
            rnd["waiting"].discard(key)
            if not rnd["waiting"]:
                self._hedera_schedule(rnd["time"], rnd["counts"])

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
        if self.core is not None:
            self._freeway_period(now, mon)
        if self.efm is not None and mon is not None:
            self._efm_round(now, mon)
        if self.hedera is not None and now - self.hedera_round.get("time", -1e9) >= self.cfg.hedera_poll_s:
            self._hedera_poll(now)
        for t in list(self.txns.values()):
            if now - t.started > BARRIER_TIMEOUT_S:
                self._fail(t, f"no confirmation within {BARRIER_TIMEOUT_S:.0f} s")

    def _freeway_period(self, now, mon):
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

    def _efm_round(self, now, mon):
        est = mon.estimator

        def flow_links(f):
            pinned = self.efm.paths.get(f)
            if pinned is not None:
                return set(zip(pinned, pinned[1:], strict=False))
            if self.core is not None and self.core.is_announced(f):
                el = self.core.elephants[self.core.by_subflow[hs.Subflow(*_tuple(f))]]
                return {ln for pl in el.placements for ln in zip(pl.path, pl.path[1:], strict=False)}
            st = est.flows.get(f)
            return est.flow_links(st) if st is not None else set()

        eligible = (lambda f: not self.core.is_announced(f)) if self.core is not None else (lambda f: True)
        paths = (lambda s, d: self.core.partition.hol_paths((s, d))) if self.core is not None else None
        rnd = self.efm.decide(now, dict(est.link_bps), dict(est.link_time), est.elephants_on, flow_links,
                              eligible, paths)
        for link, why in rnd.stuck.items():
            self.counters["efm-stuck"] += 1
            if self._efm_said.get(link, (None, -1e9))[0] != why or now - self._efm_said[link][1] > 60:
                self._efm_said[link] = (why, now)  # each link's reason once, again when it changes or after 60 s
                LOG.info("efm: %s->%s congested, nothing moved: %s", *link, why)
        for mv in rnd.moves:
            self._efm_move(mv)

    def _efm_move(self, mv):
        ident, gen, old = self.efm_pins.get(mv.flow, (self._next_id(), -1, None))
        install, after, rollback, new = baselines.pin(self.fabric, mv.new_path, mv.flow, baselines.EFM, ident,
                                                      gen + 1, self.efm.cfg.idle_s, old, self.iso)
        LOG.info("efm: %s->%s over %.0f%%: moving %s (%.2f Mbit/s) to %s", *mv.link, 100 * self.efm.cfg.threshold,
                 mv.flow, mv.rate_bps / 1e6, "-".join(mv.new_path))
        self.counters["efm-moves"] += 1
        mon = app_manager.lookup_service_brick("FreewayMonitor")
        if mon is not None:
            mon.write_event({"type": "reroute", "flow": str(mv.flow), "link": "%s>%s" % mv.link,
                             "path": list(mv.new_path), "rate_bps": mv.rate_bps})

        def done():
            self.efm_pins[mv.flow] = (ident, gen + 1, new)
            self.send_ops(after)

        self.transact(f"efm move {mv.flow}", install, rollback, done, lambda reason: self.efm.forget(mv.flow))

    def _hedera_poll(self, now):
        rnd = {"time": now, "waiting": set(), "counts": {}}
        self.hedera_round = rnd
        for sw in self.fabric.tors():
            dp = self.datapaths.get(self.fabric.switches[sw].dpid)
            if dp is None:
                continue
            req = ofmsg.bind([ofmsg.flow_stats_request(*baselines.ALL_FLOWS)], dp)[0]
            dp.send_msg(req)
            rnd["waiting"].add((dp.id, req.xid))

    def _hedera_schedule(self, now, counts):
        new, released = self.hedera.schedule(now, counts)
        for flow in released:
            cookie = self.hedera_pins.pop(flow, None)
            if cookie is not None:
                self.send_ops([(sw, [DeleteFlows(cookie)]) for sw in self.fabric.switches])
        for flow, path in new.items():
            ident = self.hedera_ids.setdefault(flow, self._next_id())
            install, _, rollback, cookie = baselines.pin(self.fabric, path, flow, baselines.HEDERA, ident, 0, 10,
                                                         iso=self.iso)
            LOG.info("hedera: %s is large (demand %.2f Mbit/s): placed on %s", flow,
                     self.hedera.gff.placed[flow].demand_bps / 1e6, "-".join(path))
            self.counters["hedera-placed"] += 1

            def done(flow=flow, cookie=cookie):
                self.hedera_pins[flow] = cookie

            self.transact(f"hedera {flow}", install, rollback, done, lambda r, flow=flow: self.hedera.gff.release(flow))

    def _snapshot(self) -> dict:
        snap = {"controller": dict(self.counters)}
        if self.core is None:
            return snap
        part = self.core.partition
        return snap | {"lol_paths": {f"{s}>{d}": n for (s, d), n in sorted(part.n.items())},
                       "lol_link_names": sorted(f"{a}>{b}" for a, b in part.lol_links()),
                       "lol_min": part.n_min,
                "lol_links": len(part.lol_links()), "draining": len(part.draining),
                "allocated": {str(e.eid): round(e.rate_bps) for e in self.core.elephants.values()},
                "freeway": dict(self.core.counters)}


def _tuple(flow) -> tuple:
    return (flow.src, flow.dst, flow.proto, flow.sport, flow.dport)
