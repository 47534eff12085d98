"""One policy object per mode, all with the same interface; the app only turns events into calls.

Every method takes plain values (switch names, ports, frames, ``now``, the
monitoring ``View``) and returns a ``Reaction``: intents to send per switch,
confirmed transactions (``txn.Txn``) and events for the events file. Nothing
here touches a datapath, a socket or the clock.

- ``Policy``: ECMP (prefix routes down, a select group up), proxy ARP, and
  isolation when configured (ToR classification, marks on detected
  elephants). Every mode below builds on it.
- ``HederaPolicy``: per-flow edge entries, polled for Global First Fit.
- ``EFMPolicy``: elephants off links above the threshold (``Rerouter``).
- ``FreewayPolicy``: the partition, mice groups, the handshake and Bin-Pack
  (``FreewayCore``); EFM serves the elephants that did not announce.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field, replace

from monitoring.sflow import FiveTuple, parse_ethernet
from monitoring.view import View
from topology.fabric import Fabric
from topology.paths import Reachability, path_links, path_top, tor_paths

from . import arp, baselines, forwarding, pipeline, reconcile
from . import handshake as hs
from .decisions import flow_dict
from .efm import EFM, EFMConfig, Move
from .elephant_entries import HeldPins, flow_match, tuple_of
from .freeway_core import Elephant, FreewayConfig, FreewayCore, eid_of
from .hedera import HederaScheduler, ingress_counts
from .intents import ArpReplyOut, DeleteFlows, Flow, FlowStatsRequest, PacketThrough, ToGroup, UdpOut
from .isolation import IsolationConfig, mark_detected, tor_program
from .txn import METER_MOD_FAILED, Failure, Txn

LOG = logging.getLogger("freeway")
Ops = list[tuple[str, list]]
STALE_S = 5.0  # a link measured longer ago than this is stale: no placement chooses it
MARK_GRACE_S = 10.0  # a mark read back after a restart goes unless monitoring reports its elephant by then
SETTLE_S = 2.0  # a read-back is over when no switch has been read back for this long
PRIO_MARK = pipeline.prio("elephant-mark")


@dataclass
class Reaction:
    """What a policy wants done: ``ops`` sent now in order, ``txns`` installed and confirmed, ``events``
    written to the events file."""

    ops: Ops = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    def __iadd__(self, other: Reaction | None) -> Reaction:
        if other is not None:
            self.ops += other.ops
            self.txns += other.txns
            self.events += other.events
        return self

    def __bool__(self) -> bool:
        return bool(self.ops or self.txns or self.events)


NOTHING = Reaction


class Policy:
    """ECMP forwarding with proxy ARP; isolation composes with it and with every mode below."""

    mode = "ecmp"
    periodic = False  # whether on_period does anything
    owned = (pipeline.DETECTED,)  # cookie spaces this mode places entries in (kept across a restart)

    def __init__(self, fabric: Fabric, iso: IsolationConfig | None = None):
        self.fabric = fabric
        self.iso = iso
        self.counters: Counter[str] = Counter()
        self.services: dict[str, str] = {}  # extra addresses proxy ARP answers for
        self.marks: dict[FiveTuple, tuple[str, Flow]] = {}  # detected elephant -> (ingress ToR, its mark)
        self.unconfirmed: dict[FiveTuple, float] = {}  # marks read back, not yet reported by monitoring: since
        self._ids = 1
        self.dead: frozenset = frozenset()  # links down (the liveness model's), both directions
        self.stale: frozenset = frozenset()  # links whose measurement is older than STALE_S
        self.view = View(0.0)  # the latest monitoring view
        self._reach: Reachability | None = None
        self._prefixes = forwarding.tor_prefixes(fabric)
        self.punt = (forwarding.PUNT_PPS, forwarding.PUNT_BURST)  # each host port's punt meter
        self._recovered_with_dead = False  # placements read back while links were dead: check them
        self._recovered_at = -1e9  # the latest read-back

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def hot_threshold(self) -> float | None:
        """The link occupancy over which this mode wants an early round (``on_hot``); None: no such."""
        return None

    def on_hot(self, now: float, view: View) -> Reaction:
        """An early round: a link went over ``hot_threshold`` since the last period."""
        return NOTHING()

    def reconfigure(self, cfg) -> None:
        """A reloaded configuration: take its live settings (``config.live_settings``); the others do
        not change while the controller runs."""

    # ----- what a switch holds ---------------------------------------------------------
    def program(self, switch: str) -> list:
        """Everything a (re)connecting switch should hold: groups, meters and flows."""
        return self.static_program(switch) + self.dynamic_program(switch)

    def static_program(self, switch: str) -> list:
        """What a switch holds whatever the traffic: base forwarding around dead links, the mode's fixed
        entries, and isolation's classification at a ToR."""
        intents = self.switch_program(switch) + forwarding.lldp_program(self.fabric, switch)
        if not self.fabric.switches[switch].is_tor:
            return intents
        flows = forwarding.tor_tables(self.fabric, switch, [i for i in intents if isinstance(i, Flow)])
        intents = [i for i in intents if not isinstance(i, Flow)]
        if self.iso is not None:
            classify, meters = tor_program(self.fabric, switch, self.iso)
            intents += meters
            flows += classify
        return intents + flows

    def switch_program(self, switch: str) -> list:
        groups, flows = forwarding.base_program(self.fabric, switch, self.dead, self.reach(), self._prefixes)
        return [*forwarding.punt_meters(self.fabric, switch, *self.punt), *groups, *flows]

    def dynamic_program(self, switch: str) -> list:
        """What traffic put on a switch (placed elephants, marks): it stays across a reconnect."""
        return [f for sw, f in self.marks.values() if sw == switch]

    def recover(self, now: float, switch: str, flows, meters, groups=()) -> None:
        """After a restart (or a reconnect): rebuild what the mode placed from what a switch holds
        (cookies say whose). Here: isolation's marks on detected elephants; a mark whose elephant
        monitoring does not report within ``MARK_GRACE_S`` goes (it ended while nobody watched)."""
        self._recovered_with_dead |= bool(self.dead)
        self._recovered_at = now
        for f in flows:
            ft = tuple_of(f.match)
            if (f.priority != PRIO_MARK or pipeline.owner_of(f.cookie) is not pipeline.DETECTED or ft is None
                    or FiveTuple(*ft) in self.marks):
                continue
            self.marks[FiveTuple(*ft)] = (switch, f)
            self.unconfirmed[FiveTuple(*ft)] = now
            self.seen_id(f.cookie & 0xFFFFFFFFFFFF)
            self.counters["marks-recovered"] += 1

    def settled(self, now: float) -> bool:
        """Whether the switches' read-back is over (none for ``SETTLE_S``), so that what it rebuilt can
        be moved: a move before would fail on a switch that has not connected yet."""
        return now - self._recovered_at >= SETTLE_S

    def seen_id(self, ident: int) -> None:
        """An id read back from a switch: new ones are above it."""
        self._ids = max(self._ids, ident)

    def reach(self) -> Reachability:
        if self._reach is None:
            self._reach = Reachability(self.fabric, lambda ln: ln not in self.dead)
        return self._reach

    def unusable(self) -> frozenset:
        """Links no placement may choose: dead, or measured too long ago."""
        return self.dead | self.stale

    def live_paths(self, src: str, dst: str) -> list:
        """Paths with no dead or stale link (EFM's candidates)."""
        bad = self.unusable()
        return [p for p in tor_paths(self.fabric, src, dst) if not any(ln in bad for ln in path_links(p))]

    def observe(self, view: View) -> Reaction:
        """Every period: keep the view and which links are stale; marks read back after a restart whose
        elephant monitoring has not reported within ``MARK_GRACE_S`` go; placements read back while
        links were dead (a link that died during a restart's read-back) are moved off them."""
        self.view = view
        self.stale = view.stale(STALE_S)
        out = Reaction()
        if self._recovered_with_dead and self.settled(view.now):
            self._recovered_with_dead = False  # a placement read back after its link died moves as if it just died
            out += self.after_links(view.now, self.dead)
        for ft, since in list(self.unconfirmed.items()):
            r = view.flows.get(ft)
            if r is not None and r.elephant:
                del self.unconfirmed[ft]
            elif view.now - since > MARK_GRACE_S:
                del self.unconfirmed[ft]
                sw, mark = self.marks.pop(ft)
                out.ops.append((sw, [DeleteFlows(mark.cookie)]))
        return out

    # ----- failures ---------------------------------------------------------------------
    def on_links(self, now: float, dead) -> Reaction:
        """The liveness model changed: every switch's base program is recomputed around the dead links
        and only the difference is sent; then the mode moves what crossed them (``after_links``)."""
        dead = frozenset(dead)
        if dead == self.dead:
            return NOTHING()
        before = {sw: self.static_program(sw) for sw in self.fabric.switches}
        went_down = dead - self.dead
        self.dead, self._reach = dead, None
        out = Reaction()
        for sw in self.fabric.switches:
            ops = reconcile.diff(before[sw], self.static_program(sw))
            if ops:
                out.ops.append((sw, ops))
        self.counters["link-changes"] += 1
        out.events.append({"type": "liveness", "dead": sorted("%s>%s" % ln for ln in dead)})
        out += self.after_links(now, went_down)
        return out

    def after_links(self, now: float, went_down: frozenset) -> Reaction:
        return NOTHING()

    # ----- events ---------------------------------------------------------------------
    def on_switch(self, switch: str, up: bool) -> Reaction:
        return NOTHING()

    def on_packet(self, now: float, switch: str, port: int, data: bytes) -> Reaction:
        fields = arp.decode(data)
        if fields is None:
            return self.on_other_packet(now, switch, port, data)
        reply, reason = arp.answer(self.fabric, switch, port, *fields, services=self.services)
        self.counters[f"arp-{reason}"] += 1
        if reply is None:
            return NOTHING()
        return Reaction([(switch, [ArpReplyOut(reply.out_port, reply.requester_mac, reply.requester_ip,
                                               reply.target_mac, reply.target_ip)])])

    def on_other_packet(self, now: float, switch: str, port: int, data: bytes) -> Reaction:
        self.counters["packet-in-dropped"] += 1
        return NOTHING()

    def on_period(self, now: float, view: View) -> Reaction:
        return self.observe(view)

    def on_flow_removed(self, now: float, switch: str, cookie: int) -> Reaction:
        return NOTHING()

    def on_flow_stats(self, now: float, switch: str, entries: list, more: bool) -> Reaction:
        self.counters["stats-late-or-unknown"] += 1
        return NOTHING()

    def on_elephant_start(self, now: float, start) -> Reaction:
        """A detected elephant: with isolation, marked at its ingress ToR (it keeps its path)."""
        f = start.flow
        self.unconfirmed.pop(f, None)
        if self.iso is None or f in self.marks or f.proto not in (6, 17) or not start.switch:
            return NOTHING()
        cookie = baselines.cookie(pipeline.DETECTED, 1, self.next_id())
        entry = mark_detected(flow_match(f.src, f.dst, f.proto, f.sport, f.dport), start.port, self.iso, cookie)
        self.marks[f] = (start.switch, entry)
        return Reaction([(start.switch, [entry])])

    def on_elephant_end(self, now: float, end) -> Reaction:
        self.unconfirmed.pop(end.flow, None)
        mark = self.marks.pop(end.flow, None)
        return Reaction([(mark[0], [DeleteFlows(mark[1].cookie)])]) if mark is not None else NOTHING()

    def snapshot(self) -> dict:
        """The mode's state for the events file (and, later, the operator API); counters are separate."""
        return {}

    def table_sizes(self) -> dict[str, int]:
        """How many entries each of the mode's per-flow tables holds (they must stay at the size of
        what is live: ``freeway bench state``)."""
        return {"marks": len(self.marks), "marks_unconfirmed": len(self.unconfirmed)}


