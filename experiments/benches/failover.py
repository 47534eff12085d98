"""``freeway bench failover``, ``state``, ``hook``, ``cluster-failover`` and ``linkcheck``: the controller
process and the fabric when something fails, restarts or is probed, timed."""

from __future__ import annotations

import json
import time
from pathlib import Path

from experiments.analysis.stats import percentile
from experiments.benches.controller import machine
from experiments.harness.procs import ControllerProcess, PortRate, busiest_link, ping_bg, start_elephant
from topology.builder import FabricNet, ofctl
from topology.fabric import fattree


def _failover_elephant(fn, mode: str, port: int, seconds: float):
    """An elephant h0_0_0 -> h3_1_0: Freeway announces it with 3 Mbit/s, the other modes run iperf3.
    Returns (process, the path Freeway placed it on, or None)."""
    proc, ack = start_elephant(fn, mode == "freeway", "h0_0_0", "h3_1_0", port, seconds, 3.0)
    if not ack or ack.get("answer") != "ack":
        return proc, None
    return proc, [fn.fabric.switch_by_dpid(int(x, 16)).name for x in ack["paths"][0]["dpids"]]


def failover(modes: list[str], trials: int, out: Path) -> dict:
    """Per mode on a 10 Mbit/s k=4 fat-tree, with an elephant from pod 0 to pod 3 and the link it
    crosses cut: link-down to all pairs answering, the worst 50 Hz ping gap, the elephant's goodput
    after the cut against before, Freeway's re-placement time; then pings lost and the elephant's
    worst second across a SIGKILLed controller's restart."""
    import re

    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    fabric = fattree(4, 10)
    fabric.save(out / "failover.json.fabric")
    cross = [(a.name, b.name) for a in fabric.hosts for b in fabric.hosts if a.switch[:2] != b.switch[:2]]
    cuts = {"agg-core": [(a, c) for a in ("a0_0", "a0_1") for c in fabric.up_neighbors(a)],
            "edge-agg": [("e0_0", a) for a in fabric.up_neighbors("e0_0")]}
    dst = next(h for h in fabric.hosts if h.name == "h3_1_0")
    rows = []
    for mode in modes:
        extra = ["--isolation", "on"] if mode == "freeway" else []
        ctl = ControllerProcess(out / "failover.json.fabric", mode=mode, extra=extra,
                                log_file=out / f"failover-{mode}.controller.log").start()
        fn = FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target))
        goodput = None
        try:
            fn.start()
            fn.wait_reachable(30)
            goodput = PortRate(dst.switch, dst.port)
            settle = 12.0 if mode == "hedera" else 3.0  # Hedera places a large flow at its second 5 s poll
            for trial in range(trials):
                for cut, candidates in cuts.items():
                    row = {"mode": mode, "trial": trial, "cut": cut}
                    proc, path = _failover_elephant(fn, mode, 6000 + len(rows), settle + 12)
                    time.sleep(settle)
                    if path is not None:  # Freeway: the cut is on the announced elephant's own path
                        a, b = (path[1], path[2]) if cut == "agg-core" else (path[0], path[1])
                    else:
                        a, b = busiest_link(fn, candidates)
                    row["cut_link"] = f"{a}-{b}"
                    pings = [ping_bg(fn, "h0_0_0", "h1_1_0", 300), ping_bg(fn, "h0_0_1", "h3_1_1", 300)]
                    time.sleep(1.0)
                    before = ofctl("dump-flows", "e0_0")
                    t0 = time.monotonic()
                    rate_before = goodput.mbps(t0 - 2.0, t0)
                    fn.net.configLinkStatus(a, b, "down")
                    moved = None
                    old = re.findall(r"cookie=(0x[0-9a-f]+)[^\n]*priority=500[^\n]*tp_dst=" + str(6000 + len(rows)),
                                     before)
                    while old and time.monotonic() - t0 < 5 and moved is None:  # its entry moved or went
                        now = re.findall(r"cookie=(0x[0-9a-f]+)[^\n]*priority=500[^\n]*tp_dst="
                                         + str(6000 + len(rows)), ofctl("dump-flows", "e0_0"))
                        if now != old:
                            moved = time.monotonic() - t0
                            row["elephant"] = "moved" if now else "released (no live HOL path)"
                        time.sleep(0.02)
                    time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))
                    reach, failed = None, cross  # sweep, then retry only the pairs that failed
                    while time.monotonic() - t0 < 10:
                        start = time.monotonic() - t0
                        failed = fn.ping_matrix(failed, wait_s=0.2)
                        if not failed:
                            reach = start
                            break
                    time.sleep(max(0.0, 3.1 - (time.monotonic() - t0)))
                    rate_after = goodput.mbps(t0 + 1.0, t0 + 3.0)
                    lost = [s - r for s, r in (p() for p in pings)]
                    fn.net.configLinkStatus(a, b, "up")
                    proc.kill()
                    proc.wait()
                    time.sleep(3.0)
                    row.update(all_pairs_answer_s=round(reach, 2) if reach is not None else None,
                               worst_ping_gap_ms=20 * max(lost), elephant_moved_s=round(moved, 3) if moved else None,
                               goodput_before_mbps=round(rate_before, 2), goodput_after_mbps=round(rate_after, 2),
                               goodput_kept=round(rate_after / rate_before, 3) if rate_before > 0 else None)
                    print(f"[bench failover] {row}", flush=True)
                    rows.append(row)
                proc, _ = _failover_elephant(fn, mode, 6000 + len(rows), settle + 16)
                time.sleep(settle)
                pings = [ping_bg(fn, "h0_0_0", "h3_1_0", 400), ping_bg(fn, "h2_0_0", "h1_1_1", 400)]
                time.sleep(1.0)
                t_kill = time.monotonic()
                ref = 3.0 if mode == "freeway" else goodput.mbps(t_kill - 2.0, t_kill)
                ctl.kill()
                time.sleep(1.0)
                ctl.start()
                ctl.wait_programmed(20, timeout=30)
                lost = sum(s - r for s, r in (p() for p in pings))
                worst = min(goodput.seconds(t_kill - 1.0, time.monotonic()))
                proc.kill()
                proc.wait()
                row = {"mode": mode, "trial": trial, "cut": "controller SIGKILL + restart", "restart_lost_pings": lost,
                       "pings": 800, "elephant_worst_second_mbps": worst, "elephant_reference_mbps": round(ref, 2),
                       "restart_goodput_kept": round(worst / ref, 3) if ref > 0 else None}
                print(f"[bench failover] {row}", flush=True)
                rows.append(row)
                time.sleep(3.0)
        finally:
            if goodput is not None:
                goodput.stop()
            fn.stop()
            ctl.stop()

    def stat(mode, cut, key):
        xs = [r[key] for r in rows if r["mode"] == mode and r["cut"] == cut and r.get(key) is not None]
        return {"median": percentile(xs, 50), "worst": max(xs) if xs else None, "n": len(xs)}

    def low(mode, cut, key):  # for ratios the bad end is the lowest
        xs = [r[key] for r in rows if r["mode"] == mode and r["cut"] == cut and r.get(key) is not None]
        return {"median": percentile(xs, 50), "worst": min(xs) if xs else None, "n": len(xs)}

    restart = "controller SIGKILL + restart"
    summary = {m: {c: {k: stat(m, c, k) for k in ("all_pairs_answer_s", "worst_ping_gap_ms", "elephant_moved_s")}
                   | {"goodput_kept": low(m, c, "goodput_kept")} for c in cuts}
               | {"restart_lost_pings": stat(m, restart, "restart_lost_pings"),
                  "restart_goodput_kept": low(m, restart, "restart_goodput_kept")}
               for m in modes}
    result = {"bench": "failover", "machine": machine(), "trials": trials, "summary": summary, "rows": rows}
    (out / "failover.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _rss_mib(pid: int) -> float:
    """A process's resident set size (VmRSS), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"process {pid} has no VmRSS")


def state(flows: int, rate: float, waves: int, out: Path) -> dict:
    """Hedera mode on a k=4 fat-tree under the real controller process: ``waves`` waves of short TCP
    flows (each a new 5-tuple: a packet-in and an edge entry), ``flows`` per wave, at ``rate`` flows/s.
    Before, at each wave's highest RSS (sampled every 5 s while it runs, every 2 s while its flows
    expire) and once its flows have expired: the process RSS and the size of every per-flow table the
    controller keeps."""
    import subprocess
    import sys

    from experiments.hosts import flowgen
    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    fabric = fattree(4, 100)
    fabric.save(out / "state.json.fabric")
    ctl = ControllerProcess(out / "state.json.fabric", mode="hedera",
                            log_file=out / "state.controller.log").start()
    fn = FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(100, target=ctl.sflow_target))
    samples, rows = [], []

    def sample(label: str) -> dict:
        sizes, installed = ctl.tables()
        row = {"label": label, "t": round(time.monotonic() - t0, 1), "rss_mib": _rss_mib(ctl.proc.pid),
               "edges_installed": installed, **sizes}
        samples.append(row)
        return row

    try:
        fn.start()
        fn.wait_reachable(30)
        t0 = time.monotonic()
        time.sleep(3.0)
        before = sample("before")
        print(f"[bench state] before: {before}", flush=True)
        hosts = fabric.hosts
        per_host = -(-flows // (2 * len(hosts)))  # each connect is a flow each way
        for wave in range(1, waves + 1):
            start_installed = sample(f"wave {wave} start")["edges_installed"]
            procs = []
            for h in hosts:
                dsts = ",".join(d.ip for d in hosts if d.switch != h.switch)
                procs.append(fn.host(h.name).popen(
                    [sys.executable, flowgen.__file__, "--to", dsts, "--count", str(per_host),
                     "--rate", str(rate / 2 / len(hosts)), "--first-port", str(20000 + 1000 * wave)],
                    stdout=subprocess.PIPE, text=True))
            peak = None
            while any(p.poll() is None for p in procs):
                time.sleep(5.0)
                row = sample(f"wave {wave} running")
                peak = row if peak is None or row["rss_mib"] > peak["rss_mib"] else peak
                print(f"[bench state] wave {wave}: {row['edges_installed'] - start_installed} flows installed, "
                      f"{row.get('hedera_edges')} live, RSS {row['rss_mib']} MiB", flush=True)
            sent = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
            deadline = time.monotonic() + 60  # edge entries idle out after 10 s; a poll every 5 s forgets them
            while True:
                time.sleep(2.0)
                row = sample(f"wave {wave} after")
                peak = row if peak is None or row["rss_mib"] > peak["rss_mib"] else peak
                if row.get("hedera_edges", 1) <= before.get("hedera_edges", 0) or time.monotonic() > deadline:
                    break
            after = {**row, "label": f"wave {wave} expired"}
            rows.append({"wave": wave, "connects": sum(s["sent"] for s in sent),
                         "connect_errors": sum(s["errors"] for s in sent),
                         "flows_installed": after["edges_installed"] - start_installed,
                         "peak": peak, "after": after})
            print(f"[bench state] wave {wave}: {rows[-1]['flows_installed']} flows installed; peak RSS "
                  f"{peak['rss_mib'] if peak else None} MiB with {peak.get('hedera_edges') if peak else None} live; "
                  f"after: RSS {after['rss_mib']} MiB, tables {after}", flush=True)
    finally:
        fn.stop()
        ctl.stop()
    result = {"bench": "state", "machine": machine(), "mode": "hedera", "flows_per_wave": flows,
              "rate_flows_per_s": rate, "before": before, "waves": rows, "samples": samples}
    (out / "state.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


HOOK_PROBE = """import json, socket, sys, time
to, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ts = []
for i in range(n):
    t = time.perf_counter()
    s = socket.create_connection((to, port))
    ts.append(time.perf_counter() - t)
    s.close()
    time.sleep(0.01)
