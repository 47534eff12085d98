"""Bin-Pack placement of elephants on high-throughput paths (Freeway, Section II.C).

Among a pair's HOL paths, choose the one that minimises the maximum link
utilisation once the flow is added; each TCP subflow goes whole on one path.
A link's load is the larger of what is allocated on it and what monitoring
measures (so neither a fresh allocation nor unannounced traffic is missed).

An elephant with several subflows is split as the paper's Eq. 1 splits it
(``split``): the rate spread over the HOL paths so that the busiest link is as
little busy as it can be, solved exactly for the Clos path sets Freeway uses
(series-parallel: ``_SP``), then rounded to the subflows the flow has.
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
             capacity_bps: Callable[[Link], float], headroom: float = 1.0, ties: str = "first") -> Placement:
    """The path minimising max utilisation with ``rate_bps`` added; ties go to the earlier path, or with
    ``ties`` "load" to the path whose links' utilisations sum least (then the earlier)."""
    if not paths:
        raise NoRoom("no high-throughput path between these ToRs (all paths hold low-latency links)")
    best: Placement | None = None
    total = 0.0
    for p in paths:
        lk = links(p)
        if not lk:  # same ToR: nothing to place
            return Placement(p, rate_bps, 0.0)
        utils = [(load_bps(ln) + rate_bps) / capacity_bps(ln) for ln in lk]
        util, t = max(utils), sum(utils) if ties == "load" else 0.0
        if best is None or util < best.max_util - 1e-12 or (util <= best.max_util + 1e-12 and t < total - 1e-12):
            best, total = Placement(p, rate_bps, util), t
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
        self._on: dict[Link, dict[object, int]] = {}  # link -> the flows placed across it (in by_flow's order)

    def add(self, key, placements: list[Placement]) -> None:
        self.release(key)
        self.by_flow[key] = list(placements)
        for pl in placements:
            for ln in links(pl.path):
                self.link[ln] += pl.rate_bps
                on = self._on.setdefault(ln, {})
                on[key] = on.get(key, 0) + 1

    def release(self, key) -> list[Placement]:
        old = self.by_flow.pop(key, [])
        for pl in old:
            for ln in links(pl.path):
                self.link[ln] -= pl.rate_bps
                if self.link[ln] <= 1e-6:
                    del self.link[ln]
                on = self._on[ln]
                on[key] -= 1
                if not on[key]:
                    del on[key]
                    if not on:
                        del self._on[ln]
        return old

    def crossing(self, link: Link) -> list[object]:
        """The flows placed across ``link``, in the order they were (last) placed: from an index, as the
        period asks for every link that turned low-latency (at k=48 with 2,000 placements a scan of
        them all took 7 ms a link)."""
        return list(self._on.get(link, ()))


def place_subflows(paths: list[Path], rates: list[float], load_bps: Callable[[Link], float],
                   capacity_bps: Callable[[Link], float], headroom: float = 1.0, ties: str = "first") -> list[Placement]:
    """Place subflows one after another, each seeing the ones placed before it."""
    extra: Counter[Link] = Counter()
    out = []
    for r in rates:
        pl = bin_pack(paths, r, lambda ln: load_bps(ln) + extra[ln], capacity_bps, headroom, ties)
        for ln in links(pl.path):
            extra[ln] += r
        out.append(pl)
    return out


# ----- splitting one elephant over several paths (the paper's Eq. 1 for one flow) ----------------
class NotSeriesParallel(ValueError):
    """The paths are not a series-parallel set (not a Clos path set); ``split`` falls back to Bin-Pack."""


