"""EFM: reroute elephants off congested links (Rocha and Verdi, "EFM").

When a directed link's occupancy passes the congestion threshold (70%), take
the elephants crossing it sorted by rate and pick the biggest (or, as a
configuration choice, the smallest). Look, in a fixed order (the ToR pair's
sorted paths), for a path whose every link stays under the threshold with the
flow's rate added (measured occupancy plus what this round already moved); if
none fits, try the next elephant; if none moves, say why.

Against oscillation: a moved flow is not moved again for ``hold_down_s``; a
link that triggered a move does not trigger again until a measurement taken
after the move arrives; the trigger uses the latest raw measurement, not the
smoothed one, so it reflects what happened after the move.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import partial

from topology.fabric import Fabric
from topology.paths import Path, tor_paths

Link = tuple[str, str]


class EFMConfigError(ValueError):
    pass


@dataclass(frozen=True)
class EFMConfig:
    threshold: float = 0.7
    pick: str = "biggest"  # biggest | smallest
    hold_down_s: float = 10.0
    idle_s: int = 10  # the rerouted flow's entries expire after this long without packets

    def __post_init__(self) -> None:
        if self.pick not in ("biggest", "smallest"):
            raise EFMConfigError(f"pick: must be biggest or smallest, got {self.pick!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "pick" and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
                raise EFMConfigError(f"{f.name}: must be a positive number, got {v!r}")
        if self.threshold > 1:
            raise EFMConfigError(f"threshold: must be at most 1, got {self.threshold}")


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


class EFM:
    def __init__(self, fabric: Fabric, cfg: EFMConfig | None = None):
        self.fabric = fabric
        self.cfg = cfg or EFMConfig()
        self.moved_at: dict[object, float] = {}
        self.paths: dict[object, Path] = {}  # flows EFM pinned, and where
        self.triggered_at: dict[Link, float] = {}

    def capacity(self, link: Link) -> float:
        a, b = link
        if a in self.fabric.switches and b in self.fabric.switches:
            return self.fabric.capacity(a, b) * 1e6
        return self.fabric.link_rate_mbps * 1e6

    def decide(self, now: float, link_bps: dict[Link, float], link_time: dict[Link, float],
               elephants_on: Callable[[Link], list[tuple[object, float]]],
               flow_links: Callable[[object], set[Link]], eligible: Callable[[object], bool] = lambda f: True,
               paths: Callable[[str, str], list[Path]] | None = None) -> Round:
        """One round over every congested link, worst first."""
        rnd = Round()
        extra: Counter[Link] = Counter()  # rate moved onto (+) or off (-) links this round
        util = {ln: bps / self.capacity(ln) for ln, bps in link_bps.items()}
        congested = sorted((ln for ln, u in util.items() if u > self.cfg.threshold), key=lambda ln: -util[ln])
        for link in congested:
            if (link_time.get(link, 0.0) <= self.triggered_at.get(link, -1.0)
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
                for ln in zip(path, path[1:], strict=False):
                    extra[ln] += rate
                for ln in old:
                    extra[ln] -= rate
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
            links = list(zip(path, path[1:], strict=False))
            if set(links) <= current:
                continue  # where it already is
            ok = all(util.get(ln, 0.0) + (extra[ln] + (0.0 if ln in current else rate)) / self.capacity(ln)
                     <= self.cfg.threshold for ln in links)
            if ok:
                return path
        return None

    def forget(self, flow) -> None:
        self.paths.pop(flow, None)
