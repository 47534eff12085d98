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
NAN = float("nan")


class LinkArray:
    """One value per directed link of a fabric, in an array: the links in a fixed order, ``pos`` their
    positions, ``values`` one more than them (the last is always 0: where ``positions`` puts a link it
    does not know). What a period asks of every link at once (which are over a threshold, the loads of
    every up link) is an array operation, not a pass over a dictionary of 165,888 directed links (k=48:
    tens of milliseconds each)."""

    __slots__ = ("links", "pos", "values")

    def __init__(self, links: list[Link], pos: dict[Link, int] | None = None, values=None):
        import numpy as np

        self.links = links
        self.pos = pos if pos is not None else {ln: i for i, ln in enumerate(links)}
        self.values = values if values is not None else np.zeros(len(links) + 1)

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
    copy of 165,888 directed links is milliseconds each time a period asks), carrying the same readings
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
        if isinstance(self._m, ColumnMap):
            return self._m.above(x)
        return [ln for ln, u in self._m.items() if u > x]


class LinkReading(NamedTuple):
    """A link's latest measurement (a named tuple: one is built for every counter sample, 138,240 a
    second at k=48)."""

    util: float  # smoothed occupancy, fraction of capacity
    bps: float  # the latest raw measurement
    time: float  # when it was taken
    since: float | None = None  # when the traffic it measured began (a counter delta's start); None: ``time``


class LinkColumns:
    """Every directed link's latest reading, one array per field (``LinkArray``'s order and positions):
    the estimator writes a reading into them as it comes, and a period's view holds a copy of the arrays
    (five array copies, a fraction of a millisecond at k=48), not of dictionaries. Five copied dictionaries of
    165,888 links each were most of a k=48 view's making, and, young and tracked by the cyclic collector,
    each of its collections walked them: pauses of 30-200 ms of the controller's only event loop while a
    view was alive (``freeway bench fabric-scale``'s handshake tail). Never measured: ``time`` is NaN. A
    link outside the fabric's (none the estimator is built with) is kept aside in ``extra``."""

    __slots__ = ("links", "pos", "util", "bps", "time", "fresh", "since", "extra", "_measured", "_mv")

    def __init__(self, links: list[Link], pos: dict[Link, int] | None = None, arrays: tuple | None = None,
                 extra: dict | None = None):
        import numpy as np

        self.links = links
        self.pos = pos if pos is not None else {ln: i for i, ln in enumerate(links)}
        n = len(links) + 1  # (the last: where ``LinkArray.positions`` puts a link it does not know)
        if arrays is None:
            arrays = (np.zeros(n), np.zeros(n), np.full(n, np.nan), np.zeros(n), np.full(n, np.nan))
        self.util, self.bps, self.time, self.fresh, self.since = arrays  # since: NaN where not known
        self.extra: dict[Link, LinkReading] = extra if extra is not None else {}
        self._measured = None
        # the same memory as the arrays, read and written one element at a time as Python floats (``fold``:
        # a third of the cost of a NumPy scalar's indexing, for each of 165,888 counter deltas a second)
        self._mv = tuple(memoryview(a) for a in arrays)

    def set(self, link: Link, util: float, bps: float, time: float, since: float | None) -> None:
        """A link's new reading (``since``: when the traffic it measured began; None: ``time``)."""
        i = self.pos.get(link)
        if i is None:
            self.extra[link] = LinkReading(util, bps, time, since)
            return
        self.util[i], self.bps[i], self.time[i] = util, bps, time
        if since is None:
            self.fresh[i], self.since[i] = time, NAN
        else:
            self.fresh[i] = self.since[i] = since
        self._measured = None

    def fold(self, i: int | None, link: Link, alpha: float, util: float, bps: float, time: float,
             since: float | None) -> float:
        """A link's new measurement folded into its smoothed occupancy (``alpha``: the new one's weight;
        the measurement as it is if the link was never measured); the occupancy kept. ``i``: the link's
        position (``pos``), None for a link kept aside. One call for the estimator's 165,888 counter deltas
        a second at k=48, with the position worked out once per port (not ``util_of`` then ``set``)."""
        if i is None:
            old = self.util_of(link)
            if old is not None:
                util = alpha * util + (1 - alpha) * old
            self.set(link, util, bps, time, since)
            return util
        u, b, t, fresh, begun = self._mv
        if t[i] == t[i]:  # (NaN: never measured)
            util = alpha * util + (1 - alpha) * u[i]
        u[i], b[i], t[i] = util, bps, time
        if since is None:
            fresh[i], begun[i] = time, NAN
        else:
            fresh[i] = begun[i] = since
        self._measured = None
        return util

    def util_of(self, link: Link) -> float | None:
        """A link's smoothed occupancy, None if never measured."""
        i = self.pos.get(link)
        if i is None:
            r = self.extra.get(link)
            return None if r is None else r.util
        return None if self.time[i] != self.time[i] else float(self.util[i])

    def get(self, link: Link) -> LinkReading | None:
        i = self.pos.get(link)
        if i is None:
            return self.extra.get(link)
        t = self.time[i]
        if t != t:  # NaN: never measured
            return None
        s = self.since[i]
        return LinkReading(float(self.util[i]), float(self.bps[i]), float(t), None if s != s else float(s))

    def copy(self) -> LinkColumns:
        return LinkColumns(self.links, self.pos, tuple(a.copy() for a in (self.util, self.bps, self.time, self.fresh,
                                                                          self.since)), dict(self.extra))

    def measured(self):
        """The positions of the links measured, in the array's order (an array, worked out once per copy:
        not a list the collector would walk)."""
        if self._measured is None:
            import numpy as np

            self._measured = np.flatnonzero(~np.isnan(self.time[:-1]))
        return self._measured

    def array(self, field: str) -> LinkArray:
        """One field as a ``LinkArray`` (the same array, not a copy)."""
        return LinkArray(self.links, self.pos, getattr(self, field))

    def field_map(self, field: str) -> ColumnMap:
        return ColumnMap(self, field)


