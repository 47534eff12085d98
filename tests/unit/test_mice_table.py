"""One group per distinct set of next hops at a switch (``MiceTable``): which ops a move of
destinations sends, and in which order."""

import pytest

from ryu_apps.openflow.intents import Bucket, DeleteFlows, DeleteGroup, Flow, Group, GroupModify, Output, ToGroup
from ryu_apps.programs.mice_table import MiceTable, Pods, buckets_moved, key_of

A, B, C = (1,), (1, 2), (2,)  # keys: the output ports, sorted


def _buckets(key, weight=10):
    return tuple(Bucket((Output(p),), weight) for p in key)


def _entries(j, gid, cookie):
    return [Flow(10, (("dst", j),), (ToGroup(gid),), cookie=cookie)]


def _update(t, wants, recheck=(), weight=10):
    return t.update(wants, lambda k: _buckets(k, weight), _entries, lambda j: DeleteFlows(j), 3, recheck)


def _table(layout):
    """A table holding one group per key of ``layout`` (dst -> key), ids from 1000 in key order."""
    t = MiceTable(1000, 1100)
    _update(t, [(j, k, 0) for j, k in layout.items()])
    return t


def test_destinations_that_share_next_hops_share_one_group():
    t = MiceTable(1000, 1100)
    ops = _update(t, [(0, A, 0), (1, A, 0), (2, B, 0), (3, None, 0)])
    assert ops[:2] == [Group(1000, _buckets(A)), Group(1001, _buckets(B))]  # the groups before the entries
    assert [o.actions[0].group_id for o in ops[2:]] == [1000, 1000, 1001]
    assert t.gid_of == {0: 1000, 1: 1000, 2: 1001} and t.members == {1000: {0, 1}, 1001: {2}}


def test_a_group_whose_every_destination_moves_to_a_new_set_is_modified_in_place_alone():
    t = _table({0: A, 1: A, 2: C})
    ops = _update(t, [(0, B, 0), (1, B, 0)])
    assert ops == [GroupModify(Group(1000, _buckets(B)))]  # one message, however many destinations
    assert t.by_key == {B: 1000, C: 1001} and t.gid_of[0] == t.gid_of[1] == 1000


def test_some_destinations_moving_get_a_new_group_first_then_their_entries():
    t = _table({0: A, 1: A, 2: C})
    ops = _update(t, [(0, B, 7)])
    assert ops == [Group(1002, _buckets(B)), *_entries(0, 1002, 7)]
    assert t.members == {1000: {1}, 1001: {2}, 1002: {0}}


def test_a_destination_moving_to_a_set_a_group_has_is_pointed_at_it_and_an_emptied_group_goes_last():
    t = _table({0: A, 1: C})
    ops = _update(t, [(0, C, 0)])
    assert ops == [*_entries(0, 1001, 0), DeleteGroup(1000)]  # (deleting it first would delete the entries)
    assert 1000 not in t.groups and A not in t.by_key
    assert _update(t, [(2, A, 0)])[0] == Group(1000, _buckets(A))  # its id is given out again


def test_two_groups_swapping_their_sets_keep_both_groups_and_repoint_the_entries():
    t = _table({0: A, 1: C})
    ops = _update(t, [(0, C, 0), (1, A, 0)])
    assert ops == [*_entries(0, 1001, 0), *_entries(1, 1000, 0)]
    assert t.gid_of == {0: 1001, 1: 1000} and t.by_key == {A: 1000, C: 1001}


def test_losing_the_last_next_hop_deletes_the_entries_then_the_group():
    t = _table({0: A, 1: A})
    assert _update(t, [(0, None, 0)]) == [DeleteFlows(0)]
    assert _update(t, [(1, None, 0)]) == [DeleteFlows(1), DeleteGroup(1000)]
    assert not t.groups and not t.gid_of


def test_a_new_cookie_alone_resends_only_the_entries():
    t = _table({0: A, 1: A})
    assert _update(t, [(0, A, 5), (1, A, 0)]) == _entries(0, 1000, 5)


