"""The placed elephants' subflows, each with the links of its placement and its allocated rate, and per
link the sum of those rates: what the period's mice-load estimate takes off a link's measured load.

Kept up to date by ``sync``, a pass over the elephants that works out again only those whose placements
changed (``Elephant.placements`` and ``Elephant.subflows`` are replaced when they change, never changed in
place, so a change shows as a new object). Walking every placement's path afresh each period took 22-43 ms
of the period's first part at k=48 with 1,000-2,000 elephants, while the handshakes waited behind it
(docs/lab/benchmarks-history.md, item 39)."""
from __future__ import annotations

from monitoring.sflow import FiveTuple
from ryu_apps.algorithms.binpack import Link, links

Entry = tuple[tuple[Link, ...], float]  # a subflow's placement: its links, its allocated rate


class PlacedRates:
    def __init__(self):
        self._of: dict[int, tuple] = {}  # elephant id -> (its placements, its subflows, [(five-tuple, Entry)])
        self.by_flow: dict[FiveTuple, list[Entry]] = {}  # a subflow's five-tuple -> where it is placed
        self.bps: dict[Link, float] = {}  # per link an elephant is placed across: the rates allocated on it
        self._n: dict[Link, int] = {}  # ... and how many subflows (a link leaves ``bps`` with its last one)

    def sync(self, elephants) -> None:
        """Bring the sums up to date with ``elephants`` (id -> ``Elephant``)."""
        of = self._of
        for eid in of.keys() - elephants.keys():
            self._drop(eid)
        for eid, el in elephants.items():
            c = of.get(eid)
            if c is not None:
                if c[0] is el.placements and c[1] is el.subflows:
                    continue
                self._drop(eid)
            self._add(eid, el)

    def _add(self, eid: int, el) -> None:
        entries = [(FiveTuple(sub.src, sub.dst, sub.proto, sub.sport, sub.dport), (tuple(links(pl.path)), pl.rate_bps))
                   for sub, pl in zip(el.subflows, el.placements, strict=True)]  # (all, before any sum is touched)
        bps, n = self.bps, self._n
        for ft, e in entries:
            self.by_flow.setdefault(ft, []).append(e)
            for ln in e[0]:
                bps[ln] = bps.get(ln, 0.0) + e[1]
                n[ln] = n.get(ln, 0) + 1
        self._of[eid] = (el.placements, el.subflows, entries)

    def _drop(self, eid: int) -> None:
        bps, n = self.bps, self._n
        for ft, e in self._of.pop(eid)[2]:
            on = self.by_flow[ft]
            on.remove(e)
            if not on:
                del self.by_flow[ft]
            for ln in e[0]:
                if n[ln] == 1:  # (its last subflow: gone, not a rounding residue of adding and taking off)
                    del n[ln], bps[ln]
                else:
                    n[ln] -= 1
                    bps[ln] -= e[1]