class HederaPolicy(Policy):
    """Hedera: every new TCP flow gets an edge entry; large flows are placed by Global First Fit."""

    mode = "hedera"
    periodic = True
    owned = (pipeline.HEDERA, pipeline.DETECTED)

    def __init__(self, fabric: Fabric, iso: IsolationConfig | None = None, poll_s: float = 5.0):
        super().__init__(fabric, iso)
        self.scheduler = HederaScheduler(fabric)
        self.poll_s = poll_s
        self.flow_ids: dict[FiveTuple, int] = {}
        self.edges: dict[FiveTuple, tuple[str, Flow]] = {}  # flow -> (ingress ToR, its edge entry)
        self.pins: dict[FiveTuple, tuple[int, Ops]] = {}  # flow -> (cookie, entries) of its placement
        self.round_at = -1e9
        self.waiting: set[str] = set()  # ToRs whose statistics this poll still waits for
        self.counts: dict[FiveTuple, int] = {}
        self._held = HeldPins(fabric, lambda c: pipeline.owner_of(c) is pipeline.HEDERA
                              and (c >> 48) & 0xFF == baselines.KIND_PLACED)

    def switch_program(self, switch: str) -> list:
        return super().switch_program(switch) + baselines.hedera_edge_flows(self.fabric, switch)

    def reconfigure(self, cfg) -> None:
        self.poll_s = cfg.hedera_poll_s

    def on_other_packet(self, now, switch, port, data) -> Reaction:
        """A new TCP flow's first packet: give it its own edge entry (ECMP, counted), send it on."""
        _, ft, _ = parse_ethernet(data)
        if ft is None or ft.proto != 6 or self.fabric.peer(switch, port) is None:
            self.counters["packet-in-dropped"] += 1
            return NOTHING()
        dst = self.fabric.host_by_ip(ft.dst)
        group = forwarding.up_group(self.fabric, switch, dst.switch if dst else None, self.dead, self.reach())
        if group is None:
            self.counters["packet-in-unreachable"] += 1
            return NOTHING()
        ident = self.flow_ids.setdefault(ft, self.next_id())
        entry = baselines.hedera_edge_entry(ft, ident, 10, group)
        self.counters["hedera-edges"] += 1
        self.edges[ft] = (switch, entry)
        return Reaction([(switch, [entry, PacketThrough((ToGroup(group),), data, port)])])

    def table_sizes(self) -> dict[str, int]:
        gff = self.scheduler.gff
        return super().table_sizes() | {
            "hedera_edges": len(self.edges), "hedera_flow_ids": len(self.flow_ids), "hedera_counts": len(self.counts),
            "hedera_pins": len(self.pins), "hedera_demand": len(self.scheduler.counters),
            "hedera_placed": len(gff.placed)}

    def dynamic_program(self, switch) -> list:
        return (super().dynamic_program(switch) + [e for sw, e in self.edges.values() if sw == switch]
                + [f for _, ops in self.pins.values() for sw, fs in ops if sw == switch for f in fs])

    def after_links(self, now, went_down) -> Reaction:
        """Edge entries follow their destination's group; placements that crossed a dead link are
        released and placed again at once, around it."""
        out = Reaction()
        for ft, (sw, entry) in list(self.edges.items()):
            dst = self.fabric.host_by_ip(ft.dst)
            group = forwarding.up_group(self.fabric, sw, dst.switch if dst else None, self.dead, self.reach())
            new = replace(entry, actions=(ToGroup(group),) if group is not None else ())
            if new != entry:
                self.edges[ft] = (sw, new)
                out.ops.append((sw, [new]))
        self.scheduler.gff.unusable = self.unusable()
        hit = [f for f, pl in self.scheduler.gff.placed.items() if set(path_links(pl.path)) & went_down]
        for flow in hit:
            placed = self.scheduler.gff.release(flow)
            cookie, _ = self.pins.pop(flow, (None, None))
            if cookie is not None:
                out.ops += [(sw, [DeleteFlows(cookie)]) for sw in self.fabric.switches]
            s, d = self.fabric.host_by_ip(flow.src), self.fabric.host_by_ip(flow.dst)
            path = self.scheduler.gff.place(flow, s.switch, d.switch, placed.demand_bps)
            LOG.warning("hedera: %s crossed a dead link: %s", flow,
                        "placed on " + "-".join(path) if path else "left to ECMP (no path has room)")
            if path is not None:
                out += self._pin(flow, path)
        return out

    def on_period(self, now, view) -> Reaction:
        out = self.observe(view)
        self.scheduler.gff.unusable = self.unusable()
        if now - self.round_at < self.poll_s:
            return out
        self.round_at, self.counts = now, {}
        self.waiting = set(self.fabric.tors())
        out.ops += [(sw, [FlowStatsRequest(*baselines.ALL_FLOWS)]) for sw in self.fabric.tors()]
        return out

    def recover(self, now, switch, flows, meters, groups=()) -> None:
        """Edge entries and placements read back: the same flow ids, paths and cookies as before."""
        super().recover(now, switch, flows, meters, groups)
        for f in flows:
            ft = tuple_of(f.match)
            if (f.priority == baselines.PRIO_HEDERA_EDGE and pipeline.owner_of(f.cookie) is pipeline.HEDERA
                    and ft is not None and FiveTuple(*ft) not in self.edges):
                ident = f.cookie & 0xFFFFFFFFFFFF
                self.edges[FiveTuple(*ft)] = (switch, f)
                self.flow_ids.setdefault(FiveTuple(*ft), ident)
                self.seen_id(ident)
        known = {c for c, _ in self.pins.values()}
        for cookie, (paths, entries) in self._held.add(switch, flows, known.__contains__).items():
            (ft, path), = paths.items()
            flow, ident = FiveTuple(*ft), (cookie & 0xFFFFFFFFFFFF) >> 8
            self.flow_ids[flow] = ident
            self.seen_id(ident)
            self.pins[flow] = (cookie, [(sw, [e]) for sw, e in entries])
            self.scheduler.recover(flow, path)
            self.counters["hedera-recovered"] += 1
            LOG.info("hedera: %s recovered from the switches on %s", flow, "-".join(path))

    def on_flow_stats(self, now, switch, entries, more) -> Reaction:
        """Edge byte counters of the current poll; late or malformed replies are skipped."""
        if switch not in self.waiting:
            self.counters["stats-late-or-unknown"] += 1
            return NOTHING()
        self.counters["stats-malformed"] += ingress_counts(self.fabric, switch, entries, self.counts)
        if more:
            return NOTHING()
        self.waiting.discard(switch)
        return self.schedule(self.round_at) if not self.waiting else NOTHING()

    def on_switch(self, switch, up) -> Reaction:
        if not up and switch in self.waiting:  # a poll does not wait for a switch that went away
            self.waiting.discard(switch)
            return self.schedule(self.round_at) if not self.waiting else NOTHING()
        return NOTHING()

    def schedule(self, now: float) -> Reaction:
        new, released = self.scheduler.schedule(now, self.counts)
        out = Reaction()
        for flow in released:
            cookie, _ = self.pins.pop(flow, (None, None))
            if cookie is not None:
                out.ops += [(sw, [DeleteFlows(cookie)]) for sw in self.fabric.switches]
                out.events.append({"type": "released", "how": "hedera", "flow": str(flow),
                                   "reason": "no longer large"})
        for flow, path in new.items():
            LOG.info("hedera: %s is large (demand %.2f Mbit/s): placed on %s", flow,
                     self.scheduler.gff.placed[flow].demand_bps / 1e6, "-".join(path))
            out += self._pin(flow, path)
        live = set(self.counts)  # forget ids of flows no edge switch counts any more
        self.flow_ids = {f: i for f, i in self.flow_ids.items() if f in live or f in self.pins or f in new}
        self.edges = {f: e for f, e in self.edges.items() if f in self.flow_ids}
        return out

    def _pin(self, flow, path) -> Reaction:
        ident = self.flow_ids.setdefault(flow, self.next_id())
        install, _, _, cookie = baselines.pin(self.fabric, path, flow, baselines.HEDERA, ident, 0, 10, iso=self.iso)
        self.counters["hedera-placed"] += 1
        return Reaction(txns=[Txn(f"hedera {flow}", install, done=self._pinned(flow, cookie, install, path),
                                  failed=self._unplaced(flow))])

    def _pinned(self, flow, cookie, install, path):
        def done():
            self.pins[flow] = (cookie, install)
            placed = self.scheduler.gff.placed.get(flow)
            return Reaction(events=[{"type": "placement", "how": "hedera", "flows": [flow_dict(flow)],
                                     "rate_bps": round(placed.demand_bps) if placed else None,
                                     "paths": [list(path)]}])
        return done

    def _unplaced(self, flow):
        def failed(_failure):
            self.scheduler.gff.release(flow)
        return failed


