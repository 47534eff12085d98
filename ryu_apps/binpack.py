"""Bin-Pack placement of elephants on high-throughput paths (Freeway, Section II.C).

Among a pair's HOL paths, choose the one that minimises the maximum link
utilisation once the flow is added; each TCP subflow goes whole on one path.
A link's load is the larger of what is allocated on it and what monitoring
measures (so neither a fresh allocation nor unannounced traffic is missed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from topology.paths import Path, path_links

Link = tuple[str, str]


class NoRoom(ValueError):
    """No path can take the flow; the message says why (the best path and its free capacity)."""


@dataclass(frozen=True)
class Placement:
    path: Path
    rate_bps: float
    max_util: float  # the path's maximum link utilisation with the flow added


links = path_links  # one path-to-links function (topology.paths)


def bin_pack(paths: list[Path], rate_bps: float, load_bps: Callable[[Link], float],
             capacity_bps: Callable[[Link], float], headroom: float = 1.0) -> Placement:
    """The path minimising max utilisation with ``rate_bps`` added; ties go to the earlier path."""
    if not paths:
        raise NoRoom("no high-throughput path between these ToRs (all paths hold low-latency links)")
    best: Placement | None = None
    for p in paths:
        lk = links(p)
        if not lk:  # same ToR: nothing to place
            return Placement(p, rate_bps, 0.0)
        util = max((load_bps(ln) + rate_bps) / capacity_bps(ln) for ln in lk)
        if best is None or util < best.max_util - 1e-12:
            best = Placement(p, rate_bps, util)
    if best.max_util > headroom + 1e-9:  # (a path filled exactly fits, whatever the float rounding)
        free = min(capacity_bps(ln) * headroom - load_bps(ln) for ln in links(best.path))
        raise NoRoom(f"no high-throughput path has {rate_bps / 1e6:.2f} Mbit/s free "
                     f"(best: {max(0.0, free) / 1e6:.2f} Mbit/s via {best.path[len(best.path) // 2]})")
    return best


class Allocations:
    """Rates allocated to placed elephants, per directed link."""

    def __init__(self):
        self.by_flow: dict[object, list[Placement]] = {}
        self.link: Counter[Link] = Counter()

    def add(self, key, placements: list[Placement]) -> None:
        self.release(key)
        self.by_flow[key] = list(placements)
        for pl in placements:
            for ln in links(pl.path):
                self.link[ln] += pl.rate_bps

    def release(self, key) -> list[Placement]:
        old = self.by_flow.pop(key, [])
        for pl in old:
            for ln in links(pl.path):
                self.link[ln] -= pl.rate_bps
                if self.link[ln] <= 1e-6:
                    del self.link[ln]
        return old

    def crossing(self, link: Link) -> list[object]:
        return [k for k, pls in self.by_flow.items() if any(link in links(p.path) for p in pls)]


def place_subflows(paths: list[Path], rates: list[float], load_bps: Callable[[Link], float],
                   capacity_bps: Callable[[Link], float], headroom: float = 1.0) -> list[Placement]:
    """Place subflows one after another, each seeing the ones placed before it."""
    extra: Counter[Link] = Counter()
    out = []
    for r in rates:
        pl = bin_pack(paths, r, lambda ln: load_bps(ln) + extra[ln], capacity_bps, headroom)
        for ln in links(pl.path):
            extra[ln] += r
        out.append(pl)
    return out
