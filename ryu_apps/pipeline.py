"""Freeway's OpenFlow pipeline as data: tables, priority bands, cookie spaces, group and meter ids.

Every entry a policy installs names its band here; every cookie, group and
meter id comes from a declared space, so two owners can never collide and a
switch's entries tell who installed them (owner byte, then id and
generation). ``describe()`` prints the whole layout.

Tables: without isolation every switch forwards in table 0. With isolation a
ToR uses two tables: table 0 ("ingress") classifies what enters from a host
port (mice DSCP and queue) and holds the exact-match elephant entries, then
forwarding continues in table 1 ("forward"), where everything else goes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    table_id: int
    name: str
    purpose: str


INGRESS = Table(0, "ingress", "every switch's only table; at a ToR with isolation: classify host traffic "
                              "and exact-match elephant entries, then go to forward")
FORWARD = Table(1, "forward", "at a ToR with isolation: prefix, host, ECMP and mice forwarding")
TABLES = (INGRESS, FORWARD)


@dataclass(frozen=True)
class Band:
    name: str
    priority: int
    ingress: bool  # stays in table 0 when a ToR uses two tables (else it moves to forward)
    purpose: str


_BANDS = (
    Band("miss", 0, False, "explicit drop, so misses are counted"),
    Band("ecmp-up", 10, False, "everything not below: the ECMP select group over the uplinks"),
    Band("ecmp-avoid", 12, False, "after a failure: a destination ToR that only some uplinks still reach"),
    Band("hedera-punt", 15, False, "Hedera: a new TCP flow's first packet to the controller, through the host's "
                                   "punt meter"),
    Band("mice", 20, False, "Freeway: mice to the select group over low-latency next hops"),
    Band("classify", 100, True, "isolation: mark host traffic as mice (DSCP, queue), go to forward"),
    Band("down", 200, False, "destination prefix below a down port"),
    Band("host", 300, False, "a host on this ToR"),
    Band("hedera-edge", 400, False, "Hedera: one entry per flow at its ingress ToR, counting its bytes"),
    Band("elephant-mark", 450, True, "a detected elephant that keeps its path: mark it, go to forward"),
    Band("elephant", 500, True, "a placed elephant: exact 5-tuple, its own path"),
    Band("arp", 1000, False, "ARP to the controller (proxy ARP from the host table), through the host's punt meter"),
    Band("service-drop", 1900, False, "anything else to the handshake service address"),
    Band("handshake", 2000, False, "the elephant handshake to the controller, through the host's punt meter"),
)
BANDS = {b.name: b for b in _BANDS}
_BY_PRIORITY = {b.priority: b for b in _BANDS}


def prio(name: str) -> int:
    return BANDS[name].priority


def band_of(priority: int) -> Band:
    """The band an entry's priority belongs to (every priority a policy uses is declared)."""
    return _BY_PRIORITY[priority]


def table_for(priority: int, two_tables: bool) -> int:
    """Where an entry of this band goes on a switch with one table or (ToR with isolation) two."""
    if not two_tables:
        return INGRESS.table_id
    return INGRESS.table_id if band_of(priority).ingress else FORWARD.table_id


# ----- cookies: owner byte | id and generation ----------------------------------------
@dataclass(frozen=True)
class CookieSpace:
    owner: int
    name: str
    layout: str


FREEWAY_ELEPHANT = CookieSpace(0xF5, "freeway-elephant", "eid << 16 | generation (bit 15: adopted, bit 14: "
                                                          "rate-less)")
FREEWAY_MICE = CookieSpace(0x3C, "freeway-mice", "n_lol << 32 | index of the destination ToR (n_lol: at a source "
                                                  "ToR, the pair's low-latency path count)")
HEDERA = CookieSpace(0xD5, "hedera", "kind << 48 | flow id (kind 1: edge counter, 2: placed)")
EFM = CookieSpace(0xE7, "efm", "kind << 48 | flow id << 8 | generation")
DETECTED = CookieSpace(0xC1, "detected-mark", "kind << 48 | mark id (isolation: a detected elephant's mark)")
COOKIE_SPACES = (FREEWAY_ELEPHANT, FREEWAY_MICE, HEDERA, EFM, DETECTED)
OWNER_SHIFT = 56


def cookie(space: CookieSpace, low: int) -> int:
    """A cookie in ``space``: the owner byte above 56 bits of id."""
    return (space.owner << OWNER_SHIFT) | (low & ((1 << OWNER_SHIFT) - 1))


def owner_of(value: int) -> CookieSpace | None:
    top = value >> OWNER_SHIFT
    return next((s for s in COOKIE_SPACES if s.owner == top), None)


# ----- group and meter ids --------------------------------------------------------------
@dataclass(frozen=True)
class IdRange:
    name: str
    first: int
    last: int

    def id(self, n: int) -> int:
        if not 0 <= n <= self.last - self.first:
            raise ValueError(f"{self.name}: {n} is outside {self.first}..{self.last}")
        return self.first + n


UPLINK_GROUP = IdRange("uplink group", 1, 1)  # ECMP over the uplinks
MICE_GROUPS = IdRange("mice groups", 1000, 1000 + 0xFFFF)  # + index of the destination ToR
AVOID_GROUPS = IdRange("failure groups", 70000, 70000 + 0xFFFF)  # + index of the destination ToR
HOST_PUNT_METERS = IdRange("host punt meters", 2, 99)  # + host port: what one host may send to the controller
# (ARP, handshakes, Hedera's first packets), so that one host cannot starve its neighbours' (meter 1 is unused)
MICE_METERS = IdRange("mice meters", 100, 999)  # + host port (isolation's optional mice cap)
ELEPHANT_METERS = IdRange("elephant meters", 1000, 0xFFFF0000)  # + elephant id
GROUP_RANGES = (UPLINK_GROUP, MICE_GROUPS, AVOID_GROUPS)
METER_RANGES = (HOST_PUNT_METERS, MICE_METERS, ELEPHANT_METERS)


def describe() -> str:
    """The pipeline as text (for the docs and the operator)."""
    lines = ["tables:"] + [f"  {t.table_id} {t.name}: {t.purpose}" for t in TABLES]
    lines += ["priority bands:"] + [f"  {b.priority:5d} {b.name}{' (ingress)' if b.ingress else ''}: {b.purpose}"
                                    for b in _BANDS]
    lines += ["cookie owners:"] + [f"  0x{s.owner:02X} {s.name}: {s.layout}" for s in COOKIE_SPACES]
    lines += ["ids:"] + [f"  {r.name}: {r.first}..{r.last}" for r in GROUP_RANGES + METER_RANGES]
    return "\n".join(lines)
