"""Issue 37 on the packet-level engine: Freeway lends the low-latency capacity that mice leave idle.

A permutation on a 10 Mbit/s k=4 fat-tree with 9,000-byte frames (every host sends one long flow to a
host of another pod, every host receives one), announced, under Freeway as the paper has it (elephants
only on high-throughput paths: at k=4 half of the fabric's cross-pod capacity) and under Freeway with
lending (the default). Both runs are the engine's own processes, at once; the controller is the same
program in both, given ``lend`` off or not.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from experiments.workloads.flowlist import permutation
from topology.fabric import fattree

F = fattree(4, 10)
SECONDS = 8.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from experiments.engines.ns3.engine import Settings, run_one, spec_of

    out = tmp_path_factory.mktemp("lending")
    flows = permutation(F, 1, SECONDS, announce=True)
    specs = {
        "paper": spec_of("paper", "freeway-paper", F, "freeway", False, flows,
                         Settings(mtu=9000, grace_s=3.0, controller={"freeway_settings": [["lend", "off"]]})),
        "lend": spec_of("lend", "freeway", F, "freeway", False, flows, Settings(mtu=9000, grace_s=3.0)),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(specs, pool.map(lambda s: run_one(out, s, timeout_s=240), specs.values()), strict=True))


def _aggregate(run) -> float:
    return sum(e["goodput_mbps"] for e in run["elephants"])


def test_a_permutation_fills_the_fabric_only_with_lending(runs):
    paper, lend = _aggregate(runs["paper"]), _aggregate(runs["lend"])
    ideal = 10.0 * len(F.hosts)  # every host at its link rate: the non-blocking ideal
    print(f"permutation, k=4, announced: paper {paper:.1f}, lending {lend:.1f} Mbit/s of {ideal:.0f}")
    assert paper <= 0.6 * ideal  # the paper's cap: elephants on half the cross-pod capacity
    assert lend >= 0.85 * ideal and lend >= 1.5 * paper, (paper, lend)
    assert min(e["goodput_mbps"] for e in runs["lend"]["elephants"]) >= 0.7 * 10.0


def test_lent_placements_cross_low_latency_links_and_the_paper_never_does(runs):
    from ryu_apps.algorithms.partition import Partition

    part = Partition(F)  # nothing adds a path in a run without mice: the fixed partition throughout

    def lol_crossings(run) -> int:
        n = 0
        for ev in run["events"]:
            if ev["type"] in ("placement", "reroute"):
                n += sum(any(part.counter[ln] > 0 for ln in zip(p, p[1:], strict=False)) for p in ev["paths"])
        return n
    assert lol_crossings(runs["paper"]) == 0
    assert lol_crossings(runs["lend"]) >= 4  # at least one elephant of each pod's pair of edges
