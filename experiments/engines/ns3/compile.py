"""A switch's tables, as the message-level simulated switch holds them, compiled for ``fwsim.cc`` (pure).

``Mirror`` listens to one ``simswitch.tables.SwitchTables`` (every change the switch's messages made) and
writes each change as one line of the text ``fw::Switch::Apply`` reads, so that the ns-3 switch holds
what the simulated switch holds, without Python per packet. The numbers of fields, actions and group
types are the C++ enums'.

What an IP node does not carry, and how it is stood in for: there is no Ethernet, so a frame's
``eth_src`` is the MAC of what is attached to the port it arrived on (a host's own MAC on a host port,
as the guard expects), and every packet is IPv4 (``eth_type`` 0x0800): an entry matching ARP, LLDP or
any field IPv4 packets do not have never matches (``F_NEVER``); there are no ARP replies (the links
are point-to-point) and no MAC rewrites.
"""

from __future__ import annotations

import ipaddress

from ryu_apps.openflow import intents as it

FIELDS = {"in_port": 1, "eth_type": 2, "eth_src": 3, "eth_dst": 4, "ip_proto": 5, "ipv4_src": 6, "ipv4_dst": 7,
          "tcp_src": 8, "tcp_dst": 9, "udp_src": 10, "udp_dst": 11, "ip_dscp": 12, "tcp_flags": 14}
F_NEVER = 13
A_OUTPUT, A_GROUP, A_CONTROLLER, A_SET_DSCP, A_SET_QUEUE = 1, 2, 3, 4, 5
GROUP_TYPES = {"all": 0, "select": 1, "indirect": 2, "ff": 3}
FULL = {"in_port": 0xFFFFFFFF, "eth_type": 0xFFFF, "eth_src": 0xFFFFFFFFFFFF, "eth_dst": 0xFFFFFFFFFFFF,
        "ip_proto": 0xFF, "ipv4_src": 0xFFFFFFFF, "ipv4_dst": 0xFFFFFFFF, "tcp_src": 0xFFFF, "tcp_dst": 0xFFFF,
        "udp_src": 0xFFFF, "udp_dst": 0xFFFF, "ip_dscp": 0x3F, "tcp_flags": 0xFFF}


class CompileError(ValueError):
    """Something of a program the engine cannot carry out (the message names it)."""


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def _value(key: str, v) -> int:
    if key.startswith("ipv4"):
        return int(ipaddress.IPv4Address(v))
    if key.startswith("eth_") and key != "eth_type":
        return mac_int(v)
    return int(v)


def match_fields(match) -> list[tuple[int, int, int]]:
    """(field, value, mask) of each field of an intents match; a field IPv4 packets never carry here
    makes the entry one that never matches."""
    out = []
    for key, want in match:
        if key not in FIELDS:
            return [(F_NEVER, 0, 0)]
        if isinstance(want, tuple):
            value, mask = want
            out.append((FIELDS[key], _value(key, value), _value(key, mask)))
        else:
            out.append((FIELDS[key], _value(key, want), FULL[key]))
    return out


def actions(acts) -> list[tuple[int, int]]:
    out = []
    for a in acts:
        if isinstance(a, it.Output):
            out.append((A_OUTPUT, a.port))
        elif isinstance(a, it.ToGroup):
            out.append((A_GROUP, a.group_id))
        elif isinstance(a, it.ToController):
            out.append((A_CONTROLLER, 0))
        elif isinstance(a, it.SetField) and a.field == "ip_dscp":
            out.append((A_SET_DSCP, a.value))
        elif isinstance(a, it.SetQueue):
            out.append((A_SET_QUEUE, a.queue_id))
        else:
            raise CompileError(f"an action the engine cannot carry out: {a!r}")
    return out


def entry_line(eid: int, f: it.Flow) -> str:
    m = match_fields(f.match)
    a = actions(f.actions)
    return " ".join(str(x) for x in (
        "E", eid, f.table_id, f.priority, f.cookie, f.idle_timeout, f.flags, f.meter_id,
        -1 if f.goto is None else f.goto, len(m), *[v for t in m for v in t], len(a), *[v for t in a for v in t]))


def group_line(g: it.Group, watch: tuple[int, ...]) -> str:
    parts: list = ["G", g.group_id, GROUP_TYPES[g.type], len(g.buckets)]
    for n, b in enumerate(g.buckets):
        a = actions(b.actions)
        parts += [b.weight, watch[n] if n < len(watch) else 0xFFFFFFFF, len(a), *[v for t in a for v in t]]
    return " ".join(str(x) for x in parts)


def meter_line(m: it.Meter) -> str:
    return f"M {m.meter_id} {m.rate} {m.burst} {int(m.pktps)}"


class Mirror:
    """The changes of one switch's tables since the last ``take``, as lines for ``fw::Switch::Apply``;
    ``entry_of`` gives the id an entry has in the engine (for its counters and idle timeouts)."""

    def __init__(self):
        self.lines: list[str] = []
        self.ids: dict[tuple, int] = {}  # (table, priority, match) -> engine id
        self.entries: dict[int, it.Flow] = {}  # engine id -> the entry
        self._next = 0

    @staticmethod
    def _key(f: it.Flow) -> tuple:
        return f.table_id, f.priority, f.match

    def flow_added(self, f: it.Flow) -> None:
        key = self._key(f)
        eid = self.ids.get(key)
        if eid is None:
            self._next += 1
            eid = self.ids[key] = self._next
        self.entries[eid] = f
        self.lines.append(entry_line(eid, f))

    def flow_removed(self, f: it.Flow) -> None:
        eid = self.ids.pop(self._key(f), None)
        if eid is not None:
            self.entries.pop(eid, None)
            self.lines.append(f"DE {eid}")

    def group_set(self, g: it.Group, watch) -> None:
        self.lines.append(group_line(g, watch))

    def group_removed(self, gid: int) -> None:
        self.lines.append(f"DG {gid}")

    def meter_set(self, m: it.Meter) -> None:
        self.lines.append(meter_line(m))

    def meter_removed(self, mid: int) -> None:
        self.lines.append(f"DM {mid}")

    def take(self) -> str:
        out = "\n".join(self.lines)
        self.lines = []
        return out

    def expired(self, eid: int) -> it.Flow | None:
        """The engine removed an idle entry: forget it (the simulated switch forgets it too)."""
        f = self.entries.pop(eid, None)
        if f is not None:
            self.ids.pop(self._key(f), None)
        return f
