"""``freeway bench``: measurements that write JSON (never part of the test suite)."""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from pathlib import Path

from experiments.procs import ControllerProcess, PortRate, busiest_link, ping_bg, start_elephant
from experiments.stats import percentile
from topology.builder import FabricNet, ofctl
from topology.fabric import fattree


def machine() -> dict:
    import os

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d")}


def startup(ks: list[int], rate: float, out: Path) -> dict:
    """Time from 'build the fabric' to every host reaching every host, per k."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in ks:
        fabric = fattree(k, rate)
        fabric.save(out / f"k{k}.json")
        print(f"[bench startup] k={k}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts ...", flush=True)
        with ControllerProcess(out / f"k{k}.json", log_file=out / f"k{k}.controller.log") as ctl, \
                FabricNet(fabric, ctl.address) as fn:
            secs, failed = fn.wait_reachable(timeout=600)
            n = len(fabric.hosts)
            row = {"k": k, "switches": len(fabric.switches), "hosts": n,
                   "build_s": round(fn.timings["build_s"], 2), "shaped_s": round(fn.timings["shaped_s"], 2),
                   "programmed_s": round(fn.timings["programmed_s"], 2),
                   "ping_sweep_s": round(secs, 2),
                   "full_reachability_s": round(fn.timings["programmed_s"] + secs, 2) if not failed else None,
                   "unreachable_pairs": len(failed), "pairs": n * (n - 1)}
        print(f"[bench startup] k={k}: {row}", flush=True)
        rows.append(row)
    result = {"bench": "startup", "machine": machine(), "rate_mbps": rate, "results": rows}
    (out / "startup.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def decoder_rate(seconds: float = 2.0) -> dict:
    """Datagrams/s through the decoder alone and through decoder + estimator (the collector's path)."""
    from monitoring.collector import Collector
    from monitoring.estimator import Estimator
    from monitoring.portmap import parse_ovsdb, to_switch_ports
    from monitoring.sflow import decode_datagram
    from topology.fabric import Fabric

    fix = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "sflow"
    data = [p.read_bytes() for p in sorted(fix.glob("*.bin"))]
    fabric = Fabric.load(fix / "fabric.json")
    est = Estimator(fabric)
    est.set_ifmap(to_switch_ports(fabric, parse_ovsdb(json.loads((fix / "ovsdb.json").read_text()))))
    col = Collector(est)
    out = {}
    for name, fn in (("decode", decode_datagram), ("collector", lambda d: col.handle(time.monotonic(), d))):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for d in data:
                fn(d)
            n += len(data)
        out[f"{name}_datagrams_per_s"] = round(n / (time.perf_counter() - t0))
    out["samples_per_datagram"] = round(sum(len(decode_datagram(d).flow_samples) + len(decode_datagram(d).counter_samples)
                                            for d in data) / len(data), 2)
    return out


def collector_cost(fabric, rounds: int = 3) -> dict:
    """The collector's cost per counter sample on ``fabric``: every port's counters once per round, packed
    into datagrams as ``freeway bench fabric-scale``'s agents pack them (``experiments.sflowload``), through
    the decoder alone and through the whole collector (decoder and estimator, with EFM's hot threshold
    set, as the controller runs it); the fastest round of each."""
    from experiments.sflowload import MAX_DATAGRAM
    from monitoring.collector import Collector
    from monitoring.estimator import Estimator
    from monitoring.sflow import decode_datagram
    from ryu_apps.simswitch import sflow as enc

    ifmap, ix = {}, 1000
    for sw in sorted(fabric.switches):
        ports = [fabric.port_to(sw, n) for n in fabric.neighbors(sw)] + [h.port for h in fabric.hosts if h.switch == sw]
        for port in sorted(ports):
            ix += 1
            ifmap[ix] = (sw, port)
    est = Estimator(fabric)
    est.set_ifmap(ifmap)
    est.hot_threshold = 0.7
    col = Collector(est)

    def datagrams(t: int) -> list[bytes]:  # every port's counters at second t, rising at a few Mbit/s
        out, pending, size = [], [], 0
        for i in ifmap:
            sample = enc.counter_sample([enc.if_counters(i, t * 125_000 * (1 + i % 7), t * 250_000 * (1 + i % 5),
                                                         speed_bps=10**10)], seq=t, source=(0, i))
            if size + len(sample) > MAX_DATAGRAM - 28:
                out.append(enc.datagram(pending, agent="127.0.0.1", seq=len(out)))
                pending, size = [], 0
            pending.append(sample)
            size += len(sample)
        return out + [enc.datagram(pending, agent="127.0.0.1", seq=len(out))]

    decode, whole = [], []
    for t in range(rounds + 1):
        batch = datagrams(t + 1)
        t0 = time.perf_counter()
        for d in batch:
            decode_datagram(d)
        t1 = time.perf_counter()
        for d in batch:
            col.handle(float(t + 1), d, False)
        if t > 0:  # (the first round is every port's first reading: its baseline, and its route resolved)
            decode.append(t1 - t0)
            whole.append(time.perf_counter() - t1)
    n = len(ifmap)
    return {"ports": n, "datagrams_per_round": len(batch), "samples_per_datagram": round(n / len(batch), 2),
            "decode_us_per_sample": round(min(decode) / n * 1e6, 2),
            "collector_us_per_sample": round(min(whole) / n * 1e6, 2),
            "core_share_at_1s": round(min(whole), 3), "links_measured": len(est.columns.measured()),
            "stats": dict(col.stats)}


def detection(trials: int, rate_mbps: float, out: Path, elephant_mbps: float, mice: int, seed: int,
              mice_sizes: tuple[int, int] = (1000, 50_000)) -> dict:
    """Delay from an elephant's first byte to the controller's elephant-start event; mice wrongly flagged
    (``mice_sizes``: the smallest and largest response, log-uniform between)."""
    import random
    import sys

    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    fabric = fattree(4, rate_mbps)
    fabric.save(out / "detection-fabric.json")
    events = out / "detection-events.jsonl"
    events.unlink(missing_ok=True)
    sflow = SFlowAgentConfig.for_rate(rate_mbps)
    rows = []
    hosts = [h.name for h in fabric.hosts]
    with ControllerProcess(out / "detection-fabric.json", log_file=out / "detection-controller.log",
                           events_file=events) as ctl, \
            FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(rate_mbps, target=ctl.sflow_target)) as fn:
        fn.wait_reachable(60)
        time.sleep(2)
        for i in range(trials):
            src, dst = rng.sample(hosts, 2)
            while fabric.host_by_ip(fn.host(src).IP()).switch == fabric.host_by_ip(fn.host(dst).IP()).switch:
                src, dst = rng.sample(hosts, 2)
            port, cport = 5500 + i, 43000 + i
            fn.host(dst).cmd(f"iperf3 -s -1 -p {port} -D >/dev/null 2>&1")
            time.sleep(0.3)
            t0 = time.time()
            r = fn.host(src).cmd(f"iperf3 -c {fn.host(dst).IP()} -p {port} -t 4 -b {elephant_mbps}M --cport {cport} -J")
            try:
                got = json.loads(r)["end"]["sum_received"]["bits_per_second"]
            except (ValueError, KeyError):
                got = None
            time.sleep(1.0)
            ev = [e for e in ctl.events(("elephant_start",)) if e["flow"]["sport"] == cport and e["wall"] >= t0]
            row = {"trial": i, "src": src, "dst": dst, "iperf_bps": got,
                   "detected": bool(ev), "delay_s": round(ev[0]["wall"] - t0, 3) if ev else None,
                   "rate_at_detection_bps": ev[0]["rate_bps"] if ev else None}
            rows.append(row)
            print(f"[bench detection] trial {i + 1}/{trials}: {src}->{dst} "
                  f"{'detected after %.2f s' % row['delay_s'] if ev else 'NOT detected'}", flush=True)
            time.sleep(3.5)  # let the elephant end before the next trial
        # mice: request/response flows of mice_sizes bytes (log-uniform), one connection each
        lo, hi = (math.log10(x) for x in mice_sizes)
        sizes = [int(10 ** rng.uniform(lo, hi)) for _ in range(mice)]
        srv, cli = fn.host("h3_0_0"), fn.host("h0_1_0")
        srv.cmd(f"{sys.executable} -m experiments.rr server --port 7100 >/dev/null 2>&1 &")
        time.sleep(1.0)
        t_mice = time.time()
        res = cli.cmd(f"{sys.executable} -m experiments.rr client --to {srv.IP()} --port 7100 "
                      f"--sizes {','.join(map(str, sizes))} --gap 0.05")
        time.sleep(3.0)
        srv.cmd("kill %1")
        done = [json.loads(x) for x in res.splitlines() if x.startswith("{")]
        flagged = [e for e in ctl.events(("elephant_start",)) if e["wall"] >= t_mice]
    delays = [r["delay_s"] for r in rows if r["delay_s"] is not None]
    result = {
        "bench": "detection", "machine": machine(), "rate_mbps": rate_mbps, "elephant_mbps": elephant_mbps,
        "sflow": {"sampling": sflow.sampling, "polling_s": sflow.polling, "header": sflow.header},
        "trials": rows, "detected": len(delays), "median_delay_s": percentile(delays, 50),
        "p95_delay_s": percentile(delays, 95), "max_delay_s": max(delays) if delays else None,
        "mice": {"flows": len(done), "completed": sum(1 for d in done if d.get("ok")), "min_size": min(sizes),
                 "max_size": max(sizes),
                 "wrongly_flagged": len(flagged), "fraction_flagged": round(len(flagged) / max(1, len(done)), 4)},
        "decoder": decoder_rate(),
    }
    (out / "detection.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


class ApiPoller:
    """A client of the operator API reading what an operator's dashboard would (the fabric, the elephants,
    the latest decisions, the metrics) every ``every_s``, in a thread: what it costs the controller's loop."""

    PATHS = ("/api/v1/fabric", "/api/v1/elephants", "/api/v1/decisions?since=-1&limit=50", "/metrics")

    def __init__(self, base: str, every_s: float):
        import threading

        self.base, self.every_s = base, every_s
        self.stop_ev = threading.Event()
        self.times: list[float] = []
        self.errors = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import urllib.request

        while not self.stop_ev.is_set():
            t = time.monotonic()
            try:
                for path in self.PATHS:
                    urllib.request.urlopen(self.base + path, timeout=5).read()
                self.times.append(time.monotonic() - t)
            except OSError:
                self.errors += 1
            self.stop_ev.wait(max(0.0, self.every_s - (time.monotonic() - t)))

    def __enter__(self) -> ApiPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_ev.set()
        self.thread.join()


def _histograms(base: str) -> dict[str, dict]:
    """The controller's own histograms from ``/metrics``, summed over their labels: name -> {"sum",
    "count", "buckets": upper bound (s) -> count}."""
    import re
    import urllib.request

    text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    out: dict[str, dict] = {}
    for line in text.splitlines():
        m = re.match(r'^(freeway_\w+)_(bucket|sum|count)(\{.*\})? (\S+)$', line)  # (a label may hold braces)
        if not m:
            continue
        name, part, labels, value = m.groups()
        h = out.setdefault(name, {"sum": 0.0, "count": 0.0, "buckets": {}})
        if part == "bucket":
            le = float(re.search(r'le="([^"]+)"', labels).group(1))
            h["buckets"][le] = h["buckets"].get(le, 0.0) + float(value)
        else:
            h[part] += float(value)
    return out


_NO_HISTOGRAM = {"sum": 0.0, "count": 0.0, "buckets": {}}


def _delta(before: dict, after: dict, name: str, part: str) -> float:
    """How much histogram ``name``'s ``sum`` or ``count`` grew between two readings of ``_histograms``."""
    return after.get(name, _NO_HISTOGRAM)[part] - before.get(name, _NO_HISTOGRAM)[part]


def _where(before: dict, after: dict) -> dict:
    """Where the controller's answer time went between two readings of its histograms: the mean answer
    (packet-in to answer), the switches' share of it (entries out to the last barrier reply), and the
    collector's pauses (how many, their total, how many over 10 ms)."""
    def mean_ms(name: str) -> float | None:
        n = _delta(before, after, name, "count")
        return round(1000 * _delta(before, after, name, "sum") / n, 3) if n else None
    gc = "freeway_gc_pause_seconds"
    gc_n = _delta(before, after, gc, "count")
    within_10ms = (after.get(gc, _NO_HISTOGRAM)["buckets"].get(0.01, 0.0)
                   - before.get(gc, _NO_HISTOGRAM)["buckets"].get(0.01, 0.0))
    return {"controller_mean_ms": mean_ms("freeway_handshake_latency_seconds"),
            "switches_confirm_mean_ms": mean_ms("freeway_install_confirm_seconds"),
            "gc_pauses": int(gc_n), "gc_pause_total_ms": round(1000 * _delta(before, after, gc, "sum"), 2),
            "gc_pauses_over_10ms": int(gc_n - within_10ms)}


def _within(before: dict, after: dict, bound_s: float) -> float | None:
    """Of the handshakes answered between the two readings, the fraction the controller answered within
    ``bound_s`` of receiving them."""
    total = after.get(float("inf"), 0) - before.get(float("inf"), 0)
    return round((after.get(bound_s, 0) - before.get(bound_s, 0)) / total, 4) if total else None


def handshake_latency(rates: list[int], seconds: float, out: Path, punt_pps: int, api_poll_s: float = 0.1,
                      switch_processes: int = 1) -> dict:
    """Handshake-to-answer latency at several announce rates, from four hosts on four edge switches; with
    ``api_poll_s``, each rate runs twice in turn: with no API client, and with one polling the API."""
    import contextlib
    import sys

    from experiments.procs import free_port
    from topology.ovsproc import SwitchProcesses, check_count
    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    fabric = fattree(4, 10)
    fabric.save(out / "handshake-fabric.json")
    senders = [("h0_0_0", "10.3.1.3"), ("h1_0_0", "10.2.1.3"), ("h2_0_0", "10.1.1.3"), ("h3_0_0", "10.0.1.3")]
    api = f"127.0.0.1:{free_port()}"
    rows = []
    check_count(switch_processes)
    with SwitchProcesses(switch_processes) as sp, \
            ControllerProcess(out / "handshake-fabric.json", mode="freeway", log_file=out / "handshake-controller.log",
                              extra=["--freeway-set", f"punt_pps={punt_pps}", "--freeway-set", "elephant_idle_s=2",
                                     "--freeway-set", "host_elephants=1000000", "--api", api]
                              + (["--ovsdb", sp.ovsdb_setting] if sp.ovsdb_setting else [])) as ctl, \
            FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target),
                      processes=sp) as fn:
        fn.wait_reachable(60)
        run = 0
        for rate in rates:
            for polled in ([False, True] if api_poll_s else [False]):
                per = rate / len(senders)
                what = f"API polled every {api_poll_s * 1000:.0f} ms" if polled else "no API client"
                print(f"[bench handshake] {rate}/s for {seconds:g} s from {len(senders)} hosts, {what} ...", flush=True)
                poller = ApiPoller(f"http://{api}", api_poll_s) if polled else contextlib.nullcontext()
                hists0 = _histograms(f"http://{api}")
                with poller:
                    for j, (src, dst) in enumerate(senders):
                        fn.host(src).sendCmd(f"{sys.executable} -m experiments.hsload --to {dst} --rate {per} "
                                             f"--duration {seconds} --first-port {20000 + 5000 * run + 1000 * j}")
                    parts = [json.loads(fn.host(src).waitOutput().strip().splitlines()[-1]) for src, _ in senders]
                run += 1
                lat = sorted(x for p in parts for x in p["latency_ms"])
                row = {"rate_per_s": rate, "api_poll_s": api_poll_s if polled else None,
                       "sent": sum(p["sent"] for p in parts), "acks": sum(p["acks"] for p in parts),
                       "nacks": sum(p["nacks"] for p in parts), "unanswered": sum(p["unanswered"] for p in parts),
                       "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "max_ms": lat[-1] if lat else None}
                hists1 = _histograms(f"http://{api}")
                if polled:
                    row |= {"api_polls": len(poller.times), "api_poll_errors": poller.errors,
                            "api_poll_p50_ms": percentile([1000 * t for t in poller.times], 50),
                            "api_loop_ms_per_poll": 1000 * _delta(hists0, hists1, "freeway_api_request_duration_seconds",
                                                                  "sum") / max(1, len(poller.times))}
                b0, b1 = (h.get("freeway_handshake_latency_seconds", _NO_HISTOGRAM)["buckets"] for h in (hists0, hists1))
                row["controller_within_10ms"] = _within(b0, b1, 0.01)  # packet-in to answer
                row["controller_within_50ms"] = _within(b0, b1, 0.05)
                row |= _where(hists0, hists1)
                rows.append(row)
                print(f"[bench handshake] {row}", flush=True)
                time.sleep(4)  # let the short-lived elephant entries expire between runs
    result = {"bench": "handshake", "machine": machine(), "fabric": "fattree k=4, 10 Mbit/s", "punt_pps": punt_pps,
              "switch_processes": switch_processes,
              "seconds_per_rate": seconds, "api_poll_s": api_poll_s, "api_paths": list(ApiPoller.PATHS),
              "results": rows}
    (out / "handshake.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


PERIODS = 8  # bench scale: partition periods timed (the second half after the loads moved)
SUBFLOWS = (1, 2, 4)  # bench scale: Bin-Pack against Eq. 1's optima with this many subflows per elephant


def _app_period(core, now: float, active) -> tuple:
    """One Freeway period as the app runs it: the partition step, then the elephant moves off links that
    turned LOL (the app installs them and reports each finished; after the last, the mice groups follow).
    Returns (the step's result, the ops, the moves)."""
    res, ops = core.period(now, active)
    moves = core.take_moves()
    for _ in moves:
        ops += core.move_finished()
    return res, ops, moves


def scale(k: int, pairs: int, placements: int, seed: int, out: Path, exact_k: int, exact_flows: int) -> dict:
    """The pure modules on a large fat-tree model: placement and partition-period times; Bin-Pack vs optimum."""
    import random
    from collections import Counter

    from experiments.optimum import Flow, solve
    from ryu_apps.algorithms.binpack import links, split
    from ryu_apps.launcher import tune_gc
    from ryu_apps.modes.freeway_state import FreewayState

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    fabric = fattree(k, 10_000)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    core = FreewayState(fabric)
    init_s = time.perf_counter() - t0
    tune_gc()  # as the controller does once its apps are built
    print(f"[bench scale] k={k}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts; model {build_s:.1f} s, "
          f"partition {init_s:.1f} s", flush=True)
    tors = fabric.tors()
    # link loads: every switch link 0..60%
    core.link_util = {(a, b): rng.uniform(0, 0.6) for ln in fabric.links for a, b in ((ln.a, ln.b), (ln.b, ln.a))}
    hosts = fabric.hosts
    times = []
    placed = refused = 0
    for _ in range(placements):
        a, b = rng.sample(hosts, 2)
        t = time.perf_counter()
        try:
            pls = core.place((a.switch, b.switch), rng.uniform(0.1, 2) * 1e9)  # as the handshake places it
            core.alloc.add(("bench", placed), pls)
            placed += 1
        except ValueError:
            refused += 1
        times.append(time.perf_counter() - t)
    active = set()
    while len(active) < pairs:
        s, d = rng.sample(tors, 2)
        if core.partition.is_partitioned((s, d)):
            active.add((s, d))
    t = time.perf_counter()
    first = core.mice_updates()  # every switch's mice groups, once (as when the controller starts)
    mice_initial_s = time.perf_counter() - t
    first_ops = sum(len(v) for v in first.values())
    del first  # sent and dropped, as the app does
    print(f"[bench scale] every switch's mice groups computed once: {mice_initial_s:.1f} s ({first_ops} ops)",
          flush=True)
    # The partition steps on the mice load. With lending (the default) that is what sampling sees of flows
    # that are not elephants, and this model gives link loads, no flows: the periods below run with
    # lending off, where the partition steps on the measured loads (the paper's), so that its changes
    # and the mice groups behind them are exercised; the quiet periods are timed with lending too.
    lend_default = core.cfg
    core.cfg = dataclasses.replace(core.cfg, lend="off")
    periods = []
    changes = []
    for i in range(PERIODS):  # the whole period as the app runs it: partition step, moves, every switch's mice groups
        if i == PERIODS // 2:  # half the periods with loads that moved: mice weights and paths follow
            core.link_util = {ln: min(1.0, max(0.0, u + rng.uniform(-0.2, 0.2))) for ln, u in core.link_util.items()}
        t = time.perf_counter()
        res, ops, moves = _app_period(core, float(10 * i), active)
        periods.append(time.perf_counter() - t)
        changes.append({"added": len(res.added), "removed": len(res.removed), "became_lol": len(res.became_lol),
                        "elephants_moved": len(moves), "switches_updated": len({sw for sw, _ in ops}),
                        "mice_ops": sum(len(o) for _, o in ops)})
        print(f"[bench scale] period {i + 1}/{PERIODS}: {periods[-1] * 1e3:.1f} ms, {changes[-1]}", flush=True)
    t = time.perf_counter()
    core.fresh_mice(tors[0])
    mice_switch_s = time.perf_counter() - t
    # quiet periods: loads between the partition's bounds, jittering a little each period (a new reading
    # each time, as monitoring gives it): no pair changes, no weight moves by a step; what a period costs
    # when the fabric is steady
    mid = (core.partition.cfg.lol_low + core.partition.cfg.lol_high) / 2
    steady = {ln: mid for ln in core.link_util}
    quiet = []
    for i in range(PERIODS):
        core.link_util = {ln: u + rng.uniform(-0.02, 0.02) for ln, u in steady.items()}
        t = time.perf_counter()
        res, ops, _ = _app_period(core, 1000.0 + 10 * i, active)
        quiet.append(time.perf_counter() - t)
        print(f"[bench scale] quiet period {i + 1}/{PERIODS}: {quiet[-1] * 1e3:.1f} ms, {len(res.added)} added, "
              f"{len(res.removed)} removed, {sum(len(o) for _, o in ops)} mice ops", flush=True)
    core.cfg = lend_default
    # the same quiet loads with lending on, on a controller that ran with it from the start (switching it
    # on here would time the partition giving back the paths the loads above asked for): each period
    # its own estimate of the mice load, apart from the measured load
    lent = FreewayState(fabric)
    lent.link_util = dict(steady)
    lent.mice_updates()
    quiet_lend = []
    for i in range(PERIODS + 2):  # (the first two settle: the partition steps from its start)
        lent.link_util = {ln: u + rng.uniform(-0.02, 0.02) for ln, u in steady.items()}
        t = time.perf_counter()
        res, ops, _ = _app_period(lent, 2000.0 + 10 * i, active)
        if i >= 2:
            quiet_lend.append(time.perf_counter() - t)
    del lent
    print(f"[bench scale] quiet periods with lending ({core.cfg.lend}): median "
          f"{percentile(quiet_lend[1:], 50) * 1e3:.1f} ms", flush=True)
    # Bin-Pack against the exact solver of Eq. 1 on smaller instances
    small = fattree(exact_k, 10)
    sc = FreewayState(small)
    cap = {(a, b): 10e6 for ln in small.links for a, b in ((ln.a, ln.b), (ln.b, ln.a))}
    collector = collector_cost(fabric)
    print(f"[bench scale] the sFlow collector: {collector['collector_us_per_sample']} us a counter sample "
          f"(decoding {collector['decode_us_per_sample']} us; {collector['samples_per_datagram']} a datagram): "
          f"every port's counters every second take {collector['core_share_at_1s']:.0%} of a core", flush=True)
    cmp_rows = []
    for trial in range(5):
        flows = []
        for _ in range(exact_flows):
            a, b = rng.sample(small.hosts, 2)
            while a.switch == b.switch or not sc.partition.is_partitioned((a.switch, b.switch)):
                a, b = rng.sample(small.hosts, 2)
            flows.append(Flow(tuple(sc.partition.hol_paths((a.switch, b.switch))), rng.uniform(1e6, 4e6)))
        t_whole, _ = solve(flows, cap, split=False)
        t_split, _ = solve(flows, cap, split=True)
        row = {"trial": trial, "optimum_unsplittable": round(t_whole, 4), "optimum_splittable_eq1": round(t_split, 4)}
        for n in SUBFLOWS:  # the flows announced one after another, each with n subflows, as the app places them
            extra: Counter = Counter()
            for fl in flows:
                for pl in split(list(fl.paths), fl.rate, n, extra.__getitem__, cap.__getitem__, float("inf")):
                    for ln in links(pl.path):
                        extra[ln] += pl.rate_bps
            bp = max(v / cap[ln] for ln, v in extra.items())
            row[f"subflows_{n}"] = {"max_util": round(bp, 4), "over_unsplittable": round(bp / t_whole, 4),
                                    "over_splittable": round(bp / t_split, 4)}
        row |= {"binpack_max_util": row["subflows_1"]["max_util"],
                "binpack_over_optimum": row["subflows_1"]["over_unsplittable"]}
        cmp_rows.append(row)
        print(f"[bench scale] Bin-Pack vs exact, trial {trial}: optimum {t_split:.3f} splittable, {t_whole:.3f} "
              f"whole; " + ", ".join(f"{n} subflow{'s' * (n > 1)} {row[f'subflows_{n}']['max_util']:.3f}"
                                      for n in SUBFLOWS), flush=True)
    result = {
        "bench": "scale", "machine": machine(), "k": k, "switches": len(fabric.switches), "hosts": len(fabric.hosts),
        "model_build_s": round(build_s, 3), "partition_init_s": round(init_s, 3),
        "placement": {"n": placements, "placed": placed, "refused": refused,
                      "median_ms": round(percentile(times, 50) * 1e3, 3), "p99_ms": round(percentile(times, 99) * 1e3, 3)},
        "mice_groups_initial_s": round(mice_initial_s, 2),
        "partition_period": {"active_pairs": pairs, "median_ms": round(percentile(periods, 50) * 1e3, 2),
                             "max_ms": round(max(periods) * 1e3, 2), "changes": changes,
                             "includes": "partition step, moves off new LOL links, every switch's mice group updates",
                             "all_ms": [round(x * 1e3, 2) for x in periods],
                             "quiet_median_ms": round(percentile(quiet[1:], 50) * 1e3, 2),
                             "quiet_all_ms": [round(x * 1e3, 2) for x in quiet], "lend": "off",
                             "quiet_lend_median_ms": round(percentile(quiet_lend[1:], 50) * 1e3, 2),
                             "quiet_lend": lend_default.lend},
        "mice_groups_one_switch_ms": round(mice_switch_s * 1e3, 2),
        "collector": collector,
        "binpack_vs_exact": {"k": exact_k, "flows": exact_flows, "trials": cmp_rows,
                             "mean_ratio": round(sum(r["binpack_over_optimum"] for r in cmp_rows) / len(cmp_rows), 4),
                             "by_subflows": {str(n): {
                                 "mean_over_splittable": round(sum(r[f"subflows_{n}"]["over_splittable"]
                                                                   for r in cmp_rows) / len(cmp_rows), 4),
                                 "worst_over_splittable": max(r[f"subflows_{n}"]["over_splittable"] for r in cmp_rows),
                                 "mean_over_unsplittable": round(sum(r[f"subflows_{n}"]["over_unsplittable"]
                                                                     for r in cmp_rows) / len(cmp_rows), 4)}
                                 for n in SUBFLOWS}},
    }
    (out / "scale.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _port_tx(switch: str, port: int) -> int:
    from topology.builder import port_tx_bytes

    return port_tx_bytes(switch, port).get(port, 0)


def _watch_reroute(fn, link, ingresses, stop, out, threshold_bps):
    """Bench-side clock: when the hot link first carries more than 70% (0.1 s windows of port counters),
    and when a rerouted entry (priority 500) at any of the flows' ingress switches first carries packets."""
    import re

    from topology.builder import ofctl

    a, b = link
    port = fn.fabric.port_to(a, b)
    prev_t, prev_b = time.time(), _port_tx(a, port)
    while not stop.is_set():
        time.sleep(0.1)
        t, by = time.time(), _port_tx(a, port)
        if "hot" not in out and (by - prev_b) * 8 / (t - prev_t) > threshold_bps:
            out["hot"] = t
        prev_t, prev_b = t, by
        if "moved" not in out:
            for ingress in ingresses:
                for line in ofctl("dump-flows", ingress).splitlines():
                    if "priority=500" in line and int(re.search(r"n_packets=(\d+)", line).group(1)) > 0:
                        out["moved"] = t


def reroute(trials: int, size: int, modes: list[str], out: Path) -> dict:
    """EFM reroute delay, and the EFM paper's four collision tests under each mode (Table I style)."""
    import threading

    from experiments import collisions
    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    fabric = fattree(4, 10)
    fabric.save(out / "reroute-fabric.json")
    boot = ControllerProcess(out / "reroute-fabric.json", log_file=out / "reroute-boot.log").start()
    port, sflow_port = boot.port, boot.sflow_port
    fn = FabricNet(fabric, boot.address, sflow=SFlowAgentConfig.for_rate(10, target=boot.sflow_target))
    delays, tests = [], {}
    try:
        fn.start()
        boot.stop()

        runs = iter(range(1, 10_000))

        def scenario(mode, test_no, watch=None):
            events = out / f"reroute-{mode}-test{test_no}-run{next(runs)}.jsonl"
            events.unlink(missing_ok=True)
            for sw in fabric.switches:  # each run starts a fresh controller on an empty fabric: no pin of the
                ofctl("del-flows", sw)  # run before is recovered, and it is not a restart onto a running
                ofctl("del-groups", sw)  # fabric (EFM then waits one hold-down before its first move)
            with ControllerProcess(out / "reroute-fabric.json", port=port, sflow_port=sflow_port, mode=mode,
                                   log_file=out / f"reroute-{mode}.log", events_file=events) as ctl:
                ctl.wait_programmed(len(fabric.switches))
                fn.wait_reachable(30)
                time.sleep(2)
                flows = collisions.steer(fabric, collisions.TESTS[test_no][1])
                stop, seen = threading.Event(), {}
                th = None
                if watch:
                    th = threading.Thread(target=_watch_reroute, args=(fn, *watch, stop, seen, 7e6), daemon=True)
                    th.start()
                res = collisions.run(fn, flows, size)
                stop.set()
                if th:
                    th.join()
                collisions.unsteer(fabric)
                res["_reroutes"] = len(ctl.events(("reroute",)))
                return res, seen

        for i in range(trials):
            res, seen = scenario("efm-biggest", 1, watch=(("a0_0", "c1"), ("e0_0", "e0_1")))
            d = seen["moved"] - seen["hot"] if "moved" in seen and "hot" in seen else None
            delays.append(d)
            print(f"[bench reroute] trial {i + 1}/{trials}: link over 70% -> new path carrying the flow: "
                  f"{'%.2f s' % d if d is not None else 'no move seen'}", flush=True)
        for test_no, (kind, _) in collisions.TESTS.items():
            tests[test_no] = {"kind": kind}
            for mode in modes:
                res, _ = scenario(mode, test_no)
                flows = {k: v for k, v in res.items() if k.startswith("F")}
                agg = collisions.aggregate_mbps(flows)
                tests[test_no][mode] = {"flows": flows, "reroutes": res["_reroutes"], "aggregate_mbps": round(agg, 3)}
                print(f"[bench reroute] test {test_no} ({kind}) {mode}: " + ", ".join(
                    f"{k} {v['goodput_mbps']:.2f} Mbit/s / {v['fct_s'] or 0:.1f} s" for k, v in flows.items())
                    + f"; together {agg:.2f} Mbit/s (bytes / longest FCT)", flush=True)
    finally:
        fn.stop()
        boot.stop()
    table = {}
    for test_no, t in tests.items():
        base = t.get("ecmp")
        if not base:
            continue
        row = {}
        for mode in modes:
            if mode == "ecmp" or mode not in t:
                continue
            fcts = [(base["flows"][k]["fct_s"], v["fct_s"]) for k, v in t[mode]["flows"].items()
                    if not v["background"] and v["fct_s"] and base["flows"][k]["fct_s"]]
            thr = [(base["flows"][k]["goodput_mbps"], v["goodput_mbps"]) for k, v in t[mode]["flows"].items()
                   if not v["background"]]
            row[mode] = {
                "fct_gain_pct": round(100 * sum((b - s) / b for b, s in fcts) / len(fcts), 2) if fcts else None,
                "throughput_gain_pct": round(100 * (sum(s for _, s in thr) / sum(b for b, _ in thr) - 1), 2)}
        table[test_no] = row
    good = [d for d in delays if d is not None]
    result = {"bench": "reroute", "machine": machine(), "fabric": "fattree k=4, 10 Mbit/s", "flow_bytes": size,
              "reroute_delay_s": {"trials": delays, "median": percentile(good, 50), "max": max(good) if good else None},
              "tests": tests, "gain_vs_ecmp": table}
    (out / "reroute.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def isolation_bench(seconds: float, mice_rate: float, elephants: int, out: Path) -> dict:
    """Many-to-one on a leaf-spine: mice FCT and bottleneck utilisation with isolation on and off,
    plus mice-only and elephant-only reference runs."""
    import statistics
    import sys

    from ryu_apps.programs.isolation import IsolationConfig
    from topology.fabric import leafspine
    from topology.sflow_agent import SFlowAgentConfig

    out.mkdir(parents=True, exist_ok=True)
    fabric = leafspine(2, 4, 2, 10)
    fabric.save(out / "isolation-fabric.json")
    receiver = "h0_0"
    senders = ["h1_0", "h2_0", "h3_0", "h1_1", "h2_1", "h3_1"][:elephants]
    server = "h3_1" if elephants < 6 else "h1_1"
    n_mice = int(seconds * mice_rate)
    runs = {}
    for name, iso_on, with_mice, with_elephants in (("mice-only", True, True, False),
                                                    ("elephants-only", True, False, True),
                                                    ("isolation-off", False, True, True),
                                                    ("isolation-on", True, True, True)):
        print(f"[bench isolation] {name} ...", flush=True)
        extra = ["--isolation", "on"] if iso_on else []
        with ControllerProcess(out / "isolation-fabric.json", extra=extra,
                               log_file=out / f"isolation-{name}.log",
                               events_file=out / f"isolation-{name}.jsonl") as ctl, \
                FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target),
                          isolation=IsolationConfig() if iso_on else None) as fn:
            fn.wait_reachable(30)
            rx = fn.host(receiver)
            port = fabric.hosts_on("l0")[0].port
            fn.host(server).cmd(f"{sys.executable} -m experiments.rr server --port 7020 >/dev/null 2>&1 &")
            if with_elephants:
                for i in range(len(senders)):
                    rx.cmd(f"iperf3 -s -1 -p {5900 + i} -D >/dev/null 2>&1")
                time.sleep(0.5)
                for i, s in enumerate(senders):
                    fn.host(s).sendCmd(f"iperf3 -c {rx.IP()} -p {5900 + i} -t {seconds + 4} -J")
                time.sleep(2.0)  # elephants established (and detected)
            tx0, t0 = _port_tx("l0", port), time.time()
            fcts = []
            if with_mice:
                res = rx.cmd(f"{sys.executable} -m experiments.rr client --to {fn.host(server).IP()} --port 7020 "
                             f"--sizes {','.join(['10000'] * n_mice)} --gap {1 / mice_rate}")
                fcts = sorted(json.loads(x)["fct_s"] for x in res.splitlines()
                              if x.startswith("{") and '"ok": true' in x)
            else:
                time.sleep(seconds)
            util = (_port_tx("l0", port) - tx0) * 8 / (time.time() - t0) / 10e6
            if with_elephants:
                for s in senders:
                    fn.host(s).waitOutput()
            fn.host(server).cmd("kill %1")
        row = {"mice": len(fcts), "mice_p50_ms": round(statistics.median(fcts) * 1e3, 2) if fcts else None,
               "mice_p99_ms": round(percentile(fcts, 99) * 1e3, 2) if fcts else None,
               "bottleneck_utilisation": round(util, 4)}
        runs[name] = row
        print(f"[bench isolation] {name}: {row}", flush=True)
    on, off = runs["isolation-on"], runs["isolation-off"]
    result = {"bench": "isolation", "machine": machine(),
              "fabric": "leafspine 2 spines x 4 leaves x 2 hosts, 10 Mbit/s",
              "many_to_one": {"receiver": receiver, "elephant_senders": senders, "mice_server": server,
                              "mice_per_s": mice_rate, "mice_bytes": 10_000, "seconds": seconds},
              "runs": runs,
              "mice_p50_reduction_pct": round(100 * (1 - on["mice_p50_ms"] / off["mice_p50_ms"]), 2),
              "mice_p99_reduction_pct": round(100 * (1 - on["mice_p99_ms"] / off["mice_p99_ms"]), 2)}
    (out / "isolation.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


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

    from topology.builder import ofctl
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

    from experiments import flowgen
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
        srv.cmd(f"{sys.executable} -m experiments.rr server --port 7400 >/dev/null 2>&1 &")
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

    from experiments.etcd import EtcdCluster
    from experiments.procs import free_port
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

    from experiments.procs import free_port
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
