"""``freeway experiment``: run one workload under each mode on a fresh fabric and controller.

Scenario ``mixed`` (Freeway-style): long elephants between two source pods and
two destination pods, and Poisson request/response mice between every pair of
pods, sized by the web-search (or data-mining) distribution cut at the mice
boundary. Scenario ``permutation``: every host sends one long flow to a host
of another pod (or leaf), every host receives one. Every mode sees the same
seeded workload. Two reference runs put each mode in context: the mice alone
on the same fabric (the unloaded FCT floor) and the same mice and elephants on
one non-blocking switch (the throughput ceiling). ``--repeat`` runs whole
rounds of all of it. Results: results.json, flows.csv and PNG plots in the
output folder.

Two engines run the same workload with the same modes: the emulator (Open
vSwitch under Mininet, the default) and ns-3 (``--engine ns3``,
``experiments/ns3``), whose switches carry out the same program through the
same message builder. ns-3 runs go in parallel processes (``--jobs``), and a
run whose ``run.json`` is already in the output folder with the same spec is
not run again (an interrupted sweep resumes).
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from experiments.analysis import stats
from experiments.harness.procs import ControllerProcess, SwitchCpu
from experiments.workloads.flowlist import RR_PORT, group_of
from experiments.workloads.workload import SizeCDF, poisson_schedule
from ryu_apps.modes import registry
from topology.builder import FabricNet
from topology.fabric import Fabric, fattree, leafspine
from topology.ovsproc import ProcessError, SwitchProcesses, check_count
from topology.sflow_agent import SFlowAgentConfig

# the experiments' modes: the controller's (built-in and plug-in: ``ryu_apps.modes.registry``) and the named
# variants of them (hedera-1s, freeway-paper) and per-packet balancing (ns-3 only); each with +isolation
VARIANTS = ("hedera-1s", "freeway-paper", "perpkt")
BASE_MODES = tuple(dict.fromkeys([*registry.modes()[:5], *VARIANTS, *registry.modes()[5:]]))
MODES = BASE_MODES + tuple(f"{m}+isolation" for m in BASE_MODES if m != "perpkt")
NS3_ONLY = ("perpkt",)  # per-packet load balancing to the least-loaded next hop: no OpenFlow switch offers it
ENGINES = ("emulator", "ns3")
SCENARIOS = ("mixed", "permutation")
SWITCH_CPU_LIMIT = 0.8  # above this, the emulator itself queues packets (see procs.SwitchCpu)


class ExperimentError(ValueError):
    pass


MICE_OFFSET_S = 2.0  # both engines start the mice this long after the elephants


@dataclass
class Workload:
    elephants: list[tuple[str, str]]  # (src host, dst host)
    mice: dict[str, list] = field(default_factory=dict)  # client host -> schedule [(offset, server ip, size)]
    duration: float = 30.0


def mixed_workload(fabric: Fabric, duration: float, seed: int, mice_load: float, dist: str,
                   boundary: float) -> Workload:
    """Elephants: on a fat-tree, the first host of every edge in pods 0 and 1 sends to the last host of
    the same edge position two pods on; on a leaf-spine, the first half of the hosts of leaves 0 and 1
    send to the last half of leaves 2 and 3 (a quarter of the hosts send one, as on the fat-tree).
    Mice: every host fetches from random hosts in other pods (leaves)."""
    name = {h.name: h for h in fabric.hosts}
    elephants = []
    if fabric.topo == "fattree":
        k = fabric.params["k"]
        for p in (0, 1):
            for e in range(k // 2):
                elephants.append((f"h{p}_{e}_0", f"h{p + 2}_{e}_{k // 2 - 1}"))
    else:
        leaves = fabric.tors()
        if len(leaves) < 4:
            raise ExperimentError("mixed on a leaf-spine needs at least 4 leaves")
        for i in (0, 1):
            src, dst = fabric.hosts_on(leaves[i]), fabric.hosts_on(leaves[i + 2])
            half = max(1, len(src) // 2)
            elephants += [(a.name, b.name) for a, b in zip(src[:half], dst[-half:], strict=False)]
    mice = mice_schedules(fabric, duration, random.Random(seed), mice_load, dist, boundary)
    assert all(s in name and d in name for s, d in elephants)
    return Workload(elephants, mice, duration)


def mice_schedules(fabric: Fabric, duration: float, rng, mice_load: float, dist: str, boundary: float,
                   start: float = 0.0) -> dict[str, list]:
    """Every host's Poisson request/response mice to random hosts of other pods (leaves), sized by
    ``dist`` cut at ``boundary``, at ``mice_load`` of its link, from ``start`` to ``duration`` seconds."""
    cdf = SizeCDF.load(dist).mice(boundary)
    mice = {}
    for h in fabric.hosts:
        g = group_of(fabric, h.switch)
        servers = [o.ip for o in fabric.hosts if group_of(fabric, o.switch) != g]
        sched = poisson_schedule(rng, cdf, mice_load, fabric.link_rate_mbps * 1e6, duration - start, servers)
        mice[h.name] = [(start + off, srv, size) for off, srv, size in sched]
    return mice


def non_blocking(fabric: Fabric) -> tuple[Fabric, dict[str, str]]:
    """The same number of hosts on one non-blocking switch (a leaf-spine whose spine links carry all of
    a leaf's hosts); returns it and the host-name mapping."""
    half = len(fabric.hosts) // 2
    ls = leafspine(1, 2, half, fabric.link_rate_mbps)
    big = Fabric(ls.topo, ls.params, ls.link_rate_mbps, ls.switches,
                 [type(ln)(ln.a, ln.a_port, ln.b, ln.b_port, ln.capacity_mbps * half) for ln in ls.links], ls.hosts)
    return big, {h.name: ls.hosts[i].name for i, h in enumerate(fabric.hosts)}


def remap_workload(wl: Workload, fabric: Fabric, other: Fabric, host_map: dict[str, str]) -> Workload:
    """The same workload on another fabric: host names through ``host_map``, mice servers by their IP."""
    ip = {h.name: h.ip for h in other.hosts}
    server = {h.ip: ip[host_map[h.name]] for h in fabric.hosts}
    return Workload([(host_map[s], host_map[t]) for s, t in wl.elephants],
                    {host_map[c]: [(o, server[srv], size) for o, srv, size in sched] for c, sched in wl.mice.items()},
                    wl.duration)


def _mode_parts(mode: str) -> tuple[str, bool]:
    """(the controller's mode, isolation); ``hedera-1s`` is Hedera polling every second (the paper's
    setting), ``freeway-paper`` Freeway as the paper has it (elephants never on low-latency links:
    ``lend`` off), ``perpkt`` per-packet load balancing (ns-3 only)."""
    base, _, iso = mode.partition("+")
    if base not in BASE_MODES or iso not in ("", "isolation"):
        raise ExperimentError(f"--modes: unknown mode {mode!r} (known: {', '.join(MODES)})")
    return base, iso == "isolation"


def _controller_settings(base: str) -> dict:
    """Settings a mode's name implies, as a config file gives them (``hedera-1s``: a poll a second;
    ``freeway-paper``: no lending)."""
    if base == "hedera-1s":
        return {"hedera_poll_s": 1.0}
    if base == "freeway-paper":
        return {"freeway_settings": [["lend", "off"]]}
    return {}


def _controller_flags(base: str) -> list[str]:
    """``_controller_settings`` as ``freeway controller`` flags (its own table of them)."""
    from ryu_apps.cli import FLAGS
    from ryu_apps.config import SECTIONS

    out = []
    for key, value in _controller_settings(base).items():
        if key in SECTIONS:
            out += [x for k, v in value for x in ("--" + key.replace("_settings", "-set"), f"{k}={v}")]
        else:
            out += [FLAGS[key], f"{value:g}"]
    return out


def _controller_mode(base: str) -> str:
    return {"hedera-1s": "hedera", "freeway-paper": "freeway"}.get(base, base)


ANNOUNCERS = ("send", "hook", "none")  # none: the elephants do not announce themselves (monitoring finds them)


def elephant_command(announce: str, py: str, to: str, port: int, cport: int, seconds: float) -> str:
    """The command that runs one iperf3 elephant in a Freeway mode, announced by ``freeway send`` (which
    picks the source port and then runs iperf3 from it) or by the connect() hook under ``freeway run``
    (iperf3 unmodified, given a source port so that the rule matches its data connection and not its
    control connection)."""
    iperf = f"iperf3 -c {to} -p {port} -t {seconds:.0f} -J"
    if announce == "hook":
        return (f"{Path(py).with_name('freeway')} run --stats --rule 'port={port} sport={cport} size=1G' -- "
                f"{iperf} --cport {cport}")
    return (f"{py} -m ryu_apps.cli send --to {to} --port {port} --size 1G --json -- "
            f"iperf3 -c {{to}} -p {{port}} --cport {{cport}} -t {seconds:.0f} -J")


def run_one(out: Path, label: str, fabric: Fabric, mode: str, wl: Workload, with_mice: bool = True,
            with_elephants: bool = True, announce: str = "send", controller_config: str | None = None,
            static_arp: bool = False, mtu: int = 1500, switch_processes: int = 1, tcp: str = "cubic",
            host_demote: int = 0) -> dict:
    """One run: fresh controller and fabric (every interface at ``mtu`` bytes, the switches spread over
    ``switch_processes`` Open vSwitch processes, every host's TCP ``tcp``), the workload, results. In Freeway modes the elephants are
    announced by ``announce``: ``send`` (the host agent) or ``hook`` (the connect() hook). The controller
    reads ``controller_config`` (a config file) when given; the run's own flags override it. With
    ``static_arp`` the hosts get every neighbour's MAC once they all reach each other (no ARP during the
    run). ``host_demote``: every host demotes its TCP connections after that many bytes (``freeway
    host-demote``) and, with isolation, the ToRs keep the mark (``host_demotion``)."""
    from ryu_apps.programs.isolation import IsolationConfig

    base, iso = _mode_parts(mode)
    extra_flags = _controller_flags(base) + (["--isolation-set", "host_demotion=true"] if host_demote and iso else [])
    base = _controller_mode(base)
    d = out / label
    d.mkdir(parents=True, exist_ok=True)
    for old in ("events.jsonl", "controller.log"):  # the controller appends: a rerun into the same --out
        (d / old).unlink(missing_ok=True)  # must not analyse an earlier run's events
    fabric.save(d / "fabric.json")
    extra = ((["--config", controller_config] if controller_config else []) + (["--isolation", "on"] if iso else [])
             + extra_flags)
    t_run = time.time()
    with SwitchProcesses(switch_processes) as sp, \
            ControllerProcess(d / "fabric.json", mode=base, log_file=d / "controller.log",
                              extra=extra + (["--ovsdb", sp.ovsdb_setting] if sp.ovsdb_setting else []),
                              events_file=d / "events.jsonl") as ctl, \
            FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(fabric.link_rate_mbps, mtu,
                                                                           target=ctl.sflow_target),
                      isolation=IsolationConfig() if iso else None, mtu=mtu, processes=sp, tcp=tcp) as fn:
        secs, failed = fn.wait_reachable(60)
        if failed:
            raise ExperimentError(f"{label}: {len(failed)} host pairs unreachable before the run")
        if static_arp:
            fn.static_neighbours()
        if host_demote:
            demote_hosts(fn, fabric, host_demote)
        ip = {h.name: h.ip for h in fabric.hosts}
        core_drops0 = _core_drops(fabric)
        py = sys.executable
        if with_mice:
            for h in fabric.hosts:
                fn.host(h.name).cmd(f"{py} -m experiments.hosts.rr server --port {RR_PORT} >/dev/null 2>&1 &")
        els = []
        if with_elephants:
            for i, (s, t) in enumerate(wl.elephants):
                fn.host(t).cmd(f"iperf3 -s -1 -p {6000 + i} -D >/dev/null 2>&1")
                els.append((i, s, t))
            time.sleep(0.5)
            for i, s, t in els:
                iperf = f"iperf3 -c {ip[t]} -p {6000 + i} -t {wl.duration:.0f} -J"
                if base == "freeway" and announce != "none":
                    cmd = elephant_command(announce, py, ip[t], 6000 + i, 46000 + i, wl.duration)
                else:
                    cmd = iperf
                fn.host(s).cmd(f"{cmd} > {d / f'elephant-{i}.out'} 2>&1 &")
        time.sleep(2.0 if with_elephants else 0.5)
        if with_mice:
            for h in fabric.hosts:
                sched = d / f"mice-{h.name}.json"
                sched.write_text(json.dumps(wl.mice.get(h.name, [])))
                fn.host(h.name).cmd(f"{py} -m experiments.hosts.rr schedule --file {sched} --port {RR_PORT} "
                                    f"> {d / ('mice-' + h.name + '.out')} 2>&1 &")
        t0 = time.time()
        whole, step, cpu = SwitchCpu.of(sp.vswitchd_pids()), SwitchCpu.of(sp.vswitchd_pids()), []
        while time.time() - t0 < wl.duration:
            time.sleep(min(5.0, wl.duration - (time.time() - t0) + 0.01))
            cpu.append(step.busy())
            busy = "" if cpu[-1] is None else (f", switch main thread {cpu[-1]:.0%} busy" if sp.n == 1 else
                                               f", busiest of {sp.n} switch main threads {cpu[-1]:.0%} busy")
            if cpu[-1] is not None and step.last_waiting is not None:
                busy += f" and {step.last_waiting:.0%} waiting for a CPU"
            print(f"[{label}] {time.time() - t0:4.0f}/{wl.duration:.0f} s{busy}", flush=True)
        mean = whole.busy()
        switch_cpu = {"mean": mean, "max": max((c for c in cpu if c is not None), default=None),
                      "waiting": whole.last_waiting if mean is not None else None,
                      "processes": [{"busy": b, "waiting": w} for b, w in getattr(whole, "last_each", [])] or None}
        elephants = []
        deadline = time.time() + 20
        for i, s, t in els:
            p = d / f"elephant-{i}.out"
            while time.time() < deadline and '"end"' not in (p.read_text() if p.exists() else ""):
                time.sleep(0.5)
            time.sleep(0.2)
            elephants.append(_iperf_result(i, s, t, p.read_text() if p.exists() else ""))
        mice = []
        if with_mice:
            deadline = time.time() + 30  # the last mice may still be running: give them time to finish
            for h in fabric.hosts:
                want = len(wl.mice.get(h.name, []))
                p = d / f"mice-{h.name}.out"
                while time.time() < deadline and (p.read_text().count("\n") if p.exists() else 0) < want:
                    time.sleep(0.5)
            for h in fabric.hosts:
                fn.host(h.name).cmd("kill %1 %2 >/dev/null 2>&1")
                p = d / f"mice-{h.name}.out"
                for line in p.read_text().splitlines() if p.exists() else []:
                    if line.startswith("{"):
                        r = json.loads(line)
                        r["client"] = h.name
                        mice.append(r)
        core_drops = {k: v - core_drops0.get(k, 0) for k, v in _core_drops(fabric).items()}
        events = ctl.events()
        demoted = demoted_packets(fn, fabric) if host_demote else 0
    return {"label": label, "mode": mode, "mice": mice, "elephants": elephants, "core_drops": core_drops,
            "events": events, "switch_cpu": switch_cpu, "seconds": round(time.time() - t_run, 1),
            "host_demoted_packets": demoted}