def _bulk(t, bulk, wants=(), cookie=lambda js: [9] * len(js)):
    return t.update(wants, _buckets, _entries, lambda j: DeleteFlows(j), 3, (), None, bulk, cookie)


def test_destinations_looked_at_in_bulk_move_as_those_looked_at_one_by_one():
    """``bulk`` (key, destinations) leaves the table as the same destinations given one by one with the
    cookies they hold would, and sends the same ops; a destination without a group takes ``cookie_of``'s."""
    import random

    rng = random.Random(3)
    keys = [A, B, C, (3,), None]
    for _ in range(200):
        layout = {j: rng.choice(keys[:4]) for j in range(rng.randint(1, 12)) if rng.random() < 0.8}
        a, b = _table(layout), _table(layout)
        moved = {j: rng.choice(keys) for j in range(14) if rng.random() < 0.6}
        by_key: dict = {}
        for j, k in moved.items():
            by_key.setdefault(k, set()).add(j)
        got = _bulk(a, list(by_key.items()))
        want = _update(b, [(j, k, b.cookie.get(j, 9)) for j, k in sorted(moved.items())])
        keyed = {j: k for j, k in {**layout, **moved}.items() if k is not None}
        for t in (a, b):
            assert {j: t.keys[g] for j, g in t.gid_of.items()} == keyed, (layout, moved)
            assert set(t.groups) == {g for g in t.gid_of.values()}  # (no group left that nothing uses)
        assert a.cookie == b.cookie
        assert len(got) <= len(want), (layout, moved, got, want)


def test_a_group_moving_in_bulk_with_a_destination_that_had_none_is_modified_in_place_and_takes_it():
    t = _table({0: A, 1: A, 2: C})
    ops = _bulk(t, [(B, {0, 1, 5})])  # (5 had no group: it joins the group changed in place)
    assert ops == [GroupModify(Group(1000, _buckets(B))), *_entries(5, 1000, 9)]
    assert t.members[1000] == {0, 1, 5} and t.cookie[0] == 0 and t.cookie[5] == 9


def test_weights_are_rechecked_for_the_groups_named_or_all_on_a_full_look():
    t = _table({0: A, 1: C})
    assert _update(t, [], recheck=(1000,), weight=8) == []  # within the step
    assert _update(t, [], recheck=(1000,), weight=6) == [GroupModify(Group(1000, _buckets(A, 6)))]
    ops = t.update([(0, A, 0), (1, C, 0)], lambda k: _buckets(k, 6), _entries, DeleteFlows, 3, None)
    assert ops == [GroupModify(Group(1001, _buckets(C, 6)))]  # 1000 follows 6 already


def test_a_table_read_back_keeps_the_ids_the_switch_holds_and_a_full_look_drops_what_nothing_uses():
    t = MiceTable(1000, 1100)
    for g in (Group(1500, _buckets(A)), Group(1203, _buckets(C)), Group(1204, _buckets(C)), Group(1400, _buckets(B))):
        t.hold(g)
    t.point(0, 1500, 0)
    t.point(1, 1204, 0)  # an older layout: two groups with the same next hops
    assert t.by_key[A] == 1500 and key_of(t.groups[1400]) == B
    assert _update(t, [(2, C, 0)]) == _entries(2, 1203, 0)  # (1203 is the first held with C)
    ops = t.update([(0, A, 0), (1, C, 0), (2, C, 0)], _buckets, _entries, DeleteFlows, 3, None)
    # a full look gathers the destinations of a set in one group, then drops the groups nothing uses
    assert ops == [*_entries(1, 1203, 0), DeleteGroup(1204), DeleteGroup(1400)]
    assert set(t.groups) == {1500, 1203} and t.members == {1500: {0}, 1203: {1, 2}}
    assert t.alloc() not in (1500, 1203)


def test_ids_the_switch_may_hold_for_something_else_are_never_given_out():
    t = MiceTable(1000, 1003, avoid=[1000, 1002])
    assert [t.alloc(), t.alloc()] == [1001, 1003]
    with pytest.raises(RuntimeError, match=r"no group id left in 1000\.\.1003"):
        t.alloc()