class Rerouter:
    """EFM's rounds and the pins they make (EFM mode, and Freeway for unannounced elephants)."""

    def __init__(self, fabric: Fabric, cfg: EFMConfig, iso: IsolationConfig | None, counters: Counter, next_id):
        self.fabric = fabric
        self.efm = EFM(fabric, cfg)
        self.iso = iso
        self.counters = counters
        self.next_id = next_id
        self.pins: dict[FiveTuple, tuple[int, int, int]] = {}  # flow -> (ident, gen, cookie)
        self.entries: dict[FiveTuple, Ops] = {}  # flow -> its pinned entries
        self._said: dict[tuple[str, str], tuple[str, float]] = {}  # link -> (reason logged, when)
        self._held = HeldPins(fabric, lambda c: pipeline.owner_of(c) is pipeline.EFM)
        self._took_over = False
        self.quiet_until = -1e9  # after a restart onto a running fabric: no move before this (one hold-down)

    def round(self, now: float, view: View, flow_links=None, eligible=lambda f: True, paths=None) -> Reaction:
        if now < self.quiet_until:  # taken over a running fabric: the flows' rates are not measured well yet
            return NOTHING()

        def links_of(f):
            pinned = self.efm.paths.get(f)
            if pinned is not None:
                return set(path_links(pinned))
            found = flow_links(f) if flow_links is not None else None
            return found if found is not None else view.flow_links(f)

        fresh = view.fresh_readings()  # the counters', or the flow samples' when they see more
        rnd = self.efm.decide(now, {ln: r[0] for ln, r in fresh.items()}, {ln: r[1] for ln, r in fresh.items()},
                              view.elephants_on, links_of, eligible, paths)
        for link, why in rnd.stuck.items():
            self.counters["efm-stuck"] += 1
            if self._said.get(link, (None, -1e9))[0] != why or now - self._said[link][1] > 60:
                self._said[link] = (why, now)  # each link's reason once, again when it changes or after 60 s
                LOG.info("efm: %s->%s congested, nothing moved: %s", *link, why)
        out = Reaction()
        for mv in rnd.moves:
            out += self.move(mv)
        return out

    def move(self, mv) -> Reaction:
        ident, gen, old = self.pins.get(mv.flow, (self.next_id(), -1, None))
        install, after, _, new = baselines.pin(self.fabric, mv.new_path, mv.flow, baselines.EFM, ident, gen + 1,
                                               self.efm.cfg.idle_s, old, self.iso)
        LOG.info("efm: %s->%s over %.0f%%: moving %s (%.2f Mbit/s) to %s", *mv.link, 100 * self.efm.cfg.threshold,
                 mv.flow, mv.rate_bps / 1e6, "-".join(mv.new_path))
        self.counters["efm-moves"] += 1

        event = {"type": "reroute", "how": "efm", "flow": str(mv.flow), "link": "%s>%s" % mv.link,
                 "paths": [list(mv.new_path)], "rate_bps": mv.rate_bps}

        def done():
            self.pins[mv.flow] = (ident, gen + 1, new)
            self.entries[mv.flow] = install
            return Reaction(after, events=[event])  # recorded once every switch confirmed it

        def failed(_failure):
            """Rolled back: the flow is unpinned, back on base forwarding (which avoids dead links),
            rather than left on an old pin that may cross the link it was leaving."""
            self.efm.forget(mv.flow)
            self.entries.pop(mv.flow, None)
            pin = self.pins.pop(mv.flow, None)
            if pin is None:
                return None
            return Reaction([(sw, [DeleteFlows(pin[2])]) for sw in self.fabric.switches])

        return Reaction(txns=[Txn(f"efm move {mv.flow}", install, done, failed)])

    def entries_on(self, switch: str) -> list:
        return [f for ops in self.entries.values() for sw, fs in ops if sw == switch for f in fs]

    def expired(self, cookie: int):
        """A pin's ingress entry expired (idle): forget the flow everywhere (pins, entries, EFM's path and
        hold-down), so that state is bounded by the live pins. The flow if it was one of ours, else None."""
        flow = next((f for f, p in self.pins.items() if p[2] == cookie), None)
        if flow is None:
            return None
        del self.pins[flow]
        self.entries.pop(flow, None)
        self.efm.forget(flow)
        self.efm.moved_at.pop(flow, None)
        self.counters["efm-expired"] += 1
        return flow

    def recover(self, now: float, switch: str, flows) -> list[int]:
        """Pins read back from the switches: the same ids, generations, paths and cookies as before
        (held down as if just moved). A controller that takes over a fabric already holding entries makes
        no move for one hold-down: the monitor starts from nothing and reads young flows low, which made
        EFM move an elephant 2 s after a restart. Returns the ids seen."""
        if not self._took_over and flows:  # the first switch read back holds entries: a restart, traffic on
            self._took_over = True  # (the monitor's rates start from nothing and read young flows low)
            self.quiet_until = now + self.efm.cfg.hold_down_s
        known = {p[2] for p in self.pins.values()}
        ids = []
        for cookie, (paths, entries) in self._held.add(switch, flows, known.__contains__).items():
            (ft, path), = paths.items()
            flow, low = FiveTuple(*ft), cookie & 0xFFFFFFFFFFFF
            ident, gen = low >> 8, low & 0xFF
            self.pins[flow] = (ident, gen, cookie)
            self.entries[flow] = [(sw, [e]) for sw, e in entries]
            self.efm.paths[flow] = path
            self.efm.moved_at[flow] = now
            ids.append(ident)
            self.counters["efm-recovered"] += 1
            LOG.info("efm: pin of %s recovered from the switches on %s", flow, "-".join(path))
        return ids

    def after_links(self, now: float, went_down: frozenset, view: View, paths) -> Reaction:
        """Pinned flows that crossed a dead link: onto the first live path where every link stays under
        the threshold with them, else unpinned (base forwarding already avoids the dead link)."""
        out = Reaction()
        util = view.link_util()
        for flow, path in sorted(self.efm.paths.items(), key=lambda fp: str(fp[0])):
            old = set(path_links(path))
            if not old & went_down:
                continue
            r = view.flows.get(flow)
            rate = r.rate_bps if r is not None else 0.0
            new = self.efm.fit(flow, rate, util, Counter(), set(), paths)
            if new is not None:
                self.efm.paths[flow] = new
                self.efm.moved_at[flow] = now
                out += self.move(Move(flow, rate, frozenset(old), new, next(iter(old & went_down))))
                continue
            LOG.warning("efm: %s crossed a dead link and no live path has room: back to ECMP", flow)
            self.efm.forget(flow)
            self.entries.pop(flow, None)
            pin = self.pins.pop(flow, None)
            if pin is not None:
                out.ops += [(sw, [DeleteFlows(pin[2])]) for sw in self.fabric.switches]
                out.events.append({"type": "released", "how": "efm", "flow": str(flow),
                                   "reason": "crossed a dead link, no live path has room: back to ECMP"})
        return out


