"""One run on the packet-level engine: a fabric, a mode and a flow list on ns-3, the results in the shape
the emulator's runs have (so that ``runner.analyse`` reads both).

A run is one process (ns-3's simulator is one per process, and runs of a sweep go in parallel, one per
core): ``run_one`` writes the run's spec as JSON, starts ``python -m experiments.engines.ns3.engine SPEC OUT``,
passes its progress lines on, and reads its results. In the process: the network (``net.build``), TCP
as Linux hosts run it (settings below), the mode's policy (``ryu_apps.modes``) made from the same
configuration as ``freeway controller``, the same ``Estimator`` monitoring runs, the controller on
simulated time (``control.Controller``), each host's flows (``fw::Host``), and at the end every flow's
outcome, the core switches' drops and the events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experiments.workloads.flowlist import MICE_BOUNDARY, RR_PORT, Flow, dport_of
from ryu_apps.host import handshake as hs
from topology.fabric import Fabric

TCPS = {"cubic": "ns3::TcpCubic", "newreno": "ns3::TcpNewReno", "bbr": "ns3::TcpBbr", "dctcp": "ns3::TcpDctcp"}


class EngineError(RuntimeError):
    pass


@dataclass
class Settings:
    """How the engine models what the papers leave open (every one in results.json)."""

    mtu: int = 1500
    link_delay_s: float = 5e-6  # per link, one way (the emulator's veth and switch hop, roughly)
    tcp: str = "cubic"  # the hosts' congestion control (Linux's default: Cubic)
    min_rto_s: float = 0.2  # Linux's
    queues: str = "fifo"  # every switch port's discipline; with isolation: strict
    sampling: int = 0  # sFlow 1-in-N (0: the emulator's default for the link rate and MTU)
    polling_s: float = 1.0  # sFlow counter interval
    install_s: float = 0.0005
    barrier_s: float = 0.0002
    seed: int = 1
    grace_s: float = 30.0  # after the last flow's start, the longest a run waits for the rest
    paths: bool = False  # record every flow's path (every packet sampled: for checks, not for speed)
    own_queues: bool = False  # every port on fw::PortQueue, with its counters (plain fifo and strict too)
    rr_dscp: int = 0  # the DSCP request/response servers mark their answers with (hosts marking priorities)
    host_send: str = "link"  # hosts send at their link's rate; "unshaped": as the emulator's, into the switch
    # a new connection's first flight: 0 is ten segments (Linux's initial cwnd); N bytes caps it, standing in
    # for a Linux receiver's first advertised window (35,840 bytes on these machines, 4 jumbo segments)
    first_flight_bytes: int = 0
    # a bulk sender closes its connection once its bytes are written, its FIN after them, as a Linux sender
    # does (not under per-packet balancing: ns-3 3.44's TCP crashes closing under heavy reordering, fw::Host)
    close_when_done: bool = True
    # hosts demote, as PIAS's do: once a host has sent more than this many IP bytes on a TCP connection, its
    # next packets there carry the elephant DSCP (0: never; Freeway's ToRs keep it with isolation's
    # host_demotion on; a Linux host's rule: ryu_apps/host/demote.py)
    demote_after_bytes: int = 0
    # an announced flow is sent as this many TCP connections, as ``freeway send --subflows N`` sends it: one
    # announce names them all, each sends a share of the bytes in proportion to the rate its ACK gives it
    # (evenly without one), and the flow is done when all are (1: one connection, as every other mode's)
    subflows: int = 1
    controller: dict = field(default_factory=dict)  # settings of the controller's config (sections)


def _config(mode: str, iso: bool, extra: dict):
    """The controller's configuration, as ``freeway controller`` would make it: ``extra`` is what a config
    file gives (``config.load_file``: settings by name, module sections as pairs), the run's mode over it."""
    from ryu_apps import config

    values = {k: (tuple(tuple(kv) for kv in v) if k in config.SECTIONS or k == "mode_settings" else v)
              for k, v in (extra or {}).items()}
    values.update({"fabric": "(the ns-3 engine)", "mode": mode, "isolation": iso, "monitor": "sflow"})
    return config.Config.from_mapping(values)