def test_buckets_moved_by_the_step_or_other_actions():
    assert not buckets_moved(_buckets(B, 10), _buckets(B, 8), 3)
    assert buckets_moved(_buckets(B, 10), _buckets(B, 7), 3)
    assert buckets_moved(_buckets(A), _buckets(C), 3) and buckets_moved(_buckets(A), _buckets(B), 3)


# ----- entries per pod ----------------------------------------------------------------
# Destinations 0, 1, 2 form pod 7, destinations 3 and 4 pod 8; destination 5 is in no pod. A cookie's low 32 bits
# name the destination, the bits above (here 1 << 32: a path count) must agree for a pod's entry.
N = 1 << 32


def _pod_entries(p, gid, cookie):
    return [Flow(9, (("pod", p),), (ToGroup(gid),), cookie=cookie & ~0xFFFFFFFF | 1 << 31 | p)]


def _pod_delete(p):
    return DeleteFlows(1 << 31 | p)


def _pupdate(t, wants, recheck=()):
    return t.update(wants, _buckets, _entries, DeleteFlows, 3, recheck, (_pod_entries, _pod_delete))


def _ptable(layout, cookie=0):
    t = MiceTable(1000, 1100, pods=Pods({7: [0, 1, 2], 8: [3, 4], 9: [6]}))
    _pupdate(t, [(j, k, cookie | j) for j, k in layout.items()])
    return t


def test_a_pod_whose_destinations_share_a_group_gets_one_entry_and_a_pod_of_one_is_no_pod():
    t = MiceTable(1000, 1100, pods=Pods({7: [0, 1, 2], 8: [3, 4], 9: [6]}))
    assert 9 not in t.pods.members and 6 not in t.pods.pod_of
    ops = _pupdate(t, [(0, A, N | 0), (1, A, N | 1), (2, A, N | 2), (3, A, 3), (4, C, 4), (5, A, 5), (6, A, 6)])
    assert ops == [Group(1000, _buckets(A)), Group(1001, _buckets(C)), *_entries(5, 1000, 5), *_entries(6, 1000, 6),
                   *_pod_entries(7, 1000, N), *_entries(3, 1000, 3), *_entries(4, 1001, 4)]
    assert t.pod_held == {7: (1000, N)} and t.own == {3, 4, 5, 6}


def test_a_destination_leaving_the_pods_group_gets_its_own_entry_and_the_pod_follows_its_majority():
    t = _ptable({0: A, 1: A, 2: A}, N)
    ops = _pupdate(t, [(1, C, N | 1)])  # two of three stay: only the one that left gets its own entry
    assert ops == [Group(1001, _buckets(C)), *_entries(1, 1001, N | 1)]
    assert t.pod_held == {7: (1000, N)} and t.own == {1}
    # a second one leaves: the majority is C now: 0 gets its own entry before the pod's moves, 1's goes after
    ops = _pupdate(t, [(2, C, N | 2)])
    assert ops == [*_entries(0, 1000, N), *_pod_entries(7, 1001, N), DeleteFlows(1)]
    assert t.pod_held == {7: (1001, N)} and t.own == {0}
    # coming back: the pod's entry first, then the own entries go (and the emptied group last)
    ops = _pupdate(t, [(1, A, N | 1), (2, A, N | 2)])
    assert ops == [*_pod_entries(7, 1000, N), DeleteFlows(0), DeleteGroup(1001)]
    assert t.pod_held == {7: (1000, N)} and not t.own


def test_a_pod_with_no_majority_has_no_entry_of_its_own():
    t = _ptable({3: A, 4: A})
    ops = _pupdate(t, [(4, C, 4)])  # one of two: no majority
    assert ops == [Group(1001, _buckets(C)), *_entries(3, 1000, 3), *_entries(4, 1001, 4), _pod_delete(8)]
    assert 8 not in t.pod_held and t.own == {3, 4}


