"""Freeway's dynamic partition of equal-cost paths into low-latency and high-throughput paths.

Section II.B of the Freeway paper, for inter-pod ToR pairs of a fat-tree and
for leaf pairs of a leaf-spine:

- Every such pair has the same sorted list of top switches (cores by number,
  or spines), so path i of a pair goes up to ``tops[i]`` and down again.
- The first ``fixed_lol`` paths of every pair are fixed low-latency paths, the
  last ``fixed_hol`` fixed high-throughput paths; the rest start as
  high-throughput. A pair has ``n`` low-latency paths, its first ``n``.
- One counter per directed link: how many low-latency paths (over all pairs)
  use it. A link is LOL while its counter is above 0, HOL at 0.
- Adding a path takes path ``n`` (the one after the last low-latency path)
  and increments its links; deleting takes path ``n-1`` and decrements.
- Each period, a pair whose low-latency paths are more than half congested
  (average link load above ``lol_high``) adds one; more than half idle
  (below ``lol_low``) removes one.
- A link that turns LOL (counter 0 -> 1) is reported so that the elephants on
  it are moved. A link that falls to 0 does not become HOL at once: mice stop
  being sent on it immediately (the mice groups re-hash every mouse, even one
  mid-transfer, onto the remaining hops), but it stays closed to elephants
  until it has drained (the drain rule, see ``DRAIN``), so the mice packets
  already queued on it leave before an elephant arrives.

Intra-pod pairs follow from the inter-pod partition: their low-latency paths
are the aggregation paths whose two links are LOL.

Default thresholds: a LOL link should keep an ultra-low queue. With M/M/1-like
queueing, waiting time grows as rho/(1-rho): at 30% load it is 0.43 service
times, at 50% already 1, so a path is congested above 0.3 average load
(Freeway's Fig. 8 shows LOL links between 0.2 and 0.325). Removing one of n
paths raises the load on the others by n/(n-1) (at most 2x), so idle is below
0.1: after a removal the average stays below 0.2 < 0.3 and the pair does not
flap between adding and removing. ``lol_low`` must be below ``lol_high / 2``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from itertools import repeat
from operator import add

from topology.fabric import Fabric
from topology.paths import Path, Reachability, path_links, tor_paths, tors_below
from topology.settings import SettingError, setting, validate

Link = tuple[str, str]
Pair = tuple[str, str]

DRAIN = ("a link whose counter falls to 0 is 'draining': no mouse is forwarded on it any more (the groups move them "
         "all at once), and it becomes "
         "HOL (open to elephants) once at least drain_min_s has passed and its measured load is below drain_load, "
         "or after drain_max_s whatever the load")


PartitionError = SettingError  # the fabric or the settings do not allow the partition; the message says why


@dataclass(frozen=True)
class PartitionConfig:
    lol_high: float = setting(0.3, "a low-latency path whose average link load is above this is congested; more "
                              "than half congested adds a path", positive=True, max=1, live=True)
    lol_low: float = setting(0.1, "... below this is idle; more than half idle removes a path (below lol_high/2)", live=True)
    fixed_lol: int = setting(0, "fixed low-latency paths per ToR pair (0: k/2 on a fat-tree, 1 on a leaf-spine)")
    fixed_hol: int = setting(0, "fixed high-throughput paths per ToR pair (0: k/2 on a fat-tree, 1 on a "
                             "leaf-spine)")
    lol_order: str = setting("paper", "the order a pair's paths join the low-latency set: paper (by core number: "
                             "on a fat-tree the k/2 fixed low-latency paths all go up through a ToR's first "
                             "aggregation switch, one uplink of k/2) or spread (one core of each aggregation switch "
                             "in turn: the fixed ones leave by every uplink, so every uplink is a low-latency link "
                             "and no path is made of high-throughput links alone, against the paper's "
                             "Constraint 1: elephants go only where lending opens a link)",
                             choices=("paper", "spread"))
    mice_paths: str = setting("all", "the paths mice take: lol (the paper: the low-latency paths only) or all (every "
                              "live path, weighted by load, as ECMP spreads them: with isolation the queues keep "
                              "them apart from elephants; elephants still go on high-throughput paths first)",
                              choices=("lol", "all"))
    path_load: str = setting("mean", "a low-latency path's load, against lol_high and lol_low: mean (the paper: the "
                             "average of its links) or max (its busiest link: a burst that fills one link of four "
                             "reads a quarter of itself in the mean)", choices=("mean", "max"), live=True)
    drain_load: float = setting(0.02, "a draining link turns HOL once its load is below this ...", live=True)
    drain_min_s: float = setting(1.0, "... and it has drained at least this long", "s", live=True)
    drain_max_s: float = setting(5.0, "... or after this long whatever its load", "s", live=True)

    def __post_init__(self) -> None:
        validate(self)
        if not self.lol_low < self.lol_high / 2:
            raise SettingError(f"lol_low: must be below lol_high/2 ({self.lol_high / 2}) so that removing a "
                               f"path cannot make the pair congested again, got {self.lol_low}")
        if self.drain_min_s > self.drain_max_s:
            raise SettingError("drain_min_s: must not exceed drain_max_s")


@dataclass
class StepResult:
    added: list[Pair] = field(default_factory=list)
    removed: list[Pair] = field(default_factory=list)
    became_lol: set[Link] = field(default_factory=set)  # reschedule the elephants on these
    began_draining: set[Link] = field(default_factory=set)  # no more mice here
    became_hol: set[Link] = field(default_factory=set)  # drained: open to elephants

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.became_hol)


class Partition:
    def __init__(self, fabric: Fabric, config: PartitionConfig | None = None):
        self.fabric = fabric
        self.cfg = config or PartitionConfig()
        tors = fabric.tors()
        top_level = max(fabric.switches[t].level for t in fabric.switches)
        self.tops = sorted((s for s in fabric.switches if fabric.switches[s].level == top_level),
                           key=fabric._order)
        if fabric.topo == "fattree":
            half = fabric.params["k"] // 2
            default_lol = default_hol = half
            if self.cfg.lol_order == "spread":  # core i of aggregation j, i before j: c1, c(k/2+1), ..., c2, ...
                self.tops = sorted(self.tops, key=lambda t, at={t: i for i, t in enumerate(self.tops)}:
                                   (at[t] % half, at[t] // half))
        else:
            default_lol = default_hol = 1
        self.n_min = self.cfg.fixed_lol or default_lol
        fixed_hol = self.cfg.fixed_hol or default_hol
        self.n_max = len(self.tops) - fixed_hol
        if self.n_min < 1 or fixed_hol < 1 or self.n_min > self.n_max:
            raise PartitionError(f"fixed_lol/fixed_hol: {self.n_min} fixed low-latency and {fixed_hol} fixed "
                                 f"high-throughput paths do not fit in {len(self.tops)} paths per pair")
        self._top_index = {top: i for i, top in enumerate(self.tops)}
        self._above: dict[str, frozenset[int]] = {}  # per switch, the tops at or above it (``_tops_above``)
        self._up: dict[tuple[str, str], Path] = {}
        self._tors_below = tors_below(fabric)
        self.dead: frozenset[Link] = frozenset()  # links that are down: neither LOL nor HOL
        self._live: dict[Pair, list[Path]] = {}  # a pair's live paths, in order (cleared when ``dead`` changes)
        for t in tors:
            chains = _chains_up(fabric, t)
            for chain in chains:
                self._up[(t, chain[-1])] = chain
            if len(chains) != len(self.tops):
                raise PartitionError(f"ToR {t} has {len(chains)} paths up to {len(self.tops)} top switches: "
                                     "Freeway's partition needs exactly one per top (fat-tree or leaf-spine)")
        for t in tors:
            for top in self.tops:
                if (t, top) not in self._up:
                    raise PartitionError(f"ToR {t} has no single path up to {top}: not a fat-tree or leaf-spine")
        # each (ToR, top): its links up to the top, and down from it, in a path's order (``_lol_loads``)
        self._links_up = {key: tuple(path_links(up)) for key, up in self._up.items()}
        self._links_down = {key: tuple(path_links(tuple(reversed(up)))) for key, up in self._up.items()}
        self._batch: _Batch | None = None  # built at the first step that reads loads from a mapping
        self._loads: tuple | None = None  # (the mapping, its array) of the latest ``loads_array``
        self._group = {t: (fabric.switches[t].pod if fabric.topo == "fattree" else t) for t in tors}
        self.top_groups = _top_groups(self._up, tors, self.tops)
        self.tors = tors
        self.n: dict[Pair, int] = {}  # pairs whose count differs from n_min
        self.n_from: dict[str, dict[str, int]] = {}  # the same, per source ToR: destination -> count
        self.counter: Counter[Link] = Counter()
        self.touched: set[Link] = set()  # links whose counter went to or from 0 (``take_changes``)
        self.mice_version = 0  # counts those changes: the mice's reachability below is kept while it stands
        self._mice_reach: tuple[int, Reachability] | None = None
        self._mice_all: tuple[int, MiceRoutes] | None = None  # (the version, every switch's next hops as bits)
        self.n_touched: set[Pair] = set()  # pairs whose path count changed
        self.draining: dict[Link, float] = {}
        sizes = Counter(self._group.values())
        for t in tors:
            others = len(tors) - sizes[self._group[t]]
            for top in self.tops[: self.n_min]:
                up = self._up[(t, top)]
                for ln in path_links(up) + path_links(tuple(reversed(up))):
                    self.counter[ln] += others

    # ----- structure ---------------------------------------------------------
    def is_partitioned(self, pair: Pair) -> bool:
        """Inter-pod fat-tree pairs and leaf-spine leaf pairs are partitioned; intra-pod pairs follow."""
        s, d = pair
        return s != d and self._group[s] != self._group[d]

    def path(self, pair: Pair, i: int) -> Path:
        s, d = pair
        up = self._up[(s, self.tops[i])]
        return up + tuple(reversed(self._up[(d, self.tops[i])]))[1:]

    def halves_up(self, tor: str) -> list[tuple[Link, ...]]:
        """For each top in order, the links of the path up from ``tor`` to it: the first half of each of a
        partitioned pair's paths from ``tor`` (``halves_down`` the second, into its destination)."""
        return [self._links_up[(tor, top)] for top in self.tops]

    def halves_down(self, tor: str) -> list[tuple[Link, ...]]:
        """For each top in order, the links of the path down from it to ``tor``."""
        return [self._links_down[(tor, top)] for top in self.tops]

    def paths(self, pair: Pair) -> list[Path]:
        """All of a pair's paths in the paper's order, dead or alive."""
        if self.is_partitioned(pair):
            return [self.path(pair, i) for i in range(len(self.tops))]
        return tor_paths(self.fabric, *pair)

    def live_paths(self, pair: Pair) -> list[Path]:
        """The pair's paths that cross no dead link, in order: the first ``n_lol`` are its LOL paths."""
        if not self.dead:
            return self.paths(pair)
        if pair not in self._live:
            self._live[pair] = [p for p in self.paths(pair) if not any(ln in self.dead for ln in path_links(p))]
        return self._live[pair]

    def _live_path(self, pair: Pair, i: int) -> Path:
        """The pair's ``i``-th live path (without building them all when no link is down)."""
        return self.path(pair, i) if not self.dead else self.live_paths(pair)[i]

    def _n_live(self, pair: Pair) -> int:
        return len(self.tops) if not self.dead else len(self.live_paths(pair))

    def n_lol(self, pair: Pair) -> int:
        return self.n.get(pair, self.n_min)

    def lol_paths(self, pair: Pair) -> list[Path]:
        if self.is_partitioned(pair):
            n = min(self.n_lol(pair), len(self.tops))
            if not self.dead:
                return [self.path(pair, i) for i in range(n)]
            if pair in self._live:
                return self._live[pair][:n]
            out = []  # the first n live paths, without building (and keeping) all of them
            for i in range(len(self.tops)):
                p = self.path(pair, i)
                if not any(ln in self.dead for ln in path_links(p)):
                    out.append(p)
                    if len(out) == n:
                        break
            return out
        return [p for p in tor_paths(self.fabric, *pair) if all(self.mice_usable(ln) for ln in path_links(p))]

    def hol_paths(self, pair: Pair) -> list[Path]:
        """The pair's paths made only of HOL links (open to elephants)."""
        return [p for p in self.live_paths(pair) if all(self.is_hol(ln) for ln in path_links(p))]

    def best_hol_path(self, pair: Pair, util, usable=lambda ln: True, open_=None,
                      ties: str = "first") -> tuple[float, Path] | None:
        """(its utilisation, the path) of the pair's HOL path whose busiest link is least busy by ``util``
        (ties to the earliest path, as ``binpack.bin_pack`` over ``hol_paths``; ``ties`` "load": to the path
        whose links' utilisations sum least, then the earliest, which opens every group that can tie), among paths whose links
        are all ``usable`` too; None when there is none. Without building every path: the paths are
        taken in groups that share their first and last link (``top_groups``), the groups with the
        least busy shared links first, and a group whose shared links are already busier than the best
        path found is not opened. For partitioned pairs only. ``open_`` (default ``is_hol``): which links an
        elephant may take (Freeway's lending adds low-latency links that mice leave idle)."""
        s, d = pair
        memo: dict[Link, float] = {}
        is_open = open_ or self.is_hol

        def u(ln: Link) -> float:
            v = memo.get(ln)
            if v is None:
                v = memo[ln] = util(ln) if is_open(ln) and usable(ln) else float("inf")
            return v

        order = []
        for tops in self.top_groups:
            first = (s, self._up[(s, self.tops[tops[0]])][1])
            last = (self._up[(d, self.tops[tops[0]])][1], d)
            bound = max(u(first), u(last))
            if bound < float("inf"):
                order.append((bound, tops[0], tops))
        order.sort()
        by_load = ties == "load"
        best: tuple[float, int, Path] | None = None
        total = 0.0  # the best path's sum of utilisations (ties "load"; else 0, and only the order breaks ties)
        for bound, first_top, tops in order:
            if best is not None and (bound > best[0] + 1e-12 or (
                    not by_load and bound >= best[0] - 1e-12 and first_top > best[1])):
                continue  # nothing in it can beat the best (at most tie it, later in the order)
            for i in tops:
                path = self.path(pair, i)
                lk = path_links(path)
                v = max(u(ln) for ln in lk)
                if v == float("inf"):
                    continue
                t = sum(u(ln) for ln in lk) if by_load else 0.0
                if best is None or v < best[0] - 1e-12 or (v <= best[0] + 1e-12 and (
                        t < total - 1e-12 or (t <= total + 1e-12 and i < best[1]))):
                    best, total = (v, i, path), t
                if v <= bound + 1e-12 and not by_load:
                    break  # the group's best: no later path of it does better (by load, a later one may tie it with less)
        return None if best is None else (best[0], best[2])

    def is_lol(self, link: Link) -> bool:
        return self.counter[link] > 0 or link in self.draining

    def is_hol(self, link: Link) -> bool:
        return not self.is_lol(link) and link not in self.dead

    def mice_usable(self, link: Link) -> bool:
        if self.cfg.mice_paths == "all":  # (isolation keeps them apart in the queues: every live link)
            return self.dead is None or link not in self.dead
        return self.counter.get(link, 0) > 0

    # ----- add / remove ----------------------------------------------------------
    def add_path(self, pair: Pair, res: StepResult | None = None) -> bool:
        n = self.n_lol(pair)
        if not self.is_partitioned(pair) or n >= self.n_max or n >= self._n_live(pair):
            return False
        for ln in path_links(self._live_path(pair, n)):
            self.counter[ln] += 1
            if self.counter[ln] == 1:
                self.touched.add(ln)
                self.mice_version += 1
                if self.draining.pop(ln, None) is None and res is not None:
                    res.became_lol.add(ln)
                elif res is not None:
                    res.began_draining.discard(ln)
        self._set_n(pair, n + 1)
        if res is not None:
            res.added.append(pair)
        return True

    def remove_path(self, pair: Pair, now: float, res: StepResult | None = None) -> bool:
        n = self.n_lol(pair)
        if not self.is_partitioned(pair) or n <= self.n_min:
            return False
        for ln in path_links(self._live_path(pair, n - 1)) if n - 1 < self._n_live(pair) else ():
            self.counter[ln] -= 1
            if self.counter[ln] == 0:
                self.touched.add(ln)
                self.mice_version += 1
                self.draining[ln] = now
                if res is not None:
                    res.began_draining.add(ln)
        self._set_n(pair, n - 1)
        if res is not None:
            res.removed.append(pair)
        return True

    def take_changes(self) -> tuple[set[Link], set[Pair]]:
        """What changed since the last call: links that joined or left the mice's links (their counter
        went to or from 0; possibly back again), and pairs whose low-latency path count changed."""
        out = self.touched, self.n_touched
        self.touched, self.n_touched = set(), set()
        return out

    def _set_n(self, pair: Pair, n: int) -> None:
        self.n_touched.add(pair)
        if n == self.n_min:
            self.n.pop(pair, None)
            mine = self.n_from.get(pair[0])
            if mine is not None:
                mine.pop(pair[1], None)
                if not mine:
                    del self.n_from[pair[0]]
        else:
            self.n[pair] = n
            self.n_from.setdefault(pair[0], {})[pair[1]] = n

    # ----- the periodic decision ---------------------------------------------------
    def path_load(self, path: Path, load) -> float:
        links = path_links(path)
        return self._of_links(map(load, links), len(links))

    def _of_links(self, values, n: int) -> float:
        return max(values, default=0.0) if self.cfg.path_load == "max" else _added(values) / n

    def _lol_loads(self, pair: Pair, load, util: Mapping | None = None) -> list[float]:
        """``path_load`` of each of the pair's LOL paths, read from the ToRs' links up to and down from
        each top without building the paths when no link is down (the same sums, in the same order).
        With ``util`` (link -> load, 0 when absent) the loads are read from it directly."""
        if self.dead or not self.is_partitioned(pair):
            return [self.path_load(p, load) for p in self.lol_paths(pair)]
        s, d = pair
        up, down = self._links_up, self._links_down
        of = self._of_links
        if util is not None:
            get = util.get
            return [of(map(get, links, repeat(0.0)), len(links))
                    for links in (up[(s, top)] + down[(d, top)] for top in self.tops[: self.n_lol(pair)])]
        return [of(map(load, links), len(links))
                for links in (up[(s, top)] + down[(d, top)] for top in self.tops[: self.n_lol(pair)])]

    def loads_array(self, util: Mapping) -> tuple | None:
        """(array of every ToR-to-top link's load, link -> position) read from ``util`` once (the same
        mapping object again gives the same array: the period's step and the mice weights share one
        reading); None where the batch does not apply (chains of unequal length)."""
        if self._batch is None:
            self._batch = _Batch(self)
        if not self._batch.ok:
            return None
        if self._loads is None or self._loads[0] is not util:
            self._loads = (util, self._batch.read(util))
        return self._loads[1], self._batch.index

    def decide(self, pair: Pair, load, util: Mapping | None = None) -> int:
        """+1 to add a path, -1 to remove one, 0 to keep (more than half congested / idle)."""
        loads = self._lol_loads(pair, load, util)
        if not loads:
            return 0
        if sum(x > self.cfg.lol_high for x in loads) * 2 > len(loads):
            return 1
        if sum(x < self.cfg.lol_low for x in loads) * 2 > len(loads):
            return -1
        return 0

    def step(self, now: float, pairs, load) -> StepResult:
        """One period: decide for each candidate pair (pairs with traffic, and every pair above the
        minimum), add or remove at most one path each, and finish draining links. ``load`` is a link's
        load: a function, or a mapping (0 for a link it lacks)."""
        res = StepResult()
        util, batch = None, {}
        candidates = sorted(set(pairs) | set(self.n))
        if isinstance(load, Mapping):
            util = load
            load = lambda ln: util.get(ln, 0.0)  # noqa: E731
            if not self.dead:  # every pair's decision at once (no pair's decision moves another's loads)
                if self._batch is None:
                    self._batch = _Batch(self)
                batch = self._batch.decide(self, [p for p in candidates if self.is_partitioned(p)], util)
        for pair in candidates:
            if not self.is_partitioned(pair):
                continue
            d = batch[pair] if pair in batch else self.decide(pair, load, util)
            if d > 0:
                self.add_path(pair, res)
            elif d < 0:
                self.remove_path(pair, now, res)
        for ln, since in list(self.draining.items()):
            waited = now - since
            if ln in res.began_draining:
                continue
            if (waited >= self.cfg.drain_min_s and load(ln) < self.cfg.drain_load) or waited >= self.cfg.drain_max_s:
                del self.draining[ln]
                res.became_hol.add(ln)
        return res

    # ----- mice forwarding ----------------------------------------------------------
    def mice_next_hops(self, switch: str, dst_tor: str) -> list[str]:
        """Up-neighbors of ``switch`` through which a mouse reaches ``dst_tor`` on LOL links only
        (empty when ``dst_tor`` is below ``switch``: going down follows the prefix routes)."""
        if self._mice_reach is None or self._mice_reach[0] != self.mice_version:  # (one per version: its answers
            # are memoised, a connecting k=48 ToR asks for 1,151 destinations, the fabric for 3.3 million)
            self._mice_reach = (self.mice_version, Reachability(self.fabric, self.mice_usable, self._tors_below))
        return self._mice_reach[1].next_hops(switch, dst_tor)

    def mice_routes(self) -> MiceRoutes:
        """The mice's next hops of every switch, to keep up to date with ``take_changes``."""
        return MiceRoutes(self.fabric, self.mice_usable, self._tors_below)

    def mice_next_hops_all(self, switch: str) -> dict[str, list[str]]:
        """``mice_next_hops`` of ``switch`` toward every ToR that has some, by the sets of ToRs that share
        them (``MiceRoutes.next_hops_all``, one per version: a connecting switch's program asks for all)."""
        if self._mice_all is None or self._mice_all[0] != self.mice_version:
            self._mice_all = (self.mice_version, self.mice_routes())
        routes = self._mice_all[1]
        return {t: list(h) for t, h in zip(routes.tors, routes.next_hops_all(switch), strict=True) if h}

    # ----- failures -------------------------------------------------------------------
    def set_dead(self, now: float, dead) -> StepResult:
        """Links went down or came back. A dead link is neither LOL nor HOL; each pair's LOL paths are
        its first ``n_lol`` live paths, so a LOL path that died is replaced by the next one in order.
        Links that leave LOL drain as usual; links that join it are reported in ``became_lol``."""
        res = StepResult()
        dead = frozenset(dead)
        if dead == self.dead:
            return res
        if self.cfg.mice_paths == "all":  # the mice's usable links are the live ones: those changed
            self.touched |= dead ^ (self.dead or frozenset())
            self.mice_version += 1
        if self.dead is None:  # a recount of every pair (``restore``)
            self.dead, self._live = dead, {}
            new: Counter[Link] = Counter()
            for s in self.tors:
                for d in self.tors:
                    if self.is_partitioned((s, d)):
                        for p in self.lol_paths((s, d)):
                            new.update(path_links(p))
            changes = {ln: new[ln] for ln in set(self.counter) | set(new) if new[ln] != self.counter.get(ln, 0)}
        else:  # only the pairs with a path over a link that died or came back (k=32: a switch's thousands,
            # not all 261,632 pairs, whose every live path held at once took 3.3 GB and minutes)
            # A pair's LOL paths are its first n live ones, one per top switch in order: only the tops that
            # left or joined them change the counter (an agg-core cut at k=48: 54,000 pairs, one top each),
            # and a top's path is live when its chain up from the source and down to the destination are.
            old, affected = self.dead, self._pairs_over(dead ^ self.dead)
            up_before, down_before = self._dead_tops(old)
            up_after, down_after = self._dead_tops(dead)
            none: frozenset[int] = frozenset()
            firsts: dict[tuple, tuple[str, ...]] = {}

            def lol_tops(gone: frozenset[int], n: int) -> tuple[str, ...]:
                """The first ``n`` tops not in ``gone`` (pairs with the same dead tops share the answer)."""
                key = (gone, n)
                got = firsts.get(key)
                if got is None:
                    out = []
                    for i, top in enumerate(self.tops):
                        if i not in gone:
                            out.append(top)
                            if len(out) == n:
                                break
                    got = firsts[key] = tuple(out)
                return got

            # Pairs with the same dead tops before and after and the same count move the same tops: they
            # are counted per (end, answer), and each end's chains change once by that many (an agg-core
            # cut at k=48: 54,000 pairs, a few answers; set_dead 0.20 s to 0.08 s, offline)
            by_src: Counter[tuple[str, tuple]] = Counter()
            by_dst: Counter[tuple[str, tuple]] = Counter()
            n_tops = len(self.tops)
            for s, d in affected:
                gb = up_before.get(s, none) | down_before.get(d, none)
                ga = up_after.get(s, none) | down_after.get(d, none)
                if gb == ga:
                    continue
                key = (gb, ga, min(self.n_lol((s, d)), n_tops))
                by_src[(s, key)] += 1
                by_dst[(d, key)] += 1
            moves: dict[tuple, tuple[set[str], set[str]]] = {}  # answer -> (the tops that left, those that joined)
            for _, key in by_src:
                if key not in moves:
                    before, after = lol_tops(key[0], key[2]), lol_tops(key[1], key[2])
                    moves[key] = (set(before).difference(after), set(after).difference(before))
            delta: dict[Link, int] = {}
            for chains, ends in ((self._links_up, by_src), (self._links_down, by_dst)):
                per_chain: Counter[tuple[str, str]] = Counter()  # (end, top): paths that joined less those that left
                for (end, key), m in ends.items():
                    left, joined = moves[key]
                    for top in left:
                        per_chain[(end, top)] -= m
                    for top in joined:
                        per_chain[(end, top)] += m
                for key, dv in per_chain.items():
                    if dv:
                        for ln in chains[key]:
                            delta[ln] = delta.get(ln, 0) + dv
            self.dead = dead
            for pair in affected:
                self._live.pop(pair, None)
            changes = {ln: self.counter.get(ln, 0) + dv for ln, dv in delta.items() if dv}
        self._apply_counts(now, changes, dead, res)
        return res

    def _apply_counts(self, now: float, changes: dict[Link, int], dead: frozenset, res: StepResult) -> None:
        """Links' new counters (only those that changed): a link that joins LOL is reported, one that
        leaves it drains (unless it died); a dead link stops draining."""
        for ln, c in changes.items():
            was, now_lol = self.counter.get(ln, 0) > 0, c > 0
            if was != now_lol:
                self.touched.add(ln)
                self.mice_version += 1
            if now_lol and not was and self.draining.pop(ln, None) is None:
                res.became_lol.add(ln)
            elif was and not now_lol and ln not in dead:
                self.draining[ln] = now
                res.began_draining.add(ln)
            if c > 0:
                self.counter[ln] = c
            else:
                self.counter.pop(ln, None)
        for ln in dead:
            self.draining.pop(ln, None)

    def _dead_tops(self, dead) -> tuple[dict[str, frozenset[int]], dict[str, frozenset[int]]]:
        """Per ToR, the tops (by index) whose chain up from it, and those whose chain down to it, cross a
        link of ``dead``: a chain from a ToR to a top goes only up, so a link's chains are those of the
        ToRs below its lower end and the tops above its upper end that hold it (checked)."""
        sw = self.fabric.switches
        up: dict[str, set[int]] = {}
        down: dict[str, set[int]] = {}
        for a, b in dead:
            if a not in sw or b not in sw or sw[a].level == sw[b].level:
                continue
            going_up = sw[a].level < sw[b].level
            lo, hi = (a, b) if going_up else (b, a)
            chains, into = (self._links_up, up) if going_up else (self._links_down, down)
            for t in self._tors_below[lo]:
                for i in self._tops_above(hi):
                    if (a, b) in chains[(t, self.tops[i])]:
                        into.setdefault(t, set()).add(i)
        return ({t: frozenset(v) for t, v in up.items()}, {t: frozenset(v) for t, v in down.items()})

    def _tops_above(self, switch: str) -> frozenset[int]:
        """The tops (by index) at or above ``switch``."""
        got = self._above.get(switch)
        if got is None:
            if switch in self._top_index:
                got = frozenset((self._top_index[switch],))
            else:
                got = frozenset().union(*(self._tops_above(n) for n in self.fabric.up_neighbors(switch)))
            self._above[switch] = got
        return got

    def _pairs_over(self, links) -> set[Pair]:
        """The partitioned pairs that have a path over any of ``links``: a path goes up from its source
        ToR and down to its destination, so a link's pairs have an end below the link's lower switch."""
        ends: set[str] = set()
        for a, b in links:
            if a in self.fabric.switches and b in self.fabric.switches:
                lower = a if self.fabric.switches[a].level < self.fabric.switches[b].level else b
                ends |= self._tors_below[lower]
        out = {(s, d) for s in ends for d in self.tors if self.is_partitioned((s, d))}
        out |= {(d, s) for s in ends for d in self.tors if self.is_partitioned((d, s))}
        return out

    def restore(self, now: float, counts: dict[Pair, int]) -> StepResult:
        """After a restart: pairs' low-latency path counts as read back from the switches (values
        outside the bounds are clamped, pairs that are not partitioned ignored). The link counters are
        recomputed; a link that leaves LOL drains as usual."""
        changed = False
        for pair, n in counts.items():
            if self.is_partitioned(pair) and pair[0] in self._group and pair[1] in self._group:
                n = max(self.n_min, min(self.n_max, n))
                if n != self.n_lol(pair):
                    self._set_n(pair, n)
                    changed = True
        if not changed:
            return StepResult()
        dead, self.dead = self.dead, None  # recount as set_dead does
        return self.set_dead(now, dead)

    def lol_links(self) -> set[Link]:
        return {ln for ln, c in self.counter.items() if c > 0} | set(self.draining)



