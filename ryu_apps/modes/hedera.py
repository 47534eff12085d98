"""Hedera mode: every new TCP flow gets a counted edge entry; large ones are placed by Global First Fit."""

from __future__ import annotations

from dataclasses import replace

from monitoring.sflow import FiveTuple, parse_ethernet
from ryu_apps.algorithms.hedera_gff import HederaScheduler, ingress_counts
from ryu_apps.modes.policy import LOG, NOTHING, Ops, Placed, Policy, Reaction, flow_dict
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import DeleteFlows, Flow, FlowStatsRequest, PacketThrough, ToGroup
from ryu_apps.openflow.txn import Txn
from ryu_apps.programs import forwarding, hedera_edges, pins
from ryu_apps.programs.pins import HeldPins, tuple_of
from topology.fabric import Fabric
from topology.paths import path_links
from topology.queues import IsolationConfig


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
                              and (c >> 48) & 0xFF == pins.KIND_PLACED)

    def switch_program(self, switch: str) -> list:
        return super().switch_program(switch) + hedera_edges.hedera_edge_flows(self.fabric, switch)

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
        entry = hedera_edges.hedera_edge_entry(ft, ident, 10, group)
        self.counters["hedera-edges"] += 1
        self.edges[ft] = (switch, entry)
        return Reaction([(switch, [entry, PacketThrough((ToGroup(group),), data, port)])])

    def placements(self) -> list[Placed]:
        """Global First Fit's placements (id ``hedera-N``, N the flow's id in its cookies)."""
        out = []
        for flow, placed in sorted(self.scheduler.gff.placed.items(), key=lambda fp: str(fp[0])):
            pin = self.pins.get(flow)
            out.append(Placed(f"hedera-{self.flow_ids.get(flow, 0)}", "hedera", (flow,), placed.demand_bps, False,
                              (tuple(placed.path),), None, pin[0] if pin else None))
        return out

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
        out.ops += [(sw, [FlowStatsRequest(*hedera_edges.ALL_FLOWS)]) for sw in self.fabric.tors()]
        return out

    def recover(self, now, switch, flows, meters, groups=()) -> None:
        """Edge entries and placements read back: the same flow ids, paths and cookies as before."""
        super().recover(now, switch, flows, meters, groups)
        for f in flows:
            ft = tuple_of(f.match)
            if (f.priority == hedera_edges.PRIO_HEDERA_EDGE and pipeline.owner_of(f.cookie) is pipeline.HEDERA
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
        install, _, _, cookie = pins.pin(self.fabric, path, flow, pipeline.HEDERA, ident, 0, 10, iso=self.iso)
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