def run_spec(spec: dict, progress=print) -> dict:
    """The run a spec describes, in this process; its results."""
    from experiments.engines.ns3 import control
    from experiments.engines.ns3 import net as netmod
    from experiments.engines.ns3.native import built, load
    from monitoring.estimator import Estimator
    from ryu_apps import modes
    from topology.sflow_agent import SFlowAgentConfig

    t_wall = time.time()
    fabric = Fabric.from_dict(spec["fabric"])
    st = Settings(**spec["settings"])
    flows = [Flow(**f) for f in spec["flows"]]
    mode, iso = spec["mode"], spec["isolation"]
    per_packet = mode == "perpkt"
    cfg = _config("ecmp" if per_packet else mode, iso, st.controller)
    ns, fw = load()
    ns.RngSeedManager.SetSeed(st.seed)
    _tcp_defaults(ns, st)
    sampling = 1 if st.paths else st.sampling or SFlowAgentConfig.for_rate(fabric.link_rate_mbps, st.mtu).sampling
    net = netmod.build(fabric, link_delay_s=st.link_delay_s, mtu=st.mtu, queues=st.queues,
                       iso=cfg.isolation_config(), sampling=sampling, seed=st.seed, per_packet=per_packet,
                       own_queues=st.own_queues, host_send=st.host_send)
    policy = modes.make(cfg, fabric)
    ctl = control.Controller(net, policy, Estimator(fabric, cfg.monitor_config()),
                             control.Delays(st.install_s, st.barrier_s), st.polling_s, sampling, st.paths)
    ctl.program()
    for pin in spec.get("pins", []):
        ctl.install(pin["switch"], [_pin_flow(pin)])
    port_tx: list[dict] = []
    for t in spec.get("tx_at", []):
        ctl.at(t, lambda now: port_tx.append({"t": round(now, 6), "tx": {
            f"{sw}-eth{port}": int(net.switches[sw].txBytes(port)) for (sw, port) in net.ports}}))
    if not 1 <= st.subflows <= hs.MAX_SUBFLOWS:
        raise EngineError(f"subflows: 1..{hs.MAX_SUBFLOWS} TCP connections an announced flow is sent as, "
                          f"got {st.subflows!r}")
    apps, parts = _hosts(net, fabric, flows, policy.takes_announces, st.rr_dscp, st.seed, ecn=st.tcp == "dctcp",
                         close=st.close_when_done and not per_packet,
                         demote=(st.demote_after_bytes, _elephant_dscp(cfg)), subflows=st.subflows)
    last_start = max((f.start for f in flows), default=0.0)
    stops = [f.stop for f in flows if f.stop is not None]
    until = max([last_start] + stops + spec.get("tx_at", [])) + st.grace_s
    wall_at = [time.time()]
    pending = _Pending(apps, flows, {h.name: _int(h.ip) for h in fabric.hosts}, parts)

    def done(now: float) -> bool:
        return now > last_start and now >= max(stops + spec.get("tx_at", []), default=0.0) and pending.empty()

    def show(now: float) -> None:
        if time.time() - wall_at[0] >= 10 or now >= until:
            wall_at[0] = time.time()
            finished = len(flows) - pending.left()
            progress(f"[{spec['label']}] simulated {now:6.2f} s, wall {time.time() - t_wall:6.0f} s, "
                     f"{finished}/{len(flows)} flows done")

    at_stop: dict[int, int] = {}  # an elephant's bytes received when its sender stopped (as iperf3 -t counts)

    def received(now: float, which: list[int]) -> None:
        for n in which:
            f = flows[n]
            app = apps[f.src]
            if app.Has(n):
                at_stop[n] = sum(_received(apps, f, _int(_ip_of(fabric, f.src)), [n] + parts.get(n, []))[0])

    for stop in sorted({f.stop for f in flows if f.stop is not None and f.bytes == 0}):
        ctl.at(stop, lambda now, st=stop: received(now, [n for n, f in enumerate(flows)
                                                          if f.stop == st and f.bytes == 0]))
    end = ctl.run(until, done, show)
    wall = time.time() - t_wall
    out = _collect(spec, net, fabric, flows, apps, ctl, end, at_stop, parts)
    out["port_tx"] = port_tx
    out.update(seconds=round(wall, 1), simulated_s=round(end, 3), wall_per_simulated_s=round(wall / max(end, 1e-9), 2),
               engine="ns3", fwsim=built(), settings=asdict(st) | {"sampling": sampling},
               counters=ctl.counters | {"transactions": ctl.executor.counters["transactions"]},
               policy_time=_timing(ctl.timing))
    ns.Simulator.Destroy()
    return out


