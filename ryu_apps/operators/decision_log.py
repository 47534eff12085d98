"""What the controller decided, kept for the operator: a bounded, numbered log of decision records.

A decision is a plain dict with a ``type`` that a policy returns in a Reaction's events
(``placement``, ``refusal``, ``reroute``, ``released``, ``withdrawal``, ``rollback``,
``partition``, ``liveness``) and the app records once it is carried out. The same
record goes to the events file, the JSON log, the API's ``/api/v1/decisions`` and the
metrics, so they can never tell different stories.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

TYPES = ("placement", "refusal", "reroute", "released", "withdrawal", "rollback", "partition", "liveness",
         "config", "cluster", "queues")
DEFAULT_KEEP = 2000

# A refusal's cause: one word per kind of reason (the reason itself is free text with numbers in it),
# so that metrics can count refusals by cause without a label per message.
CAUSES = ("malformed", "unexpected", "spoofed", "pending", "invalid", "host-cap", "no-room", "switch-refused",
          "store-unreachable")


@dataclass
class Page:
    decisions: list[dict]
    next: int  # ask for ``since=next`` to get what comes after
    dropped: int  # records older than the oldest kept that the caller asked for and cannot have


class DecisionLog:
    """The latest ``keep`` decisions, each numbered (``seq`` from 1) and stamped with wall-clock time."""

    def __init__(self, keep: int = DEFAULT_KEEP):
        self._ring: deque[dict] = deque(maxlen=keep)
        self.seq = 0

    def add(self, record: dict, wall: float) -> dict:
        self.seq += 1
        rec = {"seq": self.seq, "time": round(wall, 3), **{k: v for k, v in record.items() if k not in ("seq", "time")}}
        self._ring.append(rec)
        return rec

    def page(self, since: int = 0, limit: int = 100, types: tuple[str, ...] = ()) -> Page:
        """Records with ``seq > since`` (oldest first), at most ``limit``, optionally of some types only.
        ``since`` < 0 means the latest ``limit`` records."""
        if since > self.seq:  # a client that knew a later sequence (the controller restarted): start again
            return Page([], self.seq, 0)
        if since < 0:
            picked = [r for r in self._ring if not types or r["type"] in types][-limit:]
            return Page(picked, self.seq, 0)
        oldest = self._ring[0]["seq"] if self._ring else self.seq + 1
        dropped = max(0, oldest - since - 1)
        out: list[dict] = []
        last = since
        for r in self._ring:
            if r["seq"] <= since:
                continue
            if len(out) >= limit:
                break
            last = r["seq"]
            if not types or r["type"] in types:
                out.append(r)
        if len(out) < limit:
            last = max(last, self.seq)
        return Page(out, last, dropped)

    def __len__(self) -> int:
        return len(self._ring)
