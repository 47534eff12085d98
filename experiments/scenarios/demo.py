"""``freeway demo``: a k=4 fat-tree under the controller, shown forwarding.

Starts the controller the way a user does, builds the fabric, waits for full
reachability, measures one cross-pod TCP flow against the link rate and shows
ECMP spreading eight flows over an edge switch's uplinks. Writes demo.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from experiments.harness.procs import ControllerProcess
from topology.builder import FabricNet, port_tx_bytes
from topology.fabric import fattree


def uplink_tx_bytes(fabric, switch: str) -> dict[int, int]:
    tx = port_tx_bytes(switch)
    return {p: tx.get(p, 0) for p in (fabric.port_to(switch, n) for n in fabric.up_neighbors(switch))}


def step(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fabric = fattree(args.k, args.link_mbps)
    fabric.save(out / "fabric.json")
    result: dict = {"k": args.k, "rate_mbps": args.link_mbps}
    step(f"fabric description written to {out / 'fabric.json'}")
    with ControllerProcess(out / "fabric.json", log_file=out / "controller.log") as ctl:
        step(f"controller listening on 127.0.0.1:{ctl.port} (log: {ctl.log_file})")
        with FabricNet(fabric, ctl.address) as fn:
            step(f"k={args.k} fat-tree up: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, "
                 f"all programmed in {fn.timings['programmed_s']:.1f} s")
            secs, failed = fn.wait_reachable(timeout=60)
            n = len(fabric.hosts)
            result["reachable_pairs"] = n * (n - 1) - len(failed)
            result["pairs"] = n * (n - 1)
            result["full_reachability_s"] = round(fn.timings["programmed_s"] + secs, 2)
            step(f"pingall: {result['reachable_pairs']}/{result['pairs']} pairs reachable")
            src, dst = fabric.hosts[0].name, fabric.hosts[-1].name
            mbps = fn.iperf(src, dst, seconds=5)
            result["tcp_mbps"] = round(mbps, 2)
            step(f"TCP {src} -> {dst} (across pods): {mbps:.2f} Mbit/s on {args.link_mbps:g} Mbit/s links")
            edge = fabric.hosts[0].switch
            far = fabric.hosts[len(fabric.hosts) // 2]
            fn.host(far.name).cmd("iperf3 -s -1 -p 5301 -D >/dev/null 2>&1")
            time.sleep(0.3)
            before = uplink_tx_bytes(fabric, edge)
            fn.host(src).cmd(f"iperf3 -c {far.ip} -p 5301 -P 8 -t 3 >/dev/null 2>&1")
            after = uplink_tx_bytes(fabric, edge)
            spread = {p: after[p] - before[p] for p in after}
            result["ecmp_uplink_bytes"] = spread
            step(f"ECMP: 8 TCP flows {src} -> {far.name} left {edge} as "
                 + ", ".join(f"uplink port {p}: {b / 1e6:.2f} MB" for p, b in spread.items()))
    (out / "demo.json").write_text(json.dumps(result, indent=1) + "\n")
    ok = not failed and mbps >= 0.8 * args.link_mbps
    step(f"{'OK' if ok else 'FAILED'}; results in {out / 'demo.json'}")
    return 0 if ok else 1
