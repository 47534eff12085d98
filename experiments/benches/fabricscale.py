"""``freeway bench fabric-scale``: the controller process against a whole fabric's switches emulated at
the socket (issue 41), as ONOS's cbench and null providers test a controller.

One real OpenFlow 1.3 connection per switch of a described fabric, against the real ``freeway
controller`` process started as a user starts it. Each connection is a message-level simulated switch
(``ryu_apps.simswitch``): it answers as Open vSwitch does (features, port descriptions, barriers, echo,
role requests, multipart reads of what it holds) and keeps its tables by applying the very messages it
receives. A packet-out a switch sends out of a fabric port arrives at the peer switch, goes through the
peer's tables and, if they send it to the controller (the LLDP link check's probes), comes back as a
packet-in: the controller sees the links it would see. A packet-out to a host is counted and dropped.

The generator runs in its own process (an asyncio loop), so the controller's cost is what is measured.
Once every switch is programmed (the controller's ``freeway_switches_connected`` equals the fabric's
switches and no message came for a quiet second), the program is checked by walking packets through the
emulated tables: ToR to ToR for every pair (or a sample), and every host from a ToR of another pod.
Then the controller is killed (SIGKILL) and started again: every switch must be read back with no change
sent. Last, the steady state (``fabricload``): the switches' sFlow agents export every port's counters and
the flow samples of a synthetic load on the active ToR pairs to the controller's collector (its port map
read from a real ``ovsdb-server`` holding the emulated bridges), first at the product's defaults and then at
what the controller sustains, and hosts announce elephants at 100 a second meanwhile.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import json
import os
import random
import struct
import threading
import time
import urllib.request
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from experiments.testing.simnet import stop_loop
from monitoring.sflow import FiveTuple
from ryu_apps.openflow.framework import ofproto as ofp
from ryu_apps.simswitch.fabric import SimFabric
from ryu_apps.simswitch.wire import HEADER, messages
from topology.fabric import Fabric

HELLO = HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_HELLO, HEADER.size, 0)
CHANGES = {ofp.OFPT_FLOW_MOD, ofp.OFPT_GROUP_MOD, ofp.OFPT_METER_MOD}
# what programming a switch (or reading it back) is made of; echo, LLDP probes and the like are not
PROGRAM = CHANGES | {ofp.OFPT_BARRIER_REQUEST, ofp.OFPT_MULTIPART_REQUEST, ofp.OFPT_ROLE_REQUEST,
                     ofp.OFPT_FEATURES_REQUEST}
ofp_names = {v: k[5:].lower() for k, v in vars(ofp).items() if k.startswith("OFPT_") and isinstance(v, int)}
QUIET_S = 1.0  # programmed: every switch counted by the controller and no programming message for this long
# a link change's answer is over when no change came for this long: at k=48 the first switches' changes
# came a second before the rest (1 s ended one measurement at 25 of 1,248 switches)
LINK_QUIET_S = 3.0


def packet_in(in_port: int, data: bytes, table_id: int = 0, cookie: int = 0, reason: int = ofp.OFPR_ACTION) -> bytes:
    """An OFPT_PACKET_IN as a switch sends it: the whole frame (no buffer), the in_port in its match."""
    match = struct.pack("!HHII", ofp.OFPMT_OXM, 12, (0x8000 << 16) | (ofp.OFPXMT_OFB_IN_PORT << 9) | 4, in_port)
    body = struct.pack("!IHBBQ", ofp.OFP_NO_BUFFER, len(data), reason, table_id, cookie) + match + b"\0" * 4 + b"\0\0"
    return HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_PACKET_IN, HEADER.size + len(body) + len(data), 0) + body + data


@dataclass
class Conn:
    """What one switch's connections saw."""

    connects: int = 0
    messages: int = 0
    changes: int = 0  # flow, group and meter mods
    barriers: int = 0
    last_program: float = 0.0  # when the last programming message (PROGRAM) came
    last_change: float = 0.0  # when the last change (CHANGES) was applied
    last_kind: int = -1  # the type of the last programming message
    errors: int = 0
    drops: Counter = field(default_factory=Counter)  # why its connections ended: "closed by the controller", an error
    writer: object = None
    marks: dict = field(default_factory=dict)  # label -> (messages, changes) when mark() was called


