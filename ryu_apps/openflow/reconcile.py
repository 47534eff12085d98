"""What a switch must be sent to hold what the policy wants: only the difference (pure).

Used when a switch (re)connects (``held`` is what the switch reports it
holds, read back from its flow, group and meter tables) and when the fabric
changes under a policy (``held`` is the program before, ``want`` after). No
delete-all: an entry that is already right is not touched, so traffic keeps
flowing through a controller restart.

Order: meters and groups the new entries use come first, then the entries
(an add over an existing match replaces it atomically), then what is no
longer wanted (entries before the groups and meters they use).
"""

from __future__ import annotations

from dataclasses import replace

from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import (
    DeleteFlow,
    DeleteGroup,
    DeleteMeter,
    Flow,
    Group,
    GroupModify,
    Meter,
    MeterModify,
)


def key(i) -> tuple:
    """What identifies an entry on a switch."""
    if isinstance(i, Flow):
        return ("flow", i.table_id, i.priority, i.match)
    if isinstance(i, Group):
        return ("group", i.group_id)
    if isinstance(i, Meter):
        return ("meter", i.meter_id)
    raise TypeError(f"not a switch entry: {i!r}")


def diff(held, want, keep=lambda entry: False) -> list:
    """Intents that turn ``held`` into ``want``. Held entries that ``keep`` accepts stay even when not
    wanted (another owner's: e.g. an elephant's entries when only the base program is compared)."""
    h = {key(i): i for i in held}
    w = {key(i): i for i in want}
    meters, groups, flows, gone_flows, gone_groups, gone_meters = [], [], [], [], [], []
    for k, i in w.items():
        old = h.get(k)
        if old == i:
            continue
        if isinstance(i, Meter):
            meters.append(i if old is None else MeterModify(i))
        elif isinstance(i, Group):
            groups.append(i if old is None else GroupModify(i))
        else:
            flows.append(i)
    for k, i in h.items():
        if k in w or keep(i):
            continue
        if isinstance(i, Flow):
            gone_flows.append(DeleteFlow(i.table_id, i.priority, i.match))
        elif isinstance(i, Group):
            gone_groups.append(DeleteGroup(i.group_id))
        else:
            gone_meters.append(DeleteMeter(i.meter_id))
    return meters + groups + flows + gone_flows + gone_groups + gone_meters


def placed_by_traffic(entry, owned=None) -> bool:
    """Entries that traffic put on a switch (an elephant's, a pin, a mark, a counted edge entry) and
    their meters: a reconnect never deletes them; they expire by themselves or the policy, having
    recovered them, removes them."""
    if isinstance(entry, Flow):
        owner = pipeline.owner_of(entry.cookie)
        return owner not in (None, pipeline.FREEWAY_MICE) and (owned is None or owner in owned)
    if isinstance(entry, Meter):
        return entry.meter_id >= pipeline.ELEPHANT_METERS.first and (owned is None or pipeline.FREEWAY_ELEPHANT in owned)
    return False


def at_home(entry, tor: bool) -> bool:
    """Whether an entry sits in the table its band lives in on this switch (entries of priorities no
    band declares are another tool's: left where they are)."""
    if not isinstance(entry, Flow) or entry.priority not in pipeline.PRIORITIES:
        return True
    return entry.table_id == pipeline.table_for(entry.priority, tor)


def _homed(f: Flow, tor: bool) -> Flow:
    goto = pipeline.FORWARD.table_id if f.goto is not None else None  # a mark went to forward: it still does
    return replace(f, table_id=pipeline.table_for(f.priority, tor), goto=goto if tor else None)


def rehome(flows, tor: bool, owned=None) -> list:
    """Entries traffic placed, read back from a table their band no longer lives in (the layout of an
    older Freeway, before the ToRs' guard table), as they are after ``connect_ops`` moved them: what
    ``recover`` rebuilds from."""
    return [_homed(f, tor) if placed_by_traffic(f, owned) and not at_home(f, tor) else f for f in flows]


def connect_ops(held, want, owned=None, tor: bool | None = None) -> list:
    """What a (re)connecting switch is sent: the difference, keeping what traffic placed under the cookie
    spaces ``owned`` by the running mode (another mode's entries, left by an earlier controller, go).
    With ``tor`` (whether the switch is a ToR) such an entry held in a table its band no longer lives in
    (an older layout) is moved there: added in its table first, then deleted where it was."""
    def keep(e) -> bool:
        return placed_by_traffic(e, owned)

    moved = [f for f in held if isinstance(f, Flow) and tor is not None and keep(f) and not at_home(f, tor)]
    if not moved:
        return diff(held, want, keep)
    homed = [_homed(f, tor) for f in moved]  # moved as they are (same match, actions, cookie), new one first
    gone = {id(f) for f in moved}
    ops = diff([i for i in held if id(i) not in gone] + homed, want, keep)
    return homed + ops + [DeleteFlow(f.table_id, f.priority, f.match) for f in moved]


class ReadBack:
    """A connecting switch's tables being read back (flows, groups, meters: one reply stream each), as the
    intents that would have installed them; what Freeway could not have sent is counted (``unreadable``:
    the difference deletes it)."""

    def __init__(self, dp, started: float, reconnect: bool = False):
        self.dp = dp
        self.waiting: set[int] = set()  # the xids of the requests not fully answered yet
        self.started = started
        self.last_part = started  # when the last reply part came (or it was asked)
        self.flows: list = []
        self.groups: list = []
        self.meters: list = []
        self.unreadable = 0
        self.requested = False  # read-back sent (a reconnecting switch's waits for its links' hold-down)
        self.reconnect = reconnect  # it was connected before, and went away

    def asked(self, xids, now: float) -> None:
        self.waiting, self.started, self.requested = set(xids), now, True
        self.last_part = now

    def late(self, now: float, others_last_part: float, timeout_s: float, cap_s: float, flowing_s: float = 1.0) -> bool:
        """Whether to give up on this read-back and program the switch from scratch: nothing of it came for
        ``timeout_s`` (since it was asked, or its last reply part) while no other switch's read-back was
        flowing either (a part within ``flowing_s``: the answers queue behind each other, at the switches'
        side or on the way), or it was asked ``cap_s`` ago."""
        if now - self.started > cap_s:
            return True
        return now - self.last_part > timeout_s and now - others_last_part > flowing_s

    def take(self, xid: int, what: str, items, parse, more: bool, now: float | None = None) -> bool:
        """One reply (``what``: flows, groups or meters, each item read by ``parse``); True once all are in."""
        if now is not None:
            self.last_part = now
        for item in items:
            try:
                getattr(self, what).append(parse(item))
            except ValueError:
                self.unreadable += 1
        if not more:
            self.waiting.discard(xid)
        return not self.waiting

    def held(self) -> list:
        return self.flows + self.groups + self.meters

    def summary(self, ops) -> str:
        """What was read back and what is sent, for the log."""
        kinds: dict[str, int] = {}
        for o in ops:
            kinds[type(o).__name__] = kinds.get(type(o).__name__, 0) + 1
        return (f"{len(self.held())} entries read back, {len(ops)} changes sent "
                f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items())) or 'none'})"
                + (f", {self.unreadable} entries Freeway never sends left alone" if self.unreadable else ""))
