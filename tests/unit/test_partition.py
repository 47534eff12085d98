"""Freeway's path partition: fixed paths, counters, Fig. 3's order, bounds, decisions, deferred switch-over."""

import functools
import operator
from collections import Counter

import pytest

from ryu_apps.algorithms.partition import Partition, PartitionConfig, PartitionError, StepResult
from topology.fabric import fattree, leafspine
from topology.paths import path_links, path_top, tor_paths


def _links(p):
    return list(zip(p, p[1:], strict=False))


def _recount(part):
    """Counters recomputed from scratch: every partitioned pair's first n paths."""
    from collections import Counter

    c = Counter()
    for s in part.tors:
        for d in part.tors:
            if part.is_partitioned((s, d)):
                for i in range(part.n_lol((s, d))):
                    c.update(_links(part.path((s, d), i)))
    return +c


@pytest.mark.parametrize("k", [4, 6, 8])
def test_fixed_paths_and_bounds(k):
    part = Partition(fattree(k))
    assert (part.n_min, part.n_max) == (k // 2, k * k // 4 - k // 2)
    pair = ("e0_0", f"e{k - 1}_0")
    assert part.paths(pair) == tor_paths(part.fabric, *pair)  # same order as topology/
    assert [path_top(p) for p in part.lol_paths(pair)] == [f"c{i}" for i in range(1, k // 2 + 1)]
    # every path after the fixed low-latency ones starts high-throughput
    hol = part.hol_paths(pair)
    assert [path_top(p) for p in hol] == [f"c{i}" for i in range(k // 2 + 1, k * k // 4 + 1)]
    assert +part.counter == _recount(part)


def test_k8_adds_paths_5_to_12_in_turn_then_stops_and_deletes_in_reverse():
    part = Partition(fattree(8))
    pair = ("e0_0", "e7_3")
    order = []
    while part.add_path(pair):
        order.append(path_top(part.lol_paths(pair)[-1]))
        assert +part.counter == _recount(part)
    assert order == [f"c{i}" for i in range(5, 13)]  # Fig. 3: paths 5..12
    assert part.n_lol(pair) == 12 and not part.add_path(pair)  # bound k^2/4 - k/2
    # the fixed high-throughput paths 13..16 stay made of HOL links (Constraint 1)
    assert [path_top(p) for p in part.hol_paths(pair)] == ["c13", "c14", "c15", "c16"]
    removed = []
    while part.remove_path(pair, now=0.0):
        removed.append(part.n_lol(pair) + 1)
    assert removed == list(range(12, 4, -1)) and part.n_lol(pair) == 4
    assert not part.remove_path(pair, now=0.0)  # never fewer than the fixed ones


PAPER = PartitionConfig(mice_paths="lol")  # the paper's mice: on the low-latency paths only


def test_counters_turn_links_lol_and_back_through_draining():
    part = Partition(fattree(6), PAPER)
    pair = ("e0_0", "e5_2")
    res = StepResult()
    part.add_path(pair, res)  # path 4: via a0_1 and core c4
    new = part.path(pair, 3)
    assert path_top(new) == "c4"
    # e0_0->a0_1 and a0_1->c4 were HOL before: they turn LOL now
    assert res.became_lol == {("e0_0", "a0_1"), ("a0_1", "c4"), ("c4", "a5_1"), ("a5_1", "e5_2")}
    assert all(part.is_lol(ln) and part.mice_usable(ln) for ln in _links(new))
    # a second pair sharing e0_0 -> a0_1 -> c4 does not change link types again
    res2 = StepResult()
    part.add_path(("e0_0", "e4_0"), res2)
    assert res2.became_lol == {("c4", "a4_1"), ("a4_1", "e4_0")}
    assert part.counter[("e0_0", "a0_1")] == 2
    # removing the first pair's path: shared links keep LOL, its own ones start draining
    res3 = StepResult()
    part.remove_path(pair, now=10.0, res=res3)
    assert res3.began_draining == {("c4", "a5_1"), ("a5_1", "e5_2")}
    assert part.is_lol(("c4", "a5_1")) and not part.mice_usable(("c4", "a5_1"))  # no mice, no elephants yet


def test_drain_rule():
    cfg = PartitionConfig(drain_min_s=1.0, drain_max_s=5.0, drain_load=0.02)
    part = Partition(fattree(6), cfg)
    pair = ("e0_0", "e5_2")
    part.add_path(pair)
    part.remove_path(pair, now=0.0)
    busy = ("c4", "a5_1")
    quiet = ("a5_1", "e5_2")
    load = {busy: 0.2}.get

    def ld(ln):
        return load(ln, 0.0)

    assert part.step(0.5, [], ld).became_hol == set()  # too early for anyone
    r = part.step(1.5, [], ld)
    assert quiet in r.became_hol and busy not in r.became_hol  # drained vs. still carrying mice
    assert part.is_hol(quiet) and part.is_lol(busy)
    r = part.step(5.5, [], ld)
    assert busy in r.became_hol  # drain_max_s reached


def test_re_adding_a_draining_link_cancels_the_drain():
    part = Partition(fattree(6))
    pair = ("e0_0", "e5_2")
    part.add_path(pair)
    part.remove_path(pair, now=0.0)
    res = StepResult()
    part.add_path(pair, res)
    assert res.became_lol == set() and not part.draining  # it never became HOL: nothing to reschedule


def test_step_adds_when_more_than_half_congested_and_removes_when_idle():
    part = Partition(fattree(6))
    pair = ("e0_0", "e5_2")
    lol_links = {ln for p in part.lol_paths(pair) for ln in _links(p)}
    hot = {ln: 0.5 for ln in lol_links}
    r = part.step(0.0, [pair], lambda ln: hot.get(ln, 0.0))
    assert r.added == [pair] and part.n_lol(pair) == 4
    # 2 of 4 congested is not more than half: keep
    paths = part.lol_paths(pair)
    core = {}  # load only the two core links of each path: 2 of 4 paths at 0.45, the others at 0.15
    for i, p in enumerate(paths):
        for ln in _links(p)[1:3]:
            core[ln] = 0.9 if i < 2 else 0.3
    assert part.step(1.0, [pair], lambda ln: core.get(ln, 0.0)).changed is False
    r = part.step(2.0, [pair], lambda ln: 0.0)
    assert r.removed == [pair] and part.n_lol(pair) == 3
    # at the minimum, idle removes nothing; pairs in one pod are not partitioned
    r = part.step(3.0, [pair, ("e0_0", "e0_1")], lambda ln: 0.0)
    assert r.removed == [] and r.added == []


def test_intra_pod_pairs_follow_the_inter_pod_partition():
    part = Partition(fattree(6), PAPER)
    pair = ("e0_0", "e0_1")
    assert [p[1] for p in part.lol_paths(pair)] == ["a0_0"]
    part.add_path(("e0_0", "e5_2"))  # makes e0_0->a0_1 LOL, but not a0_1->e0_1
    assert [p[1] for p in part.lol_paths(pair)] == ["a0_0"]
    part.add_path(("e3_0", "e0_1"))  # path 4 of this pair goes down a0_1 -> e0_1
    assert [p[1] for p in part.lol_paths(pair)] == ["a0_0", "a0_1"]
    assert [p[1] for p in part.hol_paths(pair)] == ["a0_2"]


def test_mice_next_hops_only_along_lol_links():
    part = Partition(fattree(4), PAPER)
    assert part.mice_next_hops("e0_0", "e3_1") == ["a0_0"]
    assert part.mice_next_hops("a0_0", "e3_1") == ["c1", "c2"]
    assert part.mice_next_hops("a1_1", "e3_1") == []  # a1_1's uplinks are HOL
    assert part.mice_next_hops("a0_0", "e0_1") == []  # below: prefix routes go down
    assert part.mice_next_hops("e0_0", "e0_1") == ["a0_0"]


def test_mice_on_all_paths_take_every_live_uplink_and_leave_a_dead_one():
    """The default (``mice_paths: all``): mice go up every live link, LOL or HOL; a dead one is left
    at once; the partition's counters (where elephants go first) are the paper's all the same."""
    part = Partition(fattree(4))
    assert part.mice_next_hops("e0_0", "e3_1") == ["a0_0", "a0_1"]
    assert part.mice_next_hops("a1_1", "e3_1") == ["c3", "c4"]  # HOL uplinks carry mice too
    assert part.mice_next_hops("a0_0", "e0_1") == []  # below: prefix routes go down
    assert part.is_hol(("e0_0", "a0_1")) and part.mice_usable(("e0_0", "a0_1"))
    part.set_dead(1.0, {("e0_0", "a0_1"), ("a0_1", "e0_0")})
    assert part.mice_next_hops("e0_0", "e3_1") == ["a0_0"]
    assert not part.mice_usable(("e0_0", "a0_1"))


@pytest.mark.parametrize("cfg", [PartitionConfig(), PAPER], ids=["all", "lol"])
def test_every_destinations_mice_next_hops_at_once_are_each_ones(cfg):
    """``mice_next_hops_all`` (by sets of ToRs, for a connecting switch's program) answers as
    ``mice_next_hops`` does ToR by ToR, before and after links die."""
    fab = fattree(8)
    part = Partition(fab, cfg)

    def check():
        for sw in fab.switches:
            every = part.mice_next_hops_all(sw)
            assert every == {d: h for d in fab.tors() if (h := part.mice_next_hops(sw, d))}, sw

    check()
    part.set_dead(1.0, {("e0_0", "a0_1"), ("a0_1", "e0_0"), ("a2_0", "c1"), ("c1", "a2_0")})
    check()


def test_leafspine_rule_and_config_errors():
    part = Partition(leafspine(4, 4, 2))
    assert (part.n_min, part.n_max) == (1, 3)
    pair = ("l0", "l3")
    assert [path_top(p) for p in part.lol_paths(pair)] == ["s1"]
    assert [path_top(p) for p in part.hol_paths(pair)] == ["s2", "s3", "s4"]
    part.add_path(pair)
    assert [path_top(p) for p in part.hol_paths(pair)] == ["s3", "s4"]
    assert Partition(leafspine(4, 4, 2), PartitionConfig(fixed_lol=2, fixed_hol=2)).n_max == 2
    with pytest.raises(PartitionError, match="do not fit in 2 paths"):
        Partition(leafspine(2, 4, 2), PartitionConfig(fixed_lol=2))
    with pytest.raises(PartitionError, match="lol_low: must be below lol_high/2"):
        PartitionConfig(lol_high=0.3, lol_low=0.2)
    with pytest.raises(PartitionError, match="lol_high"):
        PartitionConfig(lol_high=1.5)


@pytest.mark.parametrize("ties", ["first", "load"])
@pytest.mark.parametrize("k,seed", [(4, 1), (6, 2), (8, 3), (8, 4)])
def test_best_hol_path_is_bin_pack_over_every_hol_path(k, seed, ties):
    """The grouped search finds what Bin-Pack over the whole list finds, with either rule for ties: random
    loads (and an idle fabric, where every path ties; loads in whole steps, where many do), paths added,
    links down, links that may not be used."""
    import random

    from ryu_apps.algorithms.binpack import NoRoom, bin_pack
    from topology.paths import path_links

    rng = random.Random(seed)
    fab = fattree(k)
    part = Partition(fab)
    assert all(len(g) == k // 2 for g in part.top_groups) and len(part.top_groups) == k // 2
    tors = part.tors
    links = [(ln.a, ln.b) for ln in fab.links if ln.a in fab.switches and ln.b in fab.switches]
    for trial in range(60):
        s, d = rng.sample(tors, 2)
        if not part.is_partitioned((s, d)):
            continue
        if trial % 10 == 3:
            part.add_path((s, d))
        if trial % 15 == 7:
            a, b = rng.choice(links)
            part.set_dead(float(trial), {(a, b), (b, a)})
        idle = trial % 6 == 0
        steps = trial % 3 == 1  # (elephants counted at one floor each: whole numbers of them, ties everywhere)
        load = {} if idle else {(a, b): rng.choice([0.0, 1e6, 2e6] if steps else [0.0, 0.25, rng.uniform(0, 9e6)])
                                for a, b in links for a, b in ((a, b), (b, a))}
        banned = set(rng.sample(links, 3)) if trial % 4 == 1 else set()
        found = part.best_hol_path((s, d), lambda ln, ld=load: (ld.get(ln, 0.0) + 1e6) / 10e6,
                                   lambda ln, b=banned: ln not in b, ties=ties)
        paths = [p for p in part.hol_paths((s, d)) if not set(path_links(p)) & banned]
        try:
            want = bin_pack(paths, 1e6, lambda ln, ld=load: ld.get(ln, 0.0), lambda ln: 10e6, headroom=float("inf"),
                            ties=ties)
        except NoRoom:
            assert found is None
            continue
        assert found is not None and found[1] == want.path and found[0] == pytest.approx(want.max_util)


def test_best_hol_path_on_a_leaf_spine_takes_every_spine_alone():
    part = Partition(leafspine(4, 4, 2))
    assert part.top_groups == [(0,), (1,), (2,), (3,)]
    s, d = part.tors[0], part.tors[1]
    quiet = part.tops[2]
    util = lambda ln: 0.1 if quiet in ln else 0.5  # noqa: E731
    v, path = part.best_hol_path((s, d), util)
    assert path == (s, quiet, d) and v == pytest.approx(0.1)
    assert part.best_hol_path((s, d), util, lambda ln: quiet not in ln)[1][1] == part.tops[1]  # the first of the ties
    assert part.best_hol_path((s, d), util, lambda ln: False) is None


def test_the_decision_reads_the_same_path_loads_without_building_the_paths():
    import random

    from topology.paths import path_links

    rng = random.Random(5)
    part = Partition(fattree(8))
    fab = part.fabric
    load = {(a, b): rng.random() for ln in fab.links for a, b in ((ln.a, ln.b), (ln.b, ln.a))}
    pairs = [(s, d) for s in part.tors for d in part.tors if part.is_partitioned((s, d))]
    for pair in rng.sample(pairs, 40):
        for _ in range(rng.randrange(4)):
            part.add_path(pair)
        want = [functools.reduce(operator.add, (load[ln] for ln in path_links(p)), 0.0) / len(path_links(p))
                for p in part.lol_paths(pair)]
        assert part._lol_loads(pair, load.__getitem__) == want  # exactly: the same sums in the same order


def test_path_loads_add_link_by_link_as_the_batch_does():
    """(0.1 + 0.3 + 0.7 + 0.1) / 4 is 0.30000000000000004 added in turn, 0.3 by Python 3.12's compensated
    ``sum``: on a lol_high of 0.3 the two would decide differently. Every path load adds in turn."""
    part = Partition(fattree(4))
    pair = (part.tors[0], part.tors[-1])
    path = part.lol_paths(pair)[0]
    vals = dict(zip(path_links(path), (0.1, 0.3, 0.7, 0.1), strict=True))
    assert part.path_load(path, vals.__getitem__) == (((0.1 + 0.3) + 0.7) + 0.1) / 4
    load = lambda ln: vals.get(ln, 0.0)  # noqa: E731
    assert part._lol_loads(pair, load)[0] == part._lol_loads(pair, load, vals)[0] == 0.30000000000000004


@pytest.mark.parametrize("path_load", ["mean", "max"])
@pytest.mark.parametrize("fabric", [fattree(8, 10), leafspine(6, 8, 2)], ids=["fattree-k8", "leafspine"])
def test_a_step_reading_loads_from_a_mapping_decides_exactly_as_with_a_function(fabric, path_load):
    """The issue "Performance" item 4: the period decides every pair at once from the mapping (numpy, in
    ``_Batch``); the sums, their order and so every decision must be the ones the function gives, also
    at loads that put a path's mean right on a bound, and with a link down (which goes the slow way)."""
    import random

    rng = random.Random(5)
    f = fabric
    a, b = Partition(f, PartitionConfig(path_load=path_load)), Partition(f, PartitionConfig(path_load=path_load))
    pairs = [(s, d) for s in f.tors() for d in f.tors() if a.is_partitioned((s, d))]
    links = [(x, y) for ln in f.links for x, y in ((ln.a, ln.b), (ln.b, ln.a))]
    for period in range(30):
        if period == 20:
            for part in (a, b):
                part.set_dead(float(period), frozenset({links[0], links[0][::-1]}))
        util = {ln: rng.choice((0.0, 0.1, 0.3, 1 / 3, 0.7, rng.random())) for ln in links if rng.random() < 0.9}
        active = rng.sample(pairs, min(60, len(pairs)))
        ra = a.step(float(period), active, util)
        rb = b.step(float(period), active, lambda ln, util=util: util.get(ln, 0.0))
        assert (ra.added, ra.removed, ra.became_lol, ra.became_hol) == (rb.added, rb.removed, rb.became_lol,
                                                                        rb.became_hol)
        assert a.n == b.n and a.counter == b.counter
    assert a.n and a._batch is not None and a._batch.ok  # the loads moved some pairs; the batch decided


@pytest.mark.parametrize("fabric", [fattree(4, 10), fattree(6, 10), leafspine(4, 6, 2)], ids=["k4", "k6", "leafspine"])
def test_mice_routes_answer_as_reachability_does_through_changes(fabric):
    """MiceRoutes keeps its answers as bits per switch and follows changes itself: after each random
    change of the usable links, ``changed`` names exactly the (switch, ToR) whose next hops differ from
    before, every answer (``next_hops``, ``next_hops_many``, ``next_hops_all``, ``reaches``) is what a fresh
    ``Reachability`` over the same links gives, and ``classes`` groups any ToRs by those next hops."""
    import random

    from ryu_apps.algorithms.partition import MiceRoutes
    from topology.paths import Reachability, tors_below

    rng = random.Random(7)
    links = [(ln.a, ln.b) for ln in fabric.links if ln.a in fabric.switches and ln.b in fabric.switches]
    links += [(b, a) for a, b in links]
    usable = {ln for ln in links if rng.random() < 0.5}
    below = tors_below(fabric)
    routes = MiceRoutes(fabric, lambda ln: ln in usable, below)
    tors = fabric.tors()

    def answers():
        return {(sw, d): routes.next_hops(sw, d) for sw in fabric.switches for d in tors}

    before = answers()
    assert before == {(sw, d): Reachability(fabric, usable.__contains__, below).next_hops(sw, d)
                      for sw in fabric.switches for d in tors}
    for i in range(40):  # a few links, then (from the 25th) many at once: some become usable, some stop
        flipped = set(rng.sample(links, rng.randint(1, 4) if i < 25 else rng.randint(5, 20)))
        usable ^= flipped
        dirty = routes.changed(flipped)
        fresh = Reachability(fabric, usable.__contains__, below)
        now = answers()
        for (sw, d), hops in now.items():
            assert hops == fresh.next_hops(sw, d), (sw, d)
            assert routes.reaches(sw, d) == fresh.reaches(sw, d), (sw, d)
            named = bool(dirty.get(sw, 0) >> tors.index(d) & 1)
            assert named == (hops != before[(sw, d)]), (sw, d, hops, before[(sw, d)])
        for sw in fabric.switches:
            assert routes.next_hops_many(sw, range(len(tors))) == [tuple(now[(sw, d)]) for d in tors]
            assert routes.next_hops_all(sw) == [tuple(now[(sw, d)]) for d in tors]  # (by classes: the same)
            some = rng.getrandbits(len(tors))
            got = routes.classes(sw, some)
            assert sum(b for _, b in got) == some and len({h for h, _ in got}) == len(got)
            for hops, b in got:
                assert routes.indices(b) and all(tuple(now[(sw, tors[j])]) == hops for j in routes.indices(b))
        before = now


@pytest.mark.parametrize("fab", [fattree(8, 10), leafspine(4, 6, 2, 10)], ids=["fattree8", "leafspine"])
def test_links_dying_and_coming_back_recount_only_their_pairs_and_agree_with_a_full_recount(fab):
    """set_dead recounts the pairs over the links that changed, not every pair (k=32: 261,632 pairs);
    after every change its counters, draining links and results equal a recount of every pair's LOL
    paths (``restore``'s way), through paths added and removed in between."""
    import random

    rng = random.Random(7)
    inc, full = Partition(fab), Partition(fab)
    links = [(ln.a, ln.b) for ln in fab.links if ln.a in fab.switches and ln.b in fab.switches]
    pairs = [(s, d) for s in inc.tors for d in inc.tors if inc.is_partitioned((s, d))]
    dead: set = set()
    for step in range(40):
        for _ in range(3):
            pair = rng.choice(pairs)
            if rng.random() < 0.6:
                inc.add_path(pair)
                full.add_path(pair)
            else:
                inc.remove_path(pair, float(step))
                full.remove_path(pair, float(step))
        if step % 7 == 6 and dead:  # links come back
            dead -= set(rng.sample(sorted(dead), max(1, len(dead) // 2)))
        elif step % 5 == 4:  # a whole switch goes
            sw = rng.choice(sorted(fab.switches))
            dead |= {(a, b) for a, b in links if sw in (a, b)} | {(b, a) for a, b in links if sw in (a, b)}
        else:
            a, b = rng.choice(links)
            dead |= {(a, b), (b, a)}
        r1 = inc.set_dead(float(step), frozenset(dead))
        full.dead = None  # a recount of every pair
        r2 = full.set_dead(float(step), frozenset(dead))
        assert +inc.counter == +full.counter, step
        assert inc.draining == full.draining and inc.lol_links() == full.lol_links()
        assert (r1.became_lol, r1.began_draining) == (r2.became_lol, r2.began_draining)
        brute = Counter()
        for pair in pairs:
            for p in inc.lol_paths(pair):
                brute.update(path_links(p))
        assert +brute == +inc.counter


def test_a_sparse_load_reads_into_the_same_array_as_the_full_mapping():
    """The mice load lending steps on is kept only where mice were sampled (0 elsewhere): the period's
    arrays read from it are the ones the full mapping gives, and so are the decisions."""
    import random

    from ryu_apps.algorithms.partition import Partition, SparseLoads
    from topology.fabric import fattree

    f = fattree(8)
    part = Partition(f)
    rng = random.Random(3)
    links = [(a, b) for ln in f.links for a, b in ((ln.a, ln.b), (ln.b, ln.a))]
    some = {ln: rng.uniform(0, 1) for ln in rng.sample(links, 40)} | {("nowhere", "c1"): 0.5}
    full = {ln: some.get(ln, 0.0) for ln in links}
    sparse_arr, index = part.loads_array(SparseLoads(some))
    full_arr, _ = part.loads_array(full)
    assert sparse_arr.tolist() == full_arr.tolist() and any(x > 0 for x in sparse_arr.tolist())
    pairs = [(s, d) for s in f.tors()[:4] for d in f.tors()[-4:]]
    a, b = Partition(f), Partition(f)
    ra, rb = a.step(1.0, pairs, SparseLoads(some)), b.step(1.0, pairs, full)
    assert (ra.added, ra.removed) == (rb.added, rb.removed)


def test_a_burst_on_one_link_of_a_path_congests_it_only_by_its_busiest_link():
    """Issue 58: a low-latency path's load as the mean of its four links reads a link saturated by a burst
    as a quarter of itself, and the partition never grew; by its busiest link (``path_load`` max) the
    same reading adds a path."""
    for how, want in (("mean", 0), ("max", 1)):
        part = Partition(fattree(4), PartitionConfig(path_load=how))
        pair = (part.tors[0], part.tors[-1])
        load = {ln: 0.0 for p in part.lol_paths(pair) for ln in path_links(p)}
        for p in part.lol_paths(pair):
            load[path_links(p)[1]] = 0.9  # one link of each low-latency path busy
        assert part.decide(pair, load.__getitem__) == want, how


def test_spread_order_gives_the_fixed_low_latency_paths_every_uplink():
    """Issue 58: in the paper's order a k=8 ToR's four fixed low-latency paths all leave by its first
    uplink (cores 1-4 hang off aggregation 0): its mice have one of four uplinks. Spread takes one core
    of each aggregation switch in turn; the order of the rest follows, and the fixed HOL paths differ."""
    f = fattree(8, 10)
    pair = (f.tors()[0], f.tors()[-1])
    for how, uplinks in (("paper", 1), ("spread", 4)):
        part = Partition(f, PartitionConfig(lol_order=how))
        lol = part.lol_paths(pair)
        assert len(lol) == 4 and len({p[1] for p in lol}) == uplinks, (how, lol)
        assert sorted(part.tops) == sorted(Partition(f).tops)
    spread = Partition(f, PartitionConfig(lol_order="spread"))
    assert spread.tops[:4] == ["c1", "c5", "c9", "c13"]
    # the price: every uplink carries a fixed low-latency path, so no path is high-throughput end to end
    # (the paper's Constraint 1 fails; elephants go only where lending opens a link)
    assert spread.hol_paths(pair) == [] and len(Partition(f).hol_paths(pair)) == 12