class Emulator:
    """Every switch of ``fabric`` as an OpenFlow connection to ``address``, in an asyncio loop of its own
    thread (``start``/``stop``); ``sim`` holds their tables."""

    def __init__(self, fabric: Fabric, address: tuple[str, int]):
        self.fabric, self.address = fabric, address
        self.sim = SimFabric(fabric, None)
        self.conns = {sw: Conn() for sw in fabric.switches}
        self.to_hosts = 0  # packet-outs that left by a host port
        self.loop = asyncio.new_event_loop()
        self.running = True
        self.work: deque = deque()  # (switch, its connection's writer, messages, when read) in arrival order
        self.ready = asyncio.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.faults: Counter = Counter()  # messages the simulated switches failed on (a bug of theirs), by error
        self.first_change: float | None = None  # when the first change came after the last ``port_event``
        self.ovsdb = None  # the switches' OVSDB (fabricload.EmulatedOVSDB), when sFlow is emulated
        self.asked: dict[int, float] = {}  # handshake nonce -> when its announce reached the ToR
        self.answers: dict[int, tuple[str, float]] = {}  # nonce -> ("ack" or "nack", when the host got the answer)
        # while a measurement runs: (when, how long) messages read from the controller waited in ``work`` for the
        # simulated switches (one core's, in turn) before they were applied; None otherwise
        self.waits: list | None = None

    def start(self) -> Emulator:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._apply(), self.loop)
        for sw in self.fabric.switches:
            asyncio.run_coroutine_threadsafe(self._switch(sw), self.loop)
        return self

    def stop(self) -> None:
        self.running = False
        if not self.thread.is_alive():  # never started (the controller failed first): nothing to close
            return
        stop_loop(self.loop, self.thread, self.conns.values())

    def mark(self, label: str) -> None:
        for c in self.conns.values():
            c.marks[label] = (c.messages, c.changes)

    def since(self, label: str) -> tuple[int, int]:
        """Messages and changes every switch was sent since ``mark(label)``."""
        return (sum(c.messages - c.marks[label][0] for c in self.conns.values()),
                sum(c.changes - c.marks[label][1] for c in self.conns.values()))

    def connected(self) -> int:
        return sum(1 for c in self.conns.values() if c.writer is not None)

    def drops(self) -> dict[str, int]:
        """Why connections ended while the emulator ran, and how often."""
        return dict(sum((c.drops for c in self.conns.values()), Counter()))

    async def _switch(self, sw: str) -> None:
        """Connect, read, and connect again when the controller goes (as Open vSwitch does, 1 s apart).
        Reading only answers echo requests; the rest goes to the one queue ``_apply`` works through."""
        c = self.conns[sw]
        while self.running:
            try:
                reader, writer = await asyncio.open_connection(*self.address, limit=1 << 22)
            except OSError:
                await asyncio.sleep(1.0)
                continue
            c.connects += 1
            c.writer = writer
            writer.write(HELLO)
            buf = b""
            try:
                while self.running:
                    data = await reader.read(1 << 20)
                    if not data:
                        c.drops["closed by the controller"] += self.running
                        break
                    msgs, buf = messages(buf + data)
                    # a real switch's liveness does not wait on the work of the whole fabric's switches
                    # (here one core's): echo is answered as it arrives, the rest is applied in order
                    echoes = [m for m in msgs if m[1] == ofp.OFPT_ECHO_REQUEST]
                    if echoes:
                        writer.write(b"".join(self.sim.switches[sw].receive(m)[0][0] for m in echoes))
                        c.messages += len(echoes)
                    rest = [m for m in msgs if m[1] != ofp.OFPT_ECHO_REQUEST]
                    if rest:
                        self.work.append((sw, writer, rest, time.monotonic()))
                        self.ready.set()
            except Exception as e:  # (any: a reader that died silently left its connection open and unread)
                c.drops[f"{type(e).__name__}: {e}"[:120]] += self.running
            c.writer = None
            writer.close()
            await asyncio.sleep(1.0)

    async def _apply(self) -> None:
        """Every switch's messages in the order they arrived, through its simulated tables; replies go back
        on the connection they came by (none if it has ended). Yields every few milliseconds so that the
        readers keep answering echo."""
        budget = 0.005
        while self.running:
            if not self.work:
                self.ready.clear()
                await self.ready.wait()
                continue
            t = time.monotonic()
            while self.work and time.monotonic() - t < budget:
                sw, writer, msgs, came = self.work.popleft()
                c, me = self.conns[sw], self.sim.switches[sw]
                out = []
                if len(msgs) > 64:  # a megabyte read at once is thousands of messages: the rest waits its
                    self.work.appendleft((sw, writer, msgs[64:], came))  # turn, so that the readers keep reading
                    msgs = msgs[:64]
                w = self.waits  # (once: the measuring thread may end it meanwhile)
                if w is not None:
                    w.append((came, time.monotonic() - came))
                for m in msgs:
                    mtype = m[1]
                    c.messages += 1
                    c.changes += mtype in CHANGES
                    c.barriers += mtype == ofp.OFPT_BARRIER_REQUEST
                    if mtype in PROGRAM:
                        c.last_program, c.last_kind = time.monotonic(), mtype
                        if mtype in CHANGES:
                            c.last_change = c.last_program
                            if self.first_change is None:
                                self.first_change = c.last_change
                    try:
                        replies, sent = me.receive(m)
                    except Exception as e:  # the simulated switch's own fault: counted, the queue goes on
                        self.faults[f"{type(e).__name__}: {e}"[:120]] += 1
                        continue
                    c.errors += sum(1 for r in replies if r[1] == ofp.OFPT_ERROR)
                    out += replies
                    for o, frame in sent:
                        self._deliver(sw, o, frame)
                if out and c.writer is writer:
                    writer.write(b"".join(out))
            await asyncio.sleep(0)

    def port_event(self, a: str, b: str, up: bool) -> None:
        """The link a-b goes down (or up) at both ends: each switch notes it and tells the controller."""

        async def tell():
            self.first_change = None
            for sw, n in ((a, b), (b, a)):
                msg = self.sim.switches[sw].port_status(self.fabric.port_to(sw, n), up)
                if self.conns[sw].writer is not None:
                    self.conns[sw].writer.write(msg)

        asyncio.run_coroutine_threadsafe(tell(), self.loop).result(10)

    def _deliver(self, sw: str, o, frame: bytes) -> None:
        """A packet-out's frame arrives at the peer of the port it left by: a switch runs it through its
        tables (to the controller: a packet-in on that switch's connection); a host gets it (counted)."""
        from ryu_apps.simswitch.wire import frame_fields

        if not isinstance(o.port, int):
            return
        peer = self.fabric.peer(sw, o.port)
        if peer is None:
            return
        if peer[0] not in self.fabric.switches:
            self.to_hosts += 1
            self._answered(frame)
            return
        them = self.sim.switches[peer[0]]
        pkt = {**frame_fields(frame), "in_port": peer[1]}
        for out in them.tables.process(pkt):
            w = self.conns[peer[0]].writer
            if out.port == "controller" and w is not None:
                w.write(packet_in(peer[1], frame, cookie=out.cookie))


    def _answered(self, frame: bytes) -> None:
        """A frame for a host: if it answers an announce, when."""
        from ryu_apps.host import handshake as hs
        from ryu_apps.simswitch.wire import udp_payload

        data = udp_payload(frame)
        if not data or not data.startswith(hs.MAGIC):
            return
        try:
            msg = hs.decode(data)
        except hs.HandshakeError:
            return
        if msg.nonce in self.asked and msg.nonce not in self.answers:
            self.answers[msg.nonce] = ("nack" if isinstance(msg, hs.Nack) else "ack", time.monotonic())

    def _announce(self, src, dst, nonce: int, sport: int, rate_kbps: int) -> None:
        """Host ``src`` announces an elephant to ``dst``: the UDP datagram goes through its ToR's tables and,
        as they send it to the controller, arrives there as a packet-in on the ToR's connection."""
        from ryu_apps.host import handshake as hs
        from ryu_apps.simswitch.fabric import frame as make_frame
        from ryu_apps.simswitch.wire import frame_fields

        ann = hs.encode(hs.Announce(nonce, 50_000_000, rate_kbps, (hs.Subflow(src.ip, dst.ip, 6, sport, 5001),)))
        data = make_frame({"ipv4_src": src.ip, "ipv4_dst": hs.SERVICE_IP, "ip_proto": 17, "udp_src": sport,
                           "udp_dst": hs.SERVICE_PORT}, src.mac, hs.SERVICE_MAC, ann)
        self.asked[nonce] = time.monotonic()
        w = self.conns[src.switch].writer
        for out in self.sim.switches[src.switch].tables.process({**frame_fields(data), "in_port": src.port}):
            if out.port == "controller" and w is not None:
                w.write(packet_in(src.port, data, cookie=out.cookie))

    def handshakes(self, pairs: list, rate: float, seconds: float, rate_kbps: int = 2000, wait_s: float = 3.0) -> dict:
        """Hosts announce elephants (one per (src, dst) of ``pairs``, in turn) at ``rate`` a second for
        ``seconds``; each answer timed from the announce reaching the ToR to the answer leaving the ToR for
        the host (the controller's placement, the path installed and confirmed, the ACK)."""
        n = int(rate * seconds)
        first = len(self.asked)
        nonces = [(1 << 40) + first + i for i in range(n)]

        async def send():
            t0 = time.monotonic()
            for i, nonce in enumerate(nonces):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                src, dst = pairs[(first + i) % len(pairs)]
                self._announce(src, dst, nonce, 20000 + (first + i) % 40000, rate_kbps)

        self.waits = []
        with _GeneratorStalls(self.loop) as stalls:
            asyncio.run_coroutine_threadsafe(send(), self.loop).result(seconds + 60)
            time.sleep(wait_s)
        w, self.waits = self.waits, None
        waits = sorted(list(w))  # (a copy: the loop's thread may still append one it was applying)
        lat = sorted((self.answers[x][1] - self.asked[x]) * 1000 for x in nonces if x in self.answers)
        kinds = [self.answers[x][0] for x in nonces if x in self.answers]

        def pct(q):  # (the one percentile: nearest rank, experiments.analysis.stats)
            from experiments.analysis.stats import percentile

            v = percentile(lat, 100 * q)
            return None if v is None else round(v, 2)

        start = min((self.asked[x] for x in nonces if x in self.asked), default=0.0)
        slowest = sorted(((self.answers[x][1] - self.asked[x]) * 1000, self.asked[x] - start, x) for x in nonces
                         if x in self.answers)[-10:]
        came = [w[0] for w in waits]  # for each answer, the longest wait of what was read while it was under way

        def waited(x) -> float:
            lo, hi = bisect.bisect_left(came, self.asked[x]), bisect.bisect_right(came, self.answers[x][1])
            return round(1000 * max((w[1] for w in waits[lo:hi]), default=0.0), 1)

        queue = sorted(w[1] for w in waits)
        return {"rate_per_s": rate, "sent": n, "acks": kinds.count("ack"), "nacks": kinds.count("nack"),
                "unanswered": n - len(lat), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "max_ms": round(lat[-1], 2) if lat else None,
                # when the slowest ten reached their ToR (s into the window) and how long they took: a tail that
                # comes at once is one stall of the controller's loop or the generator's, one spread out is load
                "slowest": [{"at_s": round(at, 3), "ms": round(ms, 2), "generator_queue_ms": waited(x)}
                            for ms, at, x in reversed(slowest)],
                # how long what the controller sent waited for the emulated switches, which apply it in turn on
                # one core (a real fabric's switches each have their own): the generator's part of an answer
                "generator_queue_ms": {"p50": _ms(queue, 50), "p99": _ms(queue, 99),
                                       "max": round(1000 * queue[-1], 1) if queue else None},
                # the generator's own: its loop woken late, its collector's pauses (s into the window, ms)
                "generator_stalls": stalls.report(start)}


