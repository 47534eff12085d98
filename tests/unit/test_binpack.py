"""Bin-Pack choices, refusals, subflows, allocations, and the exact Eq. 1 solver."""

import pytest

from experiments.analysis.optimum import Flow, solve
from ryu_apps.algorithms.binpack import (
    _SP,
    Allocations,
    NoRoom,
    NotSeriesParallel,
    bin_pack,
    links,
    place_subflows,
    split,
)
from ryu_apps.algorithms.partition import Partition
from topology.fabric import fattree

CAP = 10e6
PART = Partition(fattree(6))
PAIR = ("e0_0", "e5_2")
HOL = PART.hol_paths(PAIR)  # via a0_1 (c4, c5, c6) and a0_2 (c7, c8, c9)


def cap(ln):
    return CAP


def test_hol_paths_of_k6():
    assert [p[2] for p in HOL] == ["c4", "c5", "c6", "c7", "c8", "c9"]
    k4 = Partition(fattree(4)).hol_paths(("e0_0", "e3_1"))
    assert [p[2] for p in k4] == ["c3", "c4"] and {p[1] for p in k4} == {"a0_1"}  # one HOL uplink per edge


def test_picks_the_path_with_the_lowest_max_utilisation():
    load = {("e0_0", "a0_1"): 6e6, ("c7", "a5_2"): 3e6}.get
    pl = bin_pack(HOL, 2e6, lambda ln: load(ln, 0.0), cap)
    assert pl.path[2] == "c8" and pl.max_util == pytest.approx(0.2)
    # ties go to the first path (deterministic)
    assert bin_pack(HOL, 2e6, lambda ln: 0.0, cap).path[2] == "c4"


def test_ties_by_load_spread_elephants_counted_at_one_floor_over_the_cores():
    """Rate-less elephants counted at one floor each: their ToR uplink is the busiest link of every path of a
    group, so the group's paths tie; by the first path they all take its first core, by load they take each
    core in turn (issue 58: the core loads fell in path order)."""
    for ties, want in (("first", ["c4", "c4", "c4"]), ("load", ["c4", "c5", "c6"])):
        load = {("e0_0", "a0_1"): 5e6, ("e0_0", "a0_2"): 9e6}  # (a0_2's uplink busier: a0_1's group wins)
        got = []
        for _ in range(3):
            pl = bin_pack(HOL, 1e6, lambda ln, ld=load: ld.get(ln, 0.0), cap, ties=ties)
            got.append(pl.path[2])
            for ln in links(pl.path):
                load[ln] = load.get(ln, 0.0) + 1e6
            load[("e0_0", "a0_1")] = 5e6  # (the uplink is not what differs: held equal for the test)
        assert got == want, ties
    # the busiest link decides first, the total only among the paths that tie on it (every path here: its
    # uplink); a path busier at its peak loses whatever its total
    load = {("e0_0", "a0_1"): 5e6, ("e0_0", "a0_2"): 5e6, ("c9", "a5_2"): 5.5e6,
            **{("a0_1" if c in ("c4", "c5", "c6") else "a0_2", c): 4e6 for c in ("c4", "c5", "c6", "c7")}}.get
    assert bin_pack(HOL, 1e6, lambda ln: load(ln, 0.0), cap, ties="first").path[2] == "c4"
    assert bin_pack(HOL, 1e6, lambda ln: load(ln, 0.0), cap, ties="load").path[2] == "c8"


def test_refuses_with_a_reason_when_nothing_fits():
    busy = {ln: 9e6 for p in HOL for ln in links(p)}
    with pytest.raises(NoRoom, match=r"no high-throughput path has 2.00 Mbit/s free \(best: 1.00 Mbit/s via c4\)"):
        bin_pack(HOL, 2e6, lambda ln: busy.get(ln, 0.0), cap)
    with pytest.raises(NoRoom, match="no high-throughput path between these ToRs"):
        bin_pack([], 1e6, lambda ln: 0.0, cap)


def test_subflows_spread_and_never_split():
    pls = place_subflows(HOL, [4e6, 4e6, 1e6], lambda ln: 0.0, cap)
    assert [p.path[1] for p in pls] == ["a0_1", "a0_2", "a0_1"]  # each uplink once, then the emptier
    assert all(p.rate_bps in (4e6, 1e6) for p in pls)


def test_allocations_track_and_release():
    a = Allocations()
    pls = place_subflows(HOL, [3e6], lambda ln: a.link[ln], cap)
    a.add("f1", pls)
    assert a.link[("a0_1", "c4")] == 3e6 and a.crossing(("a0_1", "c4")) == ["f1"]
    nxt = bin_pack(HOL, 3e6, lambda ln: a.link[ln], cap)
    assert nxt.path[1] == "a0_2"  # the allocation is seen
    assert a.release("f1") == pls and not a.link


