"""The steady state of ``freeway bench fabric-scale`` (issue 41): sFlow from every port of the emulated fabric
and elephants announced by its hosts, against the real controller process.

- ``EmulatedOVSDB``: a real ``ovsdb-server`` holding the emulated switches' bridges, ports and interfaces
  (datapath id, OpenFlow port, ifIndex), as one Open vSwitch host holds Mininet's: the controller's port map
  reads it with ``ovs-vsctl``, as it reads any switch host's (``--ovsdb tcp:127.0.0.1:PORT``).
- ``Load``: a synthetic load on ``pairs`` active ToR pairs (one elephant and a few mice each), every flow
  walked through the emulated tables to find the ports it crosses: the counters each port reports and the
  flow samples each switch takes follow the program the controller installed.
- ``ladder``: the load at the product's defaults (counters every second from every port, flow samples 1-in-10),
  then, if the controller does not keep up, longer counter intervals and sparser sampling until it does:
  the shortest counter interval and densest sampling it sustains, and why the others fail (the kernel's
  drops on its sFlow socket, its event loop's lag).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from monitoring.sflow import FiveTuple
from topology.fabric import Fabric

WINDOW_S = 10.0  # one level of the ladder
SUSTAINED_LOSS = 0.01  # a level is sustained when at most this share of the datagrams sent is lost
OFFERED_MIN = 0.95  # ... and the agents sent at least this share of every port's counters an interval (its load)
PERIOD_TARGET_MS = 100.0  # ... and the controller keeps up with it when its period's median stays within this
COUNTER_LADDER = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0)
SAMPLING_LADDER = (10, 100, 1000)


class EmulatedOVSDB:
    """``ovsdb-server`` on a fresh database in ``d``, holding every switch of ``fabric`` as a bridge: its
    ports (to switches and to hosts) with an ifIndex unique on the host. ``endpoint`` is what the
    controller's ``--ovsdb`` takes; ``ifindex[(switch, port)]`` what each port reports in sFlow."""

    def __init__(self, fabric: Fabric, d: Path):
        self.fabric, self.d = fabric, d.resolve()  # (ovsdb-server takes a relative unixctl path under its rundir)
        self.proc: subprocess.Popen | None = None
        self.ifindex: dict[tuple[str, int], int] = {}
        self.endpoint = ""

    def start(self, timeout: float = 120.0) -> EmulatedOVSDB:
        from experiments.harness.procs import free_port

        db = self.d / "ovsdb.db"
        db.unlink(missing_ok=True)
        subprocess.run(["ovsdb-tool", "create", str(db), "/usr/share/openvswitch/vswitch.ovsschema"], check=True,
                       capture_output=True)
        port = free_port()
        self.proc = subprocess.Popen(["ovsdb-server", str(db), f"--remote=ptcp:{port}:127.0.0.1",
                                      f"--unixctl={self.d / 'ovsdb.ctl'}", f"--log-file={self.d / 'ovsdb.log'}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.endpoint = f"tcp:127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                self._transact(port, self._rows(), timeout)
                return self
            except ConnectionRefusedError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.1)

    def _rows(self) -> list[dict]:
        f = self.fabric
        ports: dict[str, list[int]] = {sw: [f.port_to(sw, n) for n in f.neighbors(sw)] for sw in f.switches}
        for h in f.hosts:
            ports[h.switch].append(h.port)
        ops, bridges, ix = [], [], 1000
        for n, sw in enumerate(sorted(f.switches)):
            refs = []
            for p in sorted(ports[sw]):
                ix += 1
                self.ifindex[(sw, p)] = ix
                ops.append({"op": "insert", "table": "Interface", "uuid-name": f"i{ix}",
                            "row": {"name": f"{sw}-eth{p}", "ifindex": ix, "ofport": p}})
                ops.append({"op": "insert", "table": "Port", "uuid-name": f"p{ix}",
                            "row": {"name": f"{sw}-eth{p}", "interfaces": ["named-uuid", f"i{ix}"]}})
                refs.append(["named-uuid", f"p{ix}"])
            ops.append({"op": "insert", "table": "Bridge", "uuid-name": f"b{n}",
                        "row": {"name": sw, "datapath_id": "%016x" % f.switches[sw].dpid, "ports": ["set", refs]}})
            bridges.append(["named-uuid", f"b{n}"])
        ops.append({"op": "insert", "table": "Open_vSwitch", "row": {"bridges": ["set", bridges]}})
        return ops

    @staticmethod
    def _transact(port: int, ops: list[dict], timeout: float) -> None:
        """One OVSDB transaction over JSON-RPC (RFC 7047); every operation must succeed."""
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(json.dumps({"method": "transact", "params": ["Open_vSwitch", *ops], "id": 1}).encode())
            dec, buf = json.JSONDecoder(), b""
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise RuntimeError("ovsdb-server closed the connection during the transaction")
                buf += chunk
                try:
                    reply, _ = dec.raw_decode(buf.decode())
                    break
                except ValueError:
                    continue
        bad = [r for r in reply.get("result") or [] if isinstance(r, dict) and "error" in r]
        if reply.get("error") or bad:
            raise RuntimeError(f"ovsdb transaction failed: {reply.get('error') or bad[:3]}")

    def stop(self) -> None:
        from experiments.harness.procs import stop_process

        stop_process(self.proc)
        self.proc = None


class Load:
    """A synthetic load on ``pairs`` active ToR pairs drawn with ``seed``: per pair, one elephant at
    ``elephant`` of the access rate and ``mice`` flows at ``mouse`` of it each, from a host of one ToR to a
    host of the other, walked through the emulated tables (``sim``): which ports each flow crosses."""

    def __init__(self, fabric: Fabric, sim, ifindex: dict, pairs: int = 2000, seed: int = 1,
                 elephant: float = 0.2, mice: int = 4, mouse: float = 0.01):
        rng = random.Random(seed)
        first: dict[str, list] = {}
        for h in fabric.hosts:
            first.setdefault(h.switch, []).append(h)
        tors = sorted(first)
        all_pairs = [(a, b) for a in tors for b in tors if a != b]
        chosen = all_pairs if pairs <= 0 or pairs >= len(all_pairs) else rng.sample(all_pairs, pairs)
        self.pairs = chosen
        self.hosts = [(rng.choice(first[a]), rng.choice(first[b])) for a, b in chosen]
        self.port_bps: dict[tuple[str, int], list[float]] = {key: [0.0, 0.0] for key in ifindex}  # in, out
        self.streams: list[list] = []
        self.unrouted = 0
        self.flows = 0
        for n, (src, dst) in enumerate(self.hosts):
            rate = fabric.host_rate_bps(src.ip)
            for j, share in enumerate([elephant] + [mouse] * mice):
                flow = FiveTuple(src.ip, dst.ip, 6, 10000 + (n * (mice + 1) + j) % 50000, 5001)
                t = sim.send(src.name, flow)
                self.flows += 1
                if t.delivered_to != dst.name:
                    self.unrouted += 1
                    continue
                for hop in t.hops:
                    self.port_bps[(hop.switch, hop.in_port)][0] += share * rate
                    self.port_bps[(hop.switch, hop.out_port)][1] += share * rate
                    self.streams.append([ifindex[(hop.switch, hop.in_port)], ifindex[(hop.switch, hop.out_port)],
                                         flow.src, flow.dst, flow.sport, flow.dport, share * rate])
        bridge = {sw: i for i, sw in enumerate(sorted(fabric.switches))}  # (each bridge's agent sends on its own)
        # a port's counters at most its link's rate (flows offered beyond it share it, as TCP would: at k=8
        # with every pair active a host offered 155% of its link, and the estimator refuses, as no
        # measurement, a delta over 1.5 x the link)
        self.ports = [[ix, cap, *(min(cap, b) for b in self.port_bps[(sw, p)]), bridge[sw]]
                      for (sw, p), ix in sorted(ifindex.items(), key=lambda kv: kv[1])
                      for cap in (fabric.capacity_bps(self._link(fabric, sw, p)),)]

    @staticmethod
    def _link(fabric: Fabric, sw: str, port: int) -> tuple[str, str]:
        peer = fabric.peer(sw, port)
        return (sw, peer[0]) if peer else (sw, sw)

    def spec(self, collector: tuple[str, int], seconds: float, counter_interval_s: float, sampling: int,
             seed: int = 1) -> dict:
        return {"collector": list(collector), "agent": "127.0.0.1", "duration_s": seconds,
                "counter_interval_s": counter_interval_s, "sampling": sampling, "frame_bytes": 1500, "seed": seed,
                "ports": self.ports, "streams": self.streams}


def start_agents(spec: dict, d: Path, name: str) -> subprocess.Popen:
    """The sFlow agents (``experiments.benches.sflowload``) in a process of their own; read with ``agents_done``."""
    path, started = d / f"sflow-{name}.json", d / f"sflow-{name}.started"
    started.unlink(missing_ok=True)
    path.write_text(json.dumps({**spec, "started_file": str(started)}))
    proc = subprocess.Popen([sys.executable, "-m", "experiments.benches.sflowload", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(Path(__file__).resolve().parents[2]))
    proc.started_file = started
    return proc


def agents_sending(proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until the agents begin sending (their clock starts; the first counters go out with it): reading
    their ports and streams takes them 1-2 s at k=48, and a warm-up counted from their start was that much
    shorter (the first handshakes of a k=48 run found links not yet measured, 2026-12-05)."""
    deadline = time.monotonic() + timeout
    while not proc.started_file.exists():
        if proc.poll() is not None:
            return  # (``agents_done`` says why)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sFlow agents did not begin sending within {timeout:g} s")
        time.sleep(0.02)


def agents_done(proc: subprocess.Popen, timeout: float) -> dict:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"sFlow agents failed ({proc.returncode}): {err[-500:]}")
    return json.loads(out.strip().splitlines()[-1])


ROLES = ("controller", "collector workers", "agents", "emulator")


def cpu_seconds() -> dict[str, float]:
    """The CPU time (user and system) so far of the processes a level shares the machine with, by role: the
    controller, its sFlow collector's workers, the sFlow agents, and this process (the OpenFlow emulator).
    Only this process and those it started (and theirs) count: a controller or a generator of someone else's
    on the same machine is not this level's."""
    tick, me = os.sysconf("SC_CLK_TCK"), os.getpid()
    out = dict.fromkeys(ROLES, 0.0)
    procs = {}  # pid -> (parent, role, cpu seconds)
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (p / "stat").read_text()
        except OSError:  # (gone meanwhile)
            continue
        pid = int(p.name)
        role = ("collector workers" if "monitoring.worker" in cmd else "agents" if "benches.sflowload" in cmd
                else "controller" if " controller --fabric " in cmd else "emulator" if pid == me else None)
        fields = stat[stat.rindex(")") + 2:].split()  # (from the state on: the parent is the 2nd, utime and
        procs[pid] = (int(fields[1]), role, (int(fields[11]) + int(fields[12])) / tick)  # stime the 12th, 13th)
    for pid, (_, role, cpu) in procs.items():
        if role is None:
            continue
        at, seen = pid, set()
        while at not in (me, 0, 1) and at in procs and at not in seen:  # (up the parents to this process)
            seen.add(at)
            at = procs[at][0]
        if at == me:
            out[role] += cpu
    return out


def udp_drops(port: int) -> int:
    """The kernel's drops for the UDP sockets bound to ``port`` on 127.0.0.1 (their receive buffers were full),
    summed: the collector's workers share the port (of a worker restarted, only the new socket's count)."""
    want = f"0100007F:{port:04X}"
    return sum(int(cols[-1]) for cols in (line.split() for line in Path("/proc/net/udp").read_text().splitlines()[1:])
               if cols[1] == want)


def scrape(api: str) -> dict:
    """The counters and histograms the steady state is judged by, from one ``/metrics`` scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{api}/metrics", timeout=30) as r:
        text = r.read().decode()
    want = {"freeway_sflow_datagrams", "freeway_sflow_flow_samples", "freeway_sflow_interface_samples",
            "freeway_sflow_decode_errors", "freeway_sflow_unmapped_samples", "freeway_period_duration_seconds", "freeway_event_loop_lag_seconds",
            "freeway_elephants", "freeway_handshake_latency_seconds", "freeway_install_confirm_seconds",
            "freeway_gc_pause_seconds", "freeway_event_wait_seconds"}
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        if fam.name not in want:
            continue
        for s in fam.samples:
            if fam.name == "freeway_gc_pause_seconds":  # by generation: its count, its sum, those over 50 ms
                g = s.labels.get("generation")
                if s.name.endswith("_count") or s.name.endswith("_sum"):
                    out[f"gc{g}{s.name[len(fam.name):]}"] = s.value
                elif s.name.endswith("_bucket") and float(s.labels["le"]) == 0.05:
                    out[f"gc{g}_within_50ms"] = s.value
            elif fam.name == "freeway_event_wait_seconds":  # by kind: each its own histogram
                if s.name.endswith("_bucket"):
                    out.setdefault(f"{fam.name}/{s.labels['kind']}:buckets", {})[float(s.labels["le"])] = s.value
            elif s.name.endswith("_bucket"):
                out.setdefault(fam.name + ":buckets", {})[float(s.labels["le"])] = s.value
            elif fam.name == "freeway_elephants":
                out["elephants"] = out.get("elephants", 0) + s.value
            else:
                out[s.name] = s.value
    return out


def quantile(q: float, before: dict, after: dict, name: str) -> float | None:
    """The ``q`` quantile of what a histogram observed between two scrapes, interpolated within its bucket
    as Prometheus's ``histogram_quantile`` does; None if it observed nothing."""
    b0, b1 = before.get(name + ":buckets", {}), after.get(name + ":buckets", {})
    les = sorted(b1)
    counts = [b1[le] - b0.get(le, 0.0) for le in les]
    if not counts or counts[-1] <= 0:
        return None
    rank, lo, below = q * counts[-1], 0.0, 0.0
    for le, c in zip(les, counts, strict=True):
        if c >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((rank - below) / (c - below) if c > below else 1.0)
        lo, below = le, c
    return lo


def level(api: str, sflow_port: int, load: Load, d: Path, interval: float, sampling: int, seconds: float,
          during=None) -> dict:
    """One level: the agents send for ``seconds``; what they sent, what the controller took in and lost,
    its periods and its loop's lag meanwhile. ``during()`` (optional) runs while they send; its answer is
    kept under "during"."""
    before, drops0, cpu0, t0 = scrape(api), udp_drops(sflow_port), cpu_seconds(), time.monotonic()
    proc = start_agents(load.spec(("127.0.0.1", sflow_port), seconds, interval, sampling), d,
                        f"{interval:g}s-1in{sampling}")
    if during is not None:
        agents_sending(proc)
    extra = during() if during is not None else None
    sent = agents_done(proc, seconds + 120)
    time.sleep(1.0)  # what is still in the socket's buffer is read
    after, drops = scrape(api), udp_drops(sflow_port) - drops0
    cpu1, took = cpu_seconds(), time.monotonic() - t0
    got = after.get("freeway_sflow_datagrams_total", 0) - before.get("freeway_sflow_datagrams_total", 0)
    lost = max(0, sent["datagrams"] - got)
    out = {"counter_interval_s": interval, "sampling": sampling, "sent": sent, "received_datagrams": int(got),
           "kernel_drops": drops, "lost_share": round(lost / sent["datagrams"], 4) if sent["datagrams"] else 0.0,
           "interface_samples": int(after.get("freeway_sflow_interface_samples_total", 0)
                                    - before.get("freeway_sflow_interface_samples_total", 0)),
           "flow_samples": int(after.get("freeway_sflow_flow_samples_total", 0)
                               - before.get("freeway_sflow_flow_samples_total", 0)),
           "decode_errors": int(after.get("freeway_sflow_decode_errors_total", 0)
                                - before.get("freeway_sflow_decode_errors_total", 0)),
           "unmapped_samples": int(after.get("freeway_sflow_unmapped_samples_total", 0)
                                   - before.get("freeway_sflow_unmapped_samples_total", 0)),
           "elephants": after.get("elephants", 0),
           "periods": int(after.get("freeway_period_duration_seconds_count", 0)
                          - before.get("freeway_period_duration_seconds_count", 0)),
           # the controller's cyclic collections meanwhile, by generation (its loop does nothing during one)
           "gc": {g: {"collections": int(after.get(f"gc{g}_count", 0) - before.get(f"gc{g}_count", 0)),
                      "pause_ms": round(1000 * (after.get(f"gc{g}_sum", 0) - before.get(f"gc{g}_sum", 0)), 1),
                      "over_50ms": int((after.get(f"gc{g}_count", 0) - before.get(f"gc{g}_count", 0))
                                       - (after.get(f"gc{g}_within_50ms", 0) - before.get(f"gc{g}_within_50ms", 0)))}
                  for g in "012"}}
    # the cores each part used meanwhile (the agents: their own count, over their run), and the workers' CPU
    # time a sample taken in (what decides how much sFlow a core of theirs can take)
    share = {r: round((cpu1[r] - cpu0[r]) / took, 3) for r in ROLES if r != "agents"}
    if sent.get("cpu_s") is not None and sent.get("s"):
        share["agents"] = round(sent["cpu_s"] / sent["s"], 3)
    out["cpu_cores"] = share
    samples = out["interface_samples"] + out["flow_samples"]
    out["worker_us_per_sample"] = (round(1e6 * (cpu1["collector workers"] - cpu0["collector workers"]) / samples, 2)
                                   if samples and cpu1["collector workers"] > cpu0["collector workers"] else None)
    for q in (0.5, 0.99):
        for key, name in (("period", "freeway_period_duration_seconds"), ("loop_lag", "freeway_event_loop_lag_seconds"),
                          ("controller_handshake", "freeway_handshake_latency_seconds"),
                          ("install_confirm", "freeway_install_confirm_seconds")):
            v = quantile(q, before, after, name)
            out[f"{key}_p{int(q * 100)}_ms"] = None if v is None else round(v * 1000, 1)
        for kind in ("elephant", "packet_in", "other"):  # the wait in the controller app's queue (what the
            # handshakes' packet-ins and confirmations no longer share: they are handled as they arrive)
            v = quantile(q, before, after, f"freeway_event_wait_seconds/{kind}")
            out[f"queued_{kind}_p{int(q * 100)}_ms"] = None if v is None else round(v * 1000, 1)
    # the level's load is what the agents managed to send: on two cores, beside the controller and its workers, they
    # fall behind at dense sampling, and a level they offered a sixth of (1-in-10, 2026-12-02: every port's counters
    # 0.17 times a second, 3.5 s behind) lost nothing without being that level
    out["offered_share"] = (round(sent["counter_samples_per_s"] * interval / len(load.ports), 3)
                            if interval and load.ports else None)
    out["offered"] = out["offered_share"] is None or out["offered_share"] >= OFFERED_MIN
    out["sustained"] = (bool(sent["datagrams"]) and out["offered"] and out["lost_share"] <= SUSTAINED_LOSS
                        and out["decode_errors"] == 0)
    # ... and the controller acts on it: its period's median within issue 41's 100 ms (with the collector's
    # workers nothing may be lost while the loop that folds the flow samples and runs the period falls behind)
    out["keeps_up"] = out["sustained"] and (out["period_p50_ms"] or 0.0) <= PERIOD_TARGET_MS
    if extra is not None:
        out["during"] = extra
    return out


def handshake_level(ladder_out: dict) -> tuple[float, int, bool]:
    """The sFlow level the handshakes are timed under: (counter interval, 1-in-N or 0, whether the controller
    kept up with it). The shortest interval and densest sampling it kept up with; if it kept up with none, the
    lightest level tried (the longest interval, then no flow samples, then the sparsest), not no sFlow at all:
    without counters no link is ever measured, and every announce is refused as placed on a load nobody knows
    (all 1,000 were, at k=48 on 2026-12-02, when 1 s + 1-in-1,000 was the only level and lost 14%)."""
    interval, sampling = ladder_out.get("shortest_counter_interval_s"), ladder_out.get("densest_sampling")
    if interval:
        return interval, sampling or 0, True
    tried = [lv for lv in ladder_out.get("levels", []) if lv.get("counter_interval_s")]
    if not tried:
        return 0, 0, False
    light = max(tried, key=lambda lv: (lv["counter_interval_s"], not lv["sampling"], lv["sampling"] or 0))
    return light["counter_interval_s"], light["sampling"] or 0, False


def ladder(api: str, sflow_port: int, load: Load, d: Path, seconds: float = WINDOW_S, progress=print,
           only: list[tuple[float, int]] | None = None) -> dict:
    """The product's defaults first (counters every 1 s, flow samples 1-in-10); if the controller does not keep
    up with them (more than 1% of the datagrams lost, or its period's median over 100 ms),
    counters alone at longer intervals until one is, then flow samples at sparser rates over it. ``only``:
    these (interval, sampling) levels instead, in order (the shortest and densest sustained among them is
    reported)."""
    levels = []

    def run(interval, sampling):
        r = level(api, sflow_port, load, d, interval, sampling, seconds)
        levels.append(r)
        progress(f"[fabric-scale] sFlow counters every {interval:g} s, flow samples "
                 f"{'1-in-%d' % sampling if sampling else 'off'}: sent {r['sent']['datagrams_per_s']} datagrams/s "
                 f"({r['sent']['counter_samples_per_s']} counter, {r['sent']['flow_samples_per_s']} flow samples/s, "
                 f"sender behind {r['sent']['behind_s']} s), lost {100 * r['lost_share']:.1f}% "
                 f"(kernel drops {r['kernel_drops']}), period p50 {r['period_p50_ms']} ms, loop lag p99 "
                 f"{r['loop_lag_p99_ms']} ms: "
                 + ("sustained" if r["sustained"] else "NOT sustained" if r["offered"] else
                    f"NOT offered (the agents sent {100 * r['offered_share']:.0f}% of the ports' counters)")
                 + f"{'' if r['keeps_up'] or not r['sustained'] else ' (but the period is over 100 ms)'}; cores used: "
                 + ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_cores"].items())
                 + (f", {r['worker_us_per_sample']} us of a worker a sample" if r["worker_us_per_sample"] else ""))
        return r

    best_interval = best_sampling = None
    if only:
        for interval, sampling in only:
            r = run(interval, sampling)
            if r["keeps_up"] and (best_interval is None or interval < best_interval):
                best_interval = interval
            if r["keeps_up"] and sampling and (best_sampling is None or sampling < best_sampling):
                best_sampling = sampling
    elif run(COUNTER_LADDER[0], SAMPLING_LADDER[0])["keeps_up"]:
        best_interval, best_sampling = COUNTER_LADDER[0], SAMPLING_LADDER[0]
    else:
        for interval in COUNTER_LADDER:
            if run(interval, 0)["keeps_up"]:
                best_interval = interval
                break
        if best_interval is not None:  # (the densest sampling at the shortest interval already failed)
            for sampling in SAMPLING_LADDER[1:] if best_interval == COUNTER_LADDER[0] else SAMPLING_LADDER:
                if run(best_interval, sampling)["keeps_up"]:
                    best_sampling = sampling
                    break
    return {"levels": levels, "shortest_counter_interval_s": best_interval, "densest_sampling": best_sampling,
            "window_s": seconds, "sustained_if_lost_at_most": SUSTAINED_LOSS, "offered_if_sent_at_least": OFFERED_MIN}