def _ms(xs: list[float], q: float) -> float | None:
    from experiments.analysis.stats import percentile

    v = percentile(xs, q)
    return None if v is None else round(1000 * v, 1)


class _GeneratorStalls:
    """While a measurement runs, the generator's own holds: its asyncio loop woken more than ``LATE_S`` late
    (a probe every 10 ms) and its cyclic collector's pauses over ``LATE_S``; each with when it began. An
    answer timed by the generator is late by as much as either, whatever the controller did. Its cyclic
    collector is off meanwhile (what the window left is collected after it): with the heap frozen once the
    fabric was programmed (27. in docs/lab/benchmarks-history.md), a generation-1 collection of what the handshakes and
    the emulated switches' new entries built still held the generator 96-237 ms once in a 10 s window, and
    every answer under way waited as long (k=48, 2026-11-27)."""
    LATE_S = 0.02

    def __init__(self, loop):
        self.loop, self.late, self.pauses, self._gc_at, self._stop = loop, [], [], None, False
        self._collecting = True

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_at = time.monotonic()
        elif self._gc_at is not None:  # (a stop whose start came before this was registered: not timed)
            if time.monotonic() - self._gc_at >= self.LATE_S:
                self.pauses.append((self._gc_at, time.monotonic() - self._gc_at, info["generation"]))
            self._gc_at = None

    async def _probe(self) -> None:
        while not self._stop:
            t = time.monotonic()
            await asyncio.sleep(0.01)
            if time.monotonic() - t - 0.01 >= self.LATE_S:
                self.late.append((t, time.monotonic() - t - 0.01))

    def __enter__(self):
        gc.callbacks.append(self._gc)
        self._collecting = gc.isenabled()
        gc.disable()
        self._task = asyncio.run_coroutine_threadsafe(self._probe(), self.loop)
        return self

    def __exit__(self, *exc) -> None:
        self._stop = True
        gc.callbacks.remove(self._gc)  # (first: the collection put off until now is not the window's)
        if self._collecting:
            gc.enable()
        try:
            self._task.result(5)
        except Exception:  # (the probe's own end must not hide what the measurement raised)
            if exc[0] is None:
                raise

    def report(self, start: float) -> dict:
        return {"loop_late": [{"at_s": round(t - start, 3), "ms": round(1000 * d, 1)} for t, d in self.late],
                "gc_pauses": [{"at_s": round(t - start, 3), "ms": round(1000 * d, 1), "generation": g}
                              for t, d, g in self.pauses]}


SETTLE_S = 90.0  # the longest the handshakes wait for the levels before them to leave nothing behind


def _get(url: str, timeout: float = 10.0) -> tuple[bytes, float]:
    t = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = r.read()
    return body, time.monotonic() - t


def _switches_connected(api: str) -> int:
    """The controller's count of switches connected and programmed (its status document: polling
    ``/metrics`` four times a second took a third of the controller's time at k=32)."""
    try:
        body, _ = _get(f"http://{api}/api/v1/status", timeout=5)
        return int(json.loads(body)["switches_connected"])
    except (OSError, ValueError, KeyError):
        return -1


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_programmed(em: Emulator, api: str, timeout: float, t0: float, progress=print) -> float | None:
    """Seconds from ``t0`` to the last programming message, once the controller counts every switch and
    none came for QUIET_S; None when ``timeout`` passes first."""
    n = len(em.fabric.switches)
    last_print = asked = 0.0
    counted = -1
    while time.monotonic() - t0 < timeout:
        time.sleep(0.25)
        now = time.monotonic()
        if now - asked >= 1.0:  # the controller is asked once a second
            counted, asked = _switches_connected(api), now
        last = max(c.last_program for c in em.conns.values())
        if now - last_print >= 5:
            last_print = now
            drops = em.drops()
            progress(f"[fabric-scale] {now - t0:5.1f} s: {em.connected()}/{n} connected, {counted} programmed "
                     f"(controller's count), {sum(c.messages for c in em.conns.values())} messages"
                     + (f"; connections ended: {drops}" if drops else ""))
        if counted == n and last > t0 and now - last >= QUIET_S:
            return last - t0
    return None


