"""Confirmed installs: send entries, confirm every switch with a barrier, roll back on any failure.

Pure: the app reports what it sent (switch, xid), barrier replies, errors,
disconnections and ``now``; the tracker says which transactions finished and,
for a failed one, exactly what to remove. The rollback is derived from what
was installed: each new flow cookie is deleted, each meter and each added
group removed, on the switches that got them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from ryu_apps.openflow.intents import DeleteFlows, DeleteGroup, DeleteMeter, Flow, Group, Meter

Ops = list[tuple[str, list]]
METER_MOD_FAILED = 12  # OFPET_METER_MOD_FAILED: the switch refused a meter


@dataclass(frozen=True)
class Failure:
    """Why a transaction failed: a switch error (with its OpenFlow type and code), a switch that was
    not connected or went away, or no confirmation in time."""

    reason: str
    switch: str = ""
    error_type: int | None = None
    error_code: int | None = None


@dataclass
class Txn:
    """What a policy asks for: install ``install`` (in order, egress side first), then ``done()`` once
    every switch confirmed, or ``failed(failure)`` after the rollback. Both return what to do next
    (a policy Reaction, or None)."""

    name: str
    install: Ops
    done: Callable[[], object] | None = None
    failed: Callable[[Failure], object] | None = None
    rollback: Ops | None = None  # None: derived from ``install``
    store: list = field(default_factory=list)  # (key, record) a cluster writes to its store after the switches
    # confirmed and before ``done()`` (the ACK it backs); a write that fails rolls the install back
    answers: bool = False  # a host awaits its outcome (a handshake's answer): ``Tracker.awaited`` counts it


@dataclass
class _Open:
    tid: int
    txn: Txn
    started: float
    sent: set[tuple[str, int]] = field(default_factory=set)  # (switch, xid) of every message
    waiting: set[tuple[str, int]] = field(default_factory=set)  # barriers not yet answered
    switches: set[str] = field(default_factory=set)
    # its messages still going out (``begin`` to ``check``): a switch's answer may be handled meanwhile (the
    # os-ken app handles barrier replies and errors in each channel's reader, which runs whenever the sender
    # waits for room in a switch's send queue). It closes only once all is out: a failure meanwhile is kept
    # for then, so that its rollback follows every message of the install on each switch's channel
    opening: bool = True
    failure: Failure | None = None


@dataclass(frozen=True)
class Outcome:
    """A finished transaction: ``failure`` is None when it was confirmed; else ``rollback`` says what to
    remove from the switches (send it to those still connected)."""

    txn: Txn
    failure: Failure | None = None
    rollback: Ops = field(default_factory=list)
    started: float = 0.0  # when it began (the ``now`` given to ``begin``): its entries went out then

    @property
    def ok(self) -> bool:
        return self.failure is None


def rollback_of(install: Ops) -> Ops:
    """Exactly what undoes ``install``: delete each new cookie, meter and added group where it went."""
    out: dict[str, list] = {}
    for sw, intents in install:
        undo = out.setdefault(sw, [])
        for i in intents:
            if isinstance(i, Flow):
                d = DeleteFlows(i.cookie)
            elif isinstance(i, Meter):
                d = DeleteMeter(i.meter_id)
            elif isinstance(i, Group):
                d = DeleteGroup(i.group_id)
            else:
                continue
            if d not in undo:
                undo.append(d)
    # flows first (they may point to the meters and groups), then meters and groups
    return [(sw, sorted(ds, key=lambda d: not isinstance(d, DeleteFlows))) for sw, ds in out.items() if ds]


class Tracker:
    def __init__(self, timeout_s: float = 3.0):
        self.timeout_s = timeout_s
        self._open: dict[int, _Open] = {}
        self._by_xid: dict[tuple[str, int], int] = {}
        self._next = 1
        self._starts: list[tuple[float, int]] = []  # a heap of (started, tid): expiry looks at the oldest only
        self._answering: dict[int, float] = {}  # the open transactions whose outcome a host awaits: when each began

    def __len__(self) -> int:
        return len(self._open)

    @property
    def awaited(self) -> int:
        """The open transactions whose outcome a host awaits (``Txn.answers``)."""
        return len(self._answering)

    def awaited_since(self, since: float) -> int:
        """Those of them that began at ``since`` or later (one waiting longer waits on a slow switch)."""
        return sum(1 for t in self._answering.values() if t >= since)

    def begin(self, txn: Txn, now: float) -> int:
        tid = self._next
        self._next += 1
        self._open[tid] = _Open(tid, txn, now, switches={sw for sw, _ in txn.install})
        if txn.answers:
            self._answering[tid] = now
        heapq.heappush(self._starts, (now, tid))
        return tid

    def sent(self, tid: int, switch: str, xid: int) -> None:
        """A message of the transaction goes to ``switch`` with ``xid`` (told before it goes out, so that an
        answer handled at once finds it; the transaction is still open: nothing closes it while ``opening``)."""
        t = self._open[tid]
        t.sent.add((switch, xid))
        self._by_xid[(switch, xid)] = tid

    def barrier_sent(self, tid: int, switch: str, xid: int) -> None:
        t = self._open[tid]
        t.waiting.add((switch, xid))
        self._by_xid[(switch, xid)] = tid

    def check(self, tid: int) -> Outcome | None:
        """Every message went out (``opening`` ends): failed if a failure came meanwhile; done at once if
        nothing is left to confirm (an empty install, or every barrier answered while the others went out)."""
        t = self._open.get(tid)
        if t is None:
            return None
        t.opening = False
        if t.failure is not None:
            return self._close(t, t.failure)
        return self._close(t, None) if not t.waiting else None

    def barrier_reply(self, switch: str, xid: int) -> Outcome | None:
        tid = self._by_xid.get((switch, xid))
        t = self._open.get(tid) if tid is not None else None
        if t is None or (switch, xid) not in t.waiting:
            return None
        t.waiting.discard((switch, xid))
        self._by_xid.pop((switch, xid), None)
        return self._close(t, None) if not t.waiting and not t.opening else None

    def error(self, switch: str, xid: int, error_type: int, error_code: int) -> Outcome | None:
        """A switch refused one of our messages: the whole transaction fails."""
        tid = self._by_xid.get((switch, xid))
        t = self._open.get(tid) if tid is not None else None
        if t is None:
            return None
        return self._fail(t, Failure(f"switch {switch} error type={error_type} code={error_code}", switch,
                                     error_type, error_code))

    def fail(self, tid: int, failure: Failure) -> Outcome | None:
        """The caller's own verdict (a switch not connected before anything was sent): closed now."""
        t = self._open.get(tid)
        return self._close(t, failure) if t is not None else None

    def _fail(self, t: _Open, failure: Failure) -> Outcome | None:
        """Closed with ``failure`` now, or, while its messages still go out, when they are all out (the
        first failure is the one reported)."""
        if t.opening:
            t.failure = t.failure or failure
            return None
        return self._close(t, failure)

    def switch_down(self, switch: str) -> list[Outcome]:
        """Every open transaction touching a switch that disconnected fails."""
        out = [self._fail(t, Failure(f"switch {switch} disconnected", switch))
               for t in list(self._open.values()) if switch in t.switches]
        return [o for o in out if o is not None]

    def expire(self, now: float) -> list[Outcome]:
        """The transactions open for longer than the timeout fail, oldest first (the ones closed since
        they began are skipped as they come up)."""
        out = []
        while self._starts and now - self._starts[0][0] > self.timeout_s:
            _, tid = heapq.heappop(self._starts)
            t = self._open.get(tid)
            if t is not None:
                o = self._fail(t, Failure(f"no confirmation within {self.timeout_s:g} s"))
                if o is not None:
                    out.append(o)
        if not self._open:
            self._starts.clear()
        return out

    def _close(self, t: _Open, failure: Failure | None) -> Outcome:
        del self._open[t.tid]
        self._answering.pop(t.tid, None)
        for key in t.sent | t.waiting:
            self._by_xid.pop(key, None)
        if failure is None:
            return Outcome(t.txn, started=t.started)
        if not t.sent and not t.waiting:
            return Outcome(t.txn, failure, [], t.started)  # nothing reached a switch: nothing to undo
        rollback = t.txn.rollback if t.txn.rollback is not None else rollback_of(t.txn.install)
        return Outcome(t.txn, failure, rollback, t.started)