def _pin_flow(pin: dict):
    """A scenario's pinning entry as the switches are sent it: the flow's 5-tuple out of one port."""
    from ryu_apps.openflow import intents as it

    return it.Flow(pin["priority"], it.match(eth_type=0x0800, ip_proto=6, ipv4_src=pin["src_ip"],
                                             ipv4_dst=pin["dst_ip"], tcp_src=pin["sport"], tcp_dst=pin["dport"]),
                   (it.Output(pin["out_port"]),), table_id=pin["table"])


def _timing(timing: dict[str, list[float]]) -> dict:
    """The policy's own time per call (the controller's decisions, without the simulation): count, median,
    p99 and the largest, in ms."""
    from experiments.analysis.stats import percentile

    return {k: {"calls": len(v), "median_ms": round(percentile(v, 50) * 1e3, 3) if v else None,
                "p99_ms": round(percentile(v, 99) * 1e3, 3) if v else None,
                "max_ms": round(max(v) * 1e3, 3) if v else None} for k, v in timing.items()}


def _tcp_defaults(ns, st: Settings) -> None:
    """TCP as a Linux host runs it, where ns-3's defaults differ."""
    if st.tcp not in TCPS:
        raise EngineError(f"tcp: unknown {st.tcp!r} (known: {', '.join(TCPS)})")
    d = ns.Config.SetDefault
    d("ns3::TcpL4Protocol::SocketType", ns.TypeIdValue(ns.TypeId.LookupByName(TCPS[st.tcp])))
    d("ns3::TcpSocket::SegmentSize", ns.UintegerValue(st.mtu - 52))  # IP, TCP and timestamps
    segment = st.mtu - 52
    first = 10 if not st.first_flight_bytes else max(1, min(10, st.first_flight_bytes // segment))
    d("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(first))
    d("ns3::TcpSocket::SndBufSize", ns.UintegerValue(4 << 20))
    d("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(6 << 20))
    d("ns3::TcpSocket::DelAckTimeout", ns.TimeValue(ns.MilliSeconds(40)))
    d("ns3::TcpSocket::ConnTimeout", ns.TimeValue(ns.Seconds(1.0)))
    d("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.Seconds(st.min_rto_s)))
    d("ns3::TcpSocketBase::MaxSegLifetime", ns.DoubleValue(1.0))  # TIME_WAIT: short, or endpoints pile up
    if st.tcp == "dctcp":
        d("ns3::TcpSocketBase::UseEcn", ns.StringValue("On"))


def _elephant_dscp(cfg) -> int:
    """The DSCP a demoting host marks with: isolation's elephant DSCP (its default when isolation is off)."""
    from topology.queues import IsolationConfig

    return (cfg.isolation_config() or IsolationConfig()).elephant_dscp


def _hosts(net, fabric: Fabric, flows: list[Flow], announces: bool, rr_dscp: int = 0, seed: int = 1,
           ecn: bool = False, close: bool = False, demote: tuple[int, int] = (0, 0),
           subflows: int = 1) -> tuple[dict, dict[int, list[int]]]:
    """One ``fw::Host`` per host with its flows (announced ones carry their handshake's bytes), and each
    announced flow's other subflows (``subflows`` > 1: ids after the flow list's, by the flow's index). A
    flow without a source port of its own gets one drawn from Linux's ephemeral range (seeded), as a Linux
    host's connect() does: ns-3 would give every host the same ports in the same order, and the same
    hash in every run."""
    import itertools
    import random

    ns, fw = net.ns, net.fw
    rng = random.Random(seed)
    used: dict[str, set[int]] = {}
    ip = {h.name: h.ip for h in fabric.hosts}
    apps = {}
    for h in fabric.hosts:
        app = ns.CreateObject[fw.Host]()
        app.Configure(_int(hs.SERVICE_IP), RR_PORT, rr_dscp << 2)
        app.CloseWhenDone(close)
        if demote[0] < 0:
            raise EngineError(f"demote_after_bytes: 0 (off) or a number of bytes, got {demote[0]!r}")
        if ecn or demote[0]:  # ns-3's TCP sends a socket with a TOS of its own Not-ECT: hosts mark at their egress
            app.MarkAtEgress(net.host_queues[h.name], demote[0], demote[1])
        net.nodes[h.name].AddApplication(app)
        app.SetStartTime(ns.Seconds(0.0))
        apps[h.name] = app
    sinks: dict[str, set[int]] = {}
    parts: dict[int, list[int]] = {}
    part_ids = itertools.count(len(flows))  # a subflow's spec: an id after the flow list's

    def port(src: str, want: int = 0) -> int:
        while not want or want in used.setdefault(src, set()):
            want = rng.randint(32768, 60999)
        used.setdefault(src, set()).add(want)
        return want

    for n, f in enumerate(flows):
        spec = fw.FlowSpec()
        spec.id = n
        spec.start = f.start
        spec.kind = 0 if f.kind == "rr" else 1
        spec.dst = _int(ip[f.dst])
        spec.size = f.bytes
        spec.stop = -1.0 if f.stop is None else f.stop
        spec.sport = sport = port(f.src, f.sport)
        spec.tos = f.dscp << 2
        if f.kind == "bulk":
            spec.dport = dport_of(n, f)
            spec.rate = f.rate_mbps * 1e6
            sinks.setdefault(f.dst, set()).add(spec.dport)
        if f.announced and announces:
            more = [port(f.src) for _ in range(subflows - 1)] if f.kind == "bulk" else []
            ann = hs.Announce(n + 1, f.bytes or 1_000_000_000, 0,
                              tuple(hs.Subflow(ip[f.src], ip[f.dst], 6, p, spec.dport or RR_PORT)
                                    for p in [sport] + more))
            spec.announce = hs.encode(ann)
            for p in more:  # each the flow's own spec but for its port, started by the flow's handshake
                sub = fw.FlowSpec(spec)
                sub.id, sub.sport, sub.announce, sub.lead = next(part_ids), p, "", n
                parts.setdefault(n, []).append(sub.id)
                apps[f.src].Add(sub)
        apps[f.src].Add(spec)
    for host, ports in sinks.items():
        for p in sorted(ports):
            apps[host].AddSinkPort(p)
    return apps, parts


def _int(ip: str) -> int:
    a, b, c, d = (int(x) for x in ip.split("."))
    return a << 24 | b << 16 | c << 8 | d


class _Pending:
    """The flows not yet done: a mouse when its answer is in, a sized bulk flow when its receiver has every
    byte (its sender is done sooner: when the last byte is in its socket's buffer), a bulk flow of no size
    when its sender stopped."""

    def __init__(self, apps: dict, flows: list[Flow], ip: dict[str, int], parts: dict[int, list[int]] | None = None):
        self.apps, self.flows, self.ip, self.parts = apps, flows, ip, parts or {}
        self.todo = set(range(len(flows)))

    def _done(self, n: int) -> bool:
        f = self.flows[n]
        app = self.apps[f.src]
        if not app.Has(n):
            return False
        if f.kind == "bulk" and f.bytes:
            return _received(self.apps, f, self.ip[f.src], [n] + self.parts.get(n, []))[1] is not None
        return bool(app.Result(n).ok)

    def left(self) -> int:
        self.todo = {n for n in self.todo if not self._done(n)}
        return len(self.todo)

    def empty(self) -> bool:
        return self.left() == 0


def _received(apps: dict, f: Flow, src_ip: int, ids: list[int]) -> tuple[list[int], float | None, int]:
    """A bulk flow sent as the specs ``ids`` (its subflows): the bytes its receiver has of each, when the
    last of them had all of theirs (None: not yet), and its senders' retransmission timeouts."""
    app, sink = apps[f.src], apps[f.dst]
    got, finished, rto = [], 0.0, 0
    for i in ids:
        r = app.Result(i)
        got.append(int(sink.Sunk(src_ip, r.sport)))
        done = float(sink.SunkDone(src_ip, r.sport)) if r.sport else -1.0
        finished = None if finished is None or done < 0 else max(finished, done)
        rto += int(r.rto)
    return got, finished, rto


def _ip_of(fabric: Fabric, host: str) -> str:
    return next(h.ip for h in fabric.hosts if h.name == host)


def _collect(spec: dict, net, fabric: Fabric, flows: list[Flow], apps: dict, ctl, end: float,
             at_stop: dict[int, int] | None = None, parts: dict[int, list[int]] | None = None) -> dict:
    """Every flow's outcome in the emulator's shapes: mice (request/response flows and sized bulk flows
    under the boundary) with their completion time and timeouts; elephants with their goodput (a flow sent
    as several subflows: their bytes summed and each one's, done when the last is, its first subflow's port;
    with ``paths``, subflow i's path as "n/i")."""
    ip = {h.name: h.ip for h in fabric.hosts}
    boundary = spec.get("mice_boundary", MICE_BOUNDARY)
    mice, elephants, bulk = [], [], []
    for n, f in enumerate(flows):
        app = apps[f.src]
        if not app.Has(n):
            continue
        r = app.Result(n)
        if f.kind == "rr":
            rto = int(r.rto) + int(apps[f.dst].ServerRto(_int(ip[f.src]), r.sport))
            mice.append({"client": f.src, "server": ip[f.dst], "size": f.bytes, "start": f.start,
                         "fct_s": round(r.end - f.start, 6) if r.ok else None, "ok": bool(r.ok), "rto": rto,
                         "sport": int(r.sport), "id": n})
            continue
        per, finished, rto = _received(apps, f, _int(ip[f.src]), [n] + (parts or {}).get(n, []))
        got = sum(per)
        started = float(r.answered) if r.answered >= 0 else f.start
        answer = {-1: None, 0: "none", 1: "ack", 2: "nack"}[int(r.answer)]
        if f.bytes == 0:
            got = (at_stop or {}).get(n, got)  # what had arrived when the sender stopped
            span = (f.stop or end) - f.start
            elephants.append({"id": n, "src": f.src, "dst": f.dst, "goodput_mbps": got * 8 / span / 1e6 if span > 0
                              else 0.0, "bytes": got, "announced": answer, "sport": int(r.sport)})
        else:
            rec = {"id": n, "src": f.src, "dst": f.dst, "size": f.bytes, "start": f.start, "bytes": got,
                   "fct_s": round(finished - f.start, 6) if finished is not None else None,
                   "ok": finished is not None, "rto": rto, "announced": answer,
                   "goodput_mbps": got * 8 / (finished - started) / 1e6 if finished and finished > started else None}
            if len(per) > 1:
                rec["subflow_bytes"] = per
            bulk.append(rec)
            if f.bytes < boundary:
                mice.append({"client": f.src, "server": ip[f.dst], "size": f.bytes, "start": f.start,
                             "fct_s": rec["fct_s"], "ok": rec["ok"], "rto": rec["rto"]})
    paths = None
    if spec["settings"].get("paths"):
        paths = {}
        for n, f in enumerate(flows):
            app = apps[f.src]
            for i, spec_id in enumerate([n] + (parts or {}).get(n, [])):  # a subflow's as "n/i"
                if app.Has(spec_id):
                    dport = dport_of(n, f)
                    hops = ctl.paths.get((ip[f.src], ip[f.dst], 6, int(app.Result(spec_id).sport), dport), [])
                    first = {sw: t for t, sw in reversed(hops)}  # each switch's first packet of the flow
                    paths[f"{n}/{i}" if i else str(n)] = sorted(first, key=first.get)
    top = max(s.level for s in fabric.switches.values())
    drops = {f"{sw}-eth{port}": int(net.fw.Dropped(p.queue)) for (sw, port), p in net.ports.items()
             if fabric.switches[sw].level == top and fabric.links}  # (one switch, the ideal: no core)
    queues = {}
    for (sw, port), p in net.ports.items():
        q = p.queue
        if hasattr(q, "evictions"):  # fw::PortQueue: its own counters
            queues[f"{sw}-eth{port}"] = {
                "drops": [int(q.drops[0]), int(q.drops[1])], "marks": [int(q.marks[0]), int(q.marks[1])],
                "sent": [int(q.sent[0]), int(q.sent[1])], "evictions": int(q.evictions), "cut_ins": int(q.cutIns),
                "ect": int(q.ect), "backed_off": int(q.backedOff), "backoff_peak_bytes": int(q.backoffPeak),
                "blocked": int(q.blocked), "pauses": [int(q.pauses[0]), int(q.pauses[1])],
                "paused_s": [round(q.PausedTime(0), 6), round(q.PausedTime(1), 6)], "peak_bytes": int(q.peak),
                "average_bytes": round(q.AverageBytes(), 1),
                "tx_bytes": int(net.switches[sw].txBytes(port))}
    pfc = {name: {"pause_frames": int(sw.pauseFrames), "resume_frames": int(sw.resumeFrames)}
           for name, sw in net.switches.items() if sw.pfc}
    switch_drops = {"meter": sum(int(sw.meterDrops) for sw in net.switches.values()),
                    "table": sum(int(sw.tableDrops) for sw in net.switches.values())}
    return {"label": spec["label"], "mode": spec["label_mode"], "mice": mice, "elephants": elephants, "bulk": bulk,
            "queues": queues, "pfc": pfc, "switch_drops": switch_drops,
            "core_drops": drops, "events": ctl.events, "switch_cpu": None, "paths": paths,
            "all_drops": sum(int(net.fw.Dropped(p.queue)) for p in net.ports.values()),
            "host_demoted_packets": sum(int(app.Demoted()) for app in apps.values())}


# ----- one run, in its own process -----------------------------------------------------------------
def spec_of(label: str, mode_label: str, fabric: Fabric, mode: str, iso: bool, flows: list[Flow],
            settings: Settings, mice_boundary: int = MICE_BOUNDARY, pins: list | None = None,
            tx_at: list[float] | None = None) -> dict:
    """A run: ``pins`` are entries a scenario puts in the switches besides the controller's program
    (``collisions.Pin``: an unlucky hash made every time), ``tx_at`` times at which every switch port's
    transmitted bytes are read (``port_tx`` in the results)."""
    spec = {"label": label, "label_mode": mode_label, "fabric": fabric.to_dict(), "mode": mode, "isolation": iso,
            "flows": [asdict(f) for f in flows], "settings": asdict(settings), "mice_boundary": mice_boundary}
    if pins:
        spec["pins"] = [asdict(p) for p in pins]
    if tx_at:
        spec["tx_at"] = sorted(tx_at)
    return spec


def run_all(out: Path, specs: list[dict], jobs: int = 0, tag: str = "engine",
            timeout_s: float = 24 * 3600) -> list[dict]:
    """Every spec's run, ``jobs`` at once (0: one per core), each its own process; a run already written
    under ``out`` with the same spec is read back, not run again (an interrupted sweep resumes)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(spec):
        done = written(out, spec)
        if done is not None:
            print(f"[{tag}] {spec['label']}: already run", flush=True)
            return done
        print(f"[{tag}] {spec['label']}: {len(spec['flows'])} flows", flush=True)
        return run_one(out, spec, timeout_s=timeout_s)

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(one, specs))


def written(out: Path, spec: dict) -> dict | None:
    """The results of a run already written under ``out`` with this very spec (an interrupted sweep resumes),
    else None."""
    d = out / spec["label"]
    if not ((d / "run.json").exists() and (d / "spec.json").exists()):
        return None
    old, new = json.loads((d / "spec.json").read_text()), json.loads(json.dumps(spec))
    if isinstance(old.get("settings"), dict):  # a setting added since, at its default, changes nothing
        defaults = json.loads(json.dumps(asdict(Settings())))
        old["settings"] = {**{k: v for k, v in defaults.items() if k not in old["settings"]}, **old["settings"]}
    return json.loads((d / "run.json").read_text()) if old == new else None


HASH_SEED = "0"


def child_env() -> dict:
    """The environment of a run's process. Its hash seed is fixed: the controller's decisions follow the
    order of Python sets of strings in places, which a random hash seed changed from process to process
    (the same flow list under freeway+isolation came out one of two ways by PYTHONHASHSEED); with it
    fixed, the same configuration gives the same numbers, run after run and machine after machine."""
    return dict(os.environ, PYTHONUNBUFFERED="1", PYTHONHASHSEED=HASH_SEED)


def run_one(out: Path, spec: dict, timeout_s: float = 6 * 3600) -> dict:
    """Run a spec in a child process (its progress lines passed on); its results (also ``run.json``)."""
    d = (out / spec["label"]).resolve()  # (the child runs in the package's directory: a relative path would miss)
    d.mkdir(parents=True, exist_ok=True)
    (d / "spec.json").write_text(json.dumps(spec))
    result = d / "run.json"
    result.unlink(missing_ok=True)
    env = child_env()
    proc = subprocess.Popen([sys.executable, "-m", "experiments.engines.ns3.engine", str(d / "spec.json"), str(result)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=str(Path(__file__).resolve().parents[3]))
    tail: list[str] = []
    deadline = time.time() + timeout_s
    for line in proc.stdout:
        if "runStaticInitializersOnce" in line:
            continue  # cling's notice when ns-3 loads: harmless
        tail = (tail + [line.rstrip()])[-20:]
        if line.startswith("["):
            print(line.rstrip(), flush=True)
        if time.time() > deadline:
            proc.kill()
            raise EngineError(f"{spec['label']}: no result within {timeout_s:.0f} s")
    proc.wait()
    if proc.returncode != 0 or not result.exists():
        raise EngineError(f"{spec['label']}: the engine failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return json.loads(result.read_text())


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    res = run_spec(spec, progress=lambda s: print(s, flush=True))
    Path(args[1]).write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
