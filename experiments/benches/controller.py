"""``freeway bench``: measurements that write JSON (never part of the test suite)."""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from pathlib import Path

from experiments.analysis.stats import percentile
from experiments.harness.procs import ControllerProcess
from topology.builder import FabricNet
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

    fix = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sflow"
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
    into datagrams as ``freeway bench fabric-scale``'s agents pack them (``experiments.benches.sflowload``), through
    the decoder alone and through the whole collector (decoder and estimator, with EFM's hot threshold
    set, as a worker runs it: ``HOLD_N`` datagrams folded together); the fastest round of each."""
    from experiments.benches.sflowload import MAX_DATAGRAM
    from monitoring.collector import Collector
    from monitoring.estimator import Estimator
    from monitoring.sflow import decode_datagram
    from monitoring.worker import HOLD_N
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
        for j in range(0, len(batch), HOLD_N):  # (as a worker takes them: what waits, folded together)
            col.handle_many([(float(t + 1), d, None) for d in batch[j:j + HOLD_N]], False)
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
        srv.cmd(f"{sys.executable} -m experiments.hosts.rr server --port 7100 >/dev/null 2>&1 &")
        time.sleep(1.0)
        t_mice = time.time()
        res = cli.cmd(f"{sys.executable} -m experiments.hosts.rr client --to {srv.IP()} --port 7100 "
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

    from experiments.harness.procs import free_port
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
                        fn.host(src).sendCmd(f"{sys.executable} -m experiments.hosts.hsload --to {dst} --rate {per} "
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

    from experiments.analysis.optimum import Flow, solve
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