def _rerouter_sizes(r: Rerouter) -> dict[str, int]:
    return {"efm_pins": len(r.pins), "efm_entries": len(r.entries), "efm_paths": len(r.efm.paths),
            "efm_moved_at": len(r.efm.moved_at), "efm_triggered": len(r.efm.triggered_at)}


class EFMPolicy(Policy):
    periodic = True
    owned = (pipeline.EFM, pipeline.DETECTED)

    def __init__(self, fabric: Fabric, iso: IsolationConfig | None = None, cfg: EFMConfig | None = None):
        super().__init__(fabric, iso)
        self.rerouter = Rerouter(fabric, cfg or EFMConfig(), iso, self.counters, self.next_id)
        self.mode = f"efm-{self.rerouter.efm.cfg.pick}"

    def on_period(self, now, view) -> Reaction:
        out = self.observe(view)
        out += self.rerouter.round(now, view, paths=self.live_paths)
        return out

    def reconfigure(self, cfg) -> None:
        self.rerouter.efm.cfg = cfg.efm_config()

    def hot_threshold(self) -> float | None:
        return self.rerouter.efm.cfg.threshold

    def on_hot(self, now, view) -> Reaction:
        """EFM's round as soon as a link is seen over its threshold, not at the next period."""
        self.counters["efm-early-rounds"] += 1
        return self.rerouter.round(now, view, paths=self.live_paths)

    def recover(self, now, switch, flows, meters, groups=()) -> None:
        super().recover(now, switch, flows, meters, groups)
        for ident in self.rerouter.recover(now, switch, flows):
            self.seen_id(ident)

    def dynamic_program(self, switch) -> list:
        return super().dynamic_program(switch) + self.rerouter.entries_on(switch)

    def table_sizes(self) -> dict[str, int]:
        return super().table_sizes() | _rerouter_sizes(self.rerouter)

    def on_flow_removed(self, now, switch, cookie) -> Reaction:
        """An EFM pin's ingress entry expired: the flow is forgotten (its other hops' entries expire by
        themselves, idle as long)."""
        flow = self.rerouter.expired(cookie)
        if not flow:
            return NOTHING()
        return Reaction(events=[{"type": "released", "how": "efm", "flow": str(flow), "reason": "idle"}])

    def after_links(self, now, went_down) -> Reaction:
        return self.rerouter.after_links(now, went_down, self.view, self.live_paths)


