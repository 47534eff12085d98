"""``freeway bench sweep``: what the sweep machinery costs, and whether an interrupted sweep comes back the same.

On a Dask cluster started as a user starts one (a scheduler and two workers, each a process of its own), a
sweep of short ns-3 runs (k=4, 10 Mbit/s, four modes x two seeds by default):

- **overhead**: the sweep's wall time over the sum of its runs' wall times divided by the workers (1.0 is
  perfect packing; the target is at most 1.15);
- **resume**: the same sweep into a second store, interrupted (the client killed, as a lost terminal) once
  half its runs are stored, then started again: the runs it ran the second time, and whether
  ``freeway report``'s tables are the uninterrupted store's, number for number.

Writes ``sweep.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from experiments.sweep.cluster import BIN, ROOT, Cluster, stop

SPEC = """\
scenario: fct
grid:
  mode: [ideal, ecmp, ecmp+isolation, perpkt]
  seed: [1, 2]
fixed:
  k: 4
  link_mbps: 10
  load: 0.5
  duration: {duration}
  grace: 5
"""
TARGET = 1.15


def _stored(store: Path) -> int:
    return len(list((store / "runs").glob("*.parquet"))) if (store / "runs").exists() else 0


def _sweep(spec: Path, store: Path, address: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "freeway"), "sweep", str(spec), "--store", str(store), "--scheduler", address],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)


def _tables(store: Path, out: Path) -> str:
    r = subprocess.run([str(BIN / "freeway"), "report", str(store), "--out", str(out), "--no-plots"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"freeway report {store}: {r.stdout}{r.stderr}")
    return "\n".join((out / "report.md").read_text().splitlines()[1:])  # without the line naming the store


def run(out: Path, duration: float = 0.4, workers: int = 2, progress=print) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "sweep-bench"
    if work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir()
    spec = work / "spec.yaml"
    spec.write_text(SPEC.format(duration=duration))
    n = 8
    res: dict = {"runs": n, "workers": workers, "duration_s": duration, "target_overhead": TARGET,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with Cluster(work, workers) as cluster:
        progress(f"[bench sweep] cluster at {cluster.address}: a scheduler and {workers} workers, each a process")
        t0 = time.monotonic()
        proc = _sweep(spec, work / "store", cluster.address)
        text, _ = proc.communicate(timeout=3600)
        elapsed = time.monotonic() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"the sweep failed (exit {proc.returncode}): {text[-2000:]}")
        import pandas as pd

        runs = pd.concat(pd.read_parquet(p) for p in (work / "store" / "runs").glob("*.parquet"))
        walls = runs["wall_s"].tolist()
        packed = sum(walls) / workers
        res["overhead"] = {"elapsed_s": round(elapsed, 1), "run_wall_s": [round(w, 1) for w in walls],
                           "sum_over_workers_s": round(packed, 1), "ratio": round(elapsed / packed, 3),
                           "longest_run_s": round(max(walls), 1)}
        res["overhead"]["met"] = res["overhead"]["ratio"] <= TARGET
        progress(f"[bench sweep] {n} runs in {elapsed:.1f} s; the runs' wall times / {workers} = {packed:.1f} s: "
                 f"{elapsed / packed:.3f}x (target <= {TARGET})")

        again = work / "again"
        proc = _sweep(spec, again, cluster.address)
        deadline = time.monotonic() + 1800
        while _stored(again) < n // 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # the client gone, as a closed terminal
        proc.wait(30)
        first = _stored(again)
        time.sleep(2.0)  # (a run a worker was finishing may still land: it is stored whole or not at all)
        before = _stored(again)
        proc = _sweep(spec, again, cluster.address)
        text, _ = proc.communicate(timeout=3600)
        stop(proc)
        if proc.returncode != 0:
            raise RuntimeError(f"the resumed sweep failed (exit {proc.returncode}): {text[-2000:]}")
    line = next((ln for ln in text.splitlines() if "already stored" in ln), "")
    same = _tables(again, work / "r-again") == _tables(work / "store", work / "r-first")
    res["resume"] = {"stored_when_killed": first, "stored_before_restart": before, "stored_after": _stored(again),
                     "restart_said": line.strip(), "ran_again": _stored(again) - before,
                     "same_tables": same}
    res["resume"]["met"] = same and _stored(again) == n and 0 < before < n
    progress(f"[bench sweep] interrupted with {first} of {n} stored; started again: {line.strip()}; "
             f"tables {'identical' if same else 'DIFFERENT'} to the uninterrupted sweep's")
    (out / "sweep.json").write_text(json.dumps(res, indent=1) + "\n")
    return res
