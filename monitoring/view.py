"""One read-only view of what monitoring knows, taken once per period.

Policies read only this: link loads with the time of their last measurement,
flows with their rates and the links they were seen on, and mice activity per
ToR pair. It is also what the operator API and the metrics show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from monitoring.sflow import FiveTuple

Link = tuple[str, str]
Pair = tuple[str, str]


class LinkArray:
    """One value per directed link of a fabric, in an array: the links in a fixed order, ``pos`` their
    positions, ``values`` one more than them (the last is always 0: where ``positions`` puts a link it
    does not know). What a period asks of every link at once (which are over a threshold, the loads of
    every up link) is an array operation, not a pass over a dictionary of 276,480 directed links (k=48:
    tens of milliseconds each)."""

    __slots__ = ("links", "pos", "values")

    def __init__(self, links: list[Link], pos: dict[Link, int] | None = None, values=None):
        import numpy as np

        self.links = links
        self.pos = pos if pos is not None else {ln: i for i, ln in enumerate(links)}
        self.values = values if values is not None else np.zeros(len(links) + 1)

    def copy(self) -> LinkArray:
        return LinkArray(self.links, self.pos, self.values.copy())

    def above(self, x: float) -> list[Link]:
        """The links whose value is over ``x``, in the array's order."""
        import numpy as np

        links = self.links
        return [links[i] for i in np.flatnonzero(self.values[:-1] > x).tolist()]

    def positions(self, links) -> object:
        """The positions of ``links`` (an array to index ``values`` with; a link not known reads 0)."""
        import numpy as np

        pos, none = self.pos, len(self.links)
        return np.fromiter((pos.get(ln, none) for ln in links), dtype=np.int64)


class Utils(Mapping):
    """Links' occupancy (link -> fraction of capacity) as a view holds it, read-only and not copied (a
    copy of 276,480 directed links is milliseconds each time a period asks), carrying the same readings
    as a ``LinkArray`` (``array``; None: not kept so). A consumer that reads every link uses the array;
    one that changes them takes ``copy()``, a plain dictionary."""

    __slots__ = ("_m", "array", "get", "items", "keys", "values")

    def __init__(self, m: Mapping, array: LinkArray | None = None):
        self._m, self.array = m, array
        self.get, self.items, self.keys, self.values = m.get, m.items, m.keys, m.values  # (C speed)

    def __getitem__(self, link: Link) -> float:
        return self._m[link]

    def __iter__(self):
        return iter(self._m)

    def __len__(self) -> int:
        return len(self._m)

    def __contains__(self, link) -> bool:
        return link in self._m

    def copy(self) -> dict:
        return dict(self._m) if not hasattr(self._m, "copy") else self._m.copy()

    def above(self, x: float) -> list[Link]:
        """The links over ``x`` (in the array's order, or the dictionary's)."""
        if self.array is not None:
            return self.array.above(x)
        return [ln for ln, u in self._m.items() if u > x]


class LinkReading(NamedTuple):
    """A link's latest measurement (a named tuple: one is built for every counter sample, 138,240 a
    second at k=48)."""

    util: float  # smoothed occupancy, fraction of capacity
    bps: float  # the latest raw measurement
    time: float  # when it was taken
    since: float | None = None  # when the traffic it measured began (a counter delta's start); None: ``time``


@dataclass(frozen=True)
class FlowReading:
    rate_bps: float
    links: frozenset[Link]  # directed links it was sampled entering a switch from
    elephant: bool
    last_seen: float