class FreewayPolicy(Policy):
    """Freeway: partition, mice groups, handshake and Bin-Pack; EFM for elephants that did not announce."""

    mode = "freeway"
    periodic = True
    owned = (pipeline.FREEWAY_ELEPHANT, pipeline.FREEWAY_MICE, pipeline.EFM, pipeline.DETECTED)

    def __init__(self, fabric: Fabric, iso: IsolationConfig | None = None, cfg: FreewayConfig | None = None,
                 efm: EFMConfig | None = None):
        super().__init__(fabric, iso)
        self.core = FreewayCore(fabric, cfg or FreewayConfig(), iso)
        self.punt = (self.core.cfg.punt_pps, self.core.cfg.punt_burst)
        self.services = {hs.SERVICE_IP: hs.SERVICE_MAC}
        self.rerouter = Rerouter(fabric, efm or EFMConfig(), iso, self.counters, self.next_id)
        self.refusing = ""  # why new announces are refused now ('' = they are not): a cluster's store is away

    def switch_program(self, switch: str) -> list:
        return super().switch_program(switch) + self.core.fixed_entries(switch)

    def reconfigure(self, cfg) -> None:
        self.core.cfg = cfg.freeway_config()
        self.core.partition.cfg = self.core.cfg.partition_config()
        self.rerouter.efm.cfg = cfg.efm_config()

    def dynamic_program(self, switch: str) -> list:
        return self.core.dynamic_program(switch) + self.rerouter.entries_on(switch)

    def after_links(self, now, went_down) -> Reaction:
        """The partition goes around the dead links (a LOL path that died is replaced by the next one);
        elephants that crossed one move at once (confirmed make-before-break) or, with no live path
        left, fall back to the mice paths; mice groups drop dead next hops; EFM's pins move too."""
        res, mice, moves, released = self.core.set_dead(now, self.dead)
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
        for el in self.core.recover(now, switch, flows, meters, groups):
            LOG.info("elephant %d (%s -> %s, %.2f Mbit/s) recovered from the switches on %s", el.eid, el.src.ip,
                     el.dst.ip, el.rate_bps / 1e6, ", ".join(path_top(pl.path) for pl in el.placements))

    def settled(self, now: float) -> bool:
        return super().settled(now) and not self.core.recovering(now)

    def _abandon(self, el, after) -> list:
        """A move of ``el`` was rolled back: it is released (see ``FreewayCore.abandon``) and says so."""
        ops = self.core.abandon(el, after)
        if ops:
            LOG.warning("elephant %d: its move was rolled back; released, it travels with the mice", el.eid)
        return ops

    def _elephant_paths(self, s: str, d: str) -> list:
        return self.core.hol_paths((s, d))

    def _partition_events(self, res, reason: str) -> list[dict]:
        """Log the partition's changes and return them as decision records."""
        part, out = self.core.partition, []
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
        out = self.core.handshake(now, switch, port, ip_src, payload, mac, refuse=self.refusing)
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
                self.core.confirmed(el.eid)
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
                                  store=[(f"elephants/{el.eid}", self.core.record(el))])])

    def _placed_event(self, el: Elephant, how: str, via: str, now: float, repeat: bool = False) -> dict:
        return {"type": "placement", "how": how, "via": via, "elephant": el.eid, "host": el.src.ip,
                "flows": [flow_dict(s) for s in el.subflows], "rate_bps": round(el.rate_bps),
                "paths": [list(pl.path) for pl in el.placements], "repeat": repeat, "received": now}

    def withdraw(self, now: float, eid: int) -> Reaction | None:
        """An operator withdrew a Freeway elephant (announced or adopted): its entries and meter go, its
        allocation is released and the rate-less ones share again. None if there is no such elephant."""
        el = self.core.release(eid)
        if el is None:
            return None
        LOG.info("elephant %d withdrawn by the operator", eid)
        self.counters["elephant-withdrawn"] += 1
        out = Reaction(self.core.release_ops(el) + self.core.reshare())
        out.events.append({"type": "withdrawal", "elephant": eid, "host": el.src.ip,
                           "flows": [flow_dict(s) for s in el.subflows]})
        return out

    def _refused(self, el: Elephant, answer, refusal):
        """A switch refused the elephant's entries: without a meter if it was the meter, else a NACK. (The
        retry gets a new one of these: a function that named itself would be a reference cycle, and every
        handshake's closures and intents would wait for the cycle collector, not be freed when answered.)"""
        def failed(f: Failure) -> Reaction:
            if f.error_type == METER_MOD_FAILED and self.core.refuse_meters(el.src.switch):
                LOG.error("%s refused a meter: forwarding elephants from it without meters", el.src.switch)
                return Reaction(txns=[Txn(f"elephant {el.src.ip} (no meter)", self.core.install_ops(el), answer,
                                          self._refused(el, answer, refusal))])
            self.core.release(el.eid)
            store = f.reason.startswith("cluster store")
            reason = f.reason if store else f"the switches refused the path: {f.reason}"
            return answer(hs.encode(hs.Nack(el.nonce, el.size, reason)),
                          refusal("store-unreachable" if store else "switch-refused", reason, True))
        return failed

    def on_elephant_start(self, now, start) -> Reaction:
        """An elephant monitoring found that never announced itself goes to a HOL path."""
        if self.core.is_announced(start.flow):
            return NOTHING()
        ops = self.core.adopt(now, start.flow, max(start.rate_bps, 1.0))
        if not ops:
            return NOTHING()
        el = self.core.elephant_of(start.flow)
        LOG.info("unannounced elephant %s adopted onto %s", start.flow, el.placements[0].path)

        def failed(_f):
            self.core.release(el.eid)
        return Reaction(txns=[Txn(f"adopt {start.flow}", ops, lambda: Reaction(
            events=[self._placed_event(el, "adopted", "monitoring", now)]), failed)])

    def on_elephant_end(self, now, end) -> Reaction:
        return NOTHING()

    def on_flow_removed(self, now, switch, cookie) -> Reaction:
        flow = self.rerouter.expired(cookie)
        if flow:  # an EFM pin of an unannounced elephant: forgotten
            return Reaction(events=[{"type": "released", "how": "efm", "flow": str(flow), "reason": "idle"}])
        eid = eid_of(cookie)
        ops = self.core.flow_removed(switch, cookie)
        if not ops:
            return NOTHING()
        LOG.info("elephant entry %x expired on %s: allocation released", cookie, switch)
        return Reaction(list(ops.items()), events=[{"type": "released", "how": "announced", "elephant": eid,
                                                    "reason": "idle"}])

    def on_period(self, now, view) -> Reaction:
        out = self.observe(view)
        self.core.link_util = view.link_util()
        self.core.stale = self.stale
        res, ops = self.core.period(now, view.active_pairs(self.core.cfg.active_s))
        out.events += self._partition_events(res, "mice load")
        out.ops += ops
        for el, install, after in self.core.take_moves():  # off links that turned LOL, then the mice follow
            LOG.info("elephant %d leaves links that turned low-latency: to %s", el.eid,
                     ", ".join(path_top(pl.path) for pl in el.placements))

            ev = {"type": "reroute", "how": "partition", "elephant": el.eid, "reason": "its links turned low-latency",
                  "paths": [list(pl.path) for pl in el.placements]}

            def done(after=after, ev=ev) -> Reaction:
                return Reaction(after + self.core.move_finished(), events=[ev])

            def failed(_f, el=el, after=after) -> Reaction:
                return Reaction(self._abandon(el, after) + self.core.move_finished())
            out.txns.append(Txn(f"elephant {el.eid} off new low-latency links", install, done, failed))
        out += self._adopted(now, view)
        out += self.rerouter.round(now, view, self.core.placed_links,
                                   lambda f: not self.core.is_announced(f), self._elephant_paths)
        return out

    def _adopted(self, now: float, view: View) -> Reaction:
        """Adopted elephants: allocations and meters follow their measured rate, and one on a link above
        EFM's threshold moves to a high-throughput path with room for it (confirmed, make-before-break)."""
        def rate(sub):
            r = view.flows.get(FiveTuple(sub.src, sub.dst, sub.proto, sub.sport, sub.dport))
            return r.rate_bps if r is not None and view.now - r.last_seen < 2.0 else None

        out = Reaction(self.core.follow_demand(now, rate))
        out.ops += self.core.reshare()  # rate-less elephants share what is left (after releases, growth)
        cfg = self.rerouter.efm.cfg
        for el, install, after in self.core.hot_adopted(now, view.link_util(), cfg.threshold, cfg.hold_down_s):
            LOG.info("adopted elephant %d moved off a link over %.0f%% to %s", el.eid, 100 * cfg.threshold,
                     ", ".join(path_top(pl.path) for pl in el.placements))
            ev = {"type": "reroute", "how": "hot-link", "elephant": el.eid, "reason": "hot link",
                  "paths": [list(pl.path) for pl in el.placements]}
            out.txns.append(Txn(f"adopted elephant {el.eid} off a hot link", install,
                                lambda after=after, ev=ev: Reaction(after, events=[ev]),
                                lambda _f, el=el, after=after: Reaction(self._abandon(el, after))))
        return out

    def table_sizes(self) -> dict[str, int]:
        core = self.core
        return super().table_sizes() | _rerouter_sizes(self.rerouter) | {
            "elephants": len(core.elephants), "elephant_subflows": len(core.by_subflow),
            "elephants_pending": len(core.pending)}

    def snapshot(self) -> dict:
        part = self.core.partition
        return {
            "lol_paths": {f"{s}>{d}": n for (s, d), n in sorted(part.n.items())},
            "lol_link_names": sorted(f"{a}>{b}" for a, b in part.lol_links()),
            "lol_min": part.n_min, "lol_links": len(part.lol_links()), "draining": len(part.draining),
            "dead_links": sorted(f"{a}>{b}" for a, b in self.dead),
            "allocated": {str(e.eid): round(e.rate_bps) for e in self.core.elephants.values()},
            "freeway": dict(self.core.counters)}


def make(cfg, fabric: Fabric) -> Policy:
    """The policy for a controller Config."""
    iso = cfg.isolation_config()
    if cfg.mode == "freeway":
        return FreewayPolicy(fabric, iso, cfg.freeway_config(), cfg.efm_config())
    if cfg.mode == "hedera":
        return HederaPolicy(fabric, iso, cfg.hedera_poll_s)
    if cfg.mode.startswith("efm-"):
        return EFMPolicy(fabric, iso, cfg.efm_config())
    return Policy(fabric, iso)