def demoted_packets(fn, fabric: Fabric) -> int:
    """Packets the hosts' demotion rules have marked so far, summed over every emulated host."""
    from ryu_apps.host.demote import LIST_COMMAND, counted

    return sum(counted(fn.host(h.name).cmd(f"{LIST_COMMAND} 2>/dev/null"))[0] for h in fabric.hosts)


def demote_hosts(fn, fabric: Fabric, after_bytes: int) -> None:
    """``freeway host-demote --after after_bytes`` in every emulated host (its own network namespace)."""
    for h in fabric.hosts:
        out = fn.host(h.name).cmd(f"{sys.executable} -m ryu_apps.cli host-demote --after {int(after_bytes)} 2>&1; "
                                  "echo rc=$?").strip().splitlines()
        if not out or out[-1] != "rc=0":
            raise ExperimentError(f"--host-demote: {h.name}: {' '.join(out[:-1]) or 'failed'}")


def run_flows(out: Path, label: str, fabric: Fabric, mode: str, flows: list, mtu: int = 1500,
              controller_config: str | None = None, grace_s: float = 30.0, tcp: str = "cubic") -> dict:
    """A flow list on the emulator (``experiments.hosts.hostflows`` on every host, as ``fw::Host`` runs it on
    ns-3): fresh controller and fabric, the flows started at their times, results in the shape the ns-3
    engine gives (mice, elephants of no size, sized bulk flows), so that one analysis reads both."""
    from experiments.workloads.flowlist import MICE_BOUNDARY, dport_of
    from ryu_apps.programs.isolation import IsolationConfig

    base, iso = _mode_parts(mode)
    if base in NS3_ONLY:
        raise ExperimentError(f"--modes: {mode} runs only on --engine ns3")
    extra_flags = ["--hedera-poll", "1"] if base == "hedera-1s" else []
    base = _controller_mode(base)
    d = out / label
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*.out"):
        old.unlink()
    for old in ("events.jsonl", "controller.log"):
        (d / old).unlink(missing_ok=True)
    fabric.save(d / "fabric.json")
    extra = ((["--config", controller_config] if controller_config else []) + (["--isolation", "on"] if iso else [])
             + extra_flags)
    ip = {h.name: h.ip for h in fabric.hosts}
    py = sys.executable
    t_run = time.time()
    with ControllerProcess(d / "fabric.json", mode=base, log_file=d / "controller.log", extra=extra,
                           events_file=d / "events.jsonl") as ctl, \
            FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(fabric.link_rate_mbps, mtu,
                                                                           target=ctl.sflow_target),
                      isolation=IsolationConfig() if iso else None, mtu=mtu, tcp=tcp) as fn:
        _secs, failed = fn.wait_reachable(60)
        if failed:
            raise ExperimentError(f"{label}: {len(failed)} host pairs unreachable before the run")
        core_drops0 = _core_drops(fabric)
        sinks: dict[str, set[int]] = {}
        for n, f in enumerate(flows):
            if f.kind == "bulk":
                sinks.setdefault(f.dst, set()).add(dport_of(n, f))
        for h in sorted({f.dst for f in flows if f.kind == "rr"}):
            fn.host(h).cmd(f"{py} -m experiments.hosts.rr server --port {RR_PORT} >/dev/null 2>&1 &")
        for h, ports in sinks.items():
            fn.host(h).cmd(f"{py} -m experiments.hosts.hostflows sink --ports {','.join(map(str, sorted(ports)))} "
                           f"> {d / ('sink-' + h + '.out')} 2>&1 &")
        time.sleep(1.0)
        by_src: dict[str, list[dict]] = {}
        for n, f in enumerate(flows):
            by_src.setdefault(f.src, []).append(
                {"id": n, "kind": f.kind, "start": f.start, "bytes": f.bytes, "dst_ip": ip[f.dst], "sport": f.sport,
                 "dport": dport_of(n, f), "stop": f.stop, "rate_mbps": f.rate_mbps,
                 "announced": f.announced and base == "freeway"})
        t0 = time.time() + 1.0
        for h, mine in by_src.items():
            (d / f"flows-{h}.json").write_text(json.dumps(mine))
            fn.host(h).cmd(f"{py} -m experiments.hosts.hostflows run --file {d / f'flows-{h}.json'} --t0 {t0} "
                           f"--rr-port {RR_PORT} > {d / ('flows-' + h + '.out')} 2>&1 &")
        last = max([f.start for f in flows] + [f.stop or 0 for f in flows])
        deadline = t0 + last + grace_s
        while time.time() < deadline:
            done = sum((d / f"flows-{h}.out").read_text().count("\n") if (d / f"flows-{h}.out").exists() else 0
                       for h in by_src)
            elapsed = time.time() - t0
            print(f"[{label}] {elapsed:5.0f} s, {done}/{len(flows)} flows done", flush=True)
            if done >= len(flows) and elapsed >= last:
                break
            time.sleep(min(5.0, max(0.2, deadline - time.time())))
        time.sleep(1.0)  # the sinks' last lines
        for h in fabric.hosts:
            fn.host(h.name).cmd("kill %1 %2 %3 >/dev/null 2>&1")
        core_drops = {k: v - core_drops0.get(k, 0) for k, v in _core_drops(fabric).items()}
        events = ctl.events()
    sent = {}
    for h in by_src:
        p = d / f"flows-{h}.out"
        for line in p.read_text().splitlines() if p.exists() else []:
            if line.startswith("{"):
                r = json.loads(line)
                sent[r["id"]] = r
    got = {}
    for h in sinks:
        p = d / f"sink-{h}.out"
        for line in p.read_text().splitlines() if p.exists() else []:
            if line.startswith("{"):
                r = json.loads(line)
                got[(r["from"], r["sport"])] = r
    mice, elephants, bulk = [], [], []
    for n, f in enumerate(flows):
        s = sent.get(n, {})
        if f.kind == "rr":
            mice.append({"client": f.src, "server": ip[f.dst], "size": f.bytes, "start": f.start,
                         "fct_s": s.get("fct_s") if s.get("ok") else None, "ok": bool(s.get("ok")),
                         "rto": s.get("rto"), "sport": s.get("sport"), "id": n})
            continue
        r = got.get((ip[f.src], s.get("sport")), {})
        nbytes = r.get("bytes", 0)
        answer = s.get("answer")
        if f.bytes == 0:
            span = (f.stop or last) - f.start
            elephants.append({"id": n, "src": f.src, "dst": f.dst, "goodput_mbps": nbytes * 8 / span / 1e6,
                              "bytes": nbytes, "announced": answer, "sport": s.get("sport")})
            continue
        done_at = r.get("done")
        fct = round(done_at - (t0 + f.start), 6) if done_at else None
        started = s.get("answered") or (t0 + f.start)
        rec = {"id": n, "src": f.src, "dst": f.dst, "size": f.bytes, "start": f.start, "bytes": nbytes,
               "fct_s": fct, "ok": done_at is not None, "rto": None, "announced": answer,
               "goodput_mbps": nbytes * 8 / (done_at - started) / 1e6 if done_at and done_at > started else None}
        bulk.append(rec)
        if f.bytes < MICE_BOUNDARY:
            mice.append({"client": f.src, "server": ip[f.dst], "size": f.bytes, "start": f.start,
                         "fct_s": fct, "ok": rec["ok"], "rto": None})
    return {"label": label, "mode": mode, "mice": mice, "elephants": elephants, "bulk": bulk,
            "core_drops": core_drops, "events": events, "switch_cpu": None, "engine": "emulator",
            "seconds": round(time.time() - t_run, 1)}


