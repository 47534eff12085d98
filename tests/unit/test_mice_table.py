"""One group per distinct set of next hops at a switch (``MiceTable``): which ops a move of
destinations sends, and in which order."""

import pytest

from ryu_apps.openflow.intents import Bucket, DeleteFlows, DeleteGroup, Flow, Group, GroupModify, Output, ToGroup
from ryu_apps.programs.mice_table import MiceTable, buckets_moved, key_of

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
