"""One simulated switch's tables, with OpenFlow 1.3's rules for changing them and for walking a packet.

The model: flow tables (entries as ``intents.Flow``, highest priority first), groups (``intents.Group``
and each bucket's watch port), meters (``intents.Meter``) and the ports that are down. Changes follow the
specification and Open vSwitch where they differ from a naive dict: an added entry replaces the one with
the same table, priority and match; a non-strict delete takes every entry whose cookie matches under the
mask (and whose match is at least as specific as the request's); deleting a group deletes the entries
that use it; an entry may use only groups and meters that exist; a group or meter is added once and
modified only if it exists. A change the switch refuses raises ``TableError`` with the OpenFlow error
type and code a real switch would answer.

A packet is a dict of OpenFlow match fields (``packet``). It goes through goto-table, meters,
set_field, set_queue, output and group actions; a select group picks a live bucket (its watch port up)
by a hash of the 5-tuple, weighted, as Open vSwitch does. The hash is ``flow_hash``: FNV-1a (finalized as MurmurHash3) over the
switch's salt and the 5-tuple, so that switches do not all pick alike, and so that the packet-level
engine (``experiments/engines/ns3/fwsim.cc``) picks the same bucket for the same flow. Every change of the
tables is told to ``listener`` when one is set (the packet-level engine mirrors the tables so). How messages reach the tables is
``simswitch.wire``'s business, not this module's.
"""

from __future__ import annotations

import ipaddress
import struct
from collections import Counter
from dataclasses import dataclass

from ryu_apps.openflow import intents as it
from ryu_apps.openflow.framework import ofproto as ofp

OFPP_ANY = 0xFFFFFFFF
OFPG_ANY = 0xFFFFFFFF
OFPG_ALL = 0xFFFFFFFC
OFPM_ALL = 0xFFFFFFFF
OFPTT_ALL = 0xFF
MAX_GOTO = 8

# OpenFlow 1.3 error types and codes a switch answers with (the ones these tables can cause)
BAD_ACTION, BAD_OUT_GROUP = ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_GROUP
FLOW_MOD_FAILED, BAD_TABLE_ID = ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_TABLE_ID
GROUP_MOD_FAILED, GROUP_EXISTS, UNKNOWN_GROUP = ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_GROUP_EXISTS, ofp.OFPGMFC_UNKNOWN_GROUP
METER_MOD_FAILED, METER_EXISTS, UNKNOWN_METER = (ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_METER_EXISTS,
                                                 ofp.OFPMMFC_UNKNOWN_METER)


class SimError(RuntimeError):
    """What a real switch would answer with an OpenFlow error, or a broken walk."""


class TableError(SimError):
    """A change the switch refuses: ``type`` and ``code`` as in the OpenFlow error it would send."""

    def __init__(self, type_: int, code: int, why: str):
        super().__init__(why)
        self.type, self.code = type_, code


@dataclass(frozen=True)
class Output:
    """One copy of a packet leaving a switch: the port (or "controller"), the packet as sent, the meter
    it went through and the cookie of the entry that decided it."""

    port: object
    packet: dict
    meter: int = 0
    cookie: int = 0


def _ip(v) -> int:
    return int(ipaddress.IPv4Address(v))


def flow_hash(salt: int, pkt: dict) -> int:
    """FNV-1a (32 bits) over the salt and the packet's 5-tuple, big-endian: salt, src, dst (4 bytes each),
    proto (1), source and destination port (2 each; 0 for a packet without them), then MurmurHash3's
    finalizer (FNV-1a's low bits depend only on the bytes' low bits: a bucket picked by ``% 2`` would be
    the same at every switch, every path polarized)."""
    proto = pkt.get("ip_proto") or 0
    l4 = ("tcp_src", "tcp_dst") if proto == 6 else ("udp_src", "udp_dst")
    data = struct.pack("!IIIBHH", salt & 0xFFFFFFFF, _ip(pkt.get("ipv4_src") or 0), _ip(pkt.get("ipv4_dst") or 0),
                       proto, pkt.get(l4[0]) or 0, pkt.get(l4[1]) or 0)
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _covers(match, fields: dict) -> bool:
    """Whether a packet (or an entry's match, for a delete) has every field of ``match`` with its value."""
    for key, want in match:
        have = fields.get(key)
        if have is None:
            return False
        if isinstance(want, tuple):  # (value, mask)
            value, mask = want
            if isinstance(have, tuple):  # an entry's own masked field, compared as given
                if have != want:
                    return False
            elif key.startswith("ipv4"):
                if _ip(have) & _ip(mask) != _ip(value) & _ip(mask):
                    return False
            elif have & mask != value & mask:
                return False
        elif have != want:
            return False
    return True