class _SP:
    """A series-parallel set of paths from one switch to another: ``links`` in series with the
    parallel ``kids`` (or, at a single path, its index ``idx``). A Clos fabric's shortest paths
    between two ToRs always form one: up to a choice of aggregation, then of core, then down."""

    __slots__ = ("links", "kids", "idx")

    def __init__(self, chains: list[tuple[tuple[Link, ...], int]]):
        self.kids: list[_SP] = []
        self.idx: int | None = None
        if len(chains) == 1:
            self.links, self.idx = list(chains[0][0]), chains[0][1]
            return
        head, tail = 0, 0
        shortest = min(len(c) for c, _ in chains)
        while head < shortest and len({c[head] for c, _ in chains}) == 1:
            head += 1
        while tail < shortest - head and len({c[len(c) - 1 - tail] for c, _ in chains}) == 1:
            tail += 1
        c0 = chains[0][0]
        self.links = list(c0[:head]) + list(c0[len(c0) - tail:])
        groups: dict[Link, list] = {}
        for c, i in chains:
            mid = c[head:len(c) - tail]
            if not mid:
                raise NotSeriesParallel("one path is a part of another")
            groups.setdefault(mid[0], []).append((mid, i))
        seen: set[Link] = set()
        for members in groups.values():
            mine = {ln for c, _ in members for ln in c}
            if mine & seen:
                raise NotSeriesParallel("two branches share a link after they part")
            seen |= mine
            self.kids.append(_SP(members))

    def room(self, t: float, free: Callable[[Link, float], float]) -> float:
        """What this part can carry with no link above utilisation ``t``."""
        own = min((free(ln, t) for ln in self.links), default=float("inf"))
        if self.kids:
            own = min(own, sum(k.room(t, free) for k in self.kids))
        return max(0.0, own)

    def share(self, amount: float, t: float, free, out: dict[int, float], few: bool = False) -> None:
        """Spread ``amount`` over the paths in proportion to what each branch can carry at ``t`` (every
        branch equally full relative to its room), or with ``few`` over as few paths as will do: the
        branches with the most room first, each filled to ``t``."""
        if self.idx is not None:
            out[self.idx] = out.get(self.idx, 0.0) + amount
            return
        rooms = [k.room(t, free) for k in self.kids]
        total = sum(rooms)
        if few:
            left = amount
            for r, j in sorted(((r, j) for j, r in enumerate(rooms)), key=lambda x: (-x[0], x[1])):
                if left <= 0 or r <= 0:
                    break
                take = min(r, left) if r < left * (1 - 1e-12) else left
                self.kids[j].share(take, t, free, out, few)
                left -= take
            return
        for k, r in zip(self.kids, rooms, strict=True):
            if total > 0 and r > 0:
                k.share(amount * r / total, t, free, out)


def _lp(paths: list[Path], rate_bps: float, load_bps, capacity_bps, few: bool = False
        ) -> tuple[float, dict[int, float]]:
    """Eq. 1 for one flow over ``paths``: (the least possible maximum utilisation of their links,
    the rate per path index achieving it, spread evenly or over ``few`` paths: ``_SP.share``).
    Exact up to a relative 1e-9, by bisection on that maximum: a series-parallel set carries the
    sum of its branches and the minimum of its series."""
    tree = _SP([(tuple(links(p)), i) for i, p in enumerate(paths)])
    cache: dict[Link, tuple[float, float]] = {}

    def free(ln: Link, t: float) -> float:
        if ln not in cache:
            cache[ln] = (load_bps(ln), capacity_bps(ln))
        base, cap = cache[ln]
        return t * cap - base

    for p in paths:  # every link's load and capacity, read once
        for ln in links(p):
            free(ln, 0.0)
    hi = max((b + rate_bps) / c for b, c in cache.values())  # every link could carry all of it there
    lo = max(0.0, min(b / c for b, c in cache.values()))
    for _ in range(60):
        if hi - lo <= 1e-9 * hi:
            break
        mid = (lo + hi) / 2
        if tree.room(mid, free) >= rate_bps:
            hi = mid
        else:
            lo = mid
    out: dict[int, float] = {}
    tree.share(rate_bps, hi, free, out, few)
    return hi, out


def _with(placements: list[tuple[Path, float]], load_bps, capacity_bps) -> list[Placement]:
    """Placements with each path's maximum utilisation once all of them are added."""
    extra: Counter[Link] = Counter()
    for p, r in placements:
        for ln in links(p):
            extra[ln] += r
    return [Placement(p, r, max(((load_bps(ln) + extra[ln]) / capacity_bps(ln) for ln in links(p)), default=0.0))
            for p, r in placements]


