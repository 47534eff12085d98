"""Freeway mode: the partition, mice groups, the handshake and Bin-Pack (``FreewayState``); EFM's
rounds serve the elephants that did not announce."""

from __future__ import annotations

from monitoring.sflow import FiveTuple
from monitoring.view import View
from ryu_apps.algorithms.efm_rounds import EFMConfig
from ryu_apps.host import handshake as hs
from ryu_apps.modes.efm import Rerouter, _rerouter_sizes
from ryu_apps.modes.freeway_elephant import Elephant, eid_of
from ryu_apps.modes.freeway_state import FreewayConfig, FreewayState
from ryu_apps.modes.policy import LOG, NOTHING, Placed, Policy, Reaction, flow_dict
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import UdpOut
from ryu_apps.openflow.txn import METER_MOD_FAILED, Failure, Txn
from ryu_apps.programs import arp, pins
from topology.fabric import Fabric
from topology.paths import path_top
from topology.queues import IsolationConfig

ADOPTED_PART = 256  # elephants whose allocations one part of the period follows (at k=48 about 10 ms of the
# loop; all 3,000 of a k=48 steady state in one part held it 120 ms, 2026-12-04)


class FreewayPolicy(Policy):
    """Freeway: partition, mice groups, handshake and Bin-Pack; EFM for elephants that did not announce."""

    mode = "freeway"
    periodic = True
    takes_announces = True
    owned = (pipeline.FREEWAY_ELEPHANT, pipeline.FREEWAY_MICE, pipeline.EFM, pipeline.DETECTED)

    def __init__(self, fabric: Fabric, iso: IsolationConfig | None = None, cfg: FreewayConfig | None = None,
                 efm: EFMConfig | None = None):
        super().__init__(fabric, iso)
        self.state = FreewayState(fabric, cfg or FreewayConfig(), iso)
        self.punt = (self.state.cfg.punt_pps, self.state.cfg.punt_burst)
        self.services = {hs.SERVICE_IP: hs.SERVICE_MAC}
        self.rerouter = Rerouter(fabric, efm or EFMConfig(), iso, self.counters, self.next_id)

    def switch_program(self, switch: str) -> list:
        return super().switch_program(switch) + self.state.fixed_entries(switch)

    def reconfigure(self, cfg) -> None:
        self.state.cfg = cfg.freeway_config()
        self.state.partition.cfg = self.state.cfg.partition_config()
        self.rerouter.efm.cfg = cfg.efm_config()

    def dynamic_program(self, switch: str) -> list:
        return self.state.dynamic_program(switch) + self.rerouter.entries_on(switch)

    def after_links(self, now, went_down) -> Reaction:
        """The partition goes around the dead links (a LOL path that died is replaced by the next one);
        elephants that crossed one move at once (confirmed make-before-break) or, with no live path
        left, fall back to the mice paths; mice groups drop dead next hops; EFM's pins move too."""
        res, mice, moves, released = self.state.set_dead(now, self.dead)
        out = Reaction(mice, events=self._partition_events(res, "link down"))
        for el, install, after in moves:
            LOG.warning("elephant %d moved around a failure to %s", el.eid,
                        ", ".join(path_top(pl.path) for pl in el.placements))
            ev = {"type": "reroute", "how": "failure", "elephant": el.eid, "reason": "link down",
                  "paths": [list(pl.path) for pl in el.placements]}
            out.txns.append(Txn(f"elephant {el.eid} around a failure", install,
                                lambda after=after, ev=ev: Reaction(after, events=[ev]),
                                lambda _f, el=el, after=after: Reaction(self._abandon(el, after))))
        for el, ops in released:
            LOG.warning("elephant %d has no live path left: released, it travels with the mice", el.eid)
            out.ops += ops
            out.events.append({"type": "released", "how": "announced", "elephant": el.eid,
                               "reason": "no live path"})
        out += self.rerouter.after_links(now, went_down, self.view, self._elephant_paths)
        return out

    def recover(self, now, switch, flows, meters, groups=()) -> None:
        super().recover(now, switch, flows, meters, groups)
        for ident in self.rerouter.recover(now, switch, flows):
            self.seen_id(ident)
        for el in self.state.recover(now, switch, flows, meters, groups):
            LOG.info("elephant %d (%s -> %s, %.2f Mbit/s) recovered from the switches on %s", el.eid, el.src.ip,
                     el.dst.ip, el.rate_bps / 1e6, ", ".join(path_top(pl.path) for pl in el.placements))

    def settled(self, now: float) -> bool:
        return super().settled(now) and not self.state.recovering(now)

    def _abandon(self, el, after) -> list:
        """A move of ``el`` was rolled back: it is released (see ``FreewayState.abandon``) and says so."""
        ops = self.state.abandon(el, after)
        if ops:
            LOG.warning("elephant %d: its move was rolled back; released, it travels with the mice", el.eid)
        return ops

    def _elephant_paths(self, s: str, d: str) -> list:
        return self.state.elephant_paths((s, d))

    def _partition_events(self, res, reason: str) -> list[dict]:
        """Log the partition's changes and return them as decision records."""
        part, out = self.state.partition, []
        for change, pairs in (("added", res.added), ("removed", res.removed)):
            for pair in pairs:
                LOG.info("partition: %s -> %s now has %d low-latency paths (%s)", *pair, part.n_lol(pair), change)
                out.append({"type": "partition", "change": change, "src": pair[0], "dst": pair[1],
                            "lol_paths": part.n_lol(pair), "reason": reason})
        if res.became_hol:
            LOG.info("partition: %d drained links are HOL again", len(res.became_hol))
            out.append({"type": "partition", "change": "drained", "links": sorted("%s>%s" % ln for ln in
                                                                                 res.became_hol), "reason": reason})
        if res.became_lol or res.began_draining:
            out.append({"type": "partition", "change": "links", "reason": reason,
                        "became_lol": sorted("%s>%s" % ln for ln in res.became_lol),
                        "began_draining": sorted("%s>%s" % ln for ln in res.began_draining)})
        return out

    def on_other_packet(self, now, switch, port, data) -> Reaction:
        fin = pins.fin_of(data)
        if fin is not None:  # a placed elephant's FIN, copied by its ingress ToR (release_on_fin)
            el, ops = self.state.fin(switch, port, *fin)
            if el is None:
                return NOTHING()
            LOG.info("elephant %d sent its FIN on %s: allocation released", el.eid, switch)
            return Reaction(list(ops.items()), events=[{"type": "released", "how": "adopted" if el.adopted
                                                        else "announced", "elephant": el.eid, "reason": "fin"}])
        udp = arp.decode_udp(data)
        if udp is None or udp[2] != hs.SERVICE_PORT:
            self.counters["packet-in-dropped"] += 1
            return NOTHING()
        ip_src, sport, _, payload = udp
        host = self.fabric.host_by_ip(ip_src)

        def deliver(reply: bytes, _event: dict) -> Reaction:
            return Reaction([(switch, [UdpOut(port, hs.SERVICE_MAC, host.mac, hs.SERVICE_IP, host.ip,
                                              hs.SERVICE_PORT, sport, reply)])])
        return self._handshake(now, switch, port, ip_src, payload, arp.source_mac(data), deliver, "handshake")

    def announce(self, now: float, host: str, payload: bytes, deliver) -> Reaction:
        """An announce made on behalf of ``host`` (the operator API, for hosts that cannot run the agent):
        the same checks, placement and answer as the host's own handshake. ``deliver(reply)`` is called
        with the encoded ACK or NACK and its decision record once the switches confirmed (or refused) the
        entries, and returns the Reaction that carries it (None for the API)."""
        h = next(x for x in self.fabric.hosts if x.name == host)
        return self._handshake(now, h.switch, h.port, h.ip, payload, h.mac, deliver, "api")

    def _handshake(self, now, switch, port, ip_src, payload, mac, deliver, via: str) -> Reaction:
        out = self.state.handshake(now, switch, port, ip_src, payload, mac, refuse=self.refusing)
        if out.verdict != "ack":
            LOG.info("handshake from %s on %s port %d: %s", ip_src, switch, port, out.verdict)

        def refusal(cause: str, reason: str, answered: bool) -> dict:
            return {"type": "refusal", "how": "announced", "via": via, "host": ip_src, "switch": switch,
                    "port": port, "cause": cause, "reason": reason, "answered": answered, "received": now}

        if out.reply is None:
            ev = refusal(out.cause, out.verdict.partition(": ")[2], False)
            r = Reaction(events=[ev])
            if via == "api":
                r += deliver(None, ev)  # the API answers with the reason (a host gets nothing and retries)
            return r
        el = out.elephant

        def answer(reply: bytes = out.reply, event: dict | None = None) -> Reaction:
            """The reply, after the entries and meters of the elephants this one replaced are gone."""
            self.counters["handshake-answered"] += 1
            if el is not None:
                self.state.confirmed(el.eid)
            if event is None:
                event = (self._placed_event(el, "announced", via, now, out.verdict != "ack") if el is not None
                         else refusal(out.cause, out.verdict.partition(": ")[2], True))
            r = Reaction(list(out.replaced))
            r += deliver(reply, event)
            r.events.append(event)
            return r

        if not out.ops:
            return answer()
        LOG.info("elephant %s -> %s placed via %s (%.2f Mbit/s)", ip_src, el.dst.ip,
                 ", ".join(path_top(pl.path) for pl in el.placements), el.rate_bps / 1e6)
        return Reaction(txns=[Txn(f"elephant {ip_src} {el.subflows[0].sport}", out.ops, answer,
                                  self._refused(el, answer, refusal),
                                  store=[(f"elephants/{el.eid}", self.state.record(el))], answers=True)])

    def _placed_event(self, el: Elephant, how: str, via: str, now: float, repeat: bool = False) -> dict:
        return {"type": "placement", "how": how, "via": via, "elephant": el.eid, "host": el.src.ip,
                "flows": [flow_dict(s) for s in el.subflows], "rate_bps": round(el.rate_bps),
                "paths": [list(pl.path) for pl in el.placements], "repeat": repeat, "received": now}

    def withdraw(self, now: float, eid: int) -> Reaction | None:
        """An operator withdrew a Freeway elephant (announced or adopted): its entries and meter go, its
        allocation is released and the rate-less ones share again. None if there is no such elephant."""
        el = self.state.release(eid)
        if el is None:
            return None
        LOG.info("elephant %d withdrawn by the operator", eid)
        self.counters["elephant-withdrawn"] += 1
        out = Reaction(self.state.release_ops(el) + self.state.reshare())
        out.events.append({"type": "withdrawal", "elephant": eid, "host": el.src.ip,
                           "flows": [flow_dict(s) for s in el.subflows]})
        return out

    def _refused(self, el: Elephant, answer, refusal):
        """A switch refused the elephant's entries: without a meter if it was the meter, else a NACK. (The
        retry gets a new one of these: a function that named itself would be a reference cycle, and every
        handshake's closures and intents would wait for the cycle collector, not be freed when answered.)"""
        def failed(f: Failure) -> Reaction:
            if f.error_type == METER_MOD_FAILED and self.state.refuse_meters(el.src.switch):
                LOG.error("%s refused a meter: forwarding elephants from it without meters", el.src.switch)
                return Reaction(txns=[Txn(f"elephant {el.src.ip} (no meter)", self.state.install_ops(el), answer,
                                          self._refused(el, answer, refusal), answers=True)])
            self.state.release(el.eid)
            store = f.reason.startswith("cluster store")
            reason = f.reason if store else f"the switches refused the path: {f.reason}"
            return answer(hs.encode(hs.Nack(el.nonce, el.size, reason)),
                          refusal("store-unreachable" if store else "switch-refused", reason, True))
        return failed

    def on_elephant_start(self, now, start) -> Reaction:
        """An elephant monitoring found that never announced itself goes to a HOL path."""
        if self.state.is_announced(start.flow):
            return NOTHING()
        ops = self.state.adopt(now, start.flow, max(start.rate_bps, 1.0))
        if not ops:
            return NOTHING()
        el = self.state.elephant_of(start.flow)
        LOG.info("unannounced elephant %s adopted onto %s", start.flow, el.placements[0].path)

        def failed(_f):
            self.state.release(el.eid)
        return Reaction(txns=[Txn(f"adopt {start.flow}", ops, lambda: Reaction(
            events=[self._placed_event(el, "adopted", "monitoring", now)]), failed)])

    def on_elephant_end(self, now, end) -> Reaction:
        return NOTHING()

    def on_flow_removed(self, now, switch, cookie) -> Reaction:
        flow = self.rerouter.expired(cookie)
        if flow:  # an EFM pin of an unannounced elephant: forgotten
            return Reaction(events=[{"type": "released", "how": "efm", "flow": str(flow), "reason": "idle"}])
        eid = eid_of(cookie)
        finished = self.state.finished(cookie)
        ops = self.state.flow_removed(switch, cookie)
        if not ops:
            return NOTHING()
        if finished:  # released by its FIN already: its entries went idle after its last packets
            LOG.info("elephant entry %x of a finished elephant expired on %s: its entries cleared", cookie, switch)
            return Reaction(list(ops.items()))
        LOG.info("elephant entry %x expired on %s: allocation released", cookie, switch)
        return Reaction(list(ops.items()), events=[{"type": "released", "how": "announced", "elephant": eid,
                                                    "reason": "idle"}])

    def on_period(self, now, view) -> Reaction:
        out = Reaction()
        for part in self.period_parts(now, view):
            out += part
        return out

    def period_parts(self, now, view):
        """The period in parts, each a Reaction the controller carries out before the next is worked out
        (between them the loop serves what waits: a handshake, a barrier): what the view says of stale
        links and marks; the partition in its steps (``FreewayState.period_steps``: nothing to carry out
        between them), with the moves and mice groups it asks for; the adopted elephants; EFM's round."""
        yield self.observe(view)
        self.state.measure(now, view.link_util(), view.flows)
        self.state.stale = self.stale
        steps = self.state.period_steps(now, view.active_pairs(self.state.cfg.active_s))
        while True:
            try:
                next(steps)
            except StopIteration as done:
                res, ops = done.value
                break
            yield Reaction()
        out = Reaction(ops, events=self._partition_events(res, "mice load"))
        for el, install, after in self.state.take_moves():  # off links that turned LOL, then the mice follow
            why = self.state.why_moved(el.eid)
            LOG.info("elephant %d leaves low-latency links (%s): to %s", el.eid, why,
                     ", ".join(path_top(pl.path) for pl in el.placements))
            ev = {"type": "reroute", "how": "partition" if why.startswith("its links") else "reclaim",
                  "elephant": el.eid, "reason": why, "paths": [list(pl.path) for pl in el.placements]}

            def done(after=after, ev=ev) -> Reaction:
                return Reaction(after + self.state.move_finished(), events=[ev])

            def failed(_f, el=el, after=after) -> Reaction:
                return Reaction(self._abandon(el, after) + self.state.move_finished())
            out.txns.append(Txn(f"elephant {el.eid} off new low-latency links", install, done, failed))
        yield out
        yield from self._adopted(now, view)
        yield self.rerouter.round(now, view, self.state.placed_links,
                                  lambda f: not self.state.is_announced(f), self._elephant_paths)

    def _adopted(self, now: float, view: View):
        """Adopted elephants: allocations and meters follow their measured rate, and one on a link above
        EFM's threshold moves to a high-throughput path with room for it (confirmed, make-before-break).
        In parts of ``ADOPTED_PART`` elephants (Reactions: what waits on the loop goes on between them)."""
        def rate(sub):
            r = view.flows.get(FiveTuple(sub.src, sub.dst, sub.proto, sub.sport, sub.dport))
            return r.rate_bps if r is not None and view.now - r.last_seen < 2.0 else None

        els = list(self.state.elephants.values())
        for i in range(0, len(els), ADOPTED_PART):
            yield Reaction(self.state.follow_demand(now, rate, els[i:i + ADOPTED_PART]))
        out = Reaction(self.state.reshare())  # rate-less elephants share what is left (after releases, growth)
        cfg = self.rerouter.efm.cfg
        for el, install, after in self.state.hot_adopted(now, view.link_util(), cfg.threshold, cfg.hold_down_s):
            LOG.info("adopted elephant %d moved off a link over %.0f%% to %s", el.eid, 100 * cfg.threshold,
                     ", ".join(path_top(pl.path) for pl in el.placements))
            ev = {"type": "reroute", "how": "hot-link", "elephant": el.eid, "reason": "hot link",
                  "paths": [list(pl.path) for pl in el.placements]}
            out.txns.append(Txn(f"adopted elephant {el.eid} off a hot link", install,
                                lambda after=after, ev=ev: Reaction(after, events=[ev]),
                                lambda _f, el=el, after=after: Reaction(self._abandon(el, after))))
        yield out

    # ----- what the operator and the cluster ask ---------------------------------------------
    def placed_id(self, flow) -> str | None:
        el = self.state.elephant_of(flow)
        return str(el.eid) if el is not None else None

    def placements(self) -> list[Placed]:
        """Freeway's elephants (id = the elephant number, as in the cookie and the ACK), then the flows
        EFM moved that never announced themselves."""
        out, seen = [], set()
        for el in sorted(self.state.elephants.values(), key=lambda e: e.eid):
            flows = tuple(FiveTuple(s.src, s.dst, s.proto, s.sport, s.dport) for s in el.subflows)
            seen.update(flows)
            meter = self.state.meter_of(el)
            out.append(Placed(str(el.eid), "adopted" if el.adopted else "announced", flows, el.rate_bps,
                              el.rateless, tuple(tuple(pl.path) for pl in el.placements),
                              meter.meter_id if meter is not None else None, el.cookie, el.since))
        return out + self.rerouter.placements(seen)

    def link_class(self, link) -> str:
        part = self.state.partition
        if link in part.draining:
            return "draining"
        return "lol" if part.counter[link] > 0 else "hol"

    def lending(self) -> str:
        return self.state.cfg.lend

    def lent_links(self) -> list:
        """Low-latency links that elephants use now (lent, or not yet taken back), sorted."""
        return self.state.lent_links()

    def link_counter(self, link) -> int | None:
        return self.state.partition.counter[link]

    def partition(self):
        return self.state.partition, self.state.cfg.active_s

    def take_records(self, records: dict[int, dict]) -> None:
        self.state.records = records

    def records(self, now: float) -> tuple[dict[int, dict], set[int]] | None:
        if self.state.recovering(now):
            return None
        pending = set(self.state.pending)
        return {eid: rec for eid, rec in self.state.records_now().items() if eid not in pending}, pending

    def table_sizes(self) -> dict[str, int]:
        st = self.state
        return super().table_sizes() | _rerouter_sizes(self.rerouter) | {
            "elephants": len(st.elephants), "elephant_subflows": len(st.by_subflow),
            "elephants_pending": len(st.pending)}

    def snapshot(self) -> dict:
        part = self.state.partition
        return {
            "lol_paths": {f"{s}>{d}": n for (s, d), n in sorted(part.n.items())},
            "lol_link_names": sorted(f"{a}>{b}" for a, b in part.lol_links()),
            "lol_min": part.n_min, "lol_links": len(part.lol_links()), "draining": len(part.draining),
            "dead_links": sorted(f"{a}>{b}" for a, b in self.dead),
            "lent_links": [f"{a}>{b}" for a, b in self.state.lent_links()],
            "allocated": {str(e.eid): round(e.rate_bps) for e in self.state.elephants.values()},
            "freeway": dict(self.state.counters)}