class _Measured(Mapping):
    """A read-only mapping over a ``LinkColumns``' measured links (in the array's order, then those kept
    aside): what ``ColumnMap`` and ``Readings`` share."""

    __slots__ = ("_c",)

    def __iter__(self):
        links = self._c.links
        yield from (links[i] for i in self._c.measured().tolist())
        yield from self._c.extra

    def __len__(self) -> int:
        return len(self._c.measured()) + len(self._c.extra)


class ColumnMap(_Measured):
    """One field of a ``LinkColumns`` (util, bps, time, fresh) as a read-only mapping of the links measured:
    what a dictionary of them answered, read from the arrays. ``copy()`` gives a plain dictionary;
    ``above(x)`` the links over ``x`` in one array operation."""

    __slots__ = ("_v", "_field")

    def __init__(self, cols: LinkColumns, field: str):
        self._c, self._v, self._field = cols, getattr(cols, field), field

    def _extra(self, r: LinkReading) -> float:
        if self._field == "fresh":
            return r.time if r.since is None else r.since
        return getattr(r, self._field)

    def __getitem__(self, link: Link) -> float:
        c = self._c
        i = c.pos.get(link)
        if i is None:
            return self._extra(c.extra[link])
        if c.time[i] != c.time[i]:
            raise KeyError(link)
        return float(self._v[i])

    def get(self, link: Link, default=None):
        c = self._c
        i = c.pos.get(link)
        if i is None:
            r = c.extra.get(link)
            return default if r is None else self._extra(r)
        if c.time[i] != c.time[i]:
            return default
        return float(self._v[i])

    def __contains__(self, link) -> bool:
        c = self._c
        i = c.pos.get(link)
        return link in c.extra if i is None else c.time[i] == c.time[i]

    def items(self):
        c, idx = self._c, self._c.measured()
        links = c.links
        out = list(zip([links[i] for i in idx.tolist()], self._v[idx].tolist(), strict=True))
        out += [(ln, self._extra(r)) for ln, r in c.extra.items()]
        return out

    def copy(self) -> dict:
        return dict(self.items())

    def above(self, x: float) -> list[Link]:
        """The measured links whose value is over ``x`` (the array's order, then those kept aside)."""
        import numpy as np

        c = self._c
        with np.errstate(invalid="ignore"):
            hit = np.flatnonzero((self._v[:-1] > x) & ~np.isnan(c.time[:-1])).tolist()
        links = c.links
        return [links[i] for i in hit] + [ln for ln, r in c.extra.items() if self._extra(r) > x]