MIN_SHARE = 0.01  # split: a path given less than this fraction of the rate (or MIN_SHARE_BPS) is dropped
MIN_SHARE_BPS = 1000.0


def split(paths: list[Path], rate_bps: float, n: int, load_bps: Callable[[Link], float],
          capacity_bps: Callable[[Link], float], headroom: float = 1.0, ties: str = "first") -> list[Placement]:
    """``n`` subflows carrying ``rate_bps`` together, placed as the paper's Eq. 1 splits a flow.

    The rate is split over ``paths`` to minimise the maximum link utilisation (exactly: ``_lp``),
    over as few paths as reach that optimum. The ``n`` paths given most are kept (all of them if
    fewer), and the rate split again over them alone, evenly relative to their room; when fewer
    than ``n`` paths are used the largest shares are halved until there are ``n`` subflows. So
    when the optimum needs at most ``n`` paths it is what the subflows get. A path given less than
    ``MIN_SHARE`` of the rate (or ``MIN_SHARE_BPS``) is dropped, the others scaled up. Each subflow still
    goes whole on one path, with its own rate. Whichever is lower, this or Bin-Pack's equal
    subflows placed one by one, is returned. With ``n`` = 1 it is Bin-Pack. Raises ``NoRoom``
    when neither fits under ``headroom``."""
    if n <= 1 or len(paths) <= 1 or rate_bps <= 0 or not links(paths[0]):
        return place_subflows(paths, [rate_bps / max(1, n)] * max(1, n), load_bps, capacity_bps, headroom, ties)
    candidates: list[list[Placement]] = []
    try:
        _, rates = _lp(paths, rate_bps, load_bps, capacity_bps, few=True)
        used = sorted((i for i, r in rates.items() if r > rate_bps * 1e-6), key=lambda i: (-rates[i], i))
        keep = sorted(used[:n])
        _, sub = _lp([paths[i] for i in keep], rate_bps, load_bps, capacity_bps)
        rates = {keep[j]: r for j, r in sub.items()}
        used = sorted((i for i, r in rates.items() if r > 0), key=lambda i: (-rates[i], i))
        floor = max(MIN_SHARE_BPS, MIN_SHARE * rate_bps)  # a share too small to be a subflow's rate
        if len(used) > 1 and rates[used[-1]] < floor:  # (the ACK gives rates in kbit/s)
            used = [i for i in used if rates[i] >= floor] or used[:1]
        parts = [[i, rates[i] / sum(rates[j] for j in used) * rate_bps] for i in used]  # exactly rate_bps
        while len(parts) < n:  # more subflows than paths used: halve the largest share
            parts.sort(key=lambda x: -x[1])
            i, r = parts.pop(0)
            parts += [[i, r / 2], [i, r / 2]]
        parts.sort(key=lambda x: x[0])
        candidates.append(_with([(paths[i], r) for i, r in parts], load_bps, capacity_bps))
    except NotSeriesParallel:
        pass
    try:
        one_by_one = place_subflows(paths, [rate_bps / n] * n, load_bps, capacity_bps, float("inf"))
        candidates.append(_with([(p.path, p.rate_bps) for p in one_by_one], load_bps, capacity_bps))
    except NoRoom:
        pass
    if not candidates:
        raise NoRoom("no high-throughput path between these ToRs (all paths hold low-latency links)")
    best = min(candidates, key=lambda pls: max(p.max_util for p in pls))
    worst = max(p.max_util for p in best)
    if worst > headroom + 1e-9:
        try:
            tree = _SP([(tuple(links(p)), i) for i, p in enumerate(paths)])
            room = tree.room(headroom, lambda ln, t: t * capacity_bps(ln) - load_bps(ln))
            what = f"{room / 1e6:.2f} Mbit/s free on them together"
        except NotSeriesParallel:
            what = "not enough free on any"
        raise NoRoom(f"no split of {rate_bps / 1e6:.2f} Mbit/s over {n} subflows fits the {len(paths)} "
                     f"high-throughput paths ({what}; best: {worst:.0%} on the busiest link)")
    return best