def _frozen(d: dict) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class View:
    now: float
    links: Mapping[Link, LinkReading] = field(default_factory=lambda: _frozen({}))
    flows: Mapping[FiveTuple, FlowReading] = field(default_factory=lambda: _frozen({}))
    mice_seen: Mapping[Pair, float] = field(default_factory=lambda: _frozen({}))  # ToR pair -> last mice sample
    # link -> (bits/s, window start): the lower confidence bound of the rate its flow samples show over the
    # last ``link_window_s`` (see monitoring.estimator); only links with enough samples
    sampled: Mapping[Link, tuple[float, float]] = field(default_factory=lambda: _frozen({}))
    # the same readings by field (util, bps, the time fresh_readings gives), when the maker kept them so:
    # a copy then, not a pass over every link (None: taken from ``links``)
    utils: Mapping[Link, float] | None = None
    bps: Mapping[Link, float] | None = None
    times: Mapping[Link, float] | None = None
    measured: Mapping[Link, float] | None = None  # link -> when its latest reading was taken
    counter_interval_s: float | None = None  # how often the switches' agents send each port's counters
    util_array: LinkArray | None = None  # ``utils`` as an array, when the maker kept one
    _memo: dict = field(default_factory=dict, compare=False, repr=False)  # what is worked out once per view

    def util(self, link: Link) -> float:
        r = self.links.get(link)
        return r.util if r is not None else 0.0

    def link_util(self) -> Utils:
        """Every measured link's smoothed occupancy, read-only, with the view's array of them when it has
        one (``Utils``)."""
        if self.utils is not None:
            return Utils(self.utils, self.util_array)  # (the view's own copy, read-only)
        return Utils({ln: r.util for ln, r in self.links.items()})

    def link_bps(self) -> dict[Link, float]:
        return {ln: r.bps for ln, r in self.links.items()}

    def link_time(self) -> dict[Link, float]:
        return {ln: r.time for ln, r in self.links.items()}

    def fresh_readings(self) -> dict[Link, tuple[float, float]]:
        """link -> (bits/s, time) of its freshest sure measurement: the counters' latest delta, or the flow
        samples' lower bound when that is higher (a link that just filled up shows in its samples within
        a fraction of a second, in its counters only at the next poll). The time is when the measured
        traffic began, the counter delta's start or the samples' window's: only a measurement taken wholly
        after an event can speak for what followed it."""
        out = {ln: (r.bps, r.time if r.since is None else r.since) for ln, r in self.links.items()}
        for ln, (bps, since) in self.sampled.items():
            if bps > out.get(ln, (0.0, 0.0))[0]:
                out[ln] = (bps, since)
        return out

    def fresh_bps_time(self) -> tuple[dict[Link, float], dict[Link, float]]:
        """``fresh_readings`` as two maps, link -> bits/s and link -> time (copies when the view has them)."""
        if self.bps is None or self.times is None:
            fresh = self.fresh_readings()
            return {ln: r[0] for ln, r in fresh.items()}, {ln: r[1] for ln, r in fresh.items()}
        bps, times = self.bps.copy(), self.times.copy()  # (a proxy's copy is its dict's: C speed)
        for ln, (b, since) in self.sampled.items():
            if b > bps.get(ln, 0.0):
                bps[ln], times[ln] = b, since
        return bps, times

    def stale(self, max_age_s: float) -> frozenset[Link]:
        """Links whose last measurement is older than ``max_age_s``: a dead or silent link must not read
        as idle (links never measured at all are not listed: there is nothing to be stale)."""
        if self.measured is not None:
            cutoff = self.now - max_age_s
            return frozenset([ln for ln, t in self.measured.items() if t < cutoff])
        return frozenset(ln for ln, r in self.links.items() if self.now - r.time > max_age_s)

    def elephants_on(self, link: Link) -> list[tuple[FiveTuple, float]]:
        """(flow, rate) of the current elephants sampled on a directed link (every link's, worked out at
        the first call: EFM asks for each congested link, and a pass over every flow each time was a
        tenth of the controller at k=16)."""
        on = self._memo.get("elephants_on")
        if on is None:
            on = self._memo["elephants_on"] = {}
            for f, r in self.flows.items():
                if r.elephant:
                    for ln in r.links:
                        on.setdefault(ln, []).append((f, r.rate_bps))
        return list(on.get(link, ()))

    def flow_links(self, flow: FiveTuple) -> set[Link]:
        r = self.flows.get(flow)
        return set(r.links) if r is not None else set()

    def active_pairs(self, horizon_s: float) -> set[Pair]:
        """ToR pairs whose mice were sampled within ``horizon_s``."""
        return {p for p, t in self.mice_seen.items() if self.now - t <= horizon_s}


def make(now: float, links: dict, flows: dict, mice_seen: dict, sampled: dict | None = None, utils: dict | None = None,
         bps: dict | None = None, times: dict | None = None, measured: dict | None = None,
         counter_interval_s: float | None = None, util_array: LinkArray | None = None) -> View:
    """A view of copies of these maps (``utils``, ``bps``, ``times``, ``measured``: the readings by field,
    if kept so; ``util_array``: ``utils`` as an array)."""
    return View(now, _frozen(links), _frozen(flows), _frozen(mice_seen), _frozen(sampled or {}),
                *(None if m is None else _frozen(m) for m in (utils, bps, times, measured)), counter_interval_s,
                None if util_array is None else util_array.copy())
