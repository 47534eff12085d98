"""A simulated OpenFlow fabric: switches fed the real OpenFlow messages, a packet walked host to host.

``SimFabric`` builds one ``wire.Switch`` per switch of a fabric description and plays the controller:
every program and every reaction a policy returns goes through the one message builder (``ofmsg``),
is serialized to the bytes a real switch would be sent and applied by the switch as it parses them
(``SimSwitch.apply``). Packet-ins go to the policy; its packet-outs come back out of the switch and, to
a host, land in ``to_hosts``; transactions are confirmed at once (strict: a switch that answers with an
error raises ``SimError``, since a policy's program must never cause one). ``send`` walks one packet
from a host through the tables and returns its ``Trace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitoring.sflow import FiveTuple
from ryu_apps.openflow import intents as it
from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.executor import Executor
from ryu_apps.openflow.framework import ofproto as ofp
from ryu_apps.simswitch.tables import SimError, packet
from ryu_apps.simswitch.wire import HEADER, Port, Switch, serialize, udp_payload
from topology.fabric import Fabric

MAX_HOPS = 16
__all__ = ["SimError", "SimFabric", "SimSwitch", "Trace", "Hop", "frame", "packet"]


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
    copied: list[str] = field(default_factory=list)  # the switches that sent a copy to the controller

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(h.switch for h in self.hops)

    def links(self) -> list[tuple[str, str]]:
        return list(zip(self.path, self.path[1:], strict=False))


@dataclass(frozen=True)
class Delivered:
    """A frame the controller sent a host (a packet-out), as the host received it."""

    data: bytes

    @property
    def payload(self) -> bytes | None:
        return udp_payload(self.data)


class SimSwitch(Switch):
    """A switch of the fabric; ``apply`` sends it intents as messages, through the message builder."""

    xid = 0

    def apply(self, intents) -> list[tuple]:
        """Send intents as OpenFlow messages (strict: an error answered raises ``SimError``); returns the
        packet-outs the switch sent: (output, frame)."""
        out: list = []
        for m in ofmsg.messages(intents):
            SimSwitch.xid = (SimSwitch.xid + 1) & 0xFFFFFFFF
            replies, sent = self.receive(serialize(m, SimSwitch.xid))
            out += sent
            for r in replies:
                if HEADER.unpack_from(r)[1] == ofp.OFPT_ERROR:
                    raise SimError(self.errors[-1][2])
        return out

    # the table model, read as the tests and benchmarks read a switch
    @property
    def groups(self):
        return self.tables.groups

    @property
    def meters(self):
        return self.tables.meters

    @property
    def hits(self):
        return self.tables.hits

    @property
    def down_ports(self):
        return self.tables.down_ports

    def flows(self) -> list[it.Flow]:
        return self.tables.flows()

    def process(self, pkt: dict) -> list[tuple[object, dict, int, int]]:
        """Outputs of one packet: (port or "controller", packet as sent, meter, cookie)."""
        return [(o.port, o.packet, o.meter, o.cookie) for o in self.tables.process(pkt)]


def frame(pkt: dict, src_mac: str, dst_mac: str, payload: bytes = b"") -> bytes:
    """The bytes of a packet, for a packet-in to the policy (which parses frames, as from a switch)."""
    from ryu_apps.openflow.framework import pkt_ethernet, pkt_ipv4, pkt_packet, pkt_udp

    p = pkt_packet.Packet()
    p.add_protocol(pkt_ethernet.ethernet(dst=dst_mac, src=src_mac, ethertype=0x0800))
    p.add_protocol(pkt_ipv4.ipv4(src=pkt["ipv4_src"], dst=pkt["ipv4_dst"], proto=pkt["ip_proto"],
                                 tos=pkt.get("ip_dscp", 0) << 2))
    if pkt["ip_proto"] == 6:
        from os_ken.lib.packet import tcp as pkt_tcp

        p.add_protocol(pkt_tcp.tcp(src_port=pkt["tcp_src"], dst_port=pkt["tcp_dst"], bits=pkt.get("tcp_flags", 0x02)))
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
        self.switches = {sw: SimSwitch(sw, fabric.switches[sw].dpid, self._ports(sw)) for sw in fabric.switches}
        self.to_hosts: list[tuple[str, Delivered]] = []  # (host, frame) the controller sent to hosts
        self.events: list[dict] = []  # the decision records the policy returned, in order
        self.executor = Executor(_Carrier(self))
        self._sent: list | None = None  # the packet-outs of the reaction being carried out
        for sw in fabric.switches if policy is not None else ():  # None: the switches are programmed from elsewhere
            self.switches[sw].apply(policy.program(sw))

    def _ports(self, sw: str) -> dict[int, Port]:
        out = {}
        for n in self.fabric.neighbors(sw):
            p = self.fabric.port_to(sw, n)
            out[p] = Port(p, f"{sw}-eth{p}", curr_speed_kbps=int(self.fabric.capacity_bps((sw, n)) / 1000))
        return out

    def react(self, reaction) -> list[tuple[str, object, bytes]]:
        """Carry out a policy's Reaction with the app's ``Executor``, every transaction confirmed at once;
        returns the packet-outs its messages made the switches send (``apply``)."""
        if reaction is None:
            return []
        outer, self._sent = self._sent, []
        try:
            self.executor.react(reaction)
            return self._sent or []
        finally:
            self._sent = outer

    def apply(self, ops) -> list[tuple[str, object, bytes]]:
        """Send (switch, intents) in order; frames sent to hosts land in ``to_hosts``. Returns every
        packet-out as (switch, output, frame)."""
        sent = []
        for sw, intents in ops:
            for o, data in self.switches[sw].apply(intents):
                sent.append((sw, o, data))
                peer = self.fabric.peer(sw, o.port) if isinstance(o.port, int) else None
                if peer is not None and peer[0] not in self.fabric.switches:
                    self.to_hosts.append((peer[0], Delivered(data)))
        return sent

    def link_down(self, a: str, b: str) -> None:
        """Both ends of a link go down (buckets that watch them are no longer live)."""
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
             src_mac: str | None = None, tcp_flags: int | None = None) -> Trace:
        """Walk one packet from a host through the fabric; packet-ins go to the policy first. The
        packet has the host's MAC unless ``src_mac`` says otherwise (and ``flow``'s source IP, which
        may be another host's: a spoofed packet); a TCP packet has the flags ``tcp_flags`` (none given:
        it matches no entry on them, and a packet-in of it reads as a SYN)."""
        h = next(x for x in self.fabric.hosts if x.name == src_host)
        mac = (src_mac or h.mac).lower()
        pkt = {**packet(flow, dscp), "eth_src": mac}
        if tcp_flags is not None:
            pkt["tcp_flags"] = tcp_flags
        return self._walk(h.switch, h.port, pkt, Trace(), payload, mac)

    def _walk(self, sw: str, in_port: int, pkt: dict, trace: Trace, payload: bytes, src_mac: str) -> Trace:
        for _ in range(MAX_HOPS):
            outs = self.switches[sw].process({**pkt, "in_port": in_port})
            if outs and all(o[0] == "controller" for o in outs):  # the packet-in holds the packet as modified so far
                sent = {k: v for k, v in outs[0][1].items() if k != "in_port"}
                return self._punt(sw, in_port, {**sent, "queue": None}, trace, payload, src_mac)
            copies = [o for o in outs if o[0] == "controller"]
            if copies:  # a copy to the controller (a FIN): the policy sees it, the packet goes on
                sent = {k: v for k, v in copies[0][1].items() if k != "in_port"}
                dst = self.fabric.host_by_ip(sent["ipv4_dst"])
                self.react(self.policy.on_packet(self.now, sw, in_port, frame(
                    sent, src_mac, dst.mac if dst else "02:fe:ff:ff:ff:fe", payload)))
                trace.copied.append(sw)
                outs = [o for o in outs if o[0] != "controller"]
            if len(outs) != 1:
                trace.dropped = f"{sw}: {'no output' if not outs else f'{len(outs)} outputs'}"
                return trace
            port, sent, meter, cookie = outs[0]
            trace.hops.append(Hop(sw, in_port, port, sent.get("ip_dscp", 0), sent.get("queue"), meter, cookie))
            nxt = self._next(sw, port, sent, trace)
            if nxt is None:
                return trace
            sw, in_port, pkt = nxt
        trace.dropped = "loop"
        return trace

    def _next(self, sw: str, port: int, sent: dict, trace: Trace):
        """Where a packet sent out of ``port`` arrives: (switch, port, packet), or None (delivered, dropped)."""
        if port in self.switches[sw].down_ports:
            trace.dropped = f"{sw}: port {port} is down"
            return None
        peer = self.fabric.peer(sw, port)
        if peer is None:
            trace.dropped = f"{sw}: port {port} leads nowhere"
            return None
        if peer[0] not in self.fabric.switches:
            trace.delivered_to = peer[0]
            return None
        pkt = {k: v for k, v in sent.items() if k not in ("in_port", "queue")}
        pkt["queue"] = None  # a queue is per switch
        return peer[0], peer[1], pkt

    def _punt(self, sw, in_port, pkt, trace, payload, src_mac) -> Trace:
        """A packet-in: the policy answers; a packet-out of this packet continues the walk from where
        the switch sent it."""
        before = len(self.switches[sw].received)
        dst = self.fabric.host_by_ip(pkt["ipv4_dst"])
        data = frame(pkt, src_mac, dst.mac if dst else "02:fe:ff:ff:ff:fe", payload)
        mine = [o for s, o, d in self.react(self.policy.on_packet(self.now, sw, in_port, data)) if s == sw and d == data]
        if len(mine) == 1:
            o = mine[0]
            fields = {**pkt, **{k: v for k, v in o.packet.items() if k in pkt}}
            trace.hops.append(Hop(sw, in_port, o.port, fields.get("ip_dscp", 0), o.packet.get("queue")))
            nxt = self._next(sw, o.port, fields, trace)
            if nxt is None:
                return trace
            return self._walk(nxt[0], nxt[1], nxt[2], trace, payload, src_mac)
        trace.dropped = f"{sw}: to the controller" + ("" if len(self.switches[sw].received) > before else
                                                      " (nothing installed)")
        return trace


class _Carrier:
    """What a ``SimFabric`` hands its ``Executor``: no time; every switch applies what it is sent as it
    parses it, so a barrier has nothing to wait for (an error raises ``SimError``)."""

    def __init__(self, fabric: SimFabric):
        self.fabric = fabric

    def clock(self) -> float:
        return self.fabric.now

    def connected(self, switch: str) -> bool:
        return switch in self.fabric.switches

    def send(self, switch: str, intents) -> list[int]:
        self.fabric._sent += self.fabric.apply([(switch, intents)])
        return []

    def barrier(self, switch: str) -> None:
        return None  # confirmed at once

    def record(self, ev: dict) -> None:
        self.fabric.events.append(ev)
