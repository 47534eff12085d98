"""Hedera baseline: demand estimation (the paper's Fig. 4 example and hand-made cases), Global First Fit."""

import pytest

from monitoring.sflow import FiveTuple
from ryu_apps.algorithms.hedera_gff import GlobalFirstFit, HederaScheduler, estimate_demands
from topology.fabric import fattree

T = 1 / 3


def test_hedera_figure_4_example():
    # hosts A, B, C, D; flows A->B, A->C, A->D, B->A (x2), B->C, C->A, C->D, D->B (x2)
    flows = [("A", "B"), ("A", "C"), ("A", "D"), ("B", "A"), ("B", "A"), ("B", "C"), ("C", "A"), ("C", "D"),
             ("D", "B"), ("D", "B")]
    d = estimate_demands(flows)
    assert d == pytest.approx([T, T, T, T, T, T, T, 2 / 3, T, T])


@pytest.mark.parametrize("flows,want", [
    ([("a", "x")], [1.0]),
    ([("a", "x"), ("a", "y")], [0.5, 0.5]),
    ([("a", "z"), ("b", "z"), ("c", "z")], [T, T, T]),  # receiver-limited
    # b's single flow is capped by z's equal share; a's second flow gets what a has left
    ([("a", "z"), ("a", "y"), ("b", "z")], [0.5, 0.5, 0.5]),
    # z is shared by a small flow (1/4, sender-limited) and a big one: the big one gets the rest
    ([("a", "z"), ("a", "p"), ("a", "q"), ("a", "r"), ("b", "z")], [0.25, 0.25, 0.25, 0.25, 0.75]),
    ([], []),
])
def test_hand_made_demands(flows, want):
    assert estimate_demands(flows) == pytest.approx(want)


def test_global_first_fit_takes_the_first_path_with_room():
    f = fattree(4, 10)
    gff = GlobalFirstFit(f)
    p1 = gff.place("f1", "e0_0", "e2_0", 6e6)
    p2 = gff.place("f2", "e0_0", "e2_0", 6e6)
    p3 = gff.place("f3", "e0_1", "e2_1", 6e6)
    assert p1[2] == "c1"
    assert p2[1:3] == ("a0_1", "c3")  # c1 and c2 share e0_0 -> a0_0, which has only 4 Mbit/s left
    assert p3[2] == "c2"  # a0_0 -> c1 is full, e0_1 -> a0_0 is free
    assert gff.place("f4", "e0_0", "e2_0", 6e6) is None  # stays on ECMP
    gff.release("f1")
    assert gff.place("f4", "e0_0", "e2_0", 6e6)[2] == "c1"


def test_scheduler_rates_large_flows_and_releases():
    f = fattree(4, 10)
    sch = HederaScheduler(f)
    a = FiveTuple("10.0.0.2", "10.2.0.2", 6, 1, 5001)
    b = FiveTuple("10.0.0.2", "10.3.0.2", 6, 2, 5001)  # same sending host as a
    m = FiveTuple("10.0.1.2", "10.3.1.2", 6, 3, 5001)
    new, rel = sch.schedule(0.0, {a: 0, b: 0, m: 0})
    assert new == {} and rel == []  # first poll: no rates yet
    new, rel = sch.schedule(5.0, {a: 5_000_000, b: 5_000_000, m: 100_000})  # 8, 8 and 0.16 Mbit/s
    assert set(new) == {a, b}  # m is below 10% of 10 Mbit/s
    # both from one host: natural demand 1/2 each (the sender's NIC), 5 Mbit/s reserved per flow
    assert sch.gff.placed[a].demand_bps == pytest.approx(5e6) == sch.gff.placed[b].demand_bps
    new, rel = sch.schedule(10.0, {a: 5_000_100, b: 9_000_000})  # a went quiet, m ended
    assert rel == [a] and new == {}


def test_ingress_counts_only_count_a_flow_at_its_source_tor_and_skip_malformed():
    from ryu_apps.algorithms.hedera_gff import ingress_counts

    f = fattree(4, 10)
    good = {"ipv4_src": "10.0.0.2", "ipv4_dst": "10.2.0.2", "ip_proto": 6, "tcp_src": 1, "tcp_dst": 5001}
    counts = {}
    bad = ingress_counts(f, "e0_0", [(good, 100), (good, 50), ({"ipv4_src": "10.0.0.2"}, 7),
                                     ({**good, "ipv4_src": "10.1.0.2"}, 9)], counts)
    ft = FiveTuple("10.0.0.2", "10.2.0.2", 6, 1, 5001)
    assert bad == 1 and counts == {ft: {("e0_0", None): 150}}
    assert ingress_counts(f, "e2_0", [(good, 100)], counts) == 0 and counts[ft] == {("e0_0", None): 150}  # not its ingress
    counts = {}
    assert ingress_counts(f, "e0_0", [(good, 100, (2, 400, 7)), (good, 50, (1, 500, 9))], counts) == 0
    assert counts == {ft: {("e0_0", (2, 400, 7)): 100, ("e0_0", (1, 500, 9)): 50}}  # per entry


def test_a_rate_follows_each_entry_so_an_edge_entry_expiring_under_a_pin_does_not_release_it():
    """The flaky restart test of 2026-11-26: once pinned, a flow's edge entry stops counting and expires 10 s
    later. A restarted controller polled it with the edge entry's bytes and then without them: the sum of
    the flow's counters grew by less than the pin had counted, the rate came out small and the elephant
    was released (its pins deleted from every switch)."""
    f = fattree(4, 10)
    a = FiveTuple("10.0.0.2", "10.2.0.2", 6, 1, 5001)
    edge, pin = ("e0_0", (2, 400, 7)), ("e0_0", (1, 500, 9))
    sch = HederaScheduler(f)  # restarted: the placement read back from the switches
    sch.recover(a, ("e0_0", "a0_0", "c1", "a2_0", "e2_0"))
    assert sch.schedule(0.0, {a: {edge: 2_900_000, pin: 1_000_000}}) == ({}, [])  # first poll: no rate
    new, rel = sch.schedule(5.0, {a: {pin: 4_000_000}})  # the edge entry expired; the pin counted 3 MB
    assert rel == [] and a in sch.gff.placed and sch.gff.placed[a].path[2] == "c1"
    assert sch.rates(10.0, {a: {pin: 7_000_000}})[a] == pytest.approx(4.8e6)
    assert sch.rates(15.0, {a: {pin: 100}})[a] == pytest.approx(160)  # a smaller count: a new entry, from zero
