"""The fluid model of placement (experiments/engines/fluid.py): max-min shares between events."""

from dataclasses import replace

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


def test_a_view_that_holds_finished_large_flows_moves_the_next_one_off_their_path():
    """Freeway releases an elephant when its entries idle out, 2 s after its last packet: a view holding
    finished large flows sends the next one elsewhere; without the hold, ties go to the first path."""
    from experiments.engines.fluid import View

    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", MB), (0.1, "h0_0_1", "h2_0_1", MB))  # the first ends at 0.08 s
    for hold, same in ((0.0, True), (1.0, False)):
        first, second = simulate(fabric, flows, "least-loaded-large", view=View(large_only=True, hold_s=hold,
                                                                                 ties="first"))
        assert (first["links"] == second["links"]) is same, hold
        assert second["slowdown"] == pytest.approx(1.0)


def test_a_measured_view_sees_the_small_flows_of_the_last_poll_where_it_holds_no_large_flow():
    """A small flow (4 Mbit) crosses one of e0_0's two uplinks and ends before the poll at 50 ms: the
    large flow after it reads that uplink at 0.8 of the link (8 large flows' worth) and takes the other;
    a view without measurements sees nothing there and takes the first path."""
    from experiments.engines.fluid import View

    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", 500_000), (0.06, "h0_0_1", "h2_0_1", MB),
                   (0.5, "h1_0_0", "h3_0_0", 10_000))  # (the last: arrivals go on past the poll)
    for seed in range(4):
        small, large, _ = simulate(fabric, flows, "least-loaded-large", seed,
                                   view=View(large_only=True, measured="idle", ties="first", poll_s=0.05))
        assert large["links"][0] != small["links"][0]
        _, blind, _ = simulate(fabric, flows, "least-loaded-large", seed, view=View(large_only=True, ties="first"))
        assert blind["links"] == tor_links(fabric, "e0_0", "e2_0")[0]


def tor_links(fabric, a, b):
    from topology.paths import path_links, tor_paths

    return [tuple(path_links(p)) for p in tor_paths(fabric, a, b)]


def test_lending_takes_the_low_latency_plane_only_when_it_is_emptier_by_more_than_the_margin():
    """Three long large flows from e0_0 to pod 2, the a*_0 plane closed to them: the second still shares
    the a0_1 uplink with the first (one flow there is not over the margin); the third goes over the plane
    (two on the uplink against none). The plane closed (no margin), all three share a0_1's uplink."""
    from experiments.engines.fluid import View

    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", 10 * MB), (0.01, "h0_0_1", "h2_0_1", 10 * MB),
                   (0.02, "h0_0_0", "h2_0_1", 10 * MB))
    for margin, on_plane in ((1.0, 1), (None, 0)):
        rows = simulate(fabric, flows, "least-loaded-hol", view=View(large_only=True, lend_margin=margin,
                                                                      ties="first"))
        assert sum(r["links"][0] == ("e0_0", "a0_0") for r in rows) == on_plane, margin
    with pytest.raises(ValueError, match="lend_margin: only with least-loaded-hol"):
        simulate(fabric, flows, "least-loaded-large", view=View(lend_margin=1.0))
    with pytest.raises(ValueError, match="measured: only with large_only"):
        View(measured="idle")


def test_a_view_of_held_large_flows_plus_measured_small_ones_avoids_a_link_both_load():
    """Two long large flows hold one path each from e0_0 to e2_0; a small flow into e2_0 crossed one of
    its downlinks before the poll. Every path of the third large flow holds one large flow: Freeway's view
    (``idle``: measurements only where nothing is held) ties and takes the first path; the view that adds
    the small flows' measured load takes a path off the downlink the small flow loaded."""
    from experiments.engines.fluid import View

    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", 10 * MB), (0.001, "h0_0_1", "h2_0_1", 10 * MB),
                   (0.0, "h1_0_0", "h2_0_1", 500_000), (0.06, "h0_0_0", "h2_0_1", 10 * MB))
    seen = 0
    for seed in range(8):
        view = View(large_only=True, ties="first", poll_s=0.05)
        _, _, small, third = simulate(fabric, flows, "least-loaded-large", seed, view=replace(view, measured="small"))
        _, _, _, third_idle = simulate(fabric, flows, "least-loaded-large", seed, view=replace(view, measured="idle"))
        assert third_idle["links"] == tor_links(fabric, "e0_0", "e2_0")[0]
        down = [ln for ln in small["links"] if ln[1] == "e2_0"]
        assert down and down[0] not in third["links"], seed
        seen += down[0] in third_idle["links"]
    assert seen  # (some seeds put the small flow on the first path's downlink)


def test_moves_take_a_large_flow_to_the_uplink_a_finished_one_left_and_only_when_it_is_emptier_by_move_by():
    """Three large flows leave e0_0 for pods 2 and 3 over its two uplinks: the third ties and shares the
    first's uplink (ties to the first path), and its host's link with the second until that one, 1 MB, ends
    at 0.16 s. With moves every 0.2 s one of the two sharing the uplink takes the one the second left (one
    flow fewer than its own), and both run at line rate from then on; never moved, they share it to the
    end; with ``move_by`` 2 one flow fewer is not enough."""
    from experiments.engines.fluid import View

    fabric = fattree(4, 100)
    flows = _flows((0.0, "h0_0_0", "h2_0_0", 10 * MB), (0.001, "h0_0_1", "h2_0_1", MB),
                   (0.002, "h0_0_1", "h3_0_0", 10 * MB))
    for move_s, move_by, moved in ((0.0, 1.0, False), (0.2, 1.0, True), (0.2, 2.0, False)):
        first, _, third = simulate(fabric, flows, "least-loaded-large", view=View(ties="first", move_s=move_s,
                                                                                  move_by=move_by))
        if moved:  # 50 Mbit/s each until 0.2 s, then 100: 0.2 + 70 Mbit at 100 Mbit/s = 0.9 s
            assert first["links"][0] != third["links"][0]
            assert max(first["slowdown"], third["slowdown"]) == pytest.approx(0.9 / 0.8, rel=0.01)
        else:
            assert first["links"][0] == third["links"][0], (move_s, move_by)
            assert min(first["slowdown"], third["slowdown"]) == pytest.approx(2.0, rel=0.01)
    with pytest.raises(ValueError, match="move_by: above 0"):
        View(move_s=0.1, move_by=0)