def _added(values) -> float:
    """The values added one after another, as the batch adds them link by link (``sum`` of floats
    compensates its rounding from Python 3.12, which would make the two differ in the last bit)."""
    return reduce(add, values, 0.0)


class SparseLoads(dict):
    """A load per link where a link it lacks has 0 (as ``step`` reads any mapping): read into the period's
    arrays from its own entries, not by looking up every link of the fabric (at k=48 a mice load seen on
    a few hundred links, of 110,592: 36 ms a period saved)."""


class _Batch:
    """Every candidate pair's ``decide`` in a few array operations (the period's hot loop at k=48: 2,000
    pairs x 26 LOL paths x 4 links). The same sums in the same order as ``_lol_loads``: link by link along
    each path, then divided by the path's length; so the same decisions."""

    def __init__(self, part: Partition):
        import numpy as np

        self.np = np
        self.links = sorted({ln for key in part._up for ln in part._links_up[key] + part._links_down[key]})
        self.index = index = {ln: i for i, ln in enumerate(self.links)}
        self.tor_index = {t: i for i, t in enumerate(part.tors)}
        self._at = None  # (a LinkArray's positions, where each of ``links`` is in it)
        lens = {len(part._links_up[key]) for key in part._up}
        self.ok = len(lens) == 1  # every ToR's chains to every top are as long (fat-tree, leaf-spine)
        if not self.ok:
            return
        up = np.empty((len(part.tors), len(part.tops), lens.pop()), dtype=np.int32)
        down = np.empty_like(up)
        for t, ti in self.tor_index.items():
            for j, top in enumerate(part.tops):
                up[ti, j] = [index[ln] for ln in part._links_up[(t, top)]]
                down[ti, j] = [index[ln] for ln in part._links_down[(t, top)]]
        self.up, self.down = up, down

    def read(self, util: Mapping):
        arr = getattr(util, "array", None)  # (a view's ``Utils``: the same readings as an array)
        if arr is not None:
            if self._at is None or self._at[0] is not arr.pos:
                self._at = (arr.pos, arr.positions(self.links))
            return arr.values[self._at[1]]
        if isinstance(util, SparseLoads):
            out = self.np.zeros(len(self.links))
            index = self.index
            for ln, x in util.items():
                i = index.get(ln)
                if i is not None:
                    out[i] = x
            return out
        return self.np.fromiter(map(util.get, self.links, repeat(0.0)), dtype=self.np.float64, count=len(self.links))

    def decide(self, part: Partition, pairs: list[Pair], util: Mapping) -> dict[Pair, int]:
        if not self.ok or not pairs:
            return {}
        np = self.np
        u = part.loads_array(util)[0]
        n = np.fromiter((part.n_lol(p) for p in pairs), dtype=np.int64, count=len(pairs))
        src = np.fromiter((self.tor_index[p[0]] for p in pairs), dtype=np.int64, count=len(pairs))
        dst = np.fromiter((self.tor_index[p[1]] for p in pairs), dtype=np.int64, count=len(pairs))
        rows = np.repeat(np.arange(len(pairs)), n)
        starts = np.cumsum(n) - n
        top = np.arange(len(rows)) - np.repeat(starts, n)  # the pair's i-th top, i < n_lol
        ids = np.concatenate([self.up[src[rows], top], self.down[dst[rows], top]], axis=1)
        if part.cfg.path_load == "max":
            loads = u[ids].max(axis=1)
        else:
            total = np.zeros(len(rows))
            for c in range(ids.shape[1]):  # link by link, as ``sum`` adds them
                total = total + u[ids[:, c]]
            loads = total / ids.shape[1]
        high = np.add.reduceat((loads > part.cfg.lol_high).astype(np.int64), starts) * 2 > n
        low = np.add.reduceat((loads < part.cfg.lol_low).astype(np.int64), starts) * 2 > n
        return {p: (1 if h else -1 if lo else 0) for p, h, lo in zip(pairs, high.tolist(), low.tolist(), strict=True)}