print(json.dumps(ts))
"""


def hook_latency(connects: int, rounds: int, out: Path) -> dict:
    """What the connect() hook adds to connect(): on a real k=4 fabric in Freeway mode, a client makes
    ``connects`` blocking connects to a server in another pod, unhooked, hooked by a rule that does not
    match, and hooked by one that does (each connect announced, placed, installed and ACKed first); the
    three take turns ``rounds`` times so that the machine's drift hits them alike."""
    import sys

    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    fabric = fattree(4, 10)
    fabric.save(out / "hook-fabric.json")
    probe = out / "hook_probe.py"
    probe.write_text(HOOK_PROBE)
    freeway = Path(sys.executable).with_name("freeway")
    kinds = {"none": "", "hooked, no match": f"{freeway} run --stats --rule 'port=1' -- ",
             "hooked, announced": f"{freeway} run --stats --rule 'port=7400 size=1M rate=100K' -- "}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    stats: dict[str, list[str]] = {k: [] for k in kinds}
    with ControllerProcess(out / "hook-fabric.json", mode="freeway", log_file=out / "hook-controller.log",
                           extra=["--freeway-set", "elephant_idle_s=2", "--freeway-set", "host_elephants=1000000",
                                  "--freeway-set", "punt_pps=1000"]) as ctl, \
            FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target)) as fn:
        fn.wait_reachable(60)
        srv = fn.host("h3_1_1")
        srv.cmd(f"{sys.executable} -m experiments.hosts.rr server --port 7400 >/dev/null 2>&1 &")
        time.sleep(0.5)
        for r in range(rounds):
            for kind, prefix in kinds.items():
                print(f"[bench hook] round {r + 1}/{rounds}: {connects} connects, {kind} ...", flush=True)
                res = fn.host("h0_0_0").cmd(f"{prefix}{sys.executable} {probe} {srv.IP()} 7400 {connects} 2>&1")
                times[kind] += json.loads(next(x for x in res.splitlines() if x.startswith("[")))
                stats[kind] += [x for x in res.splitlines() if x.startswith("freeway hook")]
        srv.cmd("kill %1")

    def summary(xs: list[float]) -> dict:
        ms = [1000 * x for x in xs]
        return {"connects": len(ms), "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
                "max_ms": max(ms) if ms else None}
    rows = {k: summary(v) | {"hook_stats": stats[k]} for k, v in times.items()}
    result = {"bench": "hook", "machine": machine(), "fabric": "fattree k=4, 10 Mbit/s, freeway mode",
              "path": "h0_0_0 -> h3_1_1 (another pod)", "rounds": rounds, "results": rows}
    (out / "hook.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _status(api: str) -> dict | None:
    import urllib.request

    try:
        return json.load(urllib.request.urlopen(api + "/api/v1/status", timeout=1))
    except (OSError, ValueError):
        return None


def cluster_failover(trials: int, ttl: float, out: Path) -> dict:
    """Two controllers in a cluster on a three-member etcd, a 10 Mbit/s k=4 fat-tree (freeway mode with
    isolation). Each trial: an announced 4 Mbit/s elephant and a 50 Hz ping run, the leader is SIGKILLed
    and a host announces an elephant during the failover (retrying every 0.25 s); measured: the time until
    the other member leads, pings lost, the time from its election to the handshake's ACK, the elephant's
    worst second over its allocation. The killed member then restarts and rejoins; the next trial kills
    the new leader."""
    import subprocess
    import sys

    from experiments.harness.etcd import EtcdCluster
    from experiments.harness.procs import free_port
    from topology.queues import IsolationConfig
    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster-etcd").mkdir(exist_ok=True)
    subprocess.run(["rm", "-rf", *[str(p) for p in (out / "cluster-etcd").iterdir()]], check=False)
    fabric = fattree(4, 10)
    fabric.save(out / "cluster-fabric.json")
    etcd = EtcdCluster(out / "cluster-etcd", 3).start()
    members = {}
    rows = []
    try:
        for node in ("A", "B"):
            api = f"127.0.0.1:{free_port()}"
            members[node] = (ControllerProcess(
                out / "cluster-fabric.json", mode="freeway", log_file=out / f"cluster-{node}.log",
                events_file=out / f"cluster-{node}.jsonl",
                extra=["--isolation", "on", "--cluster", etcd.url, "--cluster-name", "bench", "--cluster-ttl",
                       str(ttl), "--node-id", node, "--api", api]), f"http://{api}")
        for node, (ctl, api) in members.items():
            ctl.start()
            deadline = time.monotonic() + 20
            while ((_status(api) or {}).get("cluster") or {}).get("role") not in ("leader", "follower"):
                assert time.monotonic() < deadline, f"{node} never joined the cluster"
                time.sleep(0.1)
        a, b = (m[0] for m in members.values())
        with FabricNet(fabric, [a.address, b.address], isolation=IsolationConfig(),
                       sflow=SFlowAgentConfig.for_rate(10, target=f"{a.sflow_target},{b.sflow_target}")) as fn:
            fn.wait_reachable(60)
            for trial in range(trials):
                leader = next(n for n, (_, api) in members.items() if (_status(api) or {}).get("cluster", {}).get(
                    "role") == "leader")
                other = next(n for n in members if n != leader)
                ctl, _ = members[leader]
                other_api = members[other][1]
                print(f"[bench failover --cluster] trial {trial + 1}/{trials}: killing the leader {leader} ...",
                      flush=True)
                src, dst = fabric.hosts_on("e0_0")[0], fabric.hosts_on("e3_1")[0]
                proc, ack = start_elephant(fn, True, src.name, dst.name, 5600 + trial, 16.0, rate_mbps=4.0)
                rate = PortRate(dst.switch, dst.port, 0.1)
                pings = ping_bg(fn, "h0_1_0", "h3_0_0", 500)
                time.sleep(3)
                gen = _status(other_api)["cluster"]["generation"]
                t_kill = time.monotonic()
                ctl.kill()
                hs = fn.host("h1_1_0").popen([sys.executable, "-m", "ryu_apps.cli", "send", "--to",
                                              fn.host("h2_0_0").IP(), "--port", str(5700 + trial), "--size", "10M",
                                              "--rate", "1", "--announce-only", "--json", "--timeout", "0.25",
                                              "--retries", "40"], stdout=subprocess.PIPE, text=True)
                elected = None
                while time.monotonic() - t_kill < ttl + 10:
                    if ((_status(other_api) or {}).get("cluster") or {}).get("role") == "leader":
                        elected = time.monotonic() - t_kill
                        break
                    time.sleep(0.02)
                hs_out = hs.communicate(timeout=30)[0]
                answered = time.monotonic() - t_kill
                time.sleep(4)
                t_end = time.monotonic()
                sent, received = pings()
                proc.wait(30)
                rate.stop()
                seconds = rate.seconds(t_kill - 2.0, t_end)
                rep = json.loads(hs_out[hs_out.index("{"):]) if "{" in hs_out else {}
                row = {"trial": trial, "killed": leader, "ttl_s": ttl, "elected_after_s": round(elected, 3)
                       if elected is not None else None,
                       "generation_before": gen, "generation_after": _status(other_api)["cluster"]["generation"],
                       "pings_sent": sent, "pings_lost": sent - received,
                       "handshake": rep.get("answer"), "handshake_after_election_s": round(answered - elected, 3)
                       if elected is not None else None,
                       "elephant_allocation_mbps": ack.get("rate_mbps"), "elephant_seconds_mbps": seconds,
                       "elephant_worst_second_vs_allocation": round(min(seconds) / ack["rate_mbps"], 3)
                       if seconds and ack.get("rate_mbps") else None}
                rows.append(row)
                print(f"[bench failover --cluster] {row}", flush=True)
                ctl.start()  # it rejoins as a follower
                deadline = time.monotonic() + 20
                while ((_status(members[leader][1]) or {}).get("cluster") or {}).get("role") != "follower":
                    assert time.monotonic() < deadline, f"{leader} did not rejoin"
                    time.sleep(0.1)
                time.sleep(2)
    finally:
        for ctl, _ in members.values():
            ctl.stop()
        etcd.stop()

    def stat(key):
        xs = [r[key] for r in rows if r[key] is not None]
        return {"median": percentile(xs, 50), "worst": max(xs) if key != "elephant_worst_second_vs_allocation"
                else min(xs), "n": len(xs)} if xs else None
    result = {"bench": "failover-cluster", "machine": machine(), "fabric": "fattree k=4, 10 Mbit/s, freeway with "
              "isolation, two controllers, etcd x3", "lease_ttl_s": ttl, "trials": rows,
              "summary": {k: stat(k) for k in ("elected_after_s", "pings_lost", "handshake_after_election_s",
                                                  "elephant_worst_second_vs_allocation")}}
    (out / "failover-cluster.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds a process has used."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def linkcheck(trials: int, idle_s: float, out: Path, seed: int = 1) -> dict:
    """The LLDP link check on a scrambled 10 Mbit/s k=4 fat-tree under the ECMP controller with its API.
    First its cost: the controller's CPU over ``idle_s`` of an idle fabric with probes every second and,
    in a second run, with none. Then ``trials`` silent failures: one direction of a random switch link
    black-holed (its ports stay up) while 8 host pairs ping across the fabric at 50 Hz; measured: the
    time until the API says the link is missing, pings lost, and, once the black hole is removed, the
    time until it is verified and up again."""
    import random
    import urllib.request

    from experiments.harness.procs import free_port
    from topology.builder import black_hole
    from topology.fabric import scramble

    out.mkdir(parents=True, exist_ok=True)
    fabric = scramble(fattree(4, 10), seed)
    fabric.save(out / "linkcheck-fabric.json")
    rng = random.Random(seed)
    result: dict = {"machine": machine(), "k": 4, "rate_mbps": 10, "idle_s": idle_s, "cost": {}, "trials": []}

    def get(api, path):
        return json.load(urllib.request.urlopen(f"http://{api}{path}", timeout=5))

    for interval in ("1", "0"):
        api = f"127.0.0.1:{free_port()}"
        ctl = ControllerProcess(out / "linkcheck-fabric.json", log_file=out / f"linkcheck-{interval}.log",
                                events_file=out / f"linkcheck-{interval}.jsonl",
                                extra=["--api", api, "--lldp-interval", interval]).start()
        try:
            with FabricNet(fabric, ctl.address) as fn:
                fn.wait_reachable(30)
                time.sleep(3)
                print(f"[bench linkcheck] idle {idle_s:g} s with --lldp-interval {interval} ...", flush=True)
                c0, t0, n0 = _cpu_s(ctl.proc.pid), time.monotonic(), get(api, "/api/v1/counters")["controller"]
                time.sleep(idle_s)
                c1, t1, n1 = _cpu_s(ctl.proc.pid), time.monotonic(), get(api, "/api/v1/counters")["controller"]
                result["cost"][f"interval_{interval}"] = {
                    "cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 2),
                    "probes_per_s": round((n1.get("lldp-sent", 0) - n0.get("lldp-sent", 0)) / (t1 - t0), 1),
                    "heard_per_s": round((n1.get("lldp-heard", 0) - n0.get("lldp-heard", 0)) / (t1 - t0), 1)}
                if interval == "0":
                    break
                links = [ln for ln in fabric.links]
                pairs = [(a.name, b.name) for a, b in zip(rng.sample(fabric.hosts, 8), rng.sample(fabric.hosts, 8),
                                                          strict=True) if a.switch != b.switch]
                for trial in range(trials):
                    ln = rng.choice(links)
                    src, dst = rng.choice([(ln.a, ln.b), (ln.b, ln.a)])
                    dev, key = f"{src}-eth{fabric.port_to(src, dst)}", "-".join(sorted((src, dst)))
                    print(f"[bench linkcheck] trial {trial + 1}/{trials}: {src} -> {dst} goes silent", flush=True)
                    waits = [ping_bg(fn, a, b, 400) for a, b in pairs]
                    time.sleep(1)
                    black_hole(dev)
                    t_cut = time.monotonic()
                    found = None
                    while time.monotonic() - t_cut < 15:
                        links_now = {f"{x['src']}-{x['dst']}": x for x in get(api, "/api/v1/fabric")["links"]}
                        if links_now.get(key, {}).get("lldp") == "missing":
                            found = time.monotonic() - t_cut
                            break
                        time.sleep(0.05)
                    time.sleep(3)
                    black_hole(dev, False)
                    t_back = time.monotonic()
                    back = None
                    while time.monotonic() - t_back < 15:
                        x = {f"{y['src']}-{y['dst']}": y for y in get(api, "/api/v1/fabric")["links"]}.get(key, {})
                        if x.get("lldp") == "verified" and x.get("up"):
                            back = time.monotonic() - t_back
                            break
                        time.sleep(0.05)
                    sent = received = 0
                    for w in waits:
                        s_, r_ = w()
                        sent, received = sent + s_, received + r_
                    row = {"link": f"{src}->{dst}", "found_s": round(found, 3) if found is not None else None,
                           "back_s": round(back, 3) if back is not None else None,
                           "pings_sent": sent, "pings_lost": sent - received}
                    print(f"[bench linkcheck]   missing after {row['found_s']} s, verified and up again "
                          f"{row['back_s']} s after repair, {row['pings_lost']} of {sent} pings lost", flush=True)
                    result["trials"].append(row)
        finally:
            ctl.stop()
    found = sorted(r["found_s"] for r in result["trials"] if r["found_s"] is not None)
    result["summary"] = {"found_median_s": found[len(found) // 2] if found else None,
                         "found_worst_s": found[-1] if found else None,
                         "detected": f"{len(found)}/{len(result['trials'])}",
                         "pings_lost_median": sorted(r["pings_lost"] for r in result["trials"])[len(result["trials"]) // 2]
                         if result["trials"] else None}
    (out / "linkcheck.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
