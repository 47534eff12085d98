"""EFM: reroute elephants off congested links (Rocha and Verdi, "EFM").

When a directed link's occupancy passes the congestion threshold (70%), take
the elephants crossing it sorted by rate and pick the biggest (or, as a
configuration choice, the smallest). Look, in a fixed order (the ToR pair's
sorted paths), for a path whose every link stays under the threshold with the
flow's rate added (measured occupancy plus what this round already moved); if
none fits, try the next elephant; if none moves, say why.

Against oscillation: a moved flow is not moved again for ``hold_down_s``; a
link that triggered a move does not trigger again until a measurement of
traffic wholly after the move arrives (``link_time`` is when a measurement
began: a counter delta's start, a sample window's; ``SETTLE_S`` after the
decision, the new entries carry the flow); the trigger uses the latest raw measurement, not the
smoothed one, so it reflects what happened after the move.

Rounds can follow each other faster than the measurements (an early round
runs as soon as a link is seen over the threshold), so a move's rate stays
counted on the links it joined and left until a measurement of that link
wholly after the move arrives (at most ``RECENT_S``): two rounds a fraction
of a second apart must not send two elephants onto the same free link.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from topology.fabric import Fabric
from topology.paths import Path, path_links, tor_paths
from topology.settings import SettingError, setting, validate

Link = tuple[str, str]
RECENT_S = 5.0  # a move's rate counts on its links until they are measured again, at most this long
SETTLE_S = 0.1  # a move's entries carry the flow within this of the decision: measurements from then on see it


EFMConfigError = SettingError


@dataclass(frozen=True)
class EFMConfig:
    threshold: float = setting(0.7, "a link above this occupancy is congested; a move must keep every link of "
                               "the new path under it", positive=True, max=1, live=True)
    pick: str = setting("biggest", "which elephant on a congested link moves first (set by the mode)",
                        choices=("biggest", "smallest"))
    hold_down_s: float = setting(10.0, "a moved flow is not moved again for this long", "s", positive=True, live=True)
    idle_s: int = setting(10, "a rerouted flow's entries expire after this long without packets", "s", min=1, live=True)

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True)
class Move:
    flow: object  # FiveTuple
    rate_bps: float
    old_links: frozenset
    new_path: Path
    link: Link  # the congested link that triggered it


@dataclass
class Round:
    moves: list[Move] = field(default_factory=list)
    stuck: dict[Link, str] = field(default_factory=dict)  # congested link -> why nothing moved


class _Ratio(Mapping):
    """Each link's measured bits/s over its capacity, worked out when asked (a round reads a few links of
    the whole fabric's)."""

    def __init__(self, link_bps: Mapping, capacity: Callable):
        self._bps, self._cap = link_bps, capacity

    def __getitem__(self, link):
        return self._bps[link] / self._cap(link)

    def __iter__(self):
        return iter(self._bps)

    def __len__(self):
        return len(self._bps)


class EFM:
    def __init__(self, fabric: Fabric, cfg: EFMConfig | None = None):
        self.fabric = fabric
        self.cfg = cfg or EFMConfig()
        self.moved_at: dict[object, float] = {}
        self.paths: dict[object, Path] = {}  # flows EFM pinned, and where
        self.triggered_at: dict[Link, float] = {}
        self.recent: list[tuple[float, tuple[Link, ...], tuple[Link, ...], float]] = []  # (when, onto, off, rate)

    def capacity(self, link: Link) -> float:
        return self.fabric.capacity_bps(link)

    def decide(self, now: float, link_bps: dict[Link, float], link_time: dict[Link, float],
               elephants_on: Callable[[Link], list[tuple[object, float]]],
               flow_links: Callable[[object], set[Link]], eligible: Callable[[object], bool] = lambda f: True,
               paths: Callable[[str, str], list[Path]] | None = None) -> Round:
        """One round over every congested link, worst first."""
        rnd = Round()
        for ln, t in list(self.triggered_at.items()):  # a link measured since the move it triggered: its mark
            if link_time.get(ln, -1.0) >= t + SETTLE_S:  # decides nothing any more (a reading's time only goes
                del self.triggered_at[ln]  # forward), and the table is back to what it was before the move
        extra: Counter[Link] = Counter()  # rate moved onto (+) or off (-) links, not measured since
        self.recent = [r for r in self.recent if now - r[0] < RECENT_S]
        for when, onto, off, rate in self.recent:
            for ln in onto:
                if link_time.get(ln, -1.0) < when + SETTLE_S:
                    extra[ln] += rate
            for ln in off:
                if link_time.get(ln, -1.0) < when + SETTLE_S:
                    extra[ln] -= rate
        util = _Ratio(link_bps, self.capacity)
        # a link under the threshold of the slowest link cannot be over its own: the rest is not divided
        floor = self.cfg.threshold * self.fabric.min_capacity_bps()
        above = getattr(link_bps, "above", None)  # (a view's arrays: the links over the floor in one operation)
        over = above(floor) if above is not None else [ln for ln, bps in link_bps.items() if bps > floor]
        congested = sorted((ln for ln in over if util[ln] > self.cfg.threshold), key=lambda ln: -util[ln])
        for link in congested:
            if (link_time.get(link, 0.0) < self.triggered_at.get(link, -1e9) + SETTLE_S
                    or (link_bps[link] + extra[link]) / self.capacity(link) <= self.cfg.threshold):
                continue  # no measurement since our last move here, or this round already relieved it
            sampled = elephants_on(link)
            cands = [(f, r) for f, r in sampled if eligible(f)]
            if not cands:
                rnd.stuck[link] = ("only elephants EFM leaves alone (placed by the handshake)" if sampled
                                   else "no elephant sampled on it")
                continue
            cands.sort(key=lambda fr: (-fr[1] if self.cfg.pick == "biggest" else fr[1], str(fr[0])))
            why = []
            for flow, rate in cands:
                if now - self.moved_at.get(flow, -1e9) < self.cfg.hold_down_s:
                    why.append(f"{flow} held down")
                    continue
                path = self.fit(flow, rate, util, extra, flow_links(flow), paths)
                if path is None:
                    why.append(f"{flow}: no path stays under {self.cfg.threshold:.0%} with {rate / 1e6:.2f} Mbit/s")
                    continue
                old = frozenset(flow_links(flow))
                for ln in path_links(path):
                    extra[ln] += rate
                for ln in old:
                    extra[ln] -= rate
                self.recent.append((now, tuple(path_links(path)), tuple(old), rate))
                self.moved_at[flow] = now
                self.paths[flow] = path
                self.triggered_at[link] = now
                rnd.moves.append(Move(flow, rate, old, path, link))
                break
            else:
                rnd.stuck[link] = "; ".join(why)
        return rnd

    def fit(self, flow, rate: float, util: dict[Link, float], extra: Counter, current: set[Link],
            paths: Callable[[str, str], list[Path]] | None = None) -> Path | None:
        """The first path, in the pair's sorted order (or among ``paths``), on which every link stays
        under the threshold."""
        src, dst = self.fabric.host_by_ip(flow.src), self.fabric.host_by_ip(flow.dst)
        if src is None or dst is None or src.switch == dst.switch:
            return None
        for path in (paths or partial(tor_paths, self.fabric))(src.switch, dst.switch):
            links = path_links(path)
            if set(links) <= current:
                continue  # where it already is
            ok = all(util.get(ln, 0.0) + (extra[ln] + (0.0 if ln in current else rate)) / self.capacity(ln)
                     <= self.cfg.threshold for ln in links)
            if ok:
                return path
        return None

    def forget(self, flow) -> None:
        self.paths.pop(flow, None)