class SwitchTables:
    def __init__(self, name: str, salt: int = 0):
        self.name = name
        self.salt = salt  # the select groups' hash basis
        self.listener = None  # told every change: flow_added/flow_removed(f), group_set(g, watch)/...
        # table -> its entries by (priority, match), in the order they were added (a replaced entry goes
        # last, as Open vSwitch orders equal priorities); read through ``_ordered``: adding an entry was a
        # scan and a sort of its table, a ToR's 645-entry program cost its emulator 50 ms (issue 41)
        self.tables: dict[int, dict[tuple, it.Flow]] = {}
        self._sorted: dict[int, list[it.Flow]] = {}
        self.groups: dict[int, it.Group] = {}
        self.watch: dict[int, tuple[int, ...]] = {}  # group id -> each bucket's watch port
        self.meters: dict[int, it.Meter] = {}
        self.down_ports: set[int] = set()
        self.hits: Counter = Counter()  # (table, priority, match) -> packets that entry matched

    # ----- changes --------------------------------------------------------------------------------
    def add_flow(self, f: it.Flow) -> None:
        if f.table_id >= OFPTT_ALL:
            raise TableError(FLOW_MOD_FAILED, BAD_TABLE_ID, f"{self.name}: no table {f.table_id}")
        for a in f.actions:  # (Open vSwitch refuses an entry whose group does not exist)
            if isinstance(a, it.ToGroup) and a.group_id not in self.groups:
                raise TableError(BAD_ACTION, BAD_OUT_GROUP,
                                 f"{self.name}: an entry points at group {a.group_id}, which does not exist")
        if f.meter_id and f.meter_id not in self.meters:
            raise TableError(METER_MOD_FAILED, UNKNOWN_METER, f"{self.name}: an entry uses meter {f.meter_id}, "
                             "which does not exist")
        t = self.tables.setdefault(f.table_id, {})
        key = (f.priority, f.match)
        was = t.pop(key, None)
        old = [was] if was is not None else []
        t[key] = f
        self._sorted.pop(f.table_id, None)
        if self.listener is not None:
            for g in old:
                self.listener.flow_removed(g)
            self.listener.flow_added(f)

    def delete_flows(self, table_id: int = OFPTT_ALL, cookie: int = 0, cookie_mask: int = 0, match=(),
                     out_port: int = OFPP_ANY, out_group: int = OFPG_ANY, strict: bool = False,
                     priority: int | None = None) -> list[it.Flow]:
        """Delete the entries a flow-mod DELETE (or DELETE_STRICT) names; returns them."""
        gone = []
        for tid, t in self.tables.items():
            if table_id != OFPTT_ALL and tid != table_id:
                continue
            if strict:  # one entry at most: found by its key
                f = t.get((priority, match))
                if f is not None and (f.cookie & cookie_mask == cookie & cookie_mask
                                      and (out_port == OFPP_ANY or it.Output(out_port) in f.actions)
                                      and (out_group == OFPG_ANY or it.ToGroup(out_group) in f.actions)):
                    del t[(priority, match)]
                    self._sorted.pop(tid, None)
                    gone.append(f)
                continue
            keep = []
            for f in t.values():
                hit = (f.cookie & cookie_mask == cookie & cookie_mask
                       and (f.match == match and f.priority == priority if strict else _covers(match, dict(f.match)))
                       and (out_port == OFPP_ANY or it.Output(out_port) in f.actions)
                       and (out_group == OFPG_ANY or it.ToGroup(out_group) in f.actions))
                (gone if hit else keep).append(f)
            if len(keep) != len(t):
                self.tables[tid] = {(f.priority, f.match): f for f in keep}
                self._sorted.pop(tid, None)
        if self.listener is not None:
            for f in gone:
                self.listener.flow_removed(f)
        return gone

    def add_group(self, g: it.Group, watch: tuple[int, ...] | None = None, modify: bool = False) -> None:
        if modify and g.group_id not in self.groups:
            raise TableError(GROUP_MOD_FAILED, UNKNOWN_GROUP, f"{self.name}: modify of unknown group {g.group_id}")
        if not modify and g.group_id in self.groups:
            raise TableError(GROUP_MOD_FAILED, GROUP_EXISTS, f"{self.name}: group {g.group_id} exists")
        self.groups[g.group_id] = g
        self.watch[g.group_id] = watch if watch is not None else tuple(
            next((a.port for a in b.actions if isinstance(a, it.Output)), OFPP_ANY) for b in g.buckets)
        if self.listener is not None:
            self.listener.group_set(g, self.watch[g.group_id])

    def delete_group(self, gid: int) -> None:
        """A group goes, and with it every entry that uses it (OpenFlow); an unknown one is no error."""
        for g in (list(self.groups) if gid == OFPG_ALL else [gid]):
            self.delete_flows(out_group=g)
            if self.groups.pop(g, None) is not None and self.listener is not None:
                self.listener.group_removed(g)
            self.watch.pop(g, None)

    def add_meter(self, m: it.Meter, modify: bool = False) -> None:
        if modify and m.meter_id not in self.meters:
            raise TableError(METER_MOD_FAILED, UNKNOWN_METER, f"{self.name}: modify of unknown meter {m.meter_id}")
        if not modify and m.meter_id in self.meters:
            raise TableError(METER_MOD_FAILED, METER_EXISTS, f"{self.name}: meter {m.meter_id} exists")
        self.meters[m.meter_id] = m
        if self.listener is not None:
            self.listener.meter_set(m)

    def delete_meter(self, mid: int) -> None:
        """A meter goes, and with it every entry that uses it."""
        for m in (list(self.meters) if mid == OFPM_ALL else [mid]):
            for tid, t in list(self.tables.items()):
                gone = [f for f in t.values() if f.meter_id == m]
                if gone:
                    self.tables[tid] = {k: f for k, f in t.items() if f.meter_id != m}
                    self._sorted.pop(tid, None)
                if self.listener is not None:
                    for f in gone:
                        self.listener.flow_removed(f)
            if self.meters.pop(m, None) is not None and self.listener is not None:
                self.listener.meter_removed(m)

    def rewrite(self, change) -> None:
        """Replace every entry ``f`` with ``change(f)``, in place and unannounced (what another controller
        or an operator's hand left on the switch, for tests of what a controller finds)."""
        for tid, t in self.tables.items():
            self.tables[tid] = {(g.priority, g.match): g for g in map(change, t.values())}
        self._sorted.clear()

    # ----- reading ---------------------------------------------------------------------------------
    def _ordered(self, table: int) -> list[it.Flow]:
        """A table's entries, highest priority first (equal ones in the order they were added)."""
        got = self._sorted.get(table)
        if got is None:
            got = self._sorted[table] = sorted(self.tables.get(table, {}).values(), key=lambda g: -g.priority)
        return got

    def flows(self) -> list[it.Flow]:
        return [f for t in sorted(self.tables) for f in self._ordered(t)]

    def lookup(self, table: int, pkt: dict) -> it.Flow | None:
        return next((f for f in self._ordered(table) if _covers(f.match, pkt)), None)

    def process(self, pkt: dict) -> list[Output]:
        """Every copy of one packet the switch sends (``in_port`` among its fields)."""
        out: list[Output] = []
        table, meter, cookie = 0, 0, 0
        pkt = dict(pkt)
        for _ in range(MAX_GOTO):
            f = self.lookup(table, pkt)
            if f is None:
                return out
            self.hits[(table, f.priority, f.match)] += 1
            if f.meter_id:
                if f.meter_id not in self.meters:
                    raise SimError(f"{self.name}: entry uses unknown meter {f.meter_id}")
                meter = f.meter_id
            cookie = f.cookie or cookie
            self.actions(f.actions, pkt, out, meter, cookie)
            if f.goto is None:
                return out
            if f.goto <= table:
                raise SimError(f"{self.name}: goto from table {table} back to {f.goto}")
            table = f.goto
        raise SimError(f"{self.name}: goto loop")

    def actions(self, actions, pkt: dict, out: list, meter: int = 0, cookie: int = 0) -> None:
        """Apply actions to ``pkt`` (changed in place), appending what is sent to ``out``."""
        for a in actions:
            if isinstance(a, it.SetField):
                pkt[a.field] = a.value
            elif isinstance(a, it.SetQueue):
                pkt["queue"] = a.queue_id
            elif isinstance(a, it.Output):
                out.append(Output(a.port, dict(pkt), meter, cookie))
            elif isinstance(a, it.ToController):
                out.append(Output("controller", dict(pkt), meter, cookie))
            elif isinstance(a, it.ToGroup):
                self._group(a.group_id, pkt, out, meter, cookie)

    def live_buckets(self, gid: int) -> list[it.Bucket]:
        """A group's buckets whose watch port is up (a bucket watching no port is always live)."""
        g = self.groups[gid]
        watch = self.watch.get(gid, ())
        return [b for n, b in enumerate(g.buckets)
                if (watch[n] if n < len(watch) else OFPP_ANY) not in self.down_ports]

    def _group(self, gid: int, pkt: dict, out: list, meter: int, cookie: int) -> None:
        if gid not in self.groups:
            raise SimError(f"{self.name}: entry uses unknown group {gid}")
        g = self.groups[gid]
        live = self.live_buckets(gid) if g.type in ("select", "ff") else list(g.buckets)
        if not live:
            return
        if g.type == "select":
            total = sum(b.weight for b in live)
            if total <= 0:
                return  # (a select group whose live buckets all weigh 0 sends nothing)
            pick = flow_hash(self.salt, pkt) % total
            for b in live:
                if pick < b.weight:
                    self.actions(b.actions, dict(pkt), out, meter, cookie)
                    return
                pick -= b.weight
        for b in live if g.type == "all" else live[:1]:
            self.actions(b.actions, dict(pkt), out, meter, cookie)


def packet(flow, dscp: int = 0) -> dict:
    """The match fields of an IPv4 packet of ``flow`` (src, dst, proto, sport, dport)."""
    l4 = ("tcp_src", "tcp_dst") if flow.proto == 6 else ("udp_src", "udp_dst")
    return {"eth_type": 0x0800, "ip_proto": flow.proto, "ipv4_src": flow.src, "ipv4_dst": flow.dst,
            l4[0]: flow.sport, l4[1]: flow.dport, "ip_dscp": dscp, "queue": None}