def test_a_whole_pod_moving_rewrites_its_one_entry_and_a_group_modified_in_place_none():
    t = _ptable({0: A, 1: A, 2: A, 3: C, 4: C})
    assert _pupdate(t, [(0, C, 0), (1, C, 1), (2, C, 2)]) == [*_pod_entries(7, 1001, 0), DeleteGroup(1000)]
    assert _pupdate(t, [(j, B, j) for j in range(5)]) == [GroupModify(Group(1001, _buckets(B)))]
    assert t.pod_held == {7: (1001, 0), 8: (1001, 0)}


def test_a_path_count_that_differs_is_an_own_entry_and_a_destination_without_next_hop_ends_the_pods():
    t = _ptable({0: A, 1: A, 2: A})
    assert _pupdate(t, [(2, A, N | 2)]) == _entries(2, 1000, N | 2)
    assert t.pod_held == {7: (1000, 0)} and t.own == {2}
    # a destination with no next hop must fall through to the bands below: the pod's entry would hide that
    assert _pupdate(t, [(0, None, 0)]) == [*_entries(1, 1000, 1), _pod_delete(7)]
    assert t.own == {1, 2} and 0 not in t.gid_of and not t.pod_held


def test_a_switch_read_back_with_a_pods_entry_and_an_own_one_is_rendered_again_only_where_it_must():
    pods = Pods({7: [0, 1, 2], 8: [3, 4]})
    t = MiceTable(1000, 1100, pods=pods)
    t.hold(Group(1000, _buckets(A)))
    t.hold(Group(1001, _buckets(C)))
    t.hold_pod(7, 1000, N | 1 << 31 | 7)
    t.hold_own(2, 1001, N | 2)  # an own entry wins over its pod's
    t.hold_own(3, 1000, 3)
    t.hold_own(4, 1000, 4)
    assert t.gid_of == {0: 1000, 1: 1000, 2: 1001, 3: 1000, 4: 1000} and t.cookie[1] == N | 1
    # the same wants, a full look: pod 7 as held (2 keeps its own); pod 8, all at one group, gets its entry
    ops = t.update([(0, A, N), (1, A, N | 1), (2, C, N | 2), (3, A, 3), (4, A, 4)], _buckets, _entries, DeleteFlows,
                   3, None, (_pod_entries, _pod_delete))
    assert ops == [*_pod_entries(8, 1000, 0), DeleteFlows(3), DeleteFlows(4)]
    # held as a pod's entry and its three own: the own entries the pod's covers go
    mixed = MiceTable(1000, 1100, pods=pods)
    mixed.hold(Group(1000, _buckets(A)))
    mixed.hold_pod(7, 1000, N | 1 << 31 | 7)
    for j in (0, 1, 2):
        mixed.hold_own(j, 1000, N | j)
    ops = mixed.update([(0, A, N), (1, A, N | 1), (2, A, N | 2)], _buckets, _entries, DeleteFlows, 3, None,
                       (_pod_entries, _pod_delete))
    assert ops == [DeleteFlows(0), DeleteFlows(1), DeleteFlows(2)]
    # a switch read back as rendered is left alone
    again = MiceTable(1000, 1100, pods=pods)
    again.hold(Group(1000, _buckets(A)))
    again.hold_pod(7, 1000, N | 1 << 31 | 7)
    again.hold_own(3, 1000, 3)
    again.hold_own(4, 1000, 4 | N)
    wants = [(0, A, N), (1, A, N | 1), (2, A, N | 2), (3, A, 3), (4, A, 4 | N)]
    assert again.update(wants, _buckets, _entries, DeleteFlows, 3, None, (_pod_entries, _pod_delete)) == []


def test_a_fresh_table_renders_every_destination_by_pod():
    t = MiceTable(1000, 1100, pods=Pods({7: [0, 1, 2], 8: [3, 4]}))
    t.hold(Group(1000, _buckets(A)))
    for j in (0, 1, 2, 3, 5):
        t.point(j, 1000, j)
    assert t.render_all(_entries, _pod_entries) == [*_entries(5, 1000, 5), *_pod_entries(7, 1000, 0),
                                                    *_entries(3, 1000, 3)]
