"""Freeway's OpenFlow pipeline as data: tables, priority bands, cookie spaces, group and meter ids.

Every entry a policy installs names its band here; every cookie, group and
meter id comes from a declared space, so two owners can never collide and a
switch's entries tell who installed them (owner byte, then id and
generation). ``describe()`` prints the whole layout.

Tables: an aggregation or core switch forwards in table 0, its only table.
A ToR uses three, in every mode: table 0 ("guard") lets a packet from a host
port go on only if its source MAC and IP (for ARP: source MAC and sender
IP) are that host's, and drops it otherwise, as it drops what comes from a
port that is neither a host's nor an uplink (anti-spoofing: a host cannot send as
another, nor keep another's elephant entries alive); table 1 ("ingress")
holds the exact-match elephant entries and, with isolation, classifies host
traffic as mice; table 2 ("forward") holds everything else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    table_id: int
    name: str
    purpose: str


GUARD = Table(0, "guard", "at a ToR: a host port's packets go on only with that host's MAC and IP, "
                          "everything from the uplinks goes on, nothing else; aggregation and core switches: "
                          "the only table")
INGRESS = Table(1, "ingress", "at a ToR: exact-match elephant entries, isolation's classification of host "
                              "traffic, then go to forward")
FORWARD = Table(2, "forward", "at a ToR: prefix, host, ECMP and mice forwarding, and the controller punts")
TABLES = (GUARD, INGRESS, FORWARD)


@dataclass(frozen=True)
class Band:
    name: str
    priority: int
    table: Table  # where it sits at a ToR (elsewhere everything is in table 0)
    purpose: str


_BANDS = (
    Band("miss", 0, FORWARD, "forward, guard (and the only table): explicit drop, so misses are "
                             "counted; ingress: go to forward"),
    Band("ecmp-up", 10, FORWARD, "everything not below: the ECMP select group over the uplinks"),
    Band("ecmp-avoid", 12, FORWARD, "after a failure: a destination ToR that only some uplinks still reach"),
    Band("hedera-punt", 15, FORWARD, "Hedera: a new TCP flow's first packet to the controller, through the "
                                     "host's punt meter"),
    Band("mice-pod", 19, FORWARD, "Freeway: mice toward a pod most of whose destination ToRs share their group "
                                   "(and, at a ToR, their path count): the pod's prefix to that group"),
    Band("mice", 20, FORWARD, "Freeway: mice to the select group over low-latency next hops"),
    Band("guard-drop", 90, GUARD, "a host port's packets that are not from its host (dropped, counted)"),
    Band("classify", 100, INGRESS, "isolation: mark host traffic as mice (DSCP, queue), go to forward"),
    Band("demoted", 105, INGRESS, "isolation with host_demotion: a host's own elephant DSCP stays, its queue the "
                                  "elephants', go to forward"),
    Band("guard-pass", 110, GUARD, "a host's own packets (source MAC and IP; ARP: source MAC and sender IP), "
                                   "and everything from an uplink: go to ingress"),
    Band("lldp", 120, GUARD, "LLDP from a port that faces neither a switch nor a host of the description: to the "
         "controller through the stray-LLDP meter (a miswired cable is reported; a flood there cannot starve the "
         "probes)"),
    Band("lldp-host", 121, GUARD, "LLDP probes from a port facing a switch to the controller (the link check), "
                                  "through the switch's LLDP meter; at a ToR, from a host port, through that "
                                  "host's punt meter"),
    Band("down", 200, FORWARD, "destination prefix below a down port"),
    Band("host", 300, FORWARD, "a host on this ToR"),
    Band("hedera-edge", 400, FORWARD, "Hedera: one entry per flow at its ingress ToR, counting its bytes"),
    Band("elephant-mark", 450, INGRESS, "a detected elephant that keeps its path: mark it, go to forward"),
    Band("elephant", 500, INGRESS, "a placed elephant: exact 5-tuple, its own path"),
    Band("elephant-fin", 510, INGRESS, "a placed elephant's FIN at its ingress ToR: forwarded as the elephant, and "
                                       "its headers to the controller, which releases the elephant's allocation"),
    Band("arp", 1000, FORWARD, "ARP to the controller (proxy ARP from the host table), through the host's punt meter"),
    Band("service-drop", 1900, FORWARD, "anything else to the handshake service address"),
    Band("handshake", 2000, FORWARD, "the elephant handshake to the controller, through the host's punt meter"),
    Band("discover", 3000, GUARD, "'freeway discover' only, while it runs: LLDP, ARP and IPv4 to it, through the "
                                  "LLDP meter (removed when it ends)"),
)
BANDS = {b.name: b for b in _BANDS}
_BY_PRIORITY = {b.priority: b for b in _BANDS}
PRIORITIES = frozenset(_BY_PRIORITY) - {0}  # every band's priority but the misses' (one in each table)


def prio(name: str) -> int:
    return BANDS[name].priority


def band_of(priority: int) -> Band:
    """The band an entry's priority belongs to (every priority a policy uses is declared)."""
    return _BY_PRIORITY[priority]