def _iperf_result(i, s, t, raw: str) -> dict:
    import re

    lines = raw.strip().splitlines()
    ack = None
    hook = [ln for ln in lines if ln.startswith("freeway hook")]  # the hook's statistics (announce hook)
    lines = [ln for ln in lines if not ln.startswith("freeway hook")]
    raw = "\n".join(lines)
    if lines and lines[0].startswith("{") and '"answer"' in lines[0]:
        ack = json.loads(lines[0])
        raw = "\n".join(lines[1:])
    elif hook:
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (ACKed|NACKed|timed out)", hook[-1])}
        ack = {"answer": "ack" if counts.get("ACKed") else "nack" if counts.get("NACKed") else "none"}
    try:
        end = json.loads(raw)["end"]
        return {"id": i, "src": s, "dst": t, "goodput_mbps": end["sum_received"]["bits_per_second"] / 1e6,
                "announced": (ack or {}).get("answer")}
    except (ValueError, KeyError):
        return {"id": i, "src": s, "dst": t, "goodput_mbps": 0.0, "error": raw[-200:],
                "announced": (ack or {}).get("answer")}


def _core_drops(fabric: Fabric) -> dict[str, int]:
    """Packets dropped by the egress queues of core (top-tier) switch ports (tc qdisc counters)."""
    import re
    import subprocess

    out = {}
    top = max(s.level for s in fabric.switches.values())
    for ln in fabric.links:
        for sw, port in ((ln.a, ln.a_port), (ln.b, ln.b_port)):
            if fabric.switches[sw].level == top:
                dev = f"{sw}-eth{port}"
                r = subprocess.run(["tc", "-s", "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
                out[dev] = sum(int(x) for x in re.findall(r"dropped (\d+)", r))
    return out


def analyse(run: dict, fabric: Fabric) -> dict:
    """Per-run metrics: mice FCT (overall, by size), elephants, link utilisation (LOL/HOL), drops."""
    mice = run["mice"]
    els = run["elephants"]
    snaps = [e for e in run["events"] if e.get("type") == "links"]
    switch_links = {f"{a}>{b}" for a in fabric.switches for b in fabric.neighbors(a)}
    util = {"all": [], "lol": [], "hol": []}
    lol_series = []
    for s in snaps[2:-1]:  # skip start-up and the last partial second
        lol = set(s.get("lol_link_names", []))
        for key, u in s["utilisation"].items():
            if key in switch_links:
                util["all"].append(u)
                if "lol_link_names" in s:
                    util["lol" if key in lol else "hol"].append(u)
        lol_series.append({"t": s["time"], "lol_paths": s.get("lol_paths", {}), "lol_min": s.get("lol_min"),
                           "mice_load": sum(v for k, v in s["utilisation"].items() if k in lol) if lol else None})
    return {
        "mode": run["mode"], "label": run["label"],
        "mice": stats.fct_summary(mice),
        "elephants": {"n": len(els), "aggregate_mbps": sum(e["goodput_mbps"] for e in els),
                      "per_flow_mbps": [round(e["goodput_mbps"], 3) for e in els]},
        "link_utilisation": {k: {"n": len(v), "p50": stats.percentile(v, 50), "p90": stats.percentile(v, 90)}
                             for k, v in util.items()},
        "core_drops": sum(run["core_drops"].values()),
        "switch_cpu": run.get("switch_cpu"),
        "host_demoted_packets": run.get("host_demoted_packets", 0),
        "_util": util, "_lol_series": lol_series, "_mice": mice,
    }


def merge_repeats(analyses: list[dict]) -> dict:
    """One run's analysis from repeats of it: mice FCTs and link loads pooled, elephant goodput, drops and
    switch load averaged, and each repeat's own headline numbers kept under ``repeats``."""
    if len(analyses) == 1:
        return analyses[0]
    mice = [m for a in analyses for m in a["_mice"]]
    util = {k: [u for a in analyses for u in a["_util"][k]] for k in ("all", "lol", "hol")}
    aggs = [a["elephants"]["aggregate_mbps"] for a in analyses]
    flows = [a["elephants"]["per_flow_mbps"] for a in analyses]
    cpus = [a["switch_cpu"] for a in analyses if a.get("switch_cpu") and a["switch_cpu"].get("mean") is not None]
    return {
        "mode": analyses[0]["mode"], "label": analyses[0]["label"],
        "mice": stats.fct_summary(mice),
        "elephants": {"n": analyses[0]["elephants"]["n"], "aggregate_mbps": sum(aggs) / len(aggs),
                      "per_flow_mbps": [round(sum(f) / len(f), 3) for f in zip(*flows, strict=True)] if flows else []},
        "link_utilisation": {k: {"n": len(v), "p50": stats.percentile(v, 50), "p90": stats.percentile(v, 90)}
                             for k, v in util.items()},
        "core_drops": round(sum(a["core_drops"] for a in analyses) / len(analyses)),
        "switch_cpu": {"mean": round(sum(c["mean"] for c in cpus) / len(cpus), 3),
                       "max": max((c["max"] for c in cpus if c.get("max") is not None), default=None),
                       "waiting": (round(sum(c["waiting"] for c in cpus) / len(cpus), 3)
                                   if all(c.get("waiting") is not None for c in cpus) else None)}
        if cpus else None,
        "repeats": [{"mice_p50": a["mice"]["all"]["p50"], "mice_p99": a["mice"]["all"]["p99"],
                     "with_rto": a["mice"].get("with_rto"), "elephant_mbps": a["elephants"]["aggregate_mbps"]}
                    for a in analyses],
        "_util": util, "_lol_series": analyses[0]["_lol_series"], "_mice": mice,
    }


SPREAD_KEYS = ("mice_p99_ms", "elephant_mbps", "p99_vs_floor", "goodput_vs_ceiling", "p99_vs_ecmp", "goodput_vs_ecmp")


def add_spread(table: list[dict], per_repeat: list[list[dict]]) -> None:
    """Each row gets, per headline number, the lowest and highest over the repeats, each repeat's ratios
    taken against that repeat's own ECMP, floor and ceiling."""
    for row in table:
        mine = [r for t in per_repeat for r in t if r["mode"] == row["mode"]]
        row["spread"] = {k: [min(v), max(v)] if (v := [r[k] for r in mine if r[k] is not None]) else None
                         for k in SPREAD_KEYS}


def run_experiment(scenario: str, modes: list[str], duration: float, seed: int, out: Path, k: int = 4,
                   mice_load: float = 0.1, dist: str = "websearch", boundary: float = 100_000,
                   references: bool = True, link_mbps: float = 10.0, repeats: int = 1,
                   announce: str = "send", controller_config: str | None = None, static_arp: bool = False,
                   mtu: int = 1500, switch_processes: int = 1, engine: str = "emulator", topo: str = "fattree",
                   ns3: dict | None = None, jobs: int = 0, queues: str | None = None, tcp: str = "cubic",
                   mice_after: float | None = None, host_demote: int = 0) -> dict:
    """``engine``: ``emulator`` or ``ns3`` (``ns3``: the engine's ``Settings`` fields to set, e.g. tcp,
    link_delay_s; ``jobs``: runs at once, 0 for one per core). ``queues``: every switch port's discipline
    in every run (``topology.queues``: fifo, strict, cq, with +ecn, +pfc); by default a mode's own: strict
    with +isolation, fifo without. ``+isolation`` is the controller's program (marks, classification,
    meters), ``queues`` what the ports do with it; the emulator carries only the defaults. ``tcp``: the
    hosts' congestion control on either engine (set in every emulated host, whatever the machine's
    default). ``mice_after`` (permutation): mice at ``mice_load`` join the elephants that many seconds
    into the run, until its end (by default a permutation has no mice). ``host_demote``: every host demotes a
    TCP connection to the elephant DSCP after that many bytes, on either engine, and with isolation the ToRs
    keep the mark (``host_demotion``; 0: off)."""
    if scenario not in SCENARIOS:
        raise ExperimentError(f"scenario: unknown {scenario!r} (known: {', '.join(SCENARIOS)})")
    if engine not in ENGINES:
        raise ExperimentError(f"--engine: unknown {engine!r} (known: {', '.join(ENGINES)})")
    for m in modes:
        base, _ = _mode_parts(m)
        if base in NS3_ONLY and engine != "ns3":
            raise ExperimentError(f"--modes: {m} runs only on --engine ns3 (no OpenFlow switch balances each packet "
                                  "to its least-loaded next hop)")
    if duration < 5:
        raise ExperimentError("--duration: at least 5 seconds")
    if not 0.5 <= link_mbps <= (100_000 if engine == "ns3" else 1000):
        raise ExperimentError(f"--link-mbps: must be between 0.5 and {100_000 if engine == 'ns3' else 1000}, "
                              f"got {link_mbps}")
    if not 1 <= repeats <= 20:
        raise ExperimentError(f"--repeat: must be between 1 and 20, got {repeats}")
    if announce not in ANNOUNCERS:
        raise ExperimentError(f"--announce: must be one of {', '.join(ANNOUNCERS)}, got {announce!r}")
    if queues is not None:
        from topology.queues import SettingError as QueueError
        from topology.queues import check_discipline

        try:
            check_discipline(queues, engine)
        except QueueError as e:
            raise ExperimentError(f"--{e}") from None
        if engine == "emulator":
            raise ExperimentError("--queues: the emulator's ports follow the mode (strict with +isolation, fifo "
                                  "without); other disciplines need --engine ns3")
    if engine == "ns3" and (announce == "hook" or static_arp or switch_processes != 1):
        raise ExperimentError("--announce hook, --static-arp and --switch-processes are the emulator's; ns-3 hosts "
                              "announce as freeway send does, have no ARP and no Open vSwitch process")
    from topology.queues import SettingError, check_mtu

    try:
        check_mtu(mtu)
    except SettingError as e:
        raise ExperimentError(f"--{e}") from None
    try:
        check_count(switch_processes)
    except ProcessError as e:
        raise ExperimentError(f"--{e}") from None
    if controller_config:
        from ryu_apps.config import ConfigError, load_file

        try:
            loaded = load_file(controller_config)  # every key and value checked before the first run starts
        except ConfigError as e:
            raise ExperimentError(f"--controller-config: {e}") from None
        controller_config = str(Path(controller_config).resolve())
    else:
        loaded = {}
    out.mkdir(parents=True, exist_ok=True)
    fabric = build_fabric(topo, k, link_mbps)
    if scenario == "mixed":
        wl = mixed_workload(fabric, duration, seed, mice_load, dist, boundary)
    else:
        from experiments.workloads.flowlist import FlowListError, permutation

        try:
            perm = permutation(fabric, seed, duration)
        except FlowListError as e:
            raise ExperimentError(str(e)) from None
        mice = {}
        if mice_after is not None:
            if not MICE_OFFSET_S <= mice_after <= duration - 1:
                raise ExperimentError(f"--mice-after: must be between {MICE_OFFSET_S:g} and the duration less "
                                      f"1 s ({duration - 1:g}), got {mice_after:g}")
            # (both engines start the mice MICE_OFFSET_S after the elephants)
            mice = mice_schedules(fabric, duration - MICE_OFFSET_S, random.Random(seed), mice_load, dist, boundary,
                                  mice_after - MICE_OFFSET_S)
        wl = Workload([(f.src, f.dst) for f in perm], mice, duration)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    config = {"scenario": scenario, "engine": engine, "topo": topo, "k": k, "fabric": fabric.params,
              "link_mbps": link_mbps, "modes": modes, "duration_s": duration, "seed": seed,
              "mice_load": mice_load, "distribution": dist, "mice_boundary_bytes": boundary,
              "elephants": wl.elephants, "mice_flows": sum(len(v) for v in wl.mice.values()),
              "repeats": repeats, "announce": announce, "controller_config": controller_config,
              "static_arp": static_arp, "mtu": mtu, "switch_processes": switch_processes, "tcp": tcp,
              "mice_after_s": mice_after, "host_demote_bytes": host_demote}
    if engine == "emulator" and tcp == "dctcp":
        raise ExperimentError("--tcp: dctcp needs ECN marks, which the emulator's queues cannot give (--engine ns3 "
                              "with --queues ...+ecn)")
    if engine == "ns3":
        from experiments.engines.ns3.engine import Settings

        settings = Settings(mtu=mtu, seed=seed, **{"tcp": tcp, **(ns3 or {})}, demote_after_bytes=host_demote)
        if host_demote:
            iso_set = dict(tuple(kv) for kv in loaded.get("isolation_settings", ()))
            loaded = {**loaded, "isolation_settings": tuple({**iso_set, "host_demotion": True}.items())}
        config["ns3"] = dict(settings.__dict__)
        config["queues"] = queues
    print(f"[experiment] {scenario} on a {topo} {fabric.params} ({engine}): {len(wl.elephants)} elephants, "
          f"{config['mice_flows']} mice over {duration:.0f} s, modes {', '.join(modes)}", flush=True)
    with_mice = bool(config["mice_flows"])
    plan = [(m, m, fabric, wl, True) for m in modes]
    if references:  # the floor: mice alone, same fabric; the ceiling: the whole workload, no fabric in the way
        nb, hmap = non_blocking(fabric)
        refs = [("ceiling (non-blocking switch)", "ecmp", nb, remap_workload(wl, fabric, nb, hmap), True)]
        if with_mice:
            refs.insert(0, ("floor (mice alone)", "ecmp", fabric, wl, False))
        plan = refs + plan
    runs: dict[str, list[dict]] = {label: [] for label, *_ in plan}
    each: list[dict] = [{} for _ in range(repeats)]  # per repeat: label -> analysis
    todo = [(rep, item) for rep in range(repeats) for item in plan]  # whole rounds: slow drifts hit every mode alike
    if engine == "ns3" and repeats > 1 and scenario == "mixed":
        # a simulator repeats itself exactly: its rounds are the workload drawn with seeds seed, seed+1, ...
        todo = []
        for rep in range(repeats):
            wl_rep = mixed_workload(fabric, duration, seed + rep, mice_load, dist, boundary)
            for label, mode, fab, work, el_on in plan:
                if fab is not fabric:
                    work = remap_workload(wl_rep, fabric, fab, non_blocking(fabric)[1])
                else:
                    work = wl_rep
                todo.append((rep, (label, mode, fab, work, el_on)))
        config["ns3_rounds"] = "the workload drawn with seeds seed .. seed + repeats - 1 (ns-3 is deterministic)"

    def one(i: int, rep: int, item) -> dict:
        label, mode, fab, work, el_on = item
        tag = f" (repeat {rep + 1}/{repeats})" if repeats > 1 else ""
        print(f"[experiment] run {i}/{len(todo)}: {label}{tag}", flush=True)
        name = label.split(" ")[0] + (f"-{rep + 1}" if repeats > 1 else "")
        if engine == "ns3":
            return ns3_run(out, name, fab, mode, work, with_mice, el_on, settings, loaded, seed + rep, queues,
                           announce != "none")
        return run_one(out, name, fab, mode, work, with_mice, el_on, announce, controller_config, static_arp, mtu,
                       switch_processes, tcp, host_demote)

    if engine == "ns3":
        import os
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            done = list(pool.map(lambda a: one(*a), [(i + 1, rep, item) for i, (rep, item) in enumerate(todo)]))
    else:
        done = [one(i + 1, rep, item) for i, (rep, item) in enumerate(todo)]
    for (rep, (label, _mode, fab, _work, _el)), run in zip(todo, done, strict=True):
        tag = f" (repeat {rep + 1}/{repeats})" if repeats > 1 else ""
        run["repeat"] = rep + 1
        runs[label].append(run)
        each[rep][label] = r = analyse(run, fab)
        print(f"[experiment] {label}{tag}: mice p50 {_ms(r['mice']['all']['p50'])} "
              f"p99 {_ms(r['mice']['all']['p99'])}, elephants {r['elephants']['aggregate_mbps']:.2f} Mbit/s",
              flush=True)
    rows = []
    for label, rl in runs.items():
        for run in rl:
            common = {"run": label.split(" ")[0], "repeat": run["repeat"], "mode": run["mode"]}
            rows += [{**common, "kind": "mouse", "client": m["client"], "server": m.get("server"),
                      "size": m["size"], "fct_s": m.get("fct_s"), "ok": m.get("ok")} for m in run["mice"]]
            rows += [{**common, "kind": "elephant", "client": e["src"], "server": e["dst"],
                      "goodput_mbps": e["goodput_mbps"], "announced": e.get("announced")} for e in run["elephants"]]
    stats.write_csv(out / "flows.csv", rows)
    results = {label: merge_repeats([e[label] for e in each]) for label in runs}
    table = comparison(results, modes, references)
    if repeats > 1:
        add_spread(table, [comparison(e, modes, references) for e in each])
    public = {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in results.items()}
    from experiments.analysis.plots import plot_all

    pooled = [{"label": label.split(" ")[0], "mice": [m for run in rl for m in run["mice"]]} for label, rl in runs.items()]
    plots = plot_all(out, results, pooled)
    broken = floor_check(results)
    if broken:
        print("[experiment] the floor is broken: " + "; ".join(broken), flush=True)
    engine_stats = None
    if engine == "ns3":
        engine_stats = {label: [{"seconds": r["seconds"], "simulated_s": r["simulated_s"],
                                 "wall_per_simulated_s": r["wall_per_simulated_s"]} for r in rl]
                        for label, rl in runs.items()}
    stats.write_json(out / "results.json", {"config": config, "valid": not broken, "invalid_because": broken,
                                            "results": public, "table": table, "plots": plots,
                                            "warnings": cpu_warnings(results), "engine_runs": engine_stats})
    return {"config": config, "results": results, "table": table, "plots": plots}


def build_fabric(topo: str, k: int, link_mbps: float) -> Fabric:
    """``fattree``: a k-ary fat-tree; ``leafspine``: k spines, k leaves, k hosts a leaf (k=4: the 4x4 leaf-spine)."""
    if topo == "fattree":
        return fattree(k, link_mbps)
    if topo == "leafspine":
        return leafspine(k, k, k, link_mbps)
    raise ExperimentError(f"--topo: unknown {topo!r} (known: fattree, leafspine)")


def ns3_run(out: Path, label: str, fabric: Fabric, mode: str, wl: Workload, with_mice: bool, with_elephants: bool,
            settings, controller: dict, seed: int, queues: str | None = None, announce: bool = True) -> dict:
    """One run on the packet-level engine: the same workload as a flow list, the same mode; a run already
    written with the same spec is read back, not run again."""
    from dataclasses import replace

    from experiments.engines.ns3.engine import run_one as engine_run
    from experiments.engines.ns3.engine import spec_of, written
    from experiments.workloads.flowlist import from_mixed

    base, iso = _mode_parts(mode)
    work = Workload(wl.elephants if with_elephants else [], wl.mice if with_mice else {}, wl.duration)
    flows = from_mixed(work, fabric, announce=announce and _controller_mode(base) == "freeway")
    st = replace(settings, seed=seed, queues=queues or ("strict" if iso else "fifo"),
                 controller={**controller, **_controller_settings(base)})
    spec = spec_of(label, mode, fabric, _controller_mode(base), iso, flows, st)
    done = written(out, spec)
    if done is not None:
        print(f"[experiment] {label}: already run (its run.json is kept)", flush=True)
        return done
    return engine_run(out, spec)


def _ms(x):
    return "-" if x is None else f"{x * 1e3:.1f} ms"


FLOOR_RTO_FRACTION = 0.01  # more of the floor's mice than this took a retransmission timeout: broken
FLOOR_P50_RATIO = 3.0  # the floor's mice p50 above this many times the non-blocking switch's: broken


def floor_check(results: dict) -> list[str]:
    """Why the floor (mice alone on the fabric) does not measure what the fabric can do, if it does not:
    its mice took retransmission timeouts or failed with nothing else running, or their median is far
    above the same mice's on the non-blocking switch. Then the emulator could not carry the workload on
    this machine, and ratios against the floor mean nothing."""
    floor = results.get("floor (mice alone)")
    if not floor:
        return []
    m, out = floor["mice"], []
    n = (m["all"].get("n") or 0) + (m.get("failed") or 0)
    if n and m.get("with_rto") is not None and m["with_rto"] > FLOOR_RTO_FRACTION * n:
        out.append(f"{m['with_rto']} of the floor's {n} mice took a retransmission timeout with no elephant running")
    if n and (m.get("failed") or 0) > FLOOR_RTO_FRACTION * n:
        out.append(f"{m['failed']} of the floor's {n} mice failed")
    ceil = results.get("ceiling (non-blocking switch)", {}).get("mice", {}).get("all", {})
    p50, ref = m["all"].get("p50"), ceil.get("p50")
    if p50 and ref and p50 > FLOOR_P50_RATIO * ref:
        out.append(f"the floor's mice p50 ({p50 * 1e3:.0f} ms) is {p50 / ref:.1f} times the same mice's on the "
                   f"non-blocking switch ({ref * 1e3:.0f} ms)")
    return out


def comparison(results: dict, modes: list[str], references: bool) -> list[dict]:
    """Each mode's mice p99 and elephant aggregate, as ratios to ECMP and to the limits (none to a
    broken floor: ``floor_check``)."""
    floor = results.get("floor (mice alone)", {}).get("mice", {}).get("all", {}).get("p99")
    if floor_check(results):
        floor = None
    ceiling = results.get("ceiling (non-blocking switch)", {}).get("elephants", {}).get("aggregate_mbps")
    ecmp = results.get("ecmp")
    rows = []
    for m in modes:
        r = results[m]
        p99, agg = r["mice"]["all"]["p99"], r["elephants"]["aggregate_mbps"]
        rows.append({
            "mode": m, "mice_p50_ms": _r(r["mice"]["all"]["p50"], 1e3), "mice_p99_ms": _r(p99, 1e3),
            "mice_with_rto": r["mice"].get("with_rto"), "mice_over_200ms": r["mice"]["over_200ms"],
            "switch_cpu": (r.get("switch_cpu") or {}).get("mean"), "elephant_mbps": round(agg, 2),
            "p99_vs_floor": _div(p99, floor), "goodput_vs_ceiling": _div(agg, ceiling),
            "p99_vs_ecmp": _div(p99, ecmp["mice"]["all"]["p99"]) if ecmp else None,
            "goodput_vs_ecmp": _div(agg, ecmp["elephants"]["aggregate_mbps"]) if ecmp else None,
            "core_drops": r["core_drops"],
        })
    return rows


def _r(x, scale=1.0):
    return None if x is None else round(x * scale, 2)


def _div(a, b):
    return None if a is None or not b else round(a / b, 3)


def print_table(table: list[dict], results: dict) -> None:
    broken = floor_check(results)
    for why in broken:
        print(f"INVALID RUN: {why}")
    if broken:
        print("INVALID RUN: the emulator could not carry this workload on this machine; no ratio to the floor "
              "is given (results.json: \"valid\": false)")
    floor = results.get("floor (mice alone)", {}).get("mice", {}).get("all", {})
    ceil = results.get("ceiling (non-blocking switch)", {}).get("elephants", {})
    if floor:
        print(f"floor (mice alone): p50 {_ms(floor.get('p50'))}, p99 {_ms(floor.get('p99'))}")
    if ceil:
        cm = results["ceiling (non-blocking switch)"]["mice"]["all"]
        print(f"ceiling (non-blocking switch, same mice and elephants): elephants "
              f"{ceil.get('aggregate_mbps', 0):.2f} Mbit/s; its mice p50 {_ms(cm.get('p50'))}, p99 {_ms(cm.get('p99'))}")
    head = f"{'mode':<18} {'mice p50':>9} {'mice p99':>9} {'RTO':>5} {'>200ms':>7} {'eleph Mb/s':>10} " \
           f"{'p99/floor':>9} {'gput/ceil':>9} {'p99/ECMP':>9} {'gput/ECMP':>9} {'core drops':>10} {'OVS busy':>8}"
    print(head)
    for r in table:
        busy = "-" if r.get("switch_cpu") is None else f"{r['switch_cpu']:.0%}"
        rto = "-" if r.get("mice_with_rto") is None else str(r["mice_with_rto"])
        print(f"{r['mode']:<18} {_f(r['mice_p50_ms']):>9} {_f(r['mice_p99_ms']):>9} {rto:>5} {r['mice_over_200ms']:>7} "
              f"{r['elephant_mbps']:>10.2f} {_f(r['p99_vs_floor']):>9} {_f(r['goodput_vs_ceiling']):>9} "
              f"{_f(r['p99_vs_ecmp']):>9} {_f(r['goodput_vs_ecmp']):>9} {r['core_drops']:>10} {busy:>8}")
    if any("spread" in r for r in table):
        print("lowest-highest over the repeats (each repeat against its own ECMP, floor and ceiling):")
        for r in table:
            sp = r["spread"]
            print(f"  {r['mode']:<18} " + ", ".join(f"{k} {_f(sp[k][0])}-{_f(sp[k][1])}" for k in SPREAD_KEYS
                                                 if sp.get(k)))
    for w in cpu_warnings(results):
        print(w)


def cpu_warnings(results: dict, limit: float = SWITCH_CPU_LIMIT) -> list[str]:
    """Runs during which Open vSwitch's forwarding thread was nearly always busy."""
    out = []
    for label, r in results.items():
        c = (r.get("switch_cpu") or {}).get("mean")
        w = (r.get("switch_cpu") or {}).get("waiting") or 0.0
        if c is not None and c + w >= limit:
            waited = f" and {w:.0%} waiting for a CPU the machine's other processes held" if w >= 0.05 else ""
            out.append(f"warning: {label}: the Open vSwitch main thread, which forwards every packet of the "
                       f"emulated fabric, was {c:.0%} busy{waited}; packets also queued inside the emulator, so "
                       f"this run's FCTs and goodput include the machine's limit, not only the network's")
    return out


def _f(x):
    return "-" if x is None else f"{x:.2f}"
