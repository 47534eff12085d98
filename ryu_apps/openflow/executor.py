"""Carrying out a policy's ``Reaction``, once for every carrier.

A Reaction is decision records, intents per switch, and transactions (``txn.Txn``): install, confirm
every switch it touched with a barrier, then ``done()``; or, on an error, a switch gone or no
confirmation in time, roll back and ``failed(why)``. ``Executor`` does that, in order, with a
``txn.Tracker``. What differs between the carriers is only what it is handed (a ``Carrier``):

- the os-ken app (``controller_app``): the wall clock, OpenFlow messages on each switch's channel, its
  barrier replies and errors as they come;
- the ns-3 engine's controller (``experiments/engines/ns3/control.py``): simulated time, the intents
  applied to ns-3's switches a control-channel delay later, each barrier answered a round trip after;
- the simulated fabric of the unit tests (``simswitch.fabric.SimFabric``): no time, every barrier
  answered as soon as what it follows is applied.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from ryu_apps.openflow.txn import Failure, Outcome, Tracker, Txn

LOG = logging.getLogger("freeway")


class Carrier(Protocol):
    """What a carrier supplies to an ``Executor``."""

    def clock(self) -> float:
        """Now, on the carrier's clock (a transaction's start and its expiry are measured on it)."""

    def connected(self, switch: str) -> bool:
        """Whether intents sent to ``switch`` now reach it."""

    def send(self, switch: str, intents: list) -> Iterable[int]:
        """Send one switch its intents, in order; the transaction ids (xids) of the messages sent. A carrier
        whose switches' answers may be handled while it sends (the os-ken app: a channel's reader runs
        whenever the sender waits for room in a send queue) yields each xid before its message goes out."""

    def barrier(self, switch: str) -> int | None:
        """Send ``switch`` a barrier; its xid. Its reply comes back through ``Executor.barrier_reply``.
        None: nothing to wait for (a carrier that applies intents as it is handed them and refuses none)."""

    def record(self, ev: dict) -> None:
        """A decision record, carried out."""


class Executor:
    """``react`` carries out a Reaction; the carrier reports barrier replies, errors and switches gone
    (``barrier_reply``, ``error``, ``switch_down``) and calls ``expire`` on its clock.

    ``durable(outcome)``, when given, is asked before a confirmed transaction's ``done()``: True means it
    took the outcome over (a cluster writes the store first, then calls ``done`` or ``undo``)."""

    def __init__(self, carrier: Carrier, timeout_s: float = 3.0,
                 durable: Callable[[Outcome], bool] | None = None,
                 confirmed: Callable[[Outcome], None] | None = None):
        self.carrier, self.durable, self.confirmed = carrier, durable, confirmed
        self.tracker = Tracker(timeout_s)
        self.counters: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.tracker)

    def awaited(self, since: float | None = None) -> int:
        """Open transactions whose outcome a host awaits (a handshake's answer: ``Txn.answers``); with
        ``since``, only those that began then or later."""
        return self.tracker.awaited if since is None else self.tracker.awaited_since(since)

    def send(self, ops, tid: int | None = None) -> None:
        """Send (switch, intents) in order; a switch that is not connected is skipped. A transaction's
        messages all go out, even if a switch refused one of them meanwhile: it fails once they are out, and
        its rollback follows them (``txn.Tracker``)."""
        for sw, intents in ops:
            if not self.carrier.connected(sw):
                continue
            for xid in self.carrier.send(sw, intents):
                if tid is not None:
                    self.tracker.sent(tid, sw, xid)

    def react(self, r) -> None:
        if not r:
            return
        for ev in r.events:
            self.carrier.record(ev)
        self.send(r.ops)
        for t in r.txns:
            self.begin(t)

    def begin(self, t: Txn) -> None:
        """Install, then confirm every switch with a barrier; the tracker decides done or rollback."""
        self.counters["transactions"] += 1
        tid = self.tracker.begin(t, self.carrier.clock())
        missing = [sw for sw, _ in t.install if not self.carrier.connected(sw)]
        if missing:
            self.finish(self.tracker.fail(tid, Failure(f"switch {missing[0]} is not connected", missing[0])))
            return
        try:
            self.send(t.install, tid)
            for sw in dict.fromkeys(sw for sw, _ in t.install):
                xid = self.carrier.barrier(sw)
                if xid is not None:
                    self.tracker.barrier_sent(tid, sw, xid)
        except Exception as e:  # a message that could not be sent (a bug): the transaction fails now, and is
            LOG.exception("%s: sending failed", t.name)  # not left open for good (nothing would ever close it)
            self.finish(self.tracker.fail(tid, Failure(f"sending failed: {e}")))
            return
        self.finish(self.tracker.check(tid))

    def finish(self, o: Outcome | None) -> None:
        if o is None:
            return
        if o.ok:
            if self.confirmed is not None:
                self.confirmed(o)
            if self.durable is not None and self.durable(o):
                return
            self.done(o)
            return
        self.counters["rolled-back"] += 1
        LOG.error("%s rolled back: %s", o.txn.name, o.failure.reason)
        self.carrier.record({"type": "rollback", "txn": o.txn.name, "reason": o.failure.reason,
                             "switch": o.failure.switch})
        self.send(o.rollback)
        self.react(o.txn.failed(o.failure) if o.txn.failed else None)

    def done(self, o: Outcome) -> None:
        """A confirmed transaction's next step."""
        self.react(o.txn.done() if o.txn.done else None)

    def undo(self, o: Outcome, failure: Failure) -> None:
        """A confirmed transaction that must not stand after all (its store did not take it): removed,
        and its ``failed``."""
        from ryu_apps.openflow.txn import rollback_of

        self.send(rollback_of(o.txn.install))
        self.react(o.txn.failed(failure) if o.txn.failed else None)

    # ----- what the switches report ------------------------------------------------------------------
    def barrier_reply(self, switch: str, xid: int) -> None:
        self.finish(self.tracker.barrier_reply(switch, xid))

    def error(self, switch: str, xid: int, error_type: int, error_code: int) -> None:
        self.finish(self.tracker.error(switch, xid, error_type, error_code))

    def switch_down(self, switch: str) -> None:
        for o in self.tracker.switch_down(switch):
            self.finish(o)

    def expire(self, now: float) -> None:
        for o in self.tracker.expire(now):
            self.finish(o)