def link_event(em: Emulator, a: str, b: str, up: bool, timeout: float = 60.0) -> dict:
    """Cut (or restore) one link and time the controller's answer: from the port-status messages to
    the last change the switches applied, once none came for LINK_QUIET_S; which switches were changed."""
    label = f"{a}-{b}-{'up' if up else 'down'}"
    em.mark(label)
    before = {sw: c.changes for sw, c in em.conns.items()}
    t = time.monotonic()
    em.port_event(a, b, up)
    last = None
    while time.monotonic() - t < timeout:
        time.sleep(0.05)
        changed = [c.last_program for sw, c in em.conns.items() if c.changes > before[sw]]
        last = max(changed) if changed else None
        if last is not None and time.monotonic() - last >= LINK_QUIET_S:
            break
    msgs, changes = em.since(label)
    touched = [c for sw, c in em.conns.items() if c.changes > before[sw]]
    last_change = max((c.last_change for c in touched), default=None)
    late = Counter(ofp_names.get(c.last_kind, str(c.last_kind)) for c in touched if c.last_program > c.last_change)
    # "s": to the last change applied; "last_message_s": to the last programming message of any kind
    # (a barrier, a read) that the same switches got before the quiet time, and of which kinds
    first = em.first_change
    spread = sorted((c.last_change - t, sw) for sw, c in em.conns.items() if c.changes > before[sw])
    return {"slowest_switches": [[sw, round(x, 3)] for x, sw in spread[-3:]],
            "median_switch_s": round(spread[len(spread) // 2][0], 3) if spread else None,
            "link": f"{a}-{b}", "up": up, "s": None if last_change is None else round(last_change - t, 3),
            # the controller's answer began (the first change reached a switch) and took this long to spread
            "first_change_s": None if first is None else round(first - t, 3),
            "last_message_s": None if last is None else round(last - t, 3), "later_messages": dict(late),
            "changes": changes, "messages": msgs, "switches_changed": len(touched)}


def _settle_generator() -> None:
    """The generator's own heap once the fabric is programmed (at k=48 millions of objects: every emulated
    switch's tables) frozen out of the cyclic collector, as the controller freezes its own: a collection of
    it held the generator's loop about a second, and the measurement with it (a link cut's last switch
    reprogrammed 1.6-2.2 s after the ports went down in some cuts, 0.73-0.93 s in the others)."""
    from ryu_apps.launcher import tune_gc

    tune_gc()


def _cut_links(fabric, n: int) -> list[tuple[str, str]]:
    """``n`` aggregation-core links to cut in turn: the first aggregation switch's first uplink, then the
    next pods' (a leaf-spine: the next leaves'), each through a further uplink, so that each cut moves
    other ToRs' low-latency paths."""
    mids = [sw for sw in fabric.switches if fabric.up_neighbors(sw) and fabric.down_neighbors(sw)]
    if not mids:  # a leaf-spine: leaf-spine links
        mids = [sw for sw in fabric.switches if fabric.up_neighbors(sw)]
    by_pod: dict = {}
    for sw in mids:
        by_pod.setdefault(fabric.switches[sw].pod, sw)
    firsts = list(by_pod.values()) if len(by_pod) > 1 else mids
    out: list[tuple[str, str]] = []
    for i in range(n * len(firsts)):  # (each link once: once the switches come round again, the next uplinks)
        sw = firsts[i % len(firsts)]
        ups = fabric.up_neighbors(sw)
        ln = (sw, ups[(i + i // len(firsts)) % len(ups)])
        if ln not in out:
            out.append(ln)
        if len(out) == n:
            break
    return out


def fabric_hold_down_s() -> float:
    """How long a restored link waits before it is used again (the controller's default), and a second."""
    from ryu_apps.config import Config

    return Config.__dataclass_fields__["link_hold_down_s"].default + 1.0


def walk(em: Emulator, pairs: int, seed: int) -> dict:
    """ToR to ToR (every pair, or ``pairs`` of them drawn with ``seed``), and every host from its own ToR
    (from another pod's when it is alone there), through the emulated tables."""
    f = em.fabric
    rng = random.Random(seed)
    first = {}
    for h in f.hosts:
        first.setdefault(h.switch, h)
    tors = sorted(first)
    all_pairs = [(a, b) for a in tors for b in tors if a != b]
    chosen = all_pairs if pairs <= 0 or pairs >= len(all_pairs) else rng.sample(all_pairs, pairs)
    bad = []
    for n, (a, b) in enumerate(chosen):
        src, dst = first[a], first[b]
        t = em.sim.send(src.name, FiveTuple(src.ip, dst.ip, 6, 40000 + n % 20000, 5001))
        if t.delivered_to != dst.name:
            bad.append(f"{src.name}->{dst.name}: {t.dropped or t.delivered_to}")
    hosts_bad = []
    on: dict[str, list] = {}
    for h in f.hosts:
        on.setdefault(h.switch, []).append(h)
    for n, h in enumerate(f.hosts):  # from its own ToR (a neighbour's packet; the pairs above cross the fabric)
        mates = [x for x in on[h.switch] if x is not h]
        src = mates[0] if mates else first[next(s for s in tors if s != h.switch and not _same_pod(f, s, h.switch))]
        t = em.sim.send(src.name, FiveTuple(src.ip, h.ip, 6, 30000 + n % 20000, 5001))
        if t.delivered_to != h.name:
            hosts_bad.append(f"{src.name}->{h.name}: {t.dropped or t.delivered_to}")
    return {"tor_pairs": len(all_pairs), "tor_pairs_walked": len(chosen), "tor_pairs_failed": len(bad),
            "hosts": len(f.hosts), "hosts_failed": len(hosts_bad), "failures": (bad + hosts_bad)[:20]}


def _same_pod(f: Fabric, a: str, b: str) -> bool:
    pa, pb = f.switches[a].pod, f.switches[b].pod
    return pa == pb


def steady_state(em: Emulator, ctl, api: str, d: Path, pairs: int, seed: int, seconds: float,
                 handshake_rate: float, handshake_s: float, progress=print, levels=None, probe_gap_s: float = 2.0,
                 handshake_level: tuple[float, int] | None = None) -> dict:
    """sFlow from every port over a synthetic load on ``pairs`` active ToR pairs (``fabricload.ladder``: the
    product's defaults, then what the controller sustains), then hosts announcing elephants at
    ``handshake_rate`` a second while the sustained sFlow load goes on."""
    from experiments.benches import fabricload

    t = time.monotonic()
    load = fabricload.Load(em.fabric, em.sim, em.ovsdb.ifindex, pairs=pairs, seed=seed)
    out: dict = {"active_pairs": len(load.pairs), "flows": load.flows, "flows_unrouted": load.unrouted,
                 "ports": len(load.ports), "sample_streams": len(load.streams),
                 "load": "per pair: one elephant at 20% of the access rate, 4 mice at 1% each",
                 "load_build_s": round(time.monotonic() - t, 2)}
    progress(f"[fabric-scale] steady state: {out['active_pairs']} active ToR pairs, {out['flows']} flows over "
             f"{out['ports']} ports ({out['sample_streams']} sampled streams)")
    out.update(fabricload.ladder(api, ctl.sflow_port, load, d, seconds, progress, levels))
    interval, sampling = out["shortest_counter_interval_s"], out["densest_sampling"]
    if handshake_rate > 0:
        if handshake_level:  # a fixed level, so that two runs time their handshakes under the same load
            hs_interval, hs_sampling = handshake_level
            tried = [lv for lv in out.get("levels", []) if lv.get("counter_interval_s") == hs_interval
                     and (lv.get("sampling") or 0) == hs_sampling]
            kept_up = bool(tried) and all(lv.get("sustained") for lv in tried)
            why = " (a level the controller did not keep up with)" if tried else " (a level the ladder did not try)"
        else:
            hs_interval, hs_sampling, kept_up = fabricload.handshake_level(out)
            why = " (a level the controller did not keep up with: the lightest tried)"
        hs_pairs = [(a, b) for a, b in load.hosts]
        quiet = settle(api, backlog=lambda: len(em.work))
        # every port's counters have come twice (a reading is a delta) and a period has seen them: settling left the
        # links unmeasured for longer than the policy's STALE_S, so until then they are stale, and an announce is
        # refused as placed on a load nobody knows (92 of 1,000 were, 2026-12-02, when this was one interval + 1 s)
        warm = 2 * (hs_interval or 1.0) + 1.0

        def during() -> dict:
            time.sleep(warm)  # the steady load, not its first datagrams
            return em.handshakes(hs_pairs, handshake_rate, handshake_s)

        r = fabricload.level(api, ctl.sflow_port, load, d, hs_interval, hs_sampling, handshake_s + 4.0 + warm,
                             during=during)
        out["handshake"] = {**r.pop("during"), "settled": quiet, "warm_up_s": warm, "under": r,
                            "under_a_level_kept_up": kept_up}
        hs_ = out["handshake"]
        progress(f"[fabric-scale] handshakes at {handshake_rate:g}/s under counters every {hs_interval:g} s"
                 + (f" and flow samples 1-in-{hs_sampling}" if hs_sampling else "")
                 + ("" if kept_up else why)
                 + f": {hs_['acks']} of {hs_['sent']} ACKed, "
                 f"{hs_['nacks']} NACKed, {hs_['unanswered']} unanswered; answered p50/p99 {hs_['p50_ms']}/"
                 f"{hs_['p99_ms']} ms (max {hs_['max_ms']} ms); in the controller (packet-in to answer) p50/p99 "
                 f"{r['controller_handshake_p50_ms']}/{r['controller_handshake_p99_ms']} ms, the switches' "
                 f"confirmation p99 {r['install_confirm_p99_ms']} ms; period p50 {r['period_p50_ms']} ms meanwhile")
    if interval and sampling:
        out["detection"] = detect(api, em, ctl, load, d, interval, sampling, gap_s=probe_gap_s, seed=seed,
                                  progress=progress)
    workers = _status(api).get("sflow_workers")
    if workers and workers["workers"]:
        out["worker_killed"] = kill_worker(api, ctl, load, d, interval or 1.0, sampling or 0, progress)
    return out


class _WithProbes:
    """A load with probe streams added to the agents' spec."""

    def __init__(self, load, streams: list):
        self.load, self.streams = load, streams
        self.ports = load.ports

    def spec(self, *args, **kwargs) -> dict:
        spec = self.load.spec(*args, **kwargs)
        return {**spec, "streams": spec["streams"] + self.streams}


def detect(api: str, em: Emulator, ctl, load, d: Path, interval: float, sampling: int, n: int = 10,
           gap_s: float = 2.0, share: float = 0.9, seed: int = 1, progress=print) -> dict:
    """Unannounced elephants found by sampling under the sustained load: ``n`` flows, each from a host to one
    of another pod at ``share`` of its access rate, begin ``gap_s`` apart (as a lone TCP flow fills its host's
    link), walked through the emulated tables for the switches that sample them; each one's time from its
    first packet to the controller's placement of it (the ``adopted`` placement in its decision log, once the
    switches confirmed its path) (issue 63: the median within 2 s)."""
    from experiments.benches import fabricload

    rng = random.Random(seed + 7)
    fabric, ifindex = em.fabric, em.ovsdb.ifindex
    hosts = list(fabric.hosts)
    warm = interval + 1.0
    streams, probes = [], []
    while len(probes) < n:
        a, b = rng.sample(hosts, 2)
        if fabric.switches[a.switch].pod == fabric.switches[b.switch].pod:
            continue
        flow = FiveTuple(a.ip, b.ip, 6, 61000 + len(probes), 5002)
        t = em.sim.send(a.name, flow)
        if t.delivered_to != b.name:
            continue
        start = warm + len(probes) * gap_s
        bps = share * fabric.host_rate_bps(a.ip)
        for hop in t.hops:
            streams.append([ifindex[(hop.switch, hop.in_port)], ifindex[(hop.switch, hop.out_port)], flow.src,
                            flow.dst, flow.sport, flow.dport, bps, start])
        probes.append((flow, start, len(t.hops)))
    seconds = warm + n * gap_s + 4.0
    placed: dict = {}
    found: dict = {}  # when each was first listed in /api/v1/elephants (detected, placed or not)
    missed = [0]

    def during() -> None:  # the placements as they come (the log keeps the latest 2,000: the load's own
        since = _status(api)["decisions"]  # elephants, adopted again at each level, would push them out)
        end = time.monotonic() + seconds + 2.0
        while time.monotonic() < end:
            body, _ = _get(f"http://{api}/api/v1/decisions?type=placement&since={since}&limit=1000", timeout=30)
            page = json.loads(body)
            missed[0] += page.get("missed", 0)
            for rec in page["decisions"]:
                for f in rec.get("flows", ()):
                    if rec.get("how") == "adopted" and f.get("sport", 0) >= 61000:
                        placed.setdefault((f.get("src"), f.get("sport")), rec["time"])
            since = page["next"]
            if len(page["decisions"]) < 1000:
                body, _ = _get(f"http://{api}/api/v1/elephants", timeout=30)
                now = time.time()
                for el in json.loads(body).get("elephants", []):
                    for f in el.get("flows", ()):
                        if f.get("sport", 0) >= 61000:
                            found.setdefault((f.get("src"), f.get("sport")), now)
                time.sleep(0.3)

    r = fabricload.level(api, ctl.sflow_port, _WithProbes(load, streams), d, interval, sampling, seconds,
                         during=during)
    r.pop("during", None)
    t0 = r["sent"]["t0_wall"]
    times = []
    rows = []
    for flow, start, hops in probes:
        at, seen = placed.get((flow.src, flow.sport)), found.get((flow.src, flow.sport))
        s_ = None if at is None else round(at - (t0 + start), 3)
        first = r["sent"].get("first_sample_wall", {}).get(str(flow.sport))  # (JSON keys are strings)
        rows.append({"flow": str(flow), "switches": hops, "placed_after_s": s_,
                     "listed_after_s": None if seen is None else round(seen - (t0 + start), 3),
                     # from its first sample as the agents took it (they run behind their schedule when the
                     # machine is short of time: what the controller took, the agents' hold included)
                     "placed_after_first_sample_s": None if at is None or first is None else round(at - first, 3)})
        if s_ is not None:
            times.append(s_)
    times.sort()
    listed = sorted(r["listed_after_s"] for r in rows if r["listed_after_s"] is not None)
    taken = sorted(r["placed_after_first_sample_s"] for r in rows if r["placed_after_first_sample_s"] is not None)
    out = {"after_first_sample_median_s": taken[len(taken) // 2] if len(taken) == n else None,
           "listed": len(listed), "listed_median_s": listed[len(listed) // 2] if len(listed) == n else None,
           "listed_note": "first seen in /api/v1/elephants (polled every 0.3 s or so): detected, placed or not",
           "probes": rows, "share_of_access_rate": share, "placed": len(times), "of": n, "log_missed": missed[0],
           "median_s": times[len(times) // 2] if len(times) == n else None, "max_s": times[-1] if times else None,
           "level": {k: v for k, v in r.items() if k not in ("gc",)}}
    progress(f"[fabric-scale] {n} unannounced elephants under counters every {interval:g} s, flow samples "
             f"1-in-{sampling}: {len(times)} placed, after {times} s (median {out['median_s']} s); {len(listed)} listed "
             f"(median {out['listed_median_s']} s); from each one's first sample taken: median "
             f"{out['after_first_sample_median_s']} s; the level lost "
             f"{100 * r['lost_share']:.1f}%")
    return out


def _status(api: str) -> dict:
    body, _ = _get(f"http://{api}/api/v1/status", timeout=10)
    return json.loads(body)


WATCH_MORE_S = 2.5  # a killed worker's links are watched this much longer when not yet all measured again (to
# half a second before the level's end: at k=48 they took longer than the 6 s watched before, 2026-12-02)


def kill_worker(api: str, ctl, load, d: Path, interval: float, sampling: int, progress=print) -> dict:
    """An sFlow worker SIGKILLed while the agents send (at the sustained level): how soon the controller sees
    it gone and its links stale, how soon a new worker runs and they are measured again, and what the level
    lost meanwhile (issue 63)."""
    import os
    import signal

    from experiments.benches import fabricload

    seconds = max(6.0, 4 * interval)
    seen: dict = {}

    def during() -> dict:
        time.sleep(min(2.0, interval + 0.5))
        before = _status(api)["sflow_workers"]
        pid = next(p for p in before["pids"] if p)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        while time.monotonic() - t0 < (seconds if "measured_again_s" in seen else seconds + WATCH_MORE_S):
            st = _status(api)["sflow_workers"]
            t = round(time.monotonic() - t0, 3)
            if (st["alive"] < before["alive"] or st["restarts"] > before["restarts"]) and "gone_s" not in seen:
                seen["gone_s"] = t
            seen["stale_links_max"] = max(seen.get("stale_links_max", 0), st["stale_links"])
            if st["restarts"] > before["restarts"] and st["ready"] == st["workers"] and "restarted_s" not in seen:
                seen["restarted_s"] = t
            if "restarted_s" in seen and st["stale_links"] == 0 and "measured_again_s" not in seen:
                seen["measured_again_s"] = t
            time.sleep(0.1)
        return {"pid": pid, "restarts_before": before["restarts"], **seen}

    r = fabricload.level(api, ctl.sflow_port, load, d, interval, sampling, seconds + 3.0, during=during)
    out = {**r.pop("during"), "level": r, "status_after": _status(api)["sflow_workers"]}
    again = out.get("measured_again_s")
    progress(f"[fabric-scale] an sFlow worker killed (pid {out['pid']}): seen gone in {out.get('gone_s')} s, "
             f"{out.get('stale_links_max')} links stale, a new one ready in {out.get('restarted_s')} s, "
             + (f"every link measured again in {again} s" if again is not None else
                f"links still stale {seconds + WATCH_MORE_S:.0f} s after the kill")
             + f"; the level lost {100 * r['lost_share']:.1f}%")
    return out


def settle(api: str, timeout: float = SETTLE_S, backlog=None) -> dict:
    """Wait until the levels before have stopped changing the controller: its count of elephants the same
    three times a second apart (the backlog of datagrams the flow-sampled levels left is read, and what they
    adopted that is no longer sampled has ended after the estimator's ``idle_s``), and, with ``backlog``
    (what the emulated switches have still to apply), nothing left to apply at each of those reads; or
    ``timeout`` (``settled`` false; a count the API did not give is None). The handshakes at k=32 began on
    that aftermath once (2,514 elephants, 7.8% of datagrams lost in their own window, p99 6.2 s), and once
    while the generator, one core for 1,280 switches, still applied the group mods of the partition's
    changes after the level before (its queue 6.7 s at the window's start, p99 3.7 s, 2026-11-27 23:39): a
    measurement of the levels before, or of the generator, not of the handshakes."""
    import http.client

    t = time.monotonic()
    seen: list[int | None] = []
    queued: list[int] = []
    settled = False
    while not settled and time.monotonic() - t < timeout:
        try:
            left = max(1.0, min(10.0, timeout - (time.monotonic() - t)))
            seen.append(int(json.loads(_get(f"http://{api}/api/v1/status", timeout=left)[0])["elephants"]))
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            seen.append(None)
        queued.append(backlog() if backlog is not None else 0)
        settled = (len(seen) >= 3 and seen[-1] is not None and seen[-1] == seen[-2] == seen[-3]
                   and not any(queued[-3:]))
        if not settled:
            time.sleep(1.0)
    return {"settled": settled, "waited_s": round(time.monotonic() - t, 1),
            "elephants_at_start": seen[0] if seen else None, "elephants_left": seen[-1] if seen else None,
            "generator_backlog_at_start": queued[0] if queued else None}


def view(api: str, grouped: bool | None = None, timeout: float = 180.0, watch_s: float = 5.0) -> dict:
    """The fabric view in headless Chromium, as an operator opens it (``grouped``: open it at #level=groups;
    None: as the page decides, by the fabric's size): seconds to its first drawing and what it drew (tiles,
    lines, nodes); if it drew groups, a click on the first and the seconds until that group is drawn;
    then how many redraws a second it keeps up for ``watch_s``."""
    from experiments.harness import browser

    why = browser.missing()
    if why:
        return {"skipped": why}
    d = browser.chromium()

    def count(css):
        return d.execute_script(f"return document.querySelectorAll({css!r}).length")

    def updates():
        return int(d.execute_script("return Number(document.body.dataset.updates || 0)"))

    def wait(pred, what):
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the fabric view: {what} within {timeout:.0f} s")
            time.sleep(0.05)

    try:
        t = time.monotonic()
        d.get(f"http://{api}/" + ("#level=groups" if grouped else ""))
        wait(lambda: updates() >= 1, "no drawing")
        out = {"first_draw_s": round(time.monotonic() - t, 3), "tiles": count("button.group"),
               "lines": count("line.link"), "nodes": count("g.node")}
        if out["tiles"]:
            first = d.execute_script("return document.querySelector('button.group').dataset.group")
            t = time.monotonic()
            d.execute_script("document.querySelector('button.group').click()")
            wait(lambda: count("line.link") > 0 and d.execute_script(
                "return document.getElementById('where').textContent") == f"group {first}", "the group not drawn")
            out |= {"group": first, "group_draw_s": round(time.monotonic() - t, 3),
                    "group_lines": count("line.link"), "group_nodes": count("g.node")}
        u0, t = updates(), time.monotonic()
        time.sleep(watch_s)
        out["redraws_per_s"] = round((updates() - u0) / (time.monotonic() - t), 2)
        return out
    finally:
        d.quit()


def parse_levels(text: str | None) -> list[tuple[float, int]] | None:
    """``--sflow-levels``: INTERVAL:SAMPLING,... (0: none of that kind) as (seconds, 1-in-N) pairs."""
    if not text:
        return None
    out = []
    for part in text.split(","):
        interval, _, sampling = part.partition(":")
        try:
            out.append((float(interval), int(sampling or 0)))
        except ValueError:
            raise SystemExit(f"--sflow-levels: INTERVAL:SAMPLING,... (e.g. 1:1000,2:0), got {part!r}") from None
    return out


CPU_ROLES = ("controller", "workers", "generator")


def parse_cpus(items: list[str] | None, available=None) -> dict[str, frozenset[int]] | None:
    """``--cpus ROLE=CPUS`` (repeatable): the CPUs each role may run on, as ``taskset`` writes them ("0", "0,2",
    "1-3"). Roles: the controller, its sFlow collector's workers (the controller's CPUs when not given), and
    the generator (this process: the emulated switches and the handshakes; and the sFlow agents). A role not
    given runs anywhere. Each CPU must be one this process may use."""
    if not items:
        return None
    available = set(os.sched_getaffinity(0) if available is None else available)
    out: dict[str, frozenset[int]] = {}
    for item in items:
        role, _, spec = item.partition("=")
        if role not in CPU_ROLES:
            raise SystemExit(f"--cpus: ROLE=CPUS with ROLE one of {', '.join(CPU_ROLES)}, got {item!r}")
        cpus: set[int] = set()
        try:
            for part in spec.split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise SystemExit(f"--cpus {role}: CPUS as taskset writes them (0, 0,2, 1-3), got {spec!r}") from None
        if not cpus or not cpus <= available:
            raise SystemExit(f"--cpus {role}: CPUs {sorted(cpus - available) or spec!r} are not among this "
                             f"machine's usable ones {sorted(available)}")
        out[role] = frozenset(cpus)
    return out


def pin(pid: int, cpus) -> list[int]:
    """Every thread of process ``pid`` on ``cpus`` (``sched_setaffinity`` sets one thread's; the threads started
    later inherit it); the threads pinned."""
    done = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
            done.append(int(task.name))
        except (ProcessLookupError, OSError):  # (a thread gone meanwhile)
            continue
    return done


def _workers_of(ctl_pid: int):
    """The pids of the controller's sFlow collector workers (its children running ``monitoring.worker``)."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmd = (p / "cmdline").read_bytes()
        except OSError:  # (gone meanwhile)
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == ctl_pid and b"monitoring.worker" in cmd:
            yield int(p.name)


def pin_workers(ctl_pid: int, cpus) -> list[int]:
    """The controller's sFlow collector workers on ``cpus``; their pids (a worker the controller starts later
    runs on the controller's CPUs, as it inherits them)."""
    pids = list(_workers_of(ctl_pid))
    for pid in pids:
        pin(pid, cpus)
    return pids


def affinities(ctl_pid: int | None) -> dict[str, list[int]]:
    """The CPUs each role runs on now (read back, not as asked)."""
    out = {"generator": sorted(os.sched_getaffinity(0))}
    if ctl_pid is not None:
        out["controller"] = sorted(os.sched_getaffinity(ctl_pid))
        for pid in _workers_of(ctl_pid):
            try:
                out.setdefault("workers", sorted(os.sched_getaffinity(pid)))
            except OSError:
                continue
    return out


def run(k: int, out: Path, topo: str = "fattree", pairs: int = 2000, seed: int = 1, mode: str = "freeway",
        timeout: float = 600.0, restart: bool = True, steady: bool = True, steady_s: float = 10.0,
        active_pairs: int = 2000, handshake_rate: float = 100.0, handshake_s: float = 10.0, progress=print,
        sflow_levels: list[tuple[float, int]] | None = None, view_grouped: bool | None = None, cuts: int = 3,
        sflow_workers: str | None = None, probe_gap_s: float = 2.0, controller_config: str | None = None,
        handshake_level: tuple[float, int] | None = None, cpus: dict[str, frozenset[int]] | None = None) -> dict:
    """One fabric: start-up, the API and the fabric view, the walk, ``cuts`` link cuts (each restored), the restart,
    the steady state (sFlow and handshakes); results in ``out/fabric_scale_k{k}.json``. ``cpus``: the CPUs of each
    role (``parse_cpus``), so that the generator can be given a budget of its own apart from the controller."""
    from experiments.benches.controller import machine
    from experiments.engines.runner import build_fabric
    from experiments.harness.procs import ControllerProcess, free_port

    out = Path(out).resolve()  # (the generator's, the agents' and ovsdb-server's processes have their own cwd)
    out.mkdir(parents=True, exist_ok=True)
    fabric = build_fabric(topo, k, 10.0)
    d = out / f"k{k}"
    d.mkdir(exist_ok=True)
    fabric.save(d / "fabric.json")
    api = f"127.0.0.1:{free_port()}"
    n = len(fabric.switches)
    progress(f"[fabric-scale] {topo} k={k}: {n} switches, {len(fabric.hosts)} hosts, mode {mode}")
    cpus = cpus or {}
    if "generator" in cpus:  # (before the emulator's threads and the agents' process: they inherit it)
        pin(os.getpid(), cpus["generator"])
    t_build = time.monotonic()
    em = Emulator(fabric, ("127.0.0.1", 0))
    build_s = time.monotonic() - t_build
    extra = ["--api", api] + (["--sflow-workers", str(sflow_workers)] if sflow_workers is not None else [])
    settings = None
    if controller_config:  # read here first, so that a bad file is refused before anything starts
        from ryu_apps.config import load_file

        settings = load_file(controller_config)
        extra += ["--config", str(Path(controller_config).resolve())]
    if steady:  # the switches' OVSDB: the controller's sFlow port map reads it
        from experiments.benches.fabricload import EmulatedOVSDB

        t = time.monotonic()
        em.ovsdb = EmulatedOVSDB(fabric, d).start()
        extra += ["--ovsdb", em.ovsdb.endpoint]
        progress(f"[fabric-scale] OVSDB with {len(em.ovsdb.ifindex)} interfaces in {time.monotonic() - t:.1f} s")
    ctl = ControllerProcess(d / "fabric.json", mode=mode, log_file=d / "controller.log", extra=extra,
                            events_file=False, cpus=cpus.get("controller"))
    result: dict = {"bench": "fabric-scale", "machine": machine(), "topo": topo, "k": k, "switches": n,
                    "hosts": len(fabric.hosts), "mode": mode, "generator_build_s": round(build_s, 2),
                    "sflow_workers": sflow_workers or "auto",
                    "controller_config": ({"file": str(controller_config), "settings": settings}
                                          if controller_config else None)}
    try:
        t0 = time.monotonic()
        ctl.start(timeout=120)
        result["controller_listening_s"] = round(time.monotonic() - t0, 2)
        em.address = ctl.address
        t1 = time.monotonic()
        em.start()
        prog = wait_programmed(em, api, timeout, t1, progress)
        result["startup_s"] = None if prog is None else round(prog, 2)
        result["startup_messages"] = sum(c.messages for c in em.conns.values())
        result["startup_changes"] = sum(c.changes for c in em.conns.values())
        result["switch_errors"] = sum(c.errors for c in em.conns.values())
        result["startup_drops"] = em.drops()
        result["controller_rss_mb"] = round(_rss_mb(ctl.proc.pid), 1)
        progress(f"[fabric-scale] programmed in {result['startup_s']} s: {result['startup_messages']} messages "
                 f"({result['startup_changes']} changes), controller RSS {result['controller_rss_mb']} MB")
        _settle_generator()
        body, secs = _get(f"http://{api}/metrics")
        result["metrics_bytes"], result["metrics_s"] = len(body), round(secs, 3)
        body, secs = _get(f"http://{api}/api/v1/fabric", timeout=60)
        result["api_fabric_bytes"], result["api_fabric_s"] = len(body), round(secs, 3)
        body, secs = _get(f"http://{api}/api/v1/fabric?level=groups", timeout=60)  # what the view reads first
        result["api_groups_bytes"], result["api_groups_s"] = len(body), round(secs, 3)
        first = json.loads(body)["groups"][0]["group"]
        body, secs = _get(f"http://{api}/api/v1/fabric?group={first}", timeout=60)  # a group opened
        result["api_group_bytes"], result["api_group_s"] = len(body), round(secs, 3)
        progress(f"[fabric-scale] /api/v1/fabric {result['api_fabric_bytes'] / 1e6:.1f} MB in {result['api_fabric_s']} s; "
                 f"?level=groups {result['api_groups_bytes'] / 1e3:.0f} KB in {result['api_groups_s']} s; "
                 f"?group={first} {result['api_group_bytes'] / 1e3:.0f} KB in {result['api_group_s']} s")
        result["view"] = view(api, grouped=view_grouped)
        progress(f"[fabric-scale] the fabric view: {result['view']}")
        t = time.monotonic()
        result["walk"] = walk(em, pairs, seed)
        result["walk_s"] = round(time.monotonic() - t, 2)
        progress(f"[fabric-scale] walked {result['walk']['tor_pairs_walked']} ToR pairs "
                 f"({result['walk']['tor_pairs_failed']} failed) and {result['walk']['hosts']} hosts "
                 f"({result['walk']['hosts_failed']} failed) in {result['walk_s']} s")
        if prog is not None:  # aggregation-core links cut in turn (the first pod's first, then others), each restored
            result["link_cuts"] = []
            for i, (a, b) in enumerate(_cut_links(fabric, cuts)):
                cut = link_event(em, a, b, up=False)
                if i == 0:
                    cut["walk"] = {k: v for k, v in walk(em, min(pairs, 500) if pairs > 0 else 500, seed + 1).items()
                                   if k != "hosts_failed" or v}
                time.sleep(fabric_hold_down_s())
                restored = link_event(em, a, b, up=True)
                if i == 0:
                    result["link_cut"], result["link_restored"] = cut, restored
                result["link_cuts"].append({"link": cut["link"], "s": cut["s"], "first_change_s": cut["first_change_s"],
                                            "median_switch_s": cut["median_switch_s"],
                                            "slowest_switches": cut["slowest_switches"],
                                            "last_message_s": cut["last_message_s"],
                                            "later_messages": cut["later_messages"], "changes": cut["changes"],
                                            "switches_changed": cut["switches_changed"], "restored_s": restored["s"],
                                            "restored_switches_changed": restored["switches_changed"]})
                progress(f"[fabric-scale] link {a}-{b} cut: {cut['switches_changed']} switches changed "
                         f"within {cut['s']} s ({cut['changes']} changes)"
                         + (f", walk after it: {cut['walk']['tor_pairs_failed']} pairs failed" if i == 0 else "")
                         + f"; restored: {restored['switches_changed']} switches within {restored['s']} s")
                if i < cuts - 1:
                    time.sleep(fabric_hold_down_s())
            times = sorted(c["s"] for c in result["link_cuts"] if c["s"] is not None)
            result["link_cut_s_median"] = times[len(times) // 2] if times else None
            result["link_cut_s_max"] = times[-1] if times else None
        if restart and prog is not None:
            before = {sw: (sorted(map(str, s.flows())), sorted(map(str, s.groups.items())))
                      for sw, s in em.sim.switches.items()}
            em.mark("restart")
            ctl.kill()
            time.sleep(1.0)  # (the kill's own resets are not the restart's)
            for c in em.conns.values():
                c.drops.clear()
            t2 = time.monotonic()
            ctl.start(timeout=120)
            back = wait_programmed(em, api, timeout, t2, progress)
            _settle_generator()
            msgs, changes = em.since("restart")
            after = {sw: (sorted(map(str, s.flows())), sorted(map(str, s.groups.items())))
                     for sw, s in em.sim.switches.items()}
            result["restart"] = {"s": None if back is None else round(back, 2), "messages": msgs, "changes": changes,
                                 "switches_whose_tables_changed": sum(before[sw] != after[sw] for sw in before),
                                 "drops": {k: v for k, v in em.drops().items() if k != "closed by the controller"},
                                 "controller_rss_mb": round(_rss_mb(ctl.proc.pid), 1)}
            progress(f"[fabric-scale] restart: read back in {result['restart']['s']} s, {changes} changes sent, "
                     f"{result['restart']['switches_whose_tables_changed']} switches' tables changed")
        if steady and prog is not None and ctl.proc is not None:
            if "workers" in cpus:
                pin_workers(ctl.proc.pid, cpus["workers"])
            result["cpus"] = affinities(ctl.proc.pid)
            result["steady"] = steady_state(em, ctl, api, d, active_pairs, seed, steady_s, handshake_rate,
                                            handshake_s, progress, sflow_levels, probe_gap_s, handshake_level)
            result["controller_rss_mb_steady"] = round(_rss_mb(ctl.proc.pid), 1)
    finally:  # each part stopped whatever another's stopping raised (a failed start left ovsdb-server running)
        try:
            em.stop()
        finally:
            try:
                ctl.stop()
            finally:
                if em.ovsdb is not None:
                    em.ovsdb.stop()
    result["packet_outs_to_hosts"] = em.to_hosts
    result["generator_faults"] = dict(em.faults)
    (out / f"fabric_scale_k{k}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result



def plot(out: Path) -> str | None:
    """Start-up, restart, a link cut's reprogramming, the controller's memory, and the steady state's period
    and handshake answers against the number of switches, from every ``fabric_scale_k*.json`` in ``out``
    (``out/fabric_scale.png``)."""
    runs = []
    for f in sorted(out.glob("fabric_scale_k*.json")):
        r = json.loads(f.read_text())
        if r.get("topo") == "fattree":
            runs.append(r)
    runs.sort(key=lambda r: r["switches"])
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.analysis.plots import save

    n = [r["switches"] for r in runs]
    fig, (ax, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    for key, label in (("startup_s", "start-up (every switch programmed)"),
                       (("restart", "s"), "restart (every switch read back)"),
                       (("link_cut", "s"), "a link cut (affected switches reprogrammed)")):
        ys = [r.get(key[0], {}).get(key[1]) if isinstance(key, tuple) else r.get(key) for r in runs]
        pts = [(x, y) for x, y in zip(n, ys, strict=True) if y is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=label)
    ax.axhline(60, color="grey", ls=":", lw=1, label="issue 41's target (start-up, restart)")
    ax.set_xlabel("switches (k=%s)" % ",".join(str(r["k"]) for r in runs))
    ax.set_ylabel("seconds")
    ax.set_title("the controller process, switches emulated at the socket")
    ax.legend(fontsize=8)
    ax2.plot(n, [r.get("controller_rss_mb") for r in runs], "o-", label="after start-up")
    back = [(x, r["restart"].get("controller_rss_mb")) for x, r in zip(n, runs, strict=True) if r.get("restart")]
    if back:
        ax2.plot(*zip(*back, strict=True), "s--", label="after the restart's read-back")
    ax2.axhline(4096, color="grey", ls=":", lw=1, label="target (4 GiB)")
    ax2.set_xlabel("switches")
    ax2.set_ylabel("controller RSS (MB)")
    ax2.legend(fontsize=8)
    steady = [(x, r["steady"]) for x, r in zip(n, runs, strict=True) if r.get("steady")]
    for key, label, marker in (("period_p50_ms", "period, median", "o-"), ("period_p99_ms", "period, p99", "o--")):
        pts = [(x, st["handshake"]["under"][key]) for x, st in steady
               if st.get("handshake") and st["handshake"]["under"].get(key) is not None]
        if pts:
            ax3.plot(*zip(*pts, strict=True), marker, label=label)
    pts = [(x, st["handshake"]["p99_ms"]) for x, st in steady if st.get("handshake", {}).get("p99_ms") is not None]
    if pts:
        ax3.plot(*zip(*pts, strict=True), "s-", label="handshake answered, p99 (100/s)")
    ax3.axhline(100, color="grey", ls=":", lw=1, label="targets: period 100 ms, handshake 50 ms")
    ax3.axhline(50, color="grey", ls=":", lw=1)
    ax3.set_yscale("log")
    ax3.set_xlabel("switches")
    ax3.set_ylabel("ms")
    ax3.set_title("steady state: sFlow at the sustained level, 2,000 active pairs", fontsize=9)
    ax3.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, out / "fabric_scale.png")


def plot_workers(out: Path, k: int) -> str | None:
    """The sFlow levels of runs with several worker counts (``OUT/workers-N/fabric_scale_kK.json``) side by
    side: each level's datagrams lost and period median by the number of workers; the table in
    ``OUT/sflow_workers_kK.json``, the plot in ``OUT/sflow_workers_kK.png``."""
    rows = []
    for f in sorted(out.glob(f"workers-*/fabric_scale_k{k}.json")):
        r = json.loads(f.read_text())
        w = f.parent.name.split("-", 1)[1]
        st = r.get("steady") or {}
        for lv in st.get("levels", []):
            rows.append({"workers": w, "counter_interval_s": lv["counter_interval_s"], "sampling": lv["sampling"],
                         # the share of every port's counters the agents managed to send (they fall behind when
                         # the machine is short of time: on two cores, beside the controller and its workers)
                         "offered_share": round(lv["sent"]["counter_samples_per_s"] * lv["counter_interval_s"]
                                                / st["ports"], 3) if lv["counter_interval_s"] else None,
                         "sent_datagrams_per_s": lv["sent"]["datagrams_per_s"],
                         "flow_samples_per_s": lv["sent"]["flow_samples_per_s"], "lost_share": lv["lost_share"],
                         "period_p50_ms": lv["period_p50_ms"], "loop_lag_p99_ms": lv["loop_lag_p99_ms"],
                         "sustained": lv["sustained"]})
        hs = st.get("handshake")
        det = st.get("detection")
        rows.append({"workers": w, "summary": True, "handshake_p99_ms": hs and hs.get("p99_ms"),
                     "handshake_level": hs and [hs["under"]["counter_interval_s"], hs["under"]["sampling"]],
                     "handshake_level_lost_share": hs and hs["under"]["lost_share"],
                     "detection_median_s": det and det["median_s"], "detection_placed": det and det["placed"],
                     "worker_killed": st.get("worker_killed", {}).get("measured_again_s")})
    if not rows:
        return None
    (out / f"sflow_workers_k{k}.json").write_text(json.dumps({"k": k, "rows": rows}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.analysis.plots import save

    levels = sorted({(r["counter_interval_s"], r["sampling"]) for r in rows if "sampling" in r})
    workers = sorted({r["workers"] for r in rows}, key=lambda w: int(w) if w.isdigit() else -1)
    fig, (ax0, ax, ax2) = plt.subplots(1, 3, figsize=(17, 4))
    width = 0.8 / max(1, len(workers))
    for j, w in enumerate(workers):
        lost, per, offered = [], [], []
        for lv in levels:
            got = [r for r in rows if r["workers"] == w and (r.get("counter_interval_s"), r.get("sampling")) == lv]
            lost.append(100 * max(r["lost_share"] for r in got) if got else float("nan"))
            per.append(max((r["period_p50_ms"] or 0) for r in got) if got else float("nan"))
            offered.append(100 * min(r["offered_share"] or 0 for r in got) if got else float("nan"))
        xs = [i + j * width for i in range(len(levels))]
        ax0.bar(xs, offered, width, label=f"{w} workers")
        ax.bar(xs, lost, width, label=f"{w} workers")
        ax2.bar(xs, per, width, label=f"{w} workers")
    ax0.axhline(100, color="grey", ls=":", lw=1)
    ax0.set_ylabel("counters offered (% of every port's, worst window)")
    ax0.set_title("what the load generator managed to send", fontsize=9)
    names = [f"{i:g} s, {'1-in-%d' % s if s else 'no samples'}" for i, s in levels]
    for a in (ax0, ax, ax2):
        a.set_xticks([i + width * (len(workers) - 1) / 2 for i in range(len(levels))])
        a.set_xticklabels(names, fontsize=8, rotation=15)
        a.legend(fontsize=8)
    ax.axhline(1, color="grey", ls=":", lw=1, label="sustained: at most 1% lost")
    ax.set_ylabel("datagrams lost (%, worst window)")
    ax.set_title(f"k={k}: sFlow from every port, by collector worker processes", fontsize=9)
    ax2.axhline(100, color="grey", ls=":", lw=1)
    ax2.set_ylabel("period median (ms)")
    ax2.set_yscale("log")
    fig.tight_layout()
    return save(fig, out / f"sflow_workers_k{k}.png")

