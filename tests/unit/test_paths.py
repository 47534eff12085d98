"""Sorted ToR-pair paths: counts, Freeway's order, validity (checked against networkx)."""

import networkx as nx
import pytest

from topology.fabric import fattree, leafspine
from topology.model import to_networkx
from topology.paths import path_links, path_ports, path_top, tor_paths


def _valid(f, g, path, src, dst):
    assert path[0] == src and path[-1] == dst
    assert len(set(path)) == len(path), "loop"
    for a, b in path_links(path):
        assert g.has_edge(a, b)


@pytest.mark.parametrize("k", [4, 6, 8])
def test_fattree_inter_pod(k):
    f = fattree(k)
    g = to_networkx(f)
    src, dst = "e0_0", f"e{k - 1}_{k // 2 - 1}"
    paths = tor_paths(f, src, dst)
    assert len(paths) == k * k // 4
    assert [path_top(p) for p in paths] == [f"c{i}" for i in range(1, k * k // 4 + 1)]
    for p in paths:
        _valid(f, g, p, src, dst)
        assert len(p) == 5
    # same set as every shortest path networkx finds (restricted to switches)
    sw = g.subgraph(f.switches)
    assert sorted(paths) == sorted(tuple(p) for p in nx.all_shortest_paths(sw, src, dst))
    # first k/2 paths go through the first aggregation switch (the paper's fixed LOL paths)
    assert all(p[1] == "a0_0" for p in paths[: k // 2])


@pytest.mark.parametrize("k", [4, 6, 8])
def test_fattree_intra_pod(k):
    f = fattree(k)
    g = to_networkx(f)
    paths = tor_paths(f, "e1_0", "e1_1")
    assert [path_top(p) for p in paths] == [f"a1_{j}" for j in range(k // 2)]
    for p in paths:
        _valid(f, g, p, "e1_0", "e1_1")


def test_same_tor_and_bad_input():
    f = fattree(4)
    assert tor_paths(f, "e0_0", "e0_0") == [("e0_0",)]
    with pytest.raises(ValueError, match="not a ToR"):
        tor_paths(f, "a0_0", "e1_0")


def test_leafspine_sorted_by_spine():
    f = leafspine(3, 4, 2)
    paths = tor_paths(f, "l0", "l3")
    assert paths == [("l0", "s1", "l3"), ("l0", "s2", "l3"), ("l0", "s3", "l3")]


def test_path_ports():
    f = fattree(4)
    p = tor_paths(f, "e0_0", "e1_0")[3]  # via core 4
    assert p == ("e0_0", "a0_1", "c4", "a1_1", "e1_0")
    assert path_ports(f, p) == [("e0_0", 4), ("a0_1", 4), ("c4", 2), ("a1_1", 1)]


@pytest.mark.parametrize("fabric", [fattree(4), fattree(6), leafspine(3, 4, 2)], ids=["k4", "k6", "leafspine"])
def test_unreached_sets_agree_with_reaches_for_random_dead_links(fabric):
    """``Reachability.unreached`` (every ToR a switch does not reach, as one set) says what ``reaches``
    says for every switch and ToR, whatever set of directed links is dead; so do the detours built on it."""
    import random

    from ryu_apps.programs.forwarding import detour, detours
    from topology.paths import Reachability

    rng = random.Random(7)
    directed = [(ln.a, ln.b) for ln in fabric.links] + [(ln.b, ln.a) for ln in fabric.links]
    for n_dead in (1, 2, 3, 6, 12, len(directed) // 2):
        for _ in range(8):
            dead = frozenset(rng.sample(directed, n_dead))
            fast, slow = (Reachability(fabric, lambda ln, d=dead: ln not in d) for _ in "ab")
            for sw in fabric.switches:
                assert fast.unreached(sw) == {t for t in fabric.tors() if not slow.reaches(sw, t)}, (sw, dead)
                want = {t: h for t in fabric.tors() if (h := detour(fabric, sw, t, dead, slow)) is not None}
                assert detours(fabric, sw, dead, fast) == want and list(detours(fabric, sw, dead, fast)) == list(want)
