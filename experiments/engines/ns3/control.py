"""The controller on simulated time: the mode's policy and monitoring's estimator driving the ns-3 switches.

What ``ryu_apps/controller_app.py`` and ``monitor_app.py`` do with real switches, done on ns-3's clock:

- every switch is a message-level simulated switch (``ryu_apps.simswitch``): a policy's program and every
  reaction go through the one message builder (``ofmsg``) to bytes, are parsed and applied by it, and
  each change of its tables is compiled into the ns-3 switch (``compile.Mirror``);
- a change takes effect after a modelled control delay: ``install_s`` after the controller decided (the
  message on the channel and the switch applying it), and a transaction's entries are confirmed a
  barrier's round trip (``barrier_s``) later, when its ``done`` runs (the handshake's ACK goes out then);
- packets an entry sends to the controller stop the simulation at once and go to the policy's
  ``on_packet`` as frames; its packet-outs come back out of the switch (a held packet resumes, a UDP
  answer is sent to the host);
- monitoring's input is what sFlow would give: each switch's 1-in-N flow samples with their headers
  (TCP sequence numbers included) and every port's interface counters every ``polling_s``, fed to the
  same ``Estimator`` the controller runs; its elephant events, the early rounds on hot links and one
  ``on_period`` a second go to the policy, as the app does;
- entries idle past their timeout are removed and, with ``SEND_FLOW_REM``, reported (``on_flow_removed``);
  Hedera's flow-statistics requests are answered from the ns-3 entries' byte counters.

Every decision record, and once a second the links' occupancy with the policy's snapshot, are kept in
``events`` in the shape of the emulator's events file, so that one analysis reads both engines.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from dataclasses import dataclass

from experiments.engines.ns3.compile import Mirror
from monitoring.sflow import CounterSample, FiveTuple, FlowSample, IfCounters, PacketHeader
from ryu_apps.control import schedule
from ryu_apps.host import handshake as hs
from ryu_apps.openflow import intents as it
from ryu_apps.openflow.executor import Executor
from ryu_apps.simswitch.fabric import SimSwitch
from ryu_apps.simswitch.wire import Port as WirePort

LOG = logging.getLogger("freeway.ns3")
EPS = 1e-9  # ns-3 counts whole nanoseconds
ETH_IPV4 = 0x0800


@dataclass(frozen=True)
class Delays:
    """The control channel as the engine models it (defaults: what Open vSwitch showed on this machine's
    loopback, rounded up: a flow-mod batch applied within half a millisecond, a barrier answered within
    a fifth of one)."""

    install_s: float = 0.0005
    barrier_s: float = 0.0002


class Controller:
    def __init__(self, net, policy, estimator, delays: Delays = Delays(), polling_s: float = 1.0,
                 sampling: int = 0, paths: bool = False):
        self.net, self.policy, self.estimator, self.delays = net, policy, estimator, delays
        self.fabric = net.fabric
        self.polling_s, self.sampling = polling_s, sampling
        self.switches: dict[str, SimSwitch] = {}
        self.mirrors: dict[str, Mirror] = {}
        for name, sw in self.fabric.switches.items():
            ports = {p: WirePort(p, f"{name}-eth{p}") for (s, p) in net.ports if s == name}
            sim = SimSwitch(name, sw.dpid, ports)
            sim.tables.listener = self.mirrors[name] = Mirror()
            self.switches[name] = sim
        self.ifindex = {key: 1000 * (i + 1) + key[1] for i, key in enumerate(sorted(net.ports))}
        estimator.set_ifmap({ix: key for key, ix in self.ifindex.items()})
        estimator.hot_threshold = policy.hot_threshold()
        self.events: list[dict] = []
        self.held: dict[bytes, tuple[str, int]] = {}  # a punted frame -> (switch, held packet's id)
        self._heap: list = []
        self._seq = itertools.count()
        self._next_tick = self._next_period = self._next_poll = 0.0
        self._next_snapshot = 1.0
        self._early_at = -1e9
        self._flow_seq = 0
        self.paths: dict | None = {} if paths else None  # 5-tuple -> [(time, switch)] of its sampled packets
        self.timing: dict[str, list[float]] = {"period": [], "packet_in": [], "hot": []}  # the policy's own time
        self.counters = {"punts": 0, "runs": 0, "runs-advancing-nothing": 0, "packet_outs": 0, "injected": 0, "resumed": 0, "expired": 0,
                         "flow_removed": 0, "samples": 0}
        self._now = 0.0  # the simulated time the Reaction being carried out was decided at
        self.executor = Executor(_Carrier(self))

    # ----- the program -------------------------------------------------------------------------------
    def program(self) -> None:
        """Every switch's program, in place before the first packet (as a fabric connects at start)."""
        for name in self.fabric.switches:
            self._apply(name, self.policy.program(name), 0.0)

    def install(self, name: str, intents) -> None:
        """Entries put in a switch from outside the controller (a scenario's, as ``ovs-ofctl add-flow``)."""
        self._apply(name, intents, 0.0)

    def _push(self, name: str) -> None:
        text = self.mirrors[name].take()
        if text:
            err = self.net.switches[name].Apply(text)
            if err:
                raise RuntimeError(f"{name}: the engine refused a change: {err}")

    def _apply(self, name: str, intents, now: float) -> None:
        """Send intents to one switch as messages; statistics requests are answered from the engine."""
        stats = [i for i in intents if isinstance(i, it.FlowStatsRequest)]
        rest = [i for i in intents if not isinstance(i, it.FlowStatsRequest)]
        sent = self.switches[name].apply(rest) if rest else []
        self._push(name)
        for o, frame in sent:
            self._packet_out(name, o.port, frame)
        for req in stats:
            self.at(now + self.delays.barrier_s, lambda t, n=name, r=req: self._flow_stats(t, n, r))

    def _flow_stats(self, now: float, name: str, req: it.FlowStatsRequest) -> None:
        counts = {}
        for line in str(self.net.switches[name].EntryCounters()).splitlines():
            eid, _, nbytes = line.split()
            counts[int(eid)] = int(nbytes)
        mirror = self.mirrors[name]
        entries = [(dict(f.match), counts.get(eid, 0), (f.table_id, f.priority, f.cookie)) for eid, f in mirror.entries.items()
                   if f.cookie & req.cookie_mask == req.cookie & req.cookie_mask]
        self.react(now, self.policy.on_flow_stats(now, name, entries, False))

    def _packet_out(self, name: str, port, frame: bytes) -> None:
        self.counters["packet_outs"] += 1
        if not isinstance(port, int):
            return
        held = self.held.pop(frame, None)
        if held is not None and held[0] == name:
            self.counters["resumed"] += self.net.switches[name].Resume(held[1], port)
            return
        if len(frame) > 14 and int.from_bytes(frame[12:14], "big") == ETH_IPV4:
            self.counters["injected"] += self.net.switches[name].Inject(port, frame[14:])

    # ----- carrying out a Reaction, on the simulated clock ----------------------------------------------
    def at(self, t: float, fn) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), fn))

    def react(self, now: float, r) -> None:
        """Carried out by the app's ``Executor`` on the simulated clock: ops applied ``install_s`` from
        now, each barrier answered ``barrier_s`` after them (a mode whose switches refuse nothing here:
        ``SimSwitch`` raises on an error)."""
        if not r:
            return
        self._now = now
        self.executor.react(r)

    def record(self, now: float, ev: dict) -> None:
        received = ev.pop("received", None)
        if received is not None:
            ev["latency_s"] = round(now - received, 6)
        self.events.append({**ev, "time": round(now, 6)})

    # ----- what the switches report ------------------------------------------------------------------
    def punts(self, now: float) -> None:
        """Packets entries sent to the controller: to the policy as frames, as a switch's packet-in."""
        for name, sw in self.net.switches.items():
            for p in sw.TakePunts():
                self.counters["punts"] += 1
                frame = self._frame(name, p)
                self.held[frame] = (name, p.id)
                t0 = time.perf_counter()
                r = self.policy.on_packet(now, name, p.inPort, frame)
                self.timing["packet_in"].append(time.perf_counter() - t0)
                self.react(now, r)

    def _frame(self, name: str, p) -> bytes:
        ip = bytes(self.net.fw.Datagram(p))
        dst = self.fabric.host_by_ip(".".join(str(b) for b in ip[16:20]))
        dst_mac = hs.SERVICE_MAC if dst is None else dst.mac
        src_mac = int(self.net.switches[name].PeerMac(p.inPort))
        return (bytes.fromhex(dst_mac.replace(":", "")) + src_mac.to_bytes(6, "big") + ETH_IPV4.to_bytes(2, "big")
                + ip)

    def samples(self, now: float) -> None:
        """Each switch's flow samples since the last look, to the estimator as sFlow flow samples."""
        for name, sw in self.net.switches.items():
            for s in sw.TakeSamples():
                self._flow_seq += 1
                self.counters["samples"] += 1
                ft = FiveTuple(_ip(s.src), _ip(s.dst), s.proto, s.sport, s.dport)
                if self.paths is not None:
                    self.paths.setdefault((ft.src, ft.dst, ft.proto, ft.sport, ft.dport), []).append((s.time, name))
                pkt = PacketHeader(1, s.ipLength + 14, 4, b"", ETH_IPV4, ft, s.dscp,
                                   (s.tcpSeq, s.tcpPayload) if s.proto == 6 else None)
                out = self.ifindex.get((name, s.outPort), 0)
                sample = FlowSample(self._flow_seq, 0, self.ifindex[(name, s.inPort)], self.sampling, 0, 0,
                                    self.ifindex[(name, s.inPort)], out, (pkt,))
                self.estimator.on_flow_sample(s.time, sample)

    def poll_counters(self, now: float) -> None:
        """Every port's interface counters, as an sFlow agent's counter samples (folded at once: the
        estimator's events are not read here, the view and the liveness of the emulator's monitor are)."""
        samples = []
        for (name, port), ix in self.ifindex.items():
            sw = self.net.switches[name]
            up = port not in self.switches[name].down_ports
            ifc = IfCounters(ix, 6, int(self.fabric.capacity_bps((name, self.net.ports[(name, port)].peer))), 1,
                             3 if up else 0, int(sw.rxBytes(port)), 0, 0, 0, 0, 0, 0, int(sw.txBytes(port)), 0, 0,
                             0, 0, 0, 0)
            samples.append(CounterSample(0, 0, ix, (ifc,)))
        self.estimator.on_counter_samples(now, samples, None, loads=False)

    def expire(self, now: float) -> None:
        """Entries idle past their timeout go; those that asked are reported to the policy."""
        for name, sw in self.net.switches.items():
            text = str(sw.Expire(now))
            for line in text.splitlines():
                eid, cookie, flags = (int(x) for x in line.split())
                f = self.mirrors[name].expired(eid)
                if f is None:
                    continue
                self.counters["expired"] += 1
                self.switches[name].tables.delete_flows(f.table_id, match=f.match, strict=True, priority=f.priority)
                if flags & it.SEND_FLOW_REM:
                    self.counters["flow_removed"] += 1
                    self.react(now, self.policy.on_flow_removed(now, name, cookie))

    def tick(self, now: float) -> None:
        """The app's and monitoring's loops: samples, counters, elephants, early rounds, the period."""
        self.samples(now)
        if now >= self._next_poll:
            self._next_poll = now + self.polling_s
            self.poll_counters(now)
        for ev in self.estimator.tick(now):
            start = ev.__class__.__name__ == "ElephantStart"
            self.record(now, {"type": "elephant_start" if start else "elephant_end", "flow": str(ev.flow)})
            self.react(now, self.policy.on_elephant_start(now, ev) if start else self.policy.on_elephant_end(now, ev))
        self.expire(now)
        if schedule.early_round_due(now, self._early_at) and self.estimator.take_hot():
            self._early_at = now
            view = self.estimator.view(now)
            t0 = time.perf_counter()
            r = self.policy.on_hot(now, view)
            self.timing["hot"].append(time.perf_counter() - t0)
            self.react(now, r)
        if now >= self._next_period:
            self._next_period = now + schedule.PERIOD_S
            view = self.estimator.view(now)
            t0 = time.perf_counter()
            r = self.policy.on_period(now, view)
            self.timing["period"].append(time.perf_counter() - t0)
            self.react(now, r)
        if now >= self._next_snapshot:
            self._next_snapshot = now + schedule.PERIOD_S
            self.snapshot(now)

    def snapshot(self, now: float) -> None:
        util = {f"{a}>{b}": round(u, 4) for (a, b), u in sorted(self.estimator.link_util.items())}
        self.events.append({"type": "links", "time": round(now, 6), "utilisation": util,
                            "elephants": {str(f): round(r) for f, r in self.estimator.elephants().items()},
                            **self.policy.snapshot()})

    # ----- the run ---------------------------------------------------------------------------------------
    def run(self, until: float, done=lambda now: False, progress=None) -> float:
        """Run the simulation to ``until`` (or until ``done(now)``), the controller stepping in it."""
        ns = self.net.ns
        now = self.net.now()
        # within a nanosecond of ``until`` is there: ns-3's clock is whole nanoseconds, so an ``until`` with a
        # fraction of one (a flow's start plus the grace) was never reached and the loop spun on, simulating
        # nothing (the k=16 paper run hung at 20.30 s)
        while now < until - EPS and not done(now):
            nxt = min(self._heap[0][0] if self._heap else until, self._next_tick, until)
            if nxt > now + EPS:
                step = max(1, math.ceil((nxt - now) * 1e9 - 0.5))  # whole nanoseconds, ns-3's clock
                stop = ns.Simulator.Stop(ns.NanoSeconds(step))
                ns.Simulator.Run()
                # a punt stops a run sooner; its stop event, left in the queue, would stop a later run at once,
                # and each of those runs schedules one more: they piled up, one more per punt (Hedera's k=8
                # data-mining run at 0.7 spent 95% of its runs advancing nothing, and took 2.7 h)
                ns.Simulator.Cancel(stop)
                was, now = now, self.net.now()
                self.counters["runs"] += 1
                if now <= was:  # (two punts at one instant do this)
                    self.counters["runs-advancing-nothing"] += 1
            self.punts(now)
            while self._heap and self._heap[0][0] <= now + EPS:
                _, _, fn = heapq.heappop(self._heap)
                fn(now)
            if now >= self._next_tick - EPS:
                self._next_tick = now + schedule.TICK_S
                self.tick(now)
                if progress is not None:
                    progress(now)
        return now


class _Carrier:
    """What the engine's controller hands its ``Executor``: the simulated clock, and a control channel
    that takes ``install_s`` to carry intents and ``barrier_s`` more to answer a barrier."""

    def __init__(self, ctl: Controller):
        self.ctl = ctl
        self._xids = itertools.count(1)

    def clock(self) -> float:
        return self.ctl._now

    def connected(self, switch: str) -> bool:
        return True

    def send(self, switch: str, intents) -> list[int]:
        ctl = self.ctl
        ctl.at(ctl._now + ctl.delays.install_s, lambda _t, s=switch, i=intents: ctl._apply(s, i, _t))
        return []

    def barrier(self, switch: str) -> int:
        ctl, xid = self.ctl, next(self._xids)
        ctl.at(ctl._now + ctl.delays.install_s + ctl.delays.barrier_s, lambda _t: self._reply(_t, switch, xid))
        return xid

    def _reply(self, now: float, switch: str, xid: int) -> None:
        self.ctl._now = now
        self.ctl.executor.barrier_reply(switch, xid)

    def record(self, ev: dict) -> None:
        self.ctl.record(self.ctl._now, ev)


def _ip(v: int) -> str:
    return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"
