"""A simulated OpenFlow 1.3 fabric: apply a policy's intents to switches and walk packets through them.

For tests and offline checks without Mininet: each ``SimSwitch`` holds flows
in several tables, select groups with weights, meters; a packet (a dict of
match fields) goes through goto-table, set_field, set_queue, output and
group actions. A select group picks a live bucket (its output port up) by a
hash of the 5-tuple, weighted, as Open vSwitch does. ``SimFabric`` connects
the switches by the fabric description, plays the controller (packet-ins go
to the policy, its reactions are applied, transactions confirmed), and
traces a packet from host to host.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections import Counter
from dataclasses import dataclass, field

from monitoring.sflow import FiveTuple
from ryu_apps.openflow import intents as it
from topology.fabric import Fabric

MAX_HOPS = 16


class SimError(RuntimeError):
    """What a real switch would answer with an OpenFlow error (group exists, unknown group or meter)."""


@dataclass(frozen=True)
class Hop:
    switch: str
    in_port: int
    out_port: int
    dscp: int
    queue: int | None
    meter: int = 0
    cookie: int = 0  # of the entry that decided the output (the last one matched)


@dataclass
class Trace:
    hops: list[Hop] = field(default_factory=list)
    delivered_to: str | None = None
    dropped: str = ""  # why, if it was

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(h.switch for h in self.hops)

    def links(self) -> list[tuple[str, str]]:
        return list(zip(self.path, self.path[1:], strict=False))


def _ip(v) -> int:
    return int(ipaddress.IPv4Address(v))


def _matches(match, pkt: dict) -> bool:
    for key, want in match:
        have = pkt.get(key)
        if have is None:
            return False
        if isinstance(want, tuple):  # (value, mask)
            value, mask = want
            if key.startswith("ipv4"):
                if _ip(have) & _ip(mask) != _ip(value) & _ip(mask):
                    return False
            elif have & mask != value & mask:
                return False
        elif have != want:
            return False
    return True


class SimSwitch:
    def __init__(self, name: str):
        self.name = name
        self.tables: dict[int, list[it.Flow]] = {}
        self.hits: Counter = Counter()  # (table, priority, match) -> packets that entry matched
        self.groups: dict[int, it.Group] = {}
        self.meters: dict[int, it.Meter] = {}
        self.down_ports: set[int] = set()
        self.received: list = []  # every intent applied, in order (to count what a switch was sent)

    def apply(self, intents) -> None:
        for i in intents:
            self.received.append(i)
            if isinstance(i, it.Flow):
                for a in i.actions:  # (Open vSwitch refuses an entry whose group does not exist)
                    if isinstance(a, it.ToGroup) and a.group_id not in self.groups:
                        raise SimError(f"{self.name}: an entry points at group {a.group_id}, which does not exist")
                t = self.tables.setdefault(i.table_id, [])
                t[:] = [f for f in t if not (f.priority == i.priority and f.match == i.match)]
                t.append(i)
                t.sort(key=lambda f: -f.priority)
            elif isinstance(i, it.DeleteFlow):
                t = self.tables.get(i.table_id, [])
                t[:] = [f for f in t if not (f.priority == i.priority and f.match == i.match)]
            elif isinstance(i, it.MeterModify):
                if i.meter.meter_id not in self.meters:
                    raise SimError(f"{self.name}: modify of unknown meter {i.meter.meter_id}")
                self.meters[i.meter.meter_id] = i.meter
            elif isinstance(i, it.DeleteFlows):
                for t in self.tables.values():
                    t[:] = [f for f in t if f.cookie & i.cookie_mask != i.cookie & i.cookie_mask]
            elif isinstance(i, it.Group):
                if i.group_id in self.groups:
                    raise SimError(f"{self.name}: group {i.group_id} exists")
                self.groups[i.group_id] = i
            elif isinstance(i, it.GroupModify):
                if i.group.group_id not in self.groups:
                    raise SimError(f"{self.name}: modify of unknown group {i.group.group_id}")
                self.groups[i.group.group_id] = i.group
            elif isinstance(i, it.DeleteGroup):  # (OpenFlow: the entries that use the group go with it)
                self.groups.pop(i.group_id, None)
                for t in self.tables.values():
                    t[:] = [f for f in t if it.ToGroup(i.group_id) not in f.actions]
            elif isinstance(i, it.Meter):
                self.meters[i.meter_id] = i
            elif isinstance(i, it.DeleteMeter):
                self.meters.pop(i.meter_id, None)

    def flows(self) -> list[it.Flow]:
        return [f for t in sorted(self.tables) for f in self.tables[t]]

    def lookup(self, table: int, pkt: dict) -> it.Flow | None:
        return next((f for f in self.tables.get(table, ()) if _matches(f.match, pkt)), None)

    def process(self, pkt: dict) -> list[tuple[object, dict, int, int]]:
        """Outputs of one packet: (port or "controller", packet as sent, meter, cookie)."""
        out: list = []
        table, meter, cookie = 0, 0, 0
        pkt = dict(pkt)
        for _ in range(8):
            f = self.lookup(table, pkt)
            if f is None:
                return out
            self.hits[(table, f.priority, f.match)] += 1
            if f.meter_id:
                if f.meter_id not in self.meters:
                    raise SimError(f"{self.name}: entry uses unknown meter {f.meter_id}")
                meter = f.meter_id
            cookie = f.cookie or cookie
            self._actions(f.actions, pkt, out, meter, cookie)
            if f.goto is None:
                return out
            table = f.goto
        raise SimError(f"{self.name}: goto loop")

    def _actions(self, actions, pkt: dict, out: list, meter: int, cookie: int) -> None:
        for a in actions:
            if isinstance(a, it.SetField):
                pkt[a.field] = a.value
            elif isinstance(a, it.SetQueue):
                pkt["queue"] = a.queue_id
            elif isinstance(a, it.Output):
                out.append((a.port, dict(pkt), meter, cookie))
            elif isinstance(a, it.ToController):
                out.append(("controller", dict(pkt), meter, cookie))
            elif isinstance(a, it.ToGroup):
                self._group(a.group_id, pkt, out, meter, cookie)

    def _group(self, gid: int, pkt: dict, out: list, meter: int, cookie: int) -> None:
        g = self.groups.get(gid)
        if g is None:
            raise SimError(f"{self.name}: entry uses unknown group {gid}")
        live = [b for b in g.buckets if not any(isinstance(a, it.Output) and a.port in self.down_ports
                                                for a in b.actions)]
        if not live:
            return
        if g.type == "select":
            key = "|".join(str(pkt.get(k)) for k in ("ipv4_src", "ipv4_dst", "ip_proto", "tcp_src", "tcp_dst",
                                                       "udp_src", "udp_dst"))
            pick = zlib.crc32(key.encode()) % sum(b.weight for b in live)
            for b in live:
                if pick < b.weight:
                    self._actions(b.actions, dict(pkt), out, meter, cookie)
                    return
                pick -= b.weight
        for b in live if g.type == "all" else live[:1]:
            self._actions(b.actions, dict(pkt), out, meter, cookie)


def packet(flow: FiveTuple, dscp: int = 0) -> dict:
    """The match fields of an IPv4 packet of ``flow``."""
    l4 = ("tcp_src", "tcp_dst") if flow.proto == 6 else ("udp_src", "udp_dst")
    return {"eth_type": 0x0800, "ip_proto": flow.proto, "ipv4_src": flow.src, "ipv4_dst": flow.dst,
            l4[0]: flow.sport, l4[1]: flow.dport, "ip_dscp": dscp, "queue": None}


def frame(pkt: dict, src_mac: str, dst_mac: str, payload: bytes = b"") -> bytes:
    """The bytes of a packet, for a packet-in to the policy (which parses frames, as from a switch)."""
    from ryu_apps.openflow.framework import pkt_ethernet, pkt_ipv4, pkt_packet, pkt_udp

    p = pkt_packet.Packet()
    p.add_protocol(pkt_ethernet.ethernet(dst=dst_mac, src=src_mac, ethertype=0x0800))
    p.add_protocol(pkt_ipv4.ipv4(src=pkt["ipv4_src"], dst=pkt["ipv4_dst"], proto=pkt["ip_proto"],
                                 tos=pkt.get("ip_dscp", 0) << 2))
    if pkt["ip_proto"] == 6:
        from os_ken.lib.packet import tcp as pkt_tcp

        p.add_protocol(pkt_tcp.tcp(src_port=pkt["tcp_src"], dst_port=pkt["tcp_dst"], bits=0x02))
    else:
        p.add_protocol(pkt_udp.udp(src_port=pkt["udp_src"], dst_port=pkt["udp_dst"]))
    if payload:
        p.add_protocol(payload)
    p.serialize()
    return bytes(p.data)


class SimFabric:
    """Every switch of a fabric programmed by ``policy``; the controller loop played in-process."""

    def __init__(self, fabric: Fabric, policy, now: float = 0.0):
        self.fabric = fabric
        self.policy = policy
        self.now = now
        self.switches = {sw: SimSwitch(sw) for sw in fabric.switches}
        self.to_hosts: list[tuple[str, object]] = []  # (host, intent) the controller sent to hosts
        self.events: list[dict] = []  # the decision records the policy returned, in order
        for sw in fabric.switches:
            self.switches[sw].apply(policy.program(sw))

    def react(self, reaction) -> None:
        """Apply a policy's Reaction as the app would, every transaction confirmed at once."""
        if reaction is None:
            return
        self.events += reaction.events
        self.apply(reaction.ops)
        for t in reaction.txns:
            self.apply(t.install)
            if t.done is not None:
                self.react(t.done())

    def apply(self, ops) -> None:
        for sw, intents in ops:
            self.switches[sw].apply(intents)
            for i in intents:
                if isinstance(i, it.UdpOut):
                    self.to_hosts.append((self.fabric.peer(sw, i.port)[0], i))

    def link_down(self, a: str, b: str) -> None:
        """Both ends of a link go down (buckets that output there are no longer live)."""
        self.switches[a].down_ports.add(self.fabric.port_to(a, b))
        self.switches[b].down_ports.add(self.fabric.port_to(b, a))

    def link_up(self, a: str, b: str) -> None:
        self.switches[a].down_ports.discard(self.fabric.port_to(a, b))
        self.switches[b].down_ports.discard(self.fabric.port_to(b, a))

    def dead(self) -> frozenset:
        """Directed links with a port down at either end."""
        out = set()
        for sw in self.fabric.switches:
            for n in self.fabric.neighbors(sw):
                if n in self.fabric.switches and (self.fabric.port_to(sw, n) in self.switches[sw].down_ports
                                                  or self.fabric.port_to(n, sw) in self.switches[n].down_ports):
                    out.add((sw, n))
        return frozenset(out)

    def fail(self, *links: tuple[str, str]) -> None:
        """Links go down, and the controller hears of it (the liveness model's dead set)."""
        for a, b in links:
            self.link_down(a, b)
        self.react(self.policy.on_links(self.now, self.dead()))

    def restore(self, *links: tuple[str, str]) -> None:
        """Links come back and their hold-down has passed."""
        for a, b in links:
            self.link_up(a, b)
        self.react(self.policy.on_links(self.now, self.dead()))

    def send(self, src_host: str, flow: FiveTuple, dscp: int = 0, payload: bytes = b"",
             src_mac: str | None = None) -> Trace:
        """Walk one packet from a host through the fabric; packet-ins go to the policy first. The
        packet has the host's MAC unless ``src_mac`` says otherwise (and ``flow``'s source IP, which
        may be another host's: a spoofed packet)."""
        h = next(x for x in self.fabric.hosts if x.name == src_host)
        mac = (src_mac or h.mac).lower()
        pkt = {**packet(flow, dscp), "eth_src": mac}
        return self._walk(h.switch, h.port, pkt, Trace(), payload, mac)

    def _walk(self, sw: str, in_port: int, pkt: dict, trace: Trace, payload: bytes, src_mac: str) -> Trace:
        for _ in range(MAX_HOPS):
            outs = self.switches[sw].process({**pkt, "in_port": in_port})
            if outs and outs[0][0] == "controller":  # the packet-in holds the packet as modified so far
                sent = {k: v for k, v in outs[0][1].items() if k != "in_port"}
                return self._punt(sw, in_port, {**sent, "queue": None}, trace, payload, src_mac)
            if len(outs) != 1:
                trace.dropped = f"{sw}: {'no output' if not outs else f'{len(outs)} outputs'}"
                return trace
            port, sent, meter, cookie = outs[0]
            trace.hops.append(Hop(sw, in_port, port, sent.get("ip_dscp", 0), sent.get("queue"), meter, cookie))
            if port in self.switches[sw].down_ports:
                trace.dropped = f"{sw}: port {port} is down"
                return trace
            peer = self.fabric.peer(sw, port)
            if peer is None:
                trace.dropped = f"{sw}: port {port} leads nowhere"
                return trace
            pkt = {k: v for k, v in sent.items() if k not in ("in_port", "queue")}
            pkt["queue"] = None  # a queue is per switch
            if peer[0] not in self.fabric.switches:
                trace.delivered_to = peer[0]
                return trace
            sw, in_port = peer
        trace.dropped = "loop"
        return trace

    def _punt(self, sw, in_port, pkt, trace, payload, src_mac) -> Trace:
        before = len(self.switches[sw].received)
        dst = self.fabric.host_by_ip(pkt["ipv4_dst"])
        data = frame(pkt, src_mac, dst.mac if dst else "02:fe:ff:ff:ff:fe", payload)
        reaction = self.policy.on_packet(self.now, sw, in_port, data)
        self.react(reaction)
        for o in reaction.ops if reaction else ():  # a packet-out through actions continues the walk
            for i in o[1]:
                if isinstance(i, it.PacketThrough):
                    outs: list = []
                    self.switches[sw]._actions(i.actions, {**pkt, "in_port": in_port}, outs, 0, 0)
                    if len(outs) == 1:
                        port, sent, _, _ = outs[0]
                        trace.hops.append(Hop(sw, in_port, port, sent.get("ip_dscp", 0), sent.get("queue")))
                        peer = self.fabric.peer(sw, port)
                        if peer[0] not in self.fabric.switches:
                            trace.delivered_to = peer[0]
                            return trace
                        return self._walk(peer[0], peer[1], {**sent, "queue": None}, trace, payload, src_mac)
        trace.dropped = f"{sw}: to the controller" + ("" if len(self.switches[sw].received) > before else
                                                      " (nothing installed)")
        return trace


