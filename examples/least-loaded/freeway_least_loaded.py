"""An example Freeway mode, packaged apart as a plug-in (docs/your-mode.md): elephants go to the path
through the least-loaded core, by the links' occupancy sFlow measures; mice keep ECMP.

Everything it needs comes from the ``Policy`` it extends: the fabric, the latest monitoring view
(``self.view``, each link's smoothed occupancy), the links that are down (``self.dead``), a cookie space
for plug-ins, and the helpers that write a path's entries. It returns what to send; the controller, the
ns-3 engine and the simulated fabric carry it out alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from ryu_apps.modes.policy import Policy, Reaction
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import DeleteFlows
from ryu_apps.programs import pins
from topology.paths import path_links, tor_paths
from topology.settings import setting


@dataclass(frozen=True)
class Settings:
    """The mode's own settings: its section in the config file is ``least-loaded:``."""

    idle_s: int = setting(5, "a placed elephant's entries expire after this long without packets", "s", min=1)
    margin: float = setting(0.05, "stay on the hashed path unless another path's busiest link is this much less "
                                  "busy (a few per cent of measurement noise decide nothing)", max=1)


class LeastLoadedPolicy(Policy):
    mode = "least-loaded"
    settings = Settings
    owned = (*Policy.owned, pipeline.PLUGIN)  # its entries survive a controller restart

    def __init__(self, fabric, iso=None, settings: Settings | None = None):
        super().__init__(fabric, iso)
        self.cfg = settings or Settings()
        self.placed: dict = {}  # five-tuple -> (cookie, path)
        self.since_view: dict = {}  # link -> the occupancy placed on it since the view was measured

    def hot_threshold(self) -> float | None:
        return None

    def _load(self, path) -> float:
        return max(self.view.util(ln) + self.since_view.get(ln, 0.0) for ln in path_links(path))

    def on_period(self, now: float, view) -> Reaction:
        self.since_view.clear()  # a new view: what was placed is in its measurements now
        return super().on_period(now, view)

    def on_elephant_start(self, now: float, start) -> Reaction:
        out = super().on_elephant_start(now, start)  # (with isolation: its mark)
        f = start.flow
        src, dst = self.fabric.host_by_ip(f.src), self.fabric.host_by_ip(f.dst)
        if f in self.placed or src is None or dst is None or src.switch == dst.switch or f.proto != 6:
            return out
        paths = [p for p in tor_paths(self.fabric, src.switch, dst.switch) if not set(path_links(p)) & self.dead]
        if not paths:
            return out
        best = min(paths, key=self._load)
        if self._load(best) > min(self._load(p) for p in paths) + self.cfg.margin:
            return out
        cookie = pins.cookie(pipeline.PLUGIN, 1, self.next_id())
        self.placed[f] = (cookie, best)
        for ln in path_links(best):  # until the next view, count it where it goes (else the next one follows)
            self.since_view[ln] = self.since_view.get(ln, 0.0) + start.rate_bps / self.fabric.capacity_bps(ln)
        out.ops += [(sw, [entry]) for sw, entry in pins.path_entries(self.fabric, best, f, cookie, self.cfg.idle_s,
                                                                       self.iso)]
        out.events.append({"type": "placement", "how": "least-loaded", "flow": str(f), "paths": [list(best)],
                           "load": round(self._load(best), 3)})
        self.counters["least-loaded-placed"] += 1
        return out

    def on_flow_removed(self, now: float, switch: str, cookie: int) -> Reaction:
        gone = [f for f, (c, _) in self.placed.items() if c == cookie]  # its entries expired (idle)
        for f in gone:
            del self.placed[f]
        return Reaction()

    def on_elephant_end(self, now: float, end) -> Reaction:
        out = super().on_elephant_end(now, end)
        placed = self.placed.pop(end.flow, None)
        if placed is not None:
            cookie, path = placed
            out.ops += [(sw, [DeleteFlows(cookie)]) for sw in path]
        return out
