"""The executor when a switch's answers are handled while a transaction's messages are still going out, as
the os-ken app does (its channels' readers run whenever the sender waits for room in a send queue): an
error fails the transaction once all its messages are out, and its rollback follows them; a barrier answered
early does not confirm what other switches have not yet been asked to confirm."""

from ryu_apps.openflow.executor import Executor
from ryu_apps.openflow.intents import DeleteFlows, Flow, match
from ryu_apps.openflow.txn import Txn

F1 = Flow(500, match(ipv4_dst="10.0.0.2"), cookie=0xF5 << 56 | 7)
F2 = Flow(500, match(ipv4_dst="10.0.0.3"), cookie=0xF5 << 56 | 8)
INSTALL = [("e2_0", [F1]), ("c2", [F1, F2]), ("e0_0", [F1])]


class Channels:
    """A carrier whose switches answer while it sends, as os-ken's channels do: whenever the sender waits for
    room in a send queue (before each message is queued) the readers run and hand the executor what came.
    ``on_send(switch, intent, xid)`` runs in that wait; ``on_barrier(switch, xid)`` is a barrier's answer,
    handled at the next wait (``wait``)."""

    def __init__(self, on_send=None, on_barrier=None):
        self.out: list[tuple[str, object]] = []  # what went out, in order
        self.on_send, self.on_barrier = on_send, on_barrier
        self.pending: list = []
        self.xid = 0
        self.ex: Executor | None = None

    def wait(self) -> None:
        while self.pending:
            self.pending.pop(0)()

    def clock(self) -> float:
        return 0.0

    def connected(self, switch: str) -> bool:
        return True

    def send(self, switch, intents):
        for i in intents:
            self.xid += 1
            yield self.xid
            self.wait()
            if self.on_send:
                self.on_send(switch, i, self.xid)
            self.out.append((switch, i))

    def barrier(self, switch):
        self.wait()
        self.xid += 1
        self.out.append((switch, "barrier"))
        if self.on_barrier:
            self.pending.append(lambda xid=self.xid: self.on_barrier(switch, xid))
        return self.xid

    def record(self, ev) -> None:
        pass


def _run(carrier):
    calls = []
    ex = carrier.ex = Executor(carrier, 3.0)
    ex.begin(Txn("t", INSTALL, done=lambda: calls.append("done"), failed=lambda f: calls.append(f.reason)))
    return ex, calls


def test_an_error_answered_while_sending_fails_the_transaction_after_all_is_out_and_rolls_it_back():
    def on_send(switch, intent, xid):
        if switch == "c2" and intent is F2:  # c2 refuses its first message while its second waits to go
            carrier.ex.error("c2", xid - 1, 5, 0)

    carrier = Channels(on_send)
    ex, calls = _run(carrier)
    assert calls == ["switch c2 error type=5 code=0"] and len(ex) == 0
    undo = [(sw, DeleteFlows(F1.cookie)) for sw in ("e2_0", "c2")] + [("c2", DeleteFlows(F2.cookie)),
                                                                         ("e0_0", DeleteFlows(F1.cookie))]
    # every message of the install went out before its rollback (on each switch's channel, in that order):
    # nothing sent after the failure is left behind on a switch
    assert carrier.out == [("e2_0", F1), ("c2", F1), ("c2", F2), ("e0_0", F1), ("e2_0", "barrier"),
                           ("c2", "barrier"), ("e0_0", "barrier")] + undo


def test_a_barrier_answered_before_the_others_are_sent_waits_for_them():
    answered = []

    def on_barrier(switch, xid):
        if switch == "e2_0":  # answered in the wait before c2's barrier goes out
            carrier.ex.barrier_reply(switch, xid)
        else:
            answered.append((switch, xid))

    carrier = Channels(on_barrier=on_barrier)
    ex, calls = _run(carrier)
    carrier.wait()
    assert calls == [] and len(ex) == 1 and [sw for sw, _ in answered] == ["c2", "e0_0"]
    ex.barrier_reply(*answered[0])
    assert calls == []
    ex.barrier_reply(*answered[1])
    assert calls == ["done"] and len(ex) == 0


def test_barriers_answered_while_sending_confirm_with_the_last_answer():
    carrier = Channels(on_barrier=lambda sw, xid: carrier.ex.barrier_reply(sw, xid))
    ex, calls = _run(carrier)
    assert calls == [] and len(ex) == 1  # e2_0 and c2 answered while the others went out; e0_0 not yet
    carrier.wait()
    assert calls == ["done"] and len(ex) == 0
    assert [sw for sw, i in carrier.out if i == "barrier"] == ["e2_0", "c2", "e0_0"]


def test_a_message_that_cannot_be_sent_fails_the_transaction_and_leaves_nothing_open():
    """A send that raises (a bug, or a switch gone while its barrier is built) used to leave the transaction
    open for good: nothing closes one whose messages are still going out, and background work gives way
    while an answered one is open (``Tracker.awaited``). It now fails at once and what went out is undone."""
    class Broken(Channels):
        def barrier(self, switch):
            if switch == "c2":
                raise AttributeError("'NoneType' object has no attribute 'send_msg'")
            return super().barrier(switch)

    carrier = Broken()
    calls = []
    ex = carrier.ex = Executor(carrier, 3.0)
    ex.begin(Txn("t", INSTALL, done=lambda: calls.append("done"), failed=lambda f: calls.append(f.reason),
                 answers=True))
    assert calls == ["sending failed: 'NoneType' object has no attribute 'send_msg'"]
    assert len(ex) == 0 and ex.awaited() == 0
    assert ("e2_0", DeleteFlows(F1.cookie)) in carrier.out and ("c2", DeleteFlows(F2.cookie)) in carrier.out