def _chains_up(fabric: Fabric, tor: str) -> list[Path]:
    out, frontier = [], [(tor,)]
    while frontier:
        nxt = []
        for c in frontier:
            ups = fabric.up_neighbors(c[-1])
            if not ups:
                out.append(c)
            nxt += [c + (u,) for u in ups]
        frontier = nxt
    return out


class MiceRoutes:
    """Every switch's mice next hops toward every ToR over LOL links, kept up to date as links join or
    leave LOL (``changed``) instead of computed afresh each period.

    The same answers as ``topology.paths.Reachability`` (valley-free routes over ``usable`` links),
    kept per switch as one bit per ToR (a Python integer: bit ``j`` for the ToR at position ``j`` of
    ``fabric.tors()``): the ToRs the switch reaches. A switch reaches the ToRs below it that one of its
    usable down links reaches going down, and the others that one of its usable up links reaches; so
    a change is followed level by level, a switch's row being the OR of a few others', whatever the
    number of ToRs. A k=48 link cut changes the next hops of 1.3 million (switch, ToR): one row
    operation per switch, not one step per pair, finds them (``changed``), and ``classes`` hands a
    switch's changed ToRs over grouped by their next hops."""

    def __init__(self, fabric: Fabric, usable, below: dict[str, frozenset[str]]):
        self.usable = usable
        self.up = {s: tuple(fabric.up_neighbors(s)) for s in fabric.switches}
        self.down = {s: tuple(fabric.down_neighbors(s)) for s in fabric.switches}
        self.level = {s: fabric.switches[s].level for s in fabric.switches}
        self.tors = fabric.tors()
        self._tid = {t: j for j, t in enumerate(self.tors)}
        self._below = {s: sum(1 << self._tid[t] for t in below[s] if t in self._tid) for s in fabric.switches}
        self._own = {s: 1 << self._tid[s] if s in self._tid else 0 for s in fabric.switches}
        self._order = sorted(fabric.switches, key=self.level.__getitem__)  # lowest level first
        self._up_ok: dict[str, tuple[str, ...]] = {}  # per switch: its up neighbors over usable links
        self._down_part: dict[str, int] = {}  # per switch: the ToRs below it it reaches going down
        self.row: dict[str, int] = {}  # per switch: the ToRs it reaches
        self._compute(set(fabric.switches), set(fabric.switches))

    def _ups(self, switch: str) -> tuple[str, ...]:
        got = self._up_ok.get(switch)
        if got is None:
            got = self._up_ok[switch] = tuple(n for n in self.up[switch] if self.usable((switch, n)))
        return got

    def _compute(self, downs: set[str], rows: set[str]) -> dict[str, int]:
        """Recompute the down parts of ``downs`` and the rows of ``rows``, and of whatever depends on a
        part or row that changed; the old rows of the switches whose row changed."""
        usable, down_part, row, below = self.usable, self._down_part, self.row, self._below
        for s in self._order:  # going down: a switch after the ones below it
            if s not in downs:
                continue
            got = self._own[s]
            for m in self.down[s]:
                if usable((s, m)):
                    got |= down_part.get(m, 0) & below[m]
            if down_part.get(s) != got:
                down_part[s] = got
                rows.add(s)
                downs.update(self.up[s])
        old_rows: dict[str, int] = {}
        for s in reversed(self._order):  # going up: a switch after the ones above it
            if s not in rows:
                continue
            got = down_part[s]
            mine = below[s] | self._own[s]
            for u in self._ups(s):
                got |= row.get(u, 0) & ~mine
            was = row.get(s)
            if was != got:
                old_rows[s] = 0 if was is None else was
                row[s] = got
                rows.update(self.down[s])
        return old_rows

    def reaches(self, node: str, dst: str) -> bool:
        return bool(self.row[node] >> self._tid[dst] & 1)

    def next_hops(self, switch: str, dst: str) -> list[str]:
        """Up-neighbors of ``switch`` through which ``dst`` is reached over usable links ([] when
        ``dst`` is below: going down follows the prefix routes)."""
        return list(self.next_hops_many(switch, (self._tid[dst],))[0])

    def next_hops_many(self, switch: str, js) -> list[tuple[str, ...]]:
        """``next_hops`` of ``switch`` toward each ToR of ``js`` (ToR positions in ``fabric.tors()``), as
        tuples."""
        below = self._below[switch] | self._own[switch]
        rows = [(n, self.row[n]) for n in self._ups(switch)]
        return [() if below >> j & 1 else tuple([n for n, r in rows if r >> j & 1]) for j in js]

    def next_hops_all(self, switch: str) -> list[tuple[str, ...]]:
        """``next_hops_many`` toward every ToR, worked out by the sets of ToRs that share their next hops
        (``classes``: one bit operation per up-neighbour and set) rather than ToR by ToR: at k=48 with
        every path open to mice (``mice_paths: all``), 24 up-neighbours x 1,152 ToRs x 2,880 switches
        held the controller's loop for 12 s at start-up."""
        out: list[tuple[str, ...]] = [()] * len(self.tors)
        for hops, b in self.classes(switch, (1 << len(self.tors)) - 1):
            if hops:
                for j in self.indices(b):
                    out[j] = hops
        return out

    def classes(self, switch: str, bits: int) -> list[tuple[tuple[str, ...], int]]:
        """The ToRs of ``bits`` grouped by ``switch``'s next hops toward them: (next hops, their ToRs'
        bits) for each distinct set, those below the switch with none."""
        below = (self._below[switch] | self._own[switch]) & bits
        out = [((), bits & ~below)] if bits & ~below else []
        for n in self._ups(switch):
            r = self.row[n]
            split = []
            for hops, b in out:
                yes = b & r
                if yes:
                    split.append((hops + (n,), yes))
                if b & ~r:
                    split.append((hops, b & ~r))
            out = split
        if below:
            for i, (hops, b) in enumerate(out):
                if not hops:
                    out[i] = (hops, b | below)
                    break
            else:
                out.append(((), below))
        return out

    def changed(self, links) -> dict[str, int]:
        """Switch -> the ToRs (as bits) whose next hops differ since ``links`` changed usability."""
        level = self.level
        was_up: dict[str, tuple[str, ...]] = {}
        downs, rows = set(), set()
        for x, y in links:
            if x not in level or y not in level:
                continue
            if level[y] < level[x]:  # a link down: ``x``'s part below
                downs.add(x)
            else:
                if x not in was_up:
                    was_up[x] = self._ups(x)
                    self._up_ok.pop(x, None)
                rows.add(x)
        old_rows = self._compute(downs, rows)
        # a switch's next hops toward a ToR differ where an up link's usability or its row did
        out: dict[str, int] = {}
        whose = set(was_up)
        for u in old_rows:
            whose.update(self.down[u])
        for s in whose:
            before = was_up.get(s)
            if before is None:
                before = self._ups(s)
            now = self._ups(s)
            diff = 0
            for n in set(before).union(now):
                r_old = old_rows.get(n, self.row[n])
                a = r_old if n in before else 0
                b = self.row[n] if n in now else 0
                diff |= a ^ b
            diff &= ~(self._below[s] | self._own[s])
            if diff:
                out[s] = diff
        return out

    def indices(self, bits: int) -> list[int]:
        """The ToR positions set in ``bits``, in order."""
        import numpy as np

        if not bits:
            return []
        raw = np.frombuffer(bits.to_bytes((len(self.tors) + 7) // 8, "little"), dtype=np.uint8)
        return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()

    def bits(self, js) -> int:
        """The bits of the ToR positions ``js``."""
        out = 0
        for j in js:
            out |= 1 << j
        return out


def _top_groups(up: dict, tors: list[str], tops: list[str]) -> list[tuple[int, ...]]:
    """The tops (by index) in groups reached through the same first hop from every ToR (so that a
    pair's paths through one group share their first and last link): in a fat-tree the cores behind
    one aggregation position, in a leaf-spine each spine alone. When ToRs disagree (no such uniform
    grouping), every top is its own group."""
    groups = None
    for t in tors:
        by_hop: dict[str, list[int]] = {}
        for i, top in enumerate(tops):
            by_hop.setdefault(up[(t, top)][1] if len(up[(t, top)]) > 1 else top, []).append(i)
        mine = sorted(tuple(g) for g in by_hop.values())
        if groups is None:
            groups = mine
        elif mine != groups:
            return [(i,) for i in range(len(tops))]
    return groups or []
