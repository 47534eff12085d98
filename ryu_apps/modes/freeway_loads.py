"""Part of ``FreewayState``: the links' loads as Freeway decides on them, each link's mice load (the lower
of two estimates) and lending (a low-latency link an elephant may use while its mice are idle).

``Loads`` is a mixin: it reads the state ``FreewayState.__init__`` sets (``link_util``, ``flows``,
``alloc``, ``elephants``, ``partition``, ``cfg``, ``iso``) and keeps its own cache of the period's sums.
"""

from __future__ import annotations

from ryu_apps.algorithms.partition import SparseLoads

Link = tuple[str, str]

FRESH_S = 2.0  # a flow reading older than this is not a measurement of now


class Loads:
    """The loads side of ``FreewayState`` (see the module's docstring)."""

    def load_bps(self, link: Link) -> float:
        measured = self.link_util.get(link, 0.0) * self.capacity_bps(link)
        return max(measured, self.alloc.link.get(link, 0.0))

    def capacity_bps(self, link: Link) -> float:
        return self.fabric.capacity_bps(link)

    def measure(self, now: float, link_util, flows=None) -> None:
        """The period's measurements: each link's load (fraction of capacity) and the flows sampled
        (``monitoring.view.FlowReading`` by five-tuple), from which the mice load of each link follows."""
        self.now, self.link_util, self.flows = now, link_util, flows if flows is not None else {}

    @property
    def mice_util(self) -> dict[Link, float]:
        """Per link, the mice load the partition steps on: with lending, ``mice_seen`` (a lent link's
        elephant is not mice asking for more paths); lending off, the measured load itself, as the paper
        has it (low-latency links carry no elephant)."""
        return self.link_util if self.cfg.lend == "off" else self._mice_loads()

    @property
    def mice_seen(self) -> dict[Link, float]:
        """Per link, the mice load lending (and, when lending, the partition) decides on: the lower of
        the measured load less the elephants' and the rates of the flows sampled on it that are not
        elephants (``_mice_loads``)."""
        return self._mice_loads()

    def _mice_loads(self) -> SparseLoads:
        """Each link's mice load, the lower of two estimates. (1) The measured load less the elephants'
        (``less_elephants``). (2) The rates of the flows not flagged elephants, summed over the links they
        were sampled on: only what mice send, but an elephant's first fraction of a second (before it is
        flagged) too. Lending takes the lower of the two: a link is lent only when both say its mice are
        idle, and taken back only when both say they came back. Only the links a mouse was sampled on are
        worked out (another has none seen), and the placed elephants' sums are kept from period to period
        (``PlacedRates``): the period's cost follows the flows sampled, not the elephants placed."""
        key = (self.link_util, self.flows)
        if self._mice_of is not None and self._mice_of[0][0] is key[0] and self._mice_of[0][1] is key[1]:
            return self._mice_of[1]
        placed = self._placed
        placed.sync(self.elephants)
        now, by_flow = self.now, placed.by_flow
        moved: dict[Link, float] = {}  # per link: what the placed subflows sampled lately send beyond their allocation
        other: dict[Link, float] = {}  # ... what flows flagged elephants that Freeway did not place send
        mice_bps: dict[Link, float] = {}
        for ft, r in self.flows.items():
            if now - r.last_seen >= FRESH_S:
                continue
            on = by_flow.get(ft)
            if on is not None:
                for lns, rate in on:
                    d = r.rate_bps - rate
                    for ln in lns:
                        moved[ln] = moved.get(ln, 0.0) + d
                continue
            into = other if r.elephant else mice_bps
            for ln in r.links:
                into[ln] = into.get(ln, 0.0) + r.rate_bps
        self._elephant_extra = (moved, other)
        cap, util, seen = self.capacity_bps, self.link_util, SparseLoads()  # (0 where no mouse was sampled)
        for ln, bps in mice_bps.items():
            u = self._less(ln) if ln in placed.bps or ln in other else util.get(ln)
            if u is not None:
                seen[ln] = max(0.0, min(u, bps / cap(ln)))
        self._mice_of = (key, seen)
        return seen

    def less_elephants(self, link: Link) -> float | None:
        """Estimate (1) of a link's mice load, of the latest measurement: its measured load less the
        elephants' (None when it has no measurement). An elephant Freeway placed counts on its placement's
        links at its measured rate (its allocation when not sampled lately), another flow flagged an
        elephant on the links it was sampled on. After an elephant moves, the smoothed load of the link it
        left still holds it for a few periods."""
        self._mice_loads()  # (the sums of the latest measurement: worked out once per measurement)
        return self._less(link)

    def _less(self, link: Link) -> float | None:
        u = self.link_util.get(link)
        if u is None:
            return None
        moved, other = self._elephant_extra
        bps = self._placed.bps.get(link, 0.0) + moved.get(link, 0.0) + other.get(link, 0.0)
        return max(0.0, u - bps / self.capacity_bps(link))

    def lending(self) -> bool:
        return self.cfg.lend != "off"

    def lendable(self, link: Link) -> bool:
        """A low-latency link an elephant may use now: mice leave it idle (their load below ``lend_below``)
        and it was not taken back from elephants within ``lend_hold_s``."""
        part = self.partition
        if not self.lending() or link in part.dead or not part.is_lol(link):
            return False
        if self.now - self.reclaimed.get(link, -1e18) < self.cfg.lend_hold_s:
            return False
        return self.mice_seen.get(link, 0.0) < self.lend_below()

    def lend_below(self) -> float:
        """Below this mice load a low-latency link may be lent (``lend_isolated`` with isolation)."""
        return self.cfg.lend_isolated if self.iso is not None and self.cfg.lend_isolated else self.cfg.lend_below

    def reclaim_above(self) -> float:
        """Above this mice load a lent link is taken back."""
        if self.iso is not None and self.cfg.lend_isolated:
            return min(1.0, self.cfg.lend_isolated + self.cfg.reclaim_above - self.cfg.lend_below)
        return self.cfg.reclaim_above

    def lent_links(self) -> list[Link]:
        """Low-latency links that carry elephant allocations now, sorted."""
        part = self.partition
        return sorted(ln for ln, bps in self.alloc.link.items() if bps > 0 and part.is_lol(ln))

    def open_link(self, link: Link) -> bool:
        """A link an elephant may be placed on: high-throughput, or low-latency and lendable."""
        return self.partition.is_hol(link) or self.lendable(link)

    def per_meter(self) -> float:
        """What an elephant's meter lets through per bit/s of its allocation (1 without isolation)."""
        return self.iso.meter_headroom if self.iso is not None else 1.0
