"""The confirmed-install tracker: done only when every switch confirmed; any failure rolls back exactly
what was installed (flows, meters, groups) and nothing else."""

from ryu_apps.openflow.intents import DeleteFlows, DeleteGroup, DeleteMeter, Flow, Group, Meter, match
from ryu_apps.openflow.txn import METER_MOD_FAILED, Failure, Tracker, Txn, rollback_of

F1 = Flow(500, match(ipv4_dst="10.0.0.2"), cookie=0xF5 << 56 | 7)
F2 = Flow(500, match(ipv4_dst="10.0.0.3"), cookie=0xF5 << 56 | 8)
M = Meter(1007, 2000, 100)
G = Group(1003, ())
INSTALL = [("e2_0", [F1]), ("c2", [F1, F2]), ("e0_0", [M, F1, G])]


def _open(tr, now=0.0, install=INSTALL, answers=False):
    calls = []
    t = Txn("test", install, done=lambda: calls.append("done"), failed=lambda f: calls.append(f), answers=answers)
    tid = tr.begin(t, now)
    xid = 100
    for sw, intents in install:
        for _ in intents:
            xid += 1
            tr.sent(tid, sw, xid)
    barriers = {}
    for sw in dict.fromkeys(sw for sw, _ in install):
        xid += 1
        tr.barrier_sent(tid, sw, xid)
        barriers[sw] = xid
    assert tr.check(tid) is None or not install  # every message out: only the replies are awaited
    return tid, barriers, calls


def test_done_only_when_every_switch_confirmed():
    tr = Tracker()
    _, barriers, _ = _open(tr)
    assert tr.check(1) is None
    outs = [tr.barrier_reply(sw, x) for sw, x in barriers.items()]
    assert outs[:-1] == [None, None] and outs[-1].ok and outs[-1].rollback == []
    assert len(tr) == 0
    assert tr.barrier_reply("e0_0", barriers["e0_0"]) is None  # a repeated reply is ignored


def test_rollback_is_exactly_what_was_installed_meters_and_groups_included():
    assert rollback_of(INSTALL) == [("e2_0", [DeleteFlows(F1.cookie)]),
                                    ("c2", [DeleteFlows(F1.cookie), DeleteFlows(F2.cookie)]),
                                    ("e0_0", [DeleteFlows(F1.cookie), DeleteMeter(1007), DeleteGroup(1003)])]


def test_an_error_on_any_message_fails_the_transaction_with_its_type():
    tr = Tracker()
    _, barriers, _ = _open(tr)
    tr.barrier_reply("e2_0", barriers["e2_0"])
    o = tr.error("e0_0", 104, METER_MOD_FAILED, 1)  # the meter (first message to e0_0)
    assert not o.ok and o.failure.error_type == METER_MOD_FAILED and o.failure.switch == "e0_0"
    assert o.rollback == rollback_of(INSTALL) and len(tr) == 0
    assert tr.barrier_reply("c2", barriers["c2"]) is None  # late replies of a closed transaction
    assert tr.error("e0_0", 105, 1, 1) is None


def test_an_error_for_another_message_is_not_ours():
    tr = Tracker()
    _open(tr)
    assert tr.error("e0_0", 9999, 1, 1) is None and len(tr) == 1


def test_a_switch_that_disconnects_fails_the_transactions_touching_it():
    tr = Tracker()
    _open(tr)
    _open(tr, install=[("a1_0", [F2])])
    (o,) = tr.switch_down("c2")
    assert "c2 disconnected" in o.failure.reason and o.rollback == rollback_of(INSTALL)
    assert len(tr) == 1 and tr.switch_down("c2") == []


def test_no_confirmation_in_time_rolls_back():
    tr = Tracker(timeout_s=3.0)
    _open(tr, now=10.0)
    assert tr.expire(12.9) == []
    (o,) = tr.expire(13.1)
    assert "no confirmation within 3 s" in o.failure.reason and o.rollback


def test_expiry_takes_only_the_overdue_oldest_first_and_skips_what_closed():
    tr = Tracker(timeout_s=3.0)
    tids = {}
    for name, now in (("late", 12.0), ("early", 10.0), ("closed", 9.0)):  # clock readings out of order
        tids[name] = tr.begin(Txn(name, INSTALL), now)
        tr.barrier_sent(tids[name], "c2", 500 + len(tids))
        assert tr.check(tids[name]) is None
    assert tr.barrier_reply("c2", 503).txn.name == "closed" and len(tr) == 2
    assert tr.expire(12.5) == []  # 'closed' is overdue by the clock but done: not failed again
    assert [o.txn.name for o in tr.expire(13.5)] == ["early"] and len(tr) == 1
    (o,) = tr.expire(15.1)
    assert o.txn.name == "late" and "no confirmation within 3 s" in o.failure.reason
    assert len(tr) == 0 and tr.expire(99.0) == []


