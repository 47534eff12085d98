"""The fluid model of placement (experiments/engines/fluid.py): max-min shares between events."""

import pytest

from experiments.engines.fluid import simulate, summary
from experiments.workloads.flowlist import Flow
from topology.fabric import fattree

MB = 1_000_000


def _flows(*spec):
    return [Flow(start, src, dst, size, kind="bulk") for start, src, dst, size in spec]


def test_two_flows_into_one_host_share_its_link_and_finish_together():
    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h3_0_0", MB), (0.0, "h1_0_0", "h3_0_0", MB))
    rows = simulate(fabric, flows, "ideal")
    assert [r["fct_s"] for r in rows] == pytest.approx([0.16, 0.16])  # 8 Mbit at 50 Mbit/s each
    assert [r["slowdown"] for r in rows] == pytest.approx([2.0, 2.0])


def test_a_flow_alone_takes_its_line_rate_and_one_that_starts_later_takes_what_is_left():
    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h3_0_0", MB), (0.04, "h1_0_0", "h3_0_0", MB))
    first, second = simulate(fabric, flows, "ideal")
    # 0-0.04 s: the first alone at 100 (4 Mbit sent); then 50 each: it ends at 0.12, the second (4 Mbit
    # sent by then) has 4 Mbit at 100 left: ends at 0.16
    assert first["fct_s"] == pytest.approx(0.12) and second["fct_s"] == pytest.approx(0.12)


def test_least_loaded_keeps_two_flows_of_one_tor_off_each_others_links():
    """Two hosts under e0_0 to two hosts under e2_0 at once: on the ideal neither slows the other; one
    path each chosen with knowledge of the other gives the same, whatever the draw; hashed paths may
    share an uplink (over seeds, some do: then both run at half their rate while they share it)."""
    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", MB), (0.0, "h0_0_1", "h2_0_1", MB))
    for seed in range(10):
        assert [r["slowdown"] for r in simulate(fabric, flows, "least-loaded", seed)] == pytest.approx([1.0, 1.0])
    hashed = [max(r["slowdown"] for r in simulate(fabric, flows, "ecmp", seed)) for seed in range(20)]
    assert min(hashed) == pytest.approx(1.0) and max(hashed) == pytest.approx(2.0)


def test_least_loaded_large_hashes_small_flows_and_the_summary_counts_buckets():
    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", 10_000), (0.0, "h0_0_1", "h2_0_1", 2 * MB))
    rows = simulate(fabric, flows, "least-loaded-large", 1)
    s = summary(rows)
    assert s["flows"] == 2 and s["ge1MB_flows"] == 1 and s["ge1MB_mean"] >= 1.0
    with pytest.raises(ValueError, match="placement: one of"):
        simulate(fabric, flows, "spray")


def test_fair_rates_are_the_controllers_max_min():
    """The model's progressive filling against the controller's (ryu_apps.algorithms.maxmin), on random
    flows over a small set of links."""
    import random

    from experiments.engines.fluid import fair_rates
    from ryu_apps.algorithms.maxmin import max_min

    rng = random.Random(7)
    links = [(f"s{i}", f"s{i + 1}") for i in range(12)]
    for _ in range(50):
        flows = {n: rng.sample(links, rng.randint(1, 4)) for n in range(rng.randint(1, 30))}
        want = max_min(flows, dict.fromkeys(links, 100.0))
        got = fair_rates(flows, 100.0)
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_least_loaded_hol_keeps_large_flows_off_the_low_latency_plane_and_mice_on_every_path():
    """Two large flows from one ToR to another pod, and the a*_0 plane kept for mice: both large flows go
    by a*_1 (k=4: two paths through it), so they share e0_0's uplink to a0_1 and run at half rate; a small
    flow may still take the a*_0 plane."""
    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", MB), (0.0, "h0_0_1", "h2_0_1", MB))
    for seed in range(5):
        assert [r["slowdown"] for r in simulate(fabric, flows, "least-loaded-hol", seed)] == pytest.approx([2.0, 2.0])
        assert [r["slowdown"] for r in simulate(fabric, flows, "least-loaded-large", seed)] == pytest.approx([1.0, 1.0])
    planes = {sw for seed in range(5) for r in simulate(fabric, flows, "least-loaded-hol", seed)
              for ln in r["links"] for sw in ln if sw.startswith("a")}
    assert planes == {"a0_1", "a2_1"}
    small = _flows((0.0, "h0_0_0", "h2_0_0", 10_000))
    hashed = {sw for seed in range(10) for ln in simulate(fabric, small, "least-loaded-hol", seed)[0]["links"]
              for sw in ln if sw.startswith("a")}
    assert hashed == {"a0_0", "a0_1", "a2_0", "a2_1"}  # a small flow is drawn over every path, the plane's too
