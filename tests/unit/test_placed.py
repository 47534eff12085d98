"""PlacedRates: the placed elephants' rates per link, kept up to date, against the sums worked out afresh."""
import random
from types import SimpleNamespace

import pytest

from monitoring.sflow import FiveTuple
from ryu_apps.algorithms.binpack import Placement, links
from ryu_apps.modes.placed import PlacedRates

PATHS = [("e0", "a0", "c0", "a1", "e1"), ("e0", "a0", "c1", "a1", "e1"), ("e0", "a2", "c2", "a3", "e1"),
         ("e2", "a1", "e1"), ("e1", "a1", "c0", "a0", "e0")]


def _sub(i: int):
    return SimpleNamespace(src=f"10.0.0.{i % 7}", dst="10.0.1.1", proto=6, sport=40000 + i, dport=5201)


def _elephant(rng: random.Random, i: int, n: int):
    subs = tuple(_sub(i * 10 + j) for j in range(n))
    return SimpleNamespace(subflows=subs, placements=[Placement(rng.choice(PATHS), rng.uniform(1e6, 9e6), 0.0)
                                                      for _ in subs])


def _afresh(elephants) -> tuple[dict, dict]:
    bps, by_flow = {}, {}
    for el in elephants.values():
        for sub, pl in zip(el.subflows, el.placements, strict=True):
            ft = FiveTuple(sub.src, sub.dst, sub.proto, sub.sport, sub.dport)
            by_flow.setdefault(ft, []).append((tuple(links(pl.path)), pl.rate_bps))
            for ln in links(pl.path):
                bps[ln] = bps.get(ln, 0.0) + pl.rate_bps
    return bps, by_flow


def _same(got: PlacedRates, elephants) -> None:
    bps, by_flow = _afresh(elephants)
    assert set(got.bps) == set(bps)  # a link with no subflow left is gone, not a residue near 0
    for ln, v in bps.items():
        assert got.bps[ln] == pytest.approx(v, rel=1e-9)
    assert {ft: sorted(on) for ft, on in got.by_flow.items()} == {ft: sorted(on) for ft, on in by_flow.items()}


def test_the_sums_follow_placements_added_moved_resized_and_released():
    rng, elephants, placed = random.Random(7), {}, PlacedRates()
    for step in range(400):
        op = rng.random()
        if op < 0.4 or not elephants:
            eid = step
            elephants[eid] = _elephant(rng, eid, rng.choice((1, 1, 2, 3)))
        elif op < 0.6:  # moved: a new list of placements (they are replaced, never changed in place)
            el = elephants[rng.choice(list(elephants))]
            el.placements = [Placement(rng.choice(PATHS), pl.rate_bps, 0.0) for pl in el.placements]
        elif op < 0.75:  # its allocation follows its rate
            el = elephants[rng.choice(list(elephants))]
            el.placements = [Placement(pl.path, pl.rate_bps * 1.5, 0.0) for pl in el.placements]
        else:
            del elephants[rng.choice(list(elephants))]
        if step % 7 == 0:  # several changes between two periods
            placed.sync(elephants)
            _same(placed, elephants)
    elephants.clear()
    placed.sync(elephants)
    assert placed.bps == {} and placed.by_flow == {} and placed._n == {}


def test_a_five_tuple_placed_twice_counts_twice_and_leaves_once_per_elephant():
    rng, placed = random.Random(1), PlacedRates()
    a, b = _elephant(rng, 1, 1), _elephant(rng, 1, 1)  # (same subflow: a re-announce before the old one went)
    placed.sync({1: a, 2: b})
    ft = next(iter(placed.by_flow))
    assert len(placed.by_flow[ft]) == 2
    placed.sync({2: b})
    _same(placed, {2: b})
    assert len(placed.by_flow[ft]) == 1


def test_an_unchanged_elephant_is_not_worked_out_again():
    rng, placed = random.Random(3), PlacedRates()
    elephants = {i: _elephant(rng, i, 2) for i in range(50)}
    placed.sync(elephants)
    kept = {eid: placed._of[eid][2] for eid in elephants}
    elephants[7].placements = list(elephants[7].placements)  # a new list: worked out again
    placed.sync(elephants)
    assert all(placed._of[eid][2] is kept[eid] for eid in elephants if eid != 7)
    assert placed._of[7][2] is not kept[7]
    _same(placed, elephants)


def test_an_elephant_whose_subflows_and_placements_disagree_is_refused_whole():
    rng, placed = random.Random(5), PlacedRates()
    good = {1: _elephant(rng, 1, 2)}
    placed.sync(good)
    before = (dict(placed.bps), {ft: list(on) for ft, on in placed.by_flow.items()})
    bad = _elephant(rng, 2, 3)
    bad.placements = bad.placements[:2]
    with pytest.raises(ValueError):
        placed.sync({**good, 2: bad})
    assert (placed.bps, placed.by_flow) == before and 2 not in placed._of
