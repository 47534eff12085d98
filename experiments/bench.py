"""``freeway bench``: measurements that write JSON (never part of the test suite)."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from topology.builder import FabricNet
from topology.fabric import fattree

from .procs import ControllerProcess


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


def _percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    i = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[i]


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


def detection(trials: int, rate_mbps: float, out: Path, elephant_mbps: float, mice: int, seed: int) -> dict:
    """Delay from an elephant's first byte to the controller's elephant-start event; mice wrongly flagged."""
    import random
    import sys

    from monitoring.agent_config import SFlowAgentConfig

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
        # mice: request/response flows of 1 KB..50 KB (log-uniform), one connection each
        sizes = [int(10 ** rng.uniform(3, 4.7)) for _ in range(mice)]
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
        "trials": rows, "detected": len(delays), "median_delay_s": _percentile(delays, 50),
        "p95_delay_s": _percentile(delays, 95), "max_delay_s": max(delays) if delays else None,
        "mice": {"flows": len(done), "completed": sum(1 for d in done if d.get("ok")), "max_size": max(sizes),
                 "wrongly_flagged": len(flagged), "fraction_flagged": round(len(flagged) / max(1, len(done)), 4)},
        "decoder": decoder_rate(),
    }
    (out / "detection.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
