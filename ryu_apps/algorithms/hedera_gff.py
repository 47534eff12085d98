"""Hedera as a baseline (Al-Fares et al., NSDI 2010): demand estimation and Global First Fit.

Edge switches keep one exact-match entry per TCP flow (installed when the
flow's first packet reaches the controller, forwarding it by ECMP). Every
``poll_s`` (5 s) the scheduler reads their byte counters; flows above 10% of
the host link rate are large. Their natural demand (what they would get if
only the hosts' NICs limited them) comes from Hedera's iterative estimation;
Global First Fit then gives each large flow the first path, in order, whose
links all have that much unreserved capacity, reserves it, and pins the flow
there with exact-match entries. Flows that stop being large give their
reservation back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from topology.fabric import Fabric
from topology.paths import Path, path_links, tor_paths

Link = tuple[str, str]


def estimate_demands(flows: list[tuple[object, object]], max_iter: int = 100) -> list[float]:
    """Hedera's demand estimation: natural demand of each (src, dst) flow as a fraction of NIC rate.

    Alternates the sender step (split what is left of each sender's NIC equally among its
    unconverged flows) and the receiver step (a receiver over capacity limits its flows to an
    equal share, leaving smaller flows alone) until nothing changes.
    """
    n = len(flows)
    demand = [0.0] * n
    converged = [False] * n
    srcs, dsts = {}, {}
    for i, (s, d) in enumerate(flows):
        srcs.setdefault(s, []).append(i)
        dsts.setdefault(d, []).append(i)
    for _ in range(max_iter):
        before = list(demand)
        for idx in srcs.values():
            fixed = sum(demand[i] for i in idx if converged[i])
            open_ = [i for i in idx if not converged[i]]
            if open_:
                share = (1.0 - fixed) / len(open_)
                for i in open_:
                    demand[i] = share
        for idx in dsts.values():
            if sum(demand[i] for i in idx) <= 1.0 + 1e-12:
                continue
            limited = set(idx)
            small = 0.0
            share = 1.0 / len(limited)
            while True:
                changed = False
                for i in list(limited):
                    if demand[i] < share - 1e-12:
                        small += demand[i]
                        limited.discard(i)
                        changed = True
                if not changed or not limited:
                    break
                share = (1.0 - small) / len(limited)
            for i in limited:
                demand[i] = share
                converged[i] = True
        if all(abs(a - b) < 1e-12 for a, b in zip(before, demand, strict=True)):
            break
    return demand


@dataclass
class Placed:
    path: Path
    demand_bps: float


@dataclass
class GlobalFirstFit:
    """Reservations per directed link; first path (sorted order) with room for the demand wins."""

    fabric: Fabric
    reserved: Counter = field(default_factory=Counter)
    placed: dict = field(default_factory=dict)
    unusable: frozenset = frozenset()  # dead or stale links: never placed on

    def capacity(self, link: Link) -> float:
        return self.fabric.capacity_bps(link)

    def release(self, key) -> Placed | None:
        p = self.placed.pop(key, None)
        if p is not None:
            for ln in path_links(p.path):
                self.reserved[ln] -= p.demand_bps
                if self.reserved[ln] <= 1e-6:
                    del self.reserved[ln]
        return p

    def hold(self, key, path: Path, demand_bps: float) -> None:
        """Reserve ``demand_bps`` for ``key`` on a given path (a placement read back after a restart)."""
        self.release(key)
        for ln in path_links(path):
            self.reserved[ln] += demand_bps
        self.placed[key] = Placed(path, demand_bps)

    def place(self, key, src_tor: str, dst_tor: str, demand_bps: float) -> Path | None:
        """Reserve the first path that fits; None leaves the flow on ECMP."""
        for path in tor_paths(self.fabric, src_tor, dst_tor):
            links = path_links(path)
            if any(ln in self.unusable for ln in links):
                continue
            if all(self.reserved[ln] + demand_bps <= self.capacity(ln) + 1e-6 for ln in links):
                for ln in links:
                    self.reserved[ln] += demand_bps
                self.placed[key] = Placed(path, demand_bps)
                return path
        return None


@dataclass
class FlowCounter:
    """Byte counters of one flow's entries at its ingress ToR (entry -> bytes), for rates between polls."""

    entries: dict
    time: float


