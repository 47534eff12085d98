"""Freeway's elephants as data: an announced (or adopted) elephant, the table of them with its per-host
and rate-less sums, their cookies, and what a handshake comes to (``HandshakeOutcome``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ryu_apps.algorithms.binpack import Placement
from ryu_apps.host import handshake as hs
from ryu_apps.openflow import pipeline
from topology.fabric import Host

ADOPTED_BIT = 0x8000  # in an elephant cookie's generation field: adopted (so a restart reads it back as such)
RATELESS_BIT = 0x4000  # ... announced without a rate
GEN_MASK = 0x3FFF


def cookie_of(eid: int, gen: int) -> int:
    return pipeline.cookie(pipeline.FREEWAY_ELEPHANT, (eid << 16) | (gen & 0xFFFF))


def eid_of(cookie: int) -> int | None:
    return (cookie >> 16) & 0xFFFFFFFFFF if pipeline.owner_of(cookie) is pipeline.FREEWAY_ELEPHANT else None




@dataclass
class Elephant:
    eid: int
    gen: int
    src: Host
    dst: Host
    nonce: int
    size: int
    rate_bps: float
    subflows: tuple[hs.Subflow, ...]
    placements: list[Placement]
    since: float
    adopted: bool = False  # found by monitoring, never announced: its allocation follows its measured rate
    rateless: bool = False  # announced without a rate: a max-min fair share of what explicit rates leave
    moved_at: float = -1e9  # when it was last moved off a hot link
    floor_bps: float = -1.0  # a rate-less subflow's floor (-1: 10% of its host's link; less when overbooked)
    asked_bps: float = 0.0  # what an explicit announce asked (its reservation decays below it: ``follow_demand``)
    low_since: float | None = None  # since when it has sent less than half its reservation

    @property
    def cookie(self) -> int:
        return cookie_of(self.eid, self.gen | (ADOPTED_BIT if self.adopted else 0)
                         | (RATELESS_BIT if self.rateless else 0))


class Elephants(dict):
    """The placed elephants by id, also indexed by source host and kept apart when rate-less, so that
    an announce looks only at its own host's elephants and the rate-less ones, not at every elephant
    placed (an elephant's source and kind never change once it is in)."""

    def __init__(self, charge=lambda el: el.rate_bps):
        super().__init__()
        self._by_host: dict[str, dict[int, Elephant]] = {}
        self._rateless: dict[int, Elephant] = {}
        self._charge = charge  # what an announced elephant counts against its host's budget
        self._charged: dict[int, float] = {}  # ... as counted when it came in
        self._host_use: dict[str, list] = {}  # host -> [announced elephants, their charges summed]

    def __setitem__(self, eid: int, el: Elephant) -> None:
        self._forget(eid)
        super().__setitem__(eid, el)
        self._by_host.setdefault(el.src.name, {})[eid] = el
        if el.rateless:
            self._rateless[eid] = el
        if not el.adopted:
            c = self._charged[eid] = self._charge(el)
            use = self._host_use.setdefault(el.src.name, [0, 0.0])
            use[0] += 1
            use[1] += c

    def __delitem__(self, eid: int) -> None:
        self._forget(eid)
        super().__delitem__(eid)

    def pop(self, eid: int, *default):
        self._forget(eid)
        return super().pop(eid, *default)

    def _forget(self, eid: int) -> None:
        old = self.get(eid)
        if old is not None:
            mine = self._by_host.get(old.src.name, {})
            mine.pop(eid, None)
            if not mine:
                self._by_host.pop(old.src.name, None)
            self._rateless.pop(eid, None)
            c = self._charged.pop(eid, None)
            if c is not None:
                use = self._host_use[old.src.name]
                use[0] -= 1
                use[1] = use[1] - c if use[0] else 0.0  # (no rounding residue once a host has none)

    def of_host(self, host: str):
        """The elephants whose source is ``host``."""
        return self._by_host.get(host, {}).values()

    def rateless(self):
        """The rate-less elephants."""
        return self._rateless.values()

    def host_use(self, host: str) -> tuple[int, float]:
        """(how many announced elephants ``host`` has placed, what they count against its budget). An
        announced elephant's charge does not change while it is placed: an explicit rate stays, a
        rate-less one counts at its floor (adopted ones are not counted)."""
        n, total = self._host_use.get(host, (0, 0.0))
        return n, total  # (a copy: the kept pair is mutable)

    # the index would go stale through these: not used on the table
    def update(self, *a, **kw):
        raise TypeError("Elephants: set items one by one")

    setdefault = popitem = clear = update





@dataclass
class HandshakeOutcome:
    """What to do with one handshake: install ``ops`` (egress side first), wait for the switches
    to confirm, then send ``reply`` (None: drop silently)."""

    reply: bytes | None = None
    ops: list[tuple[str, list]] = field(default_factory=list)
    verdict: str = ""  # ack | nack: reason | dropped: reason
    elephant: Elephant | None = None
    replaced: list[tuple[str, list]] = field(default_factory=list)  # sent after the install is confirmed (or
    # rolled back), before the reply: removes the elephants this one replaced, and modifies the meters of the
    # rate-less elephants whose share changed
    cause: str = ""  # for a nack or a drop, one word (``decisions.CAUSES``)
