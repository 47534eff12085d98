"""A fabric of switches simulated at the message level, each a real OpenFlow 1.3 connection to a controller
under test: what ``sim_fabric`` (the pytest plugin) gives a test.

Every switch of a fabric description connects over TCP to the controller's address and answers as Open
vSwitch does (HELLO, features, port descriptions, barriers, echo, the multipart reads, role requests; an
OFPT_ERROR with the type and code a real switch sends for anything it does not take), keeps its tables
as the controller's messages build them (``ryu_apps.simswitch``), sends a packet-in on an entry that
outputs to the controller (a table-miss entry, say), and a port status when a link is cut or restored.
A packet a host sends is walked through the tables, switch to switch, out to hosts, to the controller and
back (its packet-outs, FLOOD and IN_PORT included) until nothing has moved for ``quiet_s``: ``send``
returns where it went (``Walk``).

What it does not model: time (no rates, queues or timeouts: an entry never expires), header rewrites on
the frame a host receives (the tables see them; the frame keeps its original bytes), buffering at the
switch (every packet-in carries the whole frame), and ports beyond those the description gives.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from dataclasses import dataclass, field

from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import ofproto as ofp
from ryu_apps.simswitch.wire import HEADER, Port, Switch, frame_fields, messages
from topology.fabric import Fabric

# what a controller sends on its own clock to see that a switch lives (Freeway's liveness model probes
# every switch every 2 s, staggered: ten a second on a k=4 fat-tree): answered, never waited on by settle
KEEPALIVE = frozenset({ofp.OFPT_ECHO_REQUEST})
MAX_HOPS = 64  # a frame walked through more switches than this is in a loop: dropped ("loop")
FLOOD, ALL, IN_PORT, CONTROLLER, LOCAL, NORMAL = (ofp.OFPP_FLOOD, ofp.OFPP_ALL, ofp.OFPP_IN_PORT,
                                                   ofp.OFPP_CONTROLLER, ofp.OFPP_LOCAL, ofp.OFPP_NORMAL)


def packet_in(in_port: int, data: bytes, table_id: int = 0, cookie: int = 0, reason: int = ofp.OFPR_ACTION) -> bytes:
    """An OFPT_PACKET_IN as Open vSwitch sends it: the whole frame (no buffer), the in_port in its match."""
    match = struct.pack("!HHII", ofp.OFPMT_OXM, 12, (0x8000 << 16) | (ofp.OFPXMT_OFB_IN_PORT << 9) | 4, in_port)
    body = struct.pack("!IHBBQ", ofp.OFP_NO_BUFFER, len(data), reason, table_id, cookie) + match + b"\0" * 4 + b"\0\0"
    return HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_PACKET_IN, HEADER.size + len(body) + len(data), 0) + body + data


def stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, conns) -> None:
    """Stop an event loop running in ``thread``: every connection's writer closed, every task cancelled
    and ended before the loop stops (no task destroyed while pending)."""

    async def stop():
        for c in conns:
            if c.writer is not None:
                c.writer.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        loop.stop()

    asyncio.run_coroutine_threadsafe(stop(), loop)
    thread.join(10)


@dataclass(frozen=True)
class Hop:
    switch: str
    in_port: int
    out_ports: tuple  # where it left (port numbers, "controller")
    cookie: int = 0  # of the last entry that matched


@dataclass
class Walk:
    """Where a packet went: every switch it crossed (a hop per arrival), the hosts it reached (with the
    frame each got), where it was dropped and why, and how many times it went to the controller."""

    hops: list[Hop] = field(default_factory=list)
    delivered: list[tuple[str, bytes]] = field(default_factory=list)
    drops: list[tuple[str, int, str]] = field(default_factory=list)
    packet_ins: int = 0

    @property
    def hosts(self) -> list[str]:
        return [h for h, _ in self.delivered]

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(h.switch for h in self.hops)


@dataclass
class Conn:
    writer: object = None
    connects: int = 0
    log: list = field(default_factory=list)  # (time, message type) of everything the controller sent
    flow_mods: list = field(default_factory=list)  # (time, command, match dict) of every flow mod


class SimNet:
    """``SimNet(fabric, ("127.0.0.1", port)).start()``; ``send``, ``cut``, ``restore``, ``table``; ``close``."""

    def __init__(self, fabric: Fabric, address: tuple[str, int], quiet_s: float = 0.3, mutate: str = ""):
        self.fabric, self.address, self.quiet_s = fabric, address, quiet_s
        self.mutate = mutate  # "drop-flow-mod": every flow mod is lost on its way (to show tests can fail)
        self.switches: dict[str, Switch] = {}
        for name, sw in fabric.switches.items():
            ports = {p: Port(p, f"{name}-eth{p}") for p in self._ports(name)}
            self.switches[name] = Switch(name, sw.dpid, ports)
        self.conns = {name: Conn() for name in fabric.switches}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.running = False
        self.last_activity = time.monotonic()
        self.walk: Walk | None = None  # the walk under way (a frame a host sent, or a packet-out's)
        self.unsolicited: list[tuple[str, str, bytes]] = []  # (switch, host, frame) reached outside a walk
        self.errors: list[tuple[str, int, int, str]] = []  # (switch, type, code, why) of every error answered
        self._answered_at: dict[int, float] = {}  # handshake nonce -> when its answer reached the host

    def _ports(self, name: str) -> list[int]:
        f = self.fabric
        ports = [f.port_to(name, n) for n in f.neighbors(name)] + [h.port for h in f.hosts_on(name)]
        return sorted(set(ports))

    # ----- connecting -----------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> SimNet:
        """Connect every switch and wait until the controller has gone quiet (its programs sent)."""
        self.running = True
        self.thread.start()
        for sw in self.switches:
            asyncio.run_coroutine_threadsafe(self._switch(sw), self.loop)
        deadline = time.monotonic() + timeout
        while sum(1 for c in self.conns.values() if c.writer is not None) < len(self.conns):
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.connected()} of {len(self.conns)} switches connected to "
                                   f"{self.address} in {timeout:.0f} s")
            time.sleep(0.05)
        self.settle(timeout)
        return self

    def connected(self) -> int:
        return sum(1 for c in self.conns.values() if c.writer is not None)

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until neither the controller nor a walk has done anything for ``quiet_s`` (echo requests,
        a controller's keepalives, are not activity)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() - self.last_activity < self.quiet_s:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the controller did not go quiet within {timeout:.0f} s")
            time.sleep(self.quiet_s / 4)

    def close(self) -> None:
        if not self.running:
            return
        self.running = False
        stop_loop(self.loop, self.thread, self.conns.values())

    async def _switch(self, sw: str) -> None:
        c = self.conns[sw]
        while self.running:
            try:
                reader, writer = await asyncio.open_connection(*self.address)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            c.connects += 1
            writer.write(HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_HELLO, HEADER.size, 0))
            c.writer = writer
            buf = b""
            try:
                while self.running:
                    data = await reader.read(1 << 20)
                    if not data:
                        break
                    msgs, buf = messages(buf + data)
                    for m in msgs:
                        self._from_controller(sw, m)
            except (OSError, ValueError, asyncio.IncompleteReadError):
                pass
            c.writer = None
            writer.close()
            await asyncio.sleep(0.5)

    def _from_controller(self, sw: str, m: bytes) -> None:
        c, me = self.conns[sw], self.switches[sw]
        mtype = m[1]
        now = time.monotonic()
        if mtype not in KEEPALIVE:  # a liveness probe is not the controller acting: it would never go quiet
            self.last_activity = now
        c.log.append((now, mtype))
        if mtype == ofp.OFPT_FLOW_MOD:
            if self.mutate == "drop-flow-mod":
                return
            fm = ofmsg.flow_mod_fields(m)
            c.flow_mods.append((now, fm.command, dict(fm.match)))
        n_errors = len(me.errors)
        replies, sent = me.receive(m)
        self.errors += [(sw, *e) for e in me.errors[n_errors:]]
        if replies and c.writer is not None:
            c.writer.write(b"".join(replies))
        if sent:  # a packet-out: out of the ports its actions say (its in_port: for FLOOD and IN_PORT)
            in_port = struct.unpack_from(ofp.OFP_PACKET_OUT_PACK_STR, m, HEADER.size)[1]
            for o, frame in sent:
                self._out(sw, o.port, frame, in_port, depth=0)

    # ----- walking packets ----------------------------------------------------------------------------
    def _record(self, what: str, *args) -> None:
        w = self.walk
        if w is None:
            if what == "delivered":
                self.unsolicited.append(args)
                self._note_answer(args[2])
            return
        if what == "hop":
            w.hops.append(Hop(*args))
        elif what == "delivered":
            w.delivered.append((args[1], args[2]))
            self._note_answer(args[2])
        elif what == "drop":
            w.drops.append(args)
        elif what == "packet_in":
            w.packet_ins += 1

    def _note_answer(self, frame: bytes) -> None:
        """When a Freeway handshake's answer reached its host (for ``announce``)."""
        from ryu_apps.host import handshake as hs
        from ryu_apps.simswitch.wire import udp_payload

        data = udp_payload(frame)
        if data and data.startswith(hs.MAGIC):
            try:
                self._answered_at.setdefault(hs.decode(data).nonce, time.monotonic())
            except hs.HandshakeError:
                pass

    def _out(self, sw: str, port, frame: bytes, in_port: int, depth: int) -> None:
        """A frame leaving ``sw`` by ``port`` (a number, a reserved port, or "controller")."""
        self.last_activity = time.monotonic()
        if port == "controller" or port == CONTROLLER:
            c = self.conns[sw]
            if c.writer is not None:
                c.writer.write(packet_in(in_port, frame))
                self._record("packet_in")
            return
        if port in (FLOOD, ALL):
            for p in self._ports(sw):
                if p != in_port and p not in self.switches[sw].tables.down_ports:
                    self._out(sw, p, frame, in_port, depth)
            return
        if port == IN_PORT:
            port = in_port
        if not isinstance(port, int) or port in (LOCAL, NORMAL) or port > ofp.OFPP_MAX:
            self._record("drop", sw, in_port, f"output to reserved port {port:#x}" if isinstance(port, int) else str(port))
            return
        if port in self.switches[sw].tables.down_ports:
            self._record("drop", sw, in_port, f"port {port} is down")
            return
        peer = self.fabric.peer(sw, port)
        if peer is None:
            self._record("drop", sw, in_port, f"port {port} leads nowhere")
        elif peer[0] in self.switches:
            self._arrive(peer[0], peer[1], frame, depth + 1)
        else:
            self._record("delivered", sw, peer[0], frame)

    def _arrive(self, sw: str, in_port: int, frame: bytes, depth: int) -> None:
        if depth > MAX_HOPS:
            self._record("drop", sw, in_port, "loop")
            return
        if in_port in self.switches[sw].tables.down_ports:
            self._record("drop", sw, in_port, f"port {in_port} is down")
            return
        pkt = {**frame_fields(frame), "in_port": in_port}
        outs = self.switches[sw].tables.process(pkt)
        cookie = outs[-1].cookie if outs else 0
        self._record("hop", sw, in_port, tuple(o.port for o in outs), cookie)
        if not outs:
            self._record("drop", sw, in_port, "no entry sends it anywhere")
        for o in outs:
            self._out(sw, o.port, frame, in_port, depth)

    def send(self, host: str, frame: bytes, timeout: float = 10.0) -> Walk:
        """Host ``host`` sends ``frame``: where it goes until nothing moves for ``quiet_s``."""
        h = self.fabric.host(host)
        if h is None:
            raise ValueError(f"{host!r} is not a host of the fabric")
        walk = Walk()

        def go():
            self.walk = walk
            self._arrive(h.switch, h.port, frame, 0)

        self.loop.call_soon_threadsafe(go)
        time.sleep(0.01)
        self.settle(timeout)
        done = asyncio.run_coroutine_threadsafe(self._end_walk(), self.loop)
        done.result(5)
        return walk

    async def _end_walk(self) -> None:
        self.walk = None

    # ----- faults -----------------------------------------------------------------------------------------
    def cut(self, a: str, b: str) -> None:
        """The link a-b goes down at both ends: each switch notes it and tells its controller."""
        self._link(a, b, False)

    def restore(self, a: str, b: str) -> None:
        self._link(a, b, True)

    def _link(self, a: str, b: str, up: bool) -> None:
        def tell():
            for sw, n in ((a, b), (b, a)):
                if sw not in self.switches:
                    continue
                port = self.fabric.port_to(sw, n) if n in self.fabric.switches else self.fabric.host(n).port
                msg = self.switches[sw].port_status(port, up)
                if self.conns[sw].writer is not None:
                    self.conns[sw].writer.write(msg)
            self.last_activity = time.monotonic()

        self.loop.call_soon_threadsafe(tell)
        time.sleep(0.01)
        self.settle()

    def frame(self, src: str, dst: str, proto: str = "tcp", sport: int = 40000, dport: int = 5001,
              payload: bytes = b"", dst_ip: str | None = None, dst_mac: str | None = None) -> bytes:
        """An Ethernet/IPv4 frame from host ``src`` to host ``dst`` (their MACs and addresses), TCP or UDP."""
        from ryu_apps.simswitch.fabric import frame as make

        a, b = self.fabric.host(src), self.fabric.host(dst)
        proto_no = {"tcp": 6, "udp": 17}[proto]
        l4 = ("tcp_src", "tcp_dst") if proto_no == 6 else ("udp_src", "udp_dst")
        pkt = {"ipv4_src": a.ip, "ipv4_dst": dst_ip or b.ip, "ip_proto": proto_no, l4[0]: sport, l4[1]: dport}
        return make(pkt, a.mac, dst_mac or b.mac, payload)

    def announce(self, src: str, dst: str, sport: int, dport: int = 5201, size: int = 50_000_000,
                 rate_kbps: int = 0, nonce: int = 1) -> tuple[Walk, object | None, float | None]:
        """Host ``src`` announces a TCP elephant to ``dst`` (Freeway's handshake, to its service address):
        the walk, the answer the host got (``Ack``/``Nack``, None if none) and when (monotonic)."""
        from ryu_apps.host import handshake as hs

        a, b = self.fabric.host(src), self.fabric.host(dst)
        ann = hs.encode(hs.Announce(nonce, size, rate_kbps, (hs.Subflow(a.ip, b.ip, 6, sport, dport),)))
        frame = self.frame(src, dst, "udp", sport, hs.SERVICE_PORT, ann, dst_ip=hs.SERVICE_IP,
                           dst_mac=hs.SERVICE_MAC)
        n = len(self.unsolicited)
        walk = self.send(src, frame)
        for _, host, f in [("", *x) for x in walk.delivered] + self.unsolicited[n:]:
            from ryu_apps.simswitch.wire import udp_payload

            data = udp_payload(f) if host == src else None
            if data and data.startswith(hs.MAGIC):
                msg = hs.decode(data)
                if msg.nonce == nonce:
                    return walk, msg, self._answered_at.get(nonce)
        return walk, None, None

    # ----- reading the switches ------------------------------------------------------------------------
    def table(self, sw: str) -> list:
        """What a switch holds: its flow entries (``ryu_apps.openflow.intents.Flow``), every table."""
        return self.switches[sw].tables.flows()

    def sent(self, sw: str, mtype: int) -> int:
        """How many messages of type ``mtype`` the controller sent ``sw``."""
        return sum(1 for _, t in self.conns[sw].log if t == mtype)