def ingress_counts(fabric: Fabric, switch: str, entries, counts: dict) -> int:
    """Add a ToR's per-flow byte counters to ``counts`` (5-tuple -> {entry: bytes}), counting each flow only
    at its ingress ToR (the source host's). ``entries`` are (match mapping, byte count[, what identifies the
    entry on the switch: table, priority, cookie]); a flow has one entry per band that matches it (its
    counted edge entry, its pin once placed). Returns how many entries were malformed (skipped)."""
    from monitoring.sflow import FiveTuple

    bad = 0
    for item in entries:
        try:
            m, count = item[0], int(item[1])
            ft = FiveTuple(m["ipv4_src"], m["ipv4_dst"], m["ip_proto"], m["tcp_src"], m["tcp_dst"])
            ident = item[2] if len(item) > 2 else None  # none given: one sum, as before
        except (KeyError, TypeError, ValueError, IndexError):
            bad += 1
            continue
        src = fabric.host_by_ip(ft.src)
        if src is not None and src.switch == switch:
            per = counts.setdefault(ft, {})
            per[(switch, ident)] = per.get((switch, ident), 0) + count
    return bad


class HederaScheduler:
    """One scheduling round from edge flow statistics (pure: counters and ``now`` in, decisions out)."""

    def __init__(self, fabric: Fabric, large_fraction: float = 0.1):
        self.fabric = fabric
        self.large_fraction = large_fraction
        self.gff = GlobalFirstFit(fabric)
        self.counters: dict[object, FlowCounter] = {}
        self.recovered: set = set()  # placements read back after a restart: their demand is re-estimated

    def recover(self, key, path: Path) -> None:
        """A placement read back from the switches after a restart: held on its path with a large flow's
        smallest demand until the next round estimates it."""
        self.gff.hold(key, path, self.large_fraction * self._nic(key))
        self.recovered.add(key)

    def _nic(self, key) -> float:
        """The sending host's access link speed (bit/s): a flow is large above a fraction of it."""
        src = getattr(key, "src", None) or (key[0] if isinstance(key, tuple) and key and isinstance(key[0], str) else None)
        return self.fabric.host_rate_bps(src) if src else self.fabric.link_rate_mbps * 1e6

    def rates(self, now: float, byte_counts: dict[object, int | dict]) -> dict[object, float]:
        """Rates (bit/s) since the previous poll; flows seen for the first time have none yet. A flow's
        counters are per entry (``ingress_counts``): the rate is what each entry counted since the previous
        poll, an entry new since then (a pin installed in between) counting from zero, one gone since then
        (the edge entry expiring once the pin took the flow) leaving nothing behind. A sum over the entries
        would drop when one expires and give a rate that is wrong, too small, for a round (after a restart
        it released a placed elephant as no longer large)."""
        out = {}
        for key, counted in byte_counts.items():
            now_entries = counted if isinstance(counted, dict) else {None: counted}
            prev = self.counters.get(key)
            if prev is not None and now > prev.time:
                grew = 0
                for e, b in now_entries.items():
                    before = prev.entries.get(e, 0)
                    grew += b - before if b >= before else b  # a smaller count: a new entry under the same key
                out[key] = grew * 8 / (now - prev.time)
            self.counters[key] = FlowCounter(dict(now_entries), now)
        for key in list(self.counters):
            if key not in byte_counts:
                del self.counters[key]
        return out

    def schedule(self, now: float, byte_counts: dict[object, int]) -> tuple[dict[object, Path], list[object]]:
        """(newly placed flows and their paths, flows released). Keys are 5-tuples (src, dst, ...)."""
        rates = self.rates(now, byte_counts)
        large = sorted((k for k, r in rates.items() if r > self.large_fraction * self._nic(k)), key=str)
        # a placed flow is released once it is measured small or no switch counts it any more (a flow
        # with no rate yet, right after a restart, keeps its placement)
        released = [k for k in list(self.gff.placed) if k not in large and (k in rates or k not in byte_counts)]
        for k in released:
            self.gff.release(k)
            self.recovered.discard(k)
        demands = estimate_demands([(k.src, k.dst) for k in large])
        new = {}
        for k, d in zip(large, demands, strict=True):
            if k in self.recovered:  # read back after a restart: same path, the demand as estimated now
                self.recovered.discard(k)
                if k in self.gff.placed:
                    self.gff.hold(k, self.gff.placed[k].path, d * self._nic(k))
            if k in self.gff.placed:
                continue
            s, t = self.fabric.host_by_ip(k.src), self.fabric.host_by_ip(k.dst)
            if s is None or t is None or s.switch == t.switch:
                continue
            path = self.gff.place(k, s.switch, t.switch, d * self._nic(k))
            if path is not None:
                new[k] = path
        return new, released