class Readings(_Measured):
    """A ``LinkColumns`` as a read-only mapping link -> ``LinkReading`` of the links measured (a reading is
    built when asked for: what the operator's documents read, link by link)."""

    __slots__ = ()

    def __init__(self, cols: LinkColumns):
        self._c = cols

    def __getitem__(self, link: Link) -> LinkReading:
        r = self._c.get(link)
        if r is None:
            raise KeyError(link)
        return r

    def get(self, link: Link, default=None):
        r = self._c.get(link)
        return default if r is None else r

    def __contains__(self, link) -> bool:
        return self._c.get(link) is not None


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
    counter_interval_s: float | None = None  # how often the switches' agents send each port's counters
    # ``links`` as arrays by field, when the maker kept them so (None: ``links`` is a dictionary)
    columns: LinkColumns | None = None
    # links stale whatever the age of their reading: their collector worker died (``monitoring.shard``)
    lost: frozenset = frozenset()
    _memo: dict = field(default_factory=dict, compare=False, repr=False)  # what is worked out once per view

    def util(self, link: Link) -> float:
        r = self.links.get(link)
        return r.util if r is not None else 0.0

    def link_util(self) -> Utils:
        """Every measured link's smoothed occupancy, read-only, with the view's array of them when it has
        one (``Utils``)."""
        if self.columns is not None:
            return Utils(self.columns.field_map("util"), self.columns.array("util"))  # (the view's own copy)
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

    def fresh_bps_time(self) -> tuple[Mapping[Link, float], Mapping[Link, float]]:
        """``fresh_readings`` as two read-only maps, link -> bits/s and link -> time: with the view's
        columns, mappings over two of its arrays (copies of them with the flow samples' readings written
        in, when there are any; ``ColumnMap``: ``above(x)`` finds the links over a rate in one array
        operation)."""
        if self.columns is None:
            fresh = self.fresh_readings()
            return {ln: r[0] for ln, r in fresh.items()}, {ln: r[1] for ln, r in fresh.items()}
        c = self.columns
        if not self.sampled:
            return c.field_map("bps"), c.field_map("fresh")
        c = LinkColumns(c.links, c.pos, (c.util, c.bps.copy(), c.time.copy(), c.fresh.copy(), c.since),
                        dict(c.extra))
        bps = c.field_map("bps")
        for ln, (b, since) in self.sampled.items():
            if b > bps.get(ln, 0.0):
                i = c.pos.get(ln)
                if i is None:
                    old = c.extra.get(ln)
                    c.extra[ln] = LinkReading(old.util if old else 0.0, b, since, since)
                else:
                    c.bps[i], c.fresh[i] = b, since
                    if c.time[i] != c.time[i]:  # (sampled, never counted: measured now, as a dictionary had it)
                        c.time[i] = since
                    c._measured = None
        return c.field_map("bps"), c.field_map("fresh")

    def stale(self, max_age_s: float) -> frozenset[Link]:
        """Links whose last measurement is older than ``max_age_s``: a dead or silent link must not read
        as idle (links never measured at all are not listed: there is nothing to be stale)."""
        if self.columns is not None:
            import numpy as np

            c, cutoff = self.columns, self.now - max_age_s
            links = c.links
            with np.errstate(invalid="ignore"):  # (NaN: never measured, not below anything)
                old = np.flatnonzero(c.time[:-1] < cutoff).tolist()
            return frozenset([links[i] for i in old] + [ln for ln, r in c.extra.items() if r.time < cutoff]) | self.lost
        return frozenset(ln for ln, r in self.links.items() if self.now - r.time > max_age_s) | self.lost

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


def make(now: float, links: Mapping, flows: dict, mice_seen: dict, sampled: dict | None = None,
         counter_interval_s: float | None = None, columns: LinkColumns | None = None,
         lost: frozenset = frozenset()) -> View:
    """A view of copies of these (``columns``: every link's readings as arrays, copied; ``links`` is then
    read from them, and the ``links`` given is ignored)."""
    if columns is not None:
        columns = columns.copy()
        links = Readings(columns)
    else:
        links = _frozen(links)
    return View(now, links, _frozen(flows), _frozen(mice_seen), _frozen(sampled or {}), counter_interval_s, columns,
                lost)