def table_for(priority: int, tor: bool) -> int:
    """Where an entry of this band goes: at a ToR, its band's table; elsewhere table 0."""
    return band_of(priority).table.table_id if tor else 0


# ----- cookies: owner byte | id and generation ----------------------------------------
@dataclass(frozen=True)
class CookieSpace:
    owner: int
    name: str
    layout: str


FREEWAY_ELEPHANT = CookieSpace(0xF5, "freeway-elephant", "eid << 16 | generation (bit 15: adopted, bit 14: "
                                                          "rate-less)")
FREEWAY_MICE = CookieSpace(0x3C, "freeway-mice", "n_lol << 32 | index of the destination ToR, or 1 << 31 | pod "
                                                  "number for a pod's entry (n_lol: at a source ToR, the pair's "
                                                  "low-latency path count)")
HEDERA = CookieSpace(0xD5, "hedera", "kind << 48 | flow id (kind 1: edge counter, 2: placed)")
EFM = CookieSpace(0xE7, "efm", "kind << 48 | flow id << 8 | generation")
DETECTED = CookieSpace(0xC1, "detected-mark", "kind << 48 | mark id (isolation: a detected elephant's mark)")
DISCOVER = CookieSpace(0xD1, "discover", "'freeway discover''s punts (0)")
PLUGIN = CookieSpace(0xA1, "plug-in", "a plug-in mode's own entries (its layout below the owner byte)")
COOKIE_SPACES = (DISCOVER, FREEWAY_ELEPHANT, FREEWAY_MICE, HEDERA, EFM, DETECTED, PLUGIN)
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
MICE_GROUPS = IdRange("mice groups", 1000, 1000 + 0xFFFF)  # one per distinct set of next hops at a switch
AVOID_GROUPS = IdRange("failure groups", 70000, 70000 + 0xFFFF)  # + index of the destination ToR
LLDP_METER = IdRange("lldp meter", 1, 1)  # the LLDP probes a switch punts
STRAY_LLDP_METER = IdRange("stray lldp meter", 2, 2)  # LLDP from a port the description has nothing on
HOST_PUNT_METERS = IdRange("host punt meters", 3, 99)  # + the host's place on its ToR (0..): what one host may
# send to the controller (ARP, handshakes, Hedera's first packets), so that one host cannot starve its neighbours'
MICE_METERS = IdRange("mice meters", 100, 999)  # + host port (isolation's optional mice cap)


def host_punt_meter(slot: int) -> int:
    """The punt meter of the host at ``slot`` (1..) on its ToR: its own for the first 97 hosts; a ToR with
    more (the ideal's one switch carries every host of a fabric) shares them round (host 98 with host 1)."""
    return HOST_PUNT_METERS.id((slot - 1) % (HOST_PUNT_METERS.last - HOST_PUNT_METERS.first + 1))


ELEPHANT_METERS = IdRange("elephant meters", 1000, 0xFFFF0000)  # + elephant id
GROUP_RANGES = (UPLINK_GROUP, MICE_GROUPS, AVOID_GROUPS)
METER_RANGES = (LLDP_METER, STRAY_LLDP_METER, HOST_PUNT_METERS, MICE_METERS, ELEPHANT_METERS)


def describe() -> str:
    """The pipeline as text (for the docs and the operator)."""
    lines = ["tables:"] + [f"  {t.table_id} {t.name}: {t.purpose}" for t in TABLES]
    lines += ["priority bands:"] + [f"  {b.priority:5d} {b.name} ({b.table.name}): {b.purpose}"
                                    for b in _BANDS]
    lines += ["cookie owners:"] + [f"  0x{s.owner:02X} {s.name}: {s.layout}" for s in COOKIE_SPACES]
    lines += ["ids:"] + [f"  {r.name}: {r.first}..{r.last}" for r in GROUP_RANGES + METER_RANGES]
    return "\n".join(lines)
