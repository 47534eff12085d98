"""``freeway bench reroute`` and ``bench isolation`` on the emulator: the EFM collision tests timed as they
reroute, and mice beside elephants with and without the isolation queues (the scenarios reuse both)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from experiments.analysis.stats import percentile
from experiments.benches.controller import machine
from experiments.harness.procs import ControllerProcess
from topology.builder import FabricNet, ofctl
from topology.fabric import fattree


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

    from experiments.workloads import collisions
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
                print(f"[bench reroute] test {test_no} ({kind}) {mode}: {collisions.describe(flows)}"
                      f"; together {agg:.2f} Mbit/s (bytes / longest FCT)", flush=True)
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
            fn.host(server).cmd(f"{sys.executable} -m experiments.hosts.rr server --port 7020 >/dev/null 2>&1 &")
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
                res = rx.cmd(f"{sys.executable} -m experiments.hosts.rr client --to {fn.host(server).IP()} --port 7020 "
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
