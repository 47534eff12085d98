"""Max-min fair shares (progressive filling)."""

import random

import pytest

from ryu_apps.algorithms.maxmin import max_min


def test_flows_sharing_one_link_get_equal_shares():
    assert max_min({"a": ["L"], "b": ["L"]}, {"L": 10.0}) == {"a": 5.0, "b": 5.0}


def test_a_flow_held_elsewhere_leaves_its_unused_share_to_the_others():
    # b also crosses M, which has 2: a gets the rest of L
    shares = max_min({"a": ["L"], "b": ["L", "M"]}, {"L": 10.0, "M": 2.0})
    assert shares == pytest.approx({"a": 8.0, "b": 2.0})


def test_a_flow_bound_by_itself_and_a_full_link():
    shares = max_min({"a": ["L"], "b": ["L"], "c": ["L"]}, {"L": 9.0}, cap={"a": 1.0})
    assert shares == pytest.approx({"a": 1.0, "b": 4.0, "c": 4.0})
    assert max_min({"a": ["L"]}, {"L": 0.0}) == {"a": 0.0}
    assert max_min({"a": []}, {}, cap={"a": 3.0}) == {"a": 3.0}


def test_the_shares_are_feasible_and_every_flow_has_a_bottleneck():
    rnd = random.Random(3)
    links = [f"L{i}" for i in range(6)]
    for _ in range(200):
        flows = {f: rnd.sample(links, rnd.randint(1, 3)) for f in range(rnd.randint(1, 8))}
        room = {ln: rnd.uniform(0, 10) for ln in links}
        shares = max_min(flows, room)
        for ln in links:  # feasible
            assert sum(shares[f] for f in flows if ln in flows[f]) <= room[ln] + 1e-6
        for f, ls in flows.items():  # max-min: some full link on which f has the largest share
            assert any(sum(shares[g] for g in flows if ln in flows[g]) >= room[ln] - 1e-6
                       and shares[f] >= max(shares[g] for g in flows if ln in flows[g]) - 1e-6 for ln in ls)