def test_binpack_vs_exact_solver():
    # three 6 Mbit/s flows from one edge switch with two HOL uplinks: whole flows need 1.2 somewhere
    flows = [Flow(tuple(HOL), 6e6)] * 3
    capacity = {ln: CAP for p in HOL for ln in links(p)}
    t_split, assign = solve(flows, capacity, split=True)
    assert t_split == pytest.approx(0.9)  # 18 Mbit/s over 2 x 10 Mbit/s uplinks
    assert sum(sum(a.values()) for a in assign) == pytest.approx(18e6)
    t_whole, assign = solve(flows, capacity, split=False)
    assert t_whole == pytest.approx(1.2) and all(len(a) == 1 for a in assign)
    extra = {}
    for _ in range(3):
        pl = bin_pack(HOL, 6e6, lambda ln: extra.get(ln, 0.0), cap, headroom=10)
        for ln in links(pl.path):
            extra[ln] = extra.get(ln, 0.0) + 6e6
    assert max(extra.values()) / CAP == pytest.approx(t_whole)  # Bin-Pack finds the whole-flow optimum here


def test_splittable_optimum_never_exceeds_the_unsplittable_one_at_real_scales():
    """Regression: in bit/s units HiGHS once returned an LP value above the MILP's (scaling)."""
    import random

    rng = random.Random(0)
    part = Partition(fattree(8))
    hosts = part.fabric.hosts
    cap = {(a, b): 10e6 for ln in part.fabric.links for a, b in ((ln.a, ln.b), (ln.b, ln.a))}
    flows = []
    while len(flows) < 16:
        a, b = rng.sample(hosts, 2)
        if part.is_partitioned((a.switch, b.switch)):
            flows.append(Flow(tuple(part.hol_paths((a.switch, b.switch))), rng.uniform(1e6, 4e6)))
    t_split, _ = solve(flows, cap, split=True)
    t_whole, assign = solve(flows, cap, split=False)
    assert t_split <= t_whole + 1e-6
    assert all(len(a) == 1 and abs(sum(a.values()) - f.rate) < 1 for a, f in zip(assign, flows, strict=True))


# ----- one elephant split over its subflows as Eq. 1 splits it -------------------------------------
def _k8_instances(n, seed=3):
    import random

    rng = random.Random(seed)
    part = Partition(fattree(8))
    for _ in range(n):
        s, d = rng.sample(part.tors, 2)
        while not part.is_partitioned((s, d)):
            s, d = rng.sample(part.tors, 2)
        paths = part.hol_paths((s, d))
        base = {ln: rng.uniform(0, 6e6) for p in paths for ln in links(p)}
        yield paths, base, rng.uniform(2e6, 9e6)


def test_split_meets_the_exact_lp_of_one_flow():
    for paths, base, rate in _k8_instances(6):
        capacity = {ln: CAP for ln in base}
        t_lp, _ = solve([Flow(tuple(paths), rate)], capacity, base=base, split=True)
        pls = split(paths, rate, len(paths), base.__getitem__, cap)
        assert len(pls) == len(paths) and sum(p.rate_bps for p in pls) == pytest.approx(rate)
        # what each link ends up carrying agrees with the utilisation reported
        extra = {}
        for p in pls:
            for ln in links(p.path):
                extra[ln] = extra.get(ln, 0.0) + p.rate_bps
        # the LP's maximum is over every link of the paths, those the flow does not cross too
        assert max((v + extra.get(ln, 0.0)) / CAP for ln, v in base.items()) == pytest.approx(t_lp, rel=1e-6)


def test_split_rounds_to_the_subflows_and_is_never_worse_than_equal_subflows():
    for paths, base, rate in _k8_instances(10, seed=5):
        for n in (2, 4):
            pls = split(paths, rate, n, base.__getitem__, cap)
            assert len(pls) == n and sum(p.rate_bps for p in pls) == pytest.approx(rate)
            assert all(p.path in paths and p.rate_bps > 0 for p in pls)
            equal = place_subflows(paths, [rate / n] * n, base.__getitem__, cap, float("inf"))
            assert max(p.max_util for p in pls) <= max(p.max_util for p in equal) + 1e-9
        one = split(paths, rate, 1, base.__getitem__, cap, 10)
        assert [p.path for p in one] == [bin_pack(paths, rate, base.__getitem__, cap, 10).path]


