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
