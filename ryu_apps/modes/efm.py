"""EFM modes: elephants off links above the threshold (``Rerouter``, which Freeway also uses for
elephants that did not announce)."""

from __future__ import annotations

from collections import Counter

from monitoring.sflow import FiveTuple
from monitoring.view import View
from ryu_apps.algorithms.efm_rounds import EFM, EFMConfig, Move
from ryu_apps.modes.policy import LOG, NOTHING, Ops, Placed, Policy, Reaction
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import DeleteFlows
from ryu_apps.openflow.txn import Txn
from ryu_apps.programs import pins
from ryu_apps.programs.pins import HeldPins
from topology.fabric import Fabric
from topology.paths import path_links
from topology.queues import IsolationConfig


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

        bps, times = view.fresh_bps_time()  # the counters', or the flow samples' when they see more
        rnd = self.efm.decide(now, bps, times, view.elephants_on, links_of, eligible, paths)
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
        install, after, _, new = pins.pin(self.fabric, mv.new_path, mv.flow, pipeline.EFM, ident, gen + 1,
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

    def placements(self, skip=frozenset()) -> list[Placed]:
        """The flows EFM pinned (id ``efm-N``), but those in ``skip`` (placed otherwise)."""
        out = []
        for flow, path in sorted(self.efm.paths.items(), key=lambda fp: str(fp[0])):
            pin = self.pins.get(flow)
            if flow not in skip and pin is not None:
                out.append(Placed(f"efm-{pin[0]}", "efm", (flow,), None, True, (tuple(path),), None, pin[2]))
        return out

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

    def placements(self) -> list[Placed]:
        return self.rerouter.placements()

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