def test_a_switch_missing_before_sending_needs_no_rollback():
    tr = Tracker()
    tid = tr.begin(Txn("t", INSTALL), 0.0)
    o = tr.fail(tid, Failure("switch c2 is not connected", "c2"))
    assert not o.ok and o.rollback == [] and len(tr) == 0


def test_an_empty_install_is_done_at_once():
    tr = Tracker()
    tid = tr.begin(Txn("t", []), 0.0)
    assert tr.check(tid).ok


def test_an_explicit_rollback_wins():
    tr = Tracker()
    t = Txn("t", INSTALL, rollback=[("e0_0", [DeleteFlows(1)])])
    tid = tr.begin(t, 0.0)
    tr.sent(tid, "e0_0", 1)
    tr.barrier_sent(tid, "e0_0", 2)
    assert tr.check(tid) is None
    assert tr.error("e0_0", 1, 5, 0).rollback == [("e0_0", [DeleteFlows(1)])]


def test_answers_handled_while_the_messages_still_go_out_count_once_all_is_out():
    """The os-ken app handles a switch's answers in its channel's reader, which may run while a transaction's
    messages are still going out: a barrier answered before the next switch's barrier was even sent does not
    confirm the transaction; an error, a disconnection or the timeout fails it only once everything is out,
    so that its rollback follows every message it sent."""
    tr = Tracker(timeout_s=3.0)
    tid = tr.begin(Txn("t", INSTALL), 0.0)
    tr.sent(tid, "e2_0", 1)
    tr.barrier_sent(tid, "e2_0", 2)
    assert tr.barrier_reply("e2_0", 2) is None and len(tr) == 1  # c2 and e0_0 have not been asked yet
    tr.sent(tid, "c2", 3)
    tr.barrier_sent(tid, "c2", 4)
    assert tr.barrier_reply("c2", 4) is None
    assert tr.check(tid).ok and len(tr) == 0  # all out, all answered: confirmed as the sending ends

    for fault in ("error", "down", "timeout"):
        tid = tr.begin(Txn(fault, INSTALL), 10.0)
        tr.sent(tid, "e2_0", 11)
        o = {"error": lambda: tr.error("e2_0", 11, 5, 0), "down": lambda: tr.switch_down("e2_0"),
             "timeout": lambda: tr.expire(99.0)}[fault]()
        assert not o and len(tr) == 1  # kept for when all is out
        tr.sent(tid, "c2", 12)
        tr.barrier_sent(tid, "c2", 13)
        assert tr.error("c2", 12, 1, 1) is None  # (a second failure: the first is the one reported)
        o = tr.check(tid)
        assert not o.ok and len(tr) == 0
        assert o.failure.reason.split()[-1] in {"error": "code=0", "down": "disconnected", "timeout": "s"}[fault]
        assert o.rollback == rollback_of(INSTALL)  # (sent after the install's last message)


def test_awaited_counts_the_open_transactions_a_host_awaits_however_they_close():
    """``awaited`` (while it is not 0, the controller's background work gives way: ``schedule.gives_way``)
    counts the open transactions whose outcome a host awaits, and drops each as it closes: confirmed, refused
    by a switch, a switch gone, expired, or failed before anything went out. A repeated reply counts once."""
    tr = Tracker(timeout_s=1.0)
    _, confirmed, _ = _open(tr, answers=True)
    assert tr.awaited == 1
    for sw, x in confirmed.items():
        tr.barrier_reply(sw, x)
    tr.barrier_reply("e0_0", confirmed["e0_0"])
    assert tr.awaited == 0 and len(tr) == 0
    _open(tr)  # a period's move: no host awaits it
    assert tr.awaited == 0 and len(tr) == 1
    _open(tr, answers=True)
    assert tr.awaited == 1 and tr.error("c2", 102, 1, 2) is not None and tr.awaited == 0  # its first message to c2
    _open(tr, answers=True)
    assert tr.awaited == 1 and len(tr.switch_down("c2")) == 2 and tr.awaited == 0
    _open(tr, now=10.0, answers=True)
    assert tr.awaited == 1 and tr.expire(12.0) and tr.awaited == 0
    tid = tr.begin(Txn("refused at once", INSTALL, answers=True), 20.0)
    assert tr.awaited == 1 and tr.fail(tid, Failure("switch e2_0 is not connected", "e2_0")) and tr.awaited == 0
    assert len(tr) == 0
    _open(tr, now=30.0, answers=True)
    _open(tr, now=30.2, answers=True)
    _open(tr, now=30.3)
    assert tr.awaited == 2 and tr.awaited_since(30.1) == 1 and tr.awaited_since(30.0) == 2
    assert tr.awaited_since(30.25) == 0  # (one waiting longer waits on a slow switch)