def test_split_uses_the_emptier_uplink_more():
    # k=6, e0_0's two HOL uplinks: a0_1 carries 6 Mbit/s already, a0_2 nothing; 8 Mbit/s in 2 subflows
    load = {("e0_0", "a0_1"): 6e6}
    pls = split(HOL, 8e6, 2, lambda ln: load.get(ln, 0.0), cap)
    by_agg = {p.path[1]: p.rate_bps for p in pls}
    assert by_agg == pytest.approx({"a0_1": 1e6, "a0_2": 7e6})  # both uplinks at 70%: the LP's answer
    assert max(p.max_util for p in pls) == pytest.approx(0.7)


def test_split_refuses_with_the_room_there_is():
    busy = {ln: 8e6 for p in HOL for ln in links(p)}
    with pytest.raises(NoRoom, match=r"no split of 5.00 Mbit/s over 2 subflows fits the 6 high-throughput "
                                     r"paths \(4.00 Mbit/s free on them together"):
        split(HOL, 5e6, 2, lambda ln: busy.get(ln, 0.0), cap)
    assert len(split(HOL, 4e6, 2, lambda ln: busy.get(ln, 0.0), cap)) == 2  # exactly what is free fits
    with pytest.raises(NoRoom, match="no high-throughput path between these ToRs"):
        split([], 1e6, 2, lambda ln: 0.0, cap)


def test_split_falls_back_to_bin_pack_on_paths_that_are_not_series_parallel():
    # a 'braid': two paths that part at s and meet again on a shared middle link
    paths = [("s", "a", "m", "n", "x", "d"), ("s", "b", "m", "n", "y", "d")]
    with pytest.raises(NotSeriesParallel):
        _SP([(tuple(links(p)), i) for i, p in enumerate(paths)])
    pls = split(paths, 4e6, 2, lambda ln: 0.0, cap)
    assert all(p.path in paths and p.rate_bps == 2e6 for p in pls)
    assert max(p.max_util for p in pls) == pytest.approx(0.4)  # the shared middle link carries all of it


def test_byte_shares_follow_the_rates():
    from ryu_apps.host.agent import byte_shares

    assert byte_shares(1000, [1e6, 3e6]) == [250, 750]
    assert sum(byte_shares(1001, [1e6, 1e6, 1e6])) == 1001
    assert byte_shares(10, [0, 0]) == [5, 5] and byte_shares(10, [5e6, 0]) == [5, 5]  # no usable rates: evenly


def test_split_gives_no_subflow_a_share_too_small_to_announce():
    # two paths; b's first link is nearly full: the LP gives it a sliver, which is dropped
    paths = [("s", "a", "d"), ("s", "b", "d")]
    load = {("s", "b"): 4.9996e6}
    pls = split(paths, 5e6, 2, lambda ln: load.get(ln, 0.0), cap)
    assert len(pls) == 2 and sum(p.rate_bps for p in pls) == pytest.approx(5e6)
    assert all(p.rate_bps >= 1000 for p in pls) and {p.path for p in pls} == {paths[0]}
    assert split(paths, 0.0, 2, lambda ln: 0.0, cap)[0].rate_bps == 0.0  # no rate: nothing to split, no error


def test_crossing_is_the_scan_it_replaces_through_adds_re_adds_and_releases():
    """The issue "Performance" item 4: ``crossing`` reads an index kept by add and release; it must give
    what scanning every placement gives, in the same order, after any mix of them."""
    import random

    from ryu_apps.algorithms.binpack import Allocations, Placement, links
    from topology.fabric import fattree
    from topology.paths import tor_paths

    rng = random.Random(2)
    f = fattree(4, 10)
    tors = f.tors()
    alloc = Allocations()
    for step in range(400):
        key = rng.randrange(30)
        if rng.random() < 0.3:
            alloc.release(key)
        else:
            s, d = rng.sample(tors, 2)
            paths = tor_paths(f, s, d)
            alloc.add(key, [Placement(rng.choice(paths), 1e6, 0.1) for _ in range(rng.randint(1, 3))])
        for ln in {ln for pls in alloc.by_flow.values() for p in pls for ln in links(p.path)} | {("c1", "a0_0")}:
            scan = [k for k, pls in alloc.by_flow.items() if any(ln in links(p.path) for p in pls)]
            assert alloc.crossing(ln) == scan, (step, ln)
    assert not any(alloc.crossing(ln) for ln in [("x", "y")])
    for key in list(alloc.by_flow):
        alloc.release(key)
    assert not alloc._on and not alloc.link
