"""Bin-Pack choices, refusals, subflows, allocations, and the exact Eq. 1 solver."""

import pytest

from experiments.optimum import Flow, solve
from ryu_apps.binpack import Allocations, NoRoom, bin_pack, links, place_subflows
from ryu_apps.partition import Partition
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
