"""One run of a sweep, as a task on a Dask worker: the point's engine spec, the simulation in a process
of its own (ns-3 keeps global state; the process dies with the worker), the rows into the store.

The task is what Dask schedules, retries and moves off a dead worker; it keeps no state of its own, so
running it twice stores the run once (the store's files are renamed into place whole).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.engines.ns3.engine import child_env
from experiments.sweep import runs
from experiments.sweep.store import Store, config_hash

ROOT = Path(__file__).resolve().parents[2]


class RunError(RuntimeError):
    pass


def plan(point: dict) -> tuple[dict, str]:
    """The point's engine spec and its hash: of the spec and of every controller setting as the run will
    have it (defaults included), so that a run stored before a default changed is not taken for this one."""
    from experiments.engines.ns3.engine import _config
    from ryu_apps.config import sections

    spec = runs.engine_spec(point)
    mode = "ecmp" if spec["mode"] == "perpkt" else spec["mode"]  # (per-packet balancing runs ECMP's program)
    effective = sections(_config(mode, spec["isolation"], spec["settings"].get("controller")))
    effective["controller"].pop("fabric", None)
    bare = {**spec, "settings": {k: v for k, v in spec["settings"].items() if k != "controller"}}
    return spec, config_hash({"spec": bare, "controller": effective})


def versions() -> dict:
    """The engine's and the packages' versions, and the project's commit (with ``+dirty`` for local edits)."""
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for pkg in ("ns3", "os-ken", "numpy", "distributed"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        out["commit"] = (commit + ("+dirty" if dirty else "")) if commit else None
    except (OSError, subprocess.SubprocessError):
        out["commit"] = None
    return out


def _die_with_parent() -> None:
    """In the engine's process: killed when the worker that started it dies (a SIGKILLed worker must not
    leave a simulation behind to write into the store)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


NICE_MAX = 19


def _engine_preexec(nice: int) -> None:
    """In the engine's process, before it runs: killed with its worker, at ``nice`` (never below what it
    inherited: that needs privilege)."""
    _die_with_parent()
    if nice:
        os.nice(max(0, nice - os.nice(0)))


GROUP_TRIES_S = 2.0  # how long the group's niceness is tried for (the kernel takes one write a 100 ms)


def _group_nice(pid: int, nice: int) -> str | None:
    """Put the engine's scheduling group at ``nice``: None, or why not. Without its group, a niceness orders a
    process only against those of its own session (sched(7), Linux's autogroup, on by default on Debian's and
    desktop kernels): a sweep started at nice 19 from one shell competes as an equal with a benchmark started
    from another. The engine was started in a session of its own, so the group is the run's alone and the
    worker, the scheduler and the shell keep theirs. The kernel takes one such write every 100 ms from an
    unprivileged user (EAGAIN), and a sweep starts its runs together, so it is tried again for
    ``GROUP_TRIES_S``."""
    deadline = time.monotonic() + GROUP_TRIES_S
    while True:
        try:
            with open(f"/proc/{pid}/autogroup", "w") as f:
                f.write(str(nice))
            return None
        except FileNotFoundError:  # no autogroup in this kernel (or the engine is gone): its niceness is what counts
            return None
        except BlockingIOError as e:
            if time.monotonic() > deadline:
                return f"the kernel refused it for {GROUP_TRIES_S:g} s ({e})"
            time.sleep(0.05)
        except OSError as e:
            return str(e)


def run_point(point: dict, store_root: str, expect_hash: str | None = None, rerun: bool = False,
              nice: int = 0) -> dict:
    """Run one point unless the store has it; what happened (hash, status, wall seconds). ``nice`` (0-19): the
    engine's priority and its scheduling group's (``_group_nice``), below what else the machine runs; the
    results are the same."""
    if not 0 <= nice <= NICE_MAX:
        raise RunError(f"nice: {nice} is not within 0-{NICE_MAX}")
    store = Store(store_root)
    spec, h = plan(point)
    if expect_hash is not None and h != expect_hash:
        raise RunError(f"this worker builds another configuration for the point (hash {h}, expected "
                       f"{expect_hash}): its code or data differ from the client's")
    if store.has(h) and not rerun:
        return {"hash": h, "status": "stored", "wall_s": 0.0}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="freeway-run-") as d:
        spec_path, out_path = Path(d) / "spec.json", Path(d) / "run.json"
        spec_path.write_text(json.dumps(spec))
        env = child_env()  # (its hash seed fixed: the same point gives the same numbers)
        proc = subprocess.Popen([sys.executable, "-m", "experiments.engines.ns3.engine", str(spec_path), str(out_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=str(ROOT), preexec_fn=functools.partial(_engine_preexec, nice),
                                start_new_session=bool(nice))
        tail: list[str] = []
        why = _group_nice(proc.pid, nice) if nice else None  # (if not: the run goes on at its own niceness, in a
        head = [] if why is None else [  # group of its own at 0, and its log says so)
            f"[sweep] the run's scheduling group could not be set to nice {nice}: {why}"]
        store.write_progress(h, f"{runs.label(point)}: started on {socket.gethostname()} (pid {proc.pid})")
        try:
            for line in proc.stdout:
                if "runStaticInitializersOnce" not in line:
                    tail = (tail + [line.rstrip()])[-40:]
                    if line.startswith("["):
                        store.write_progress(h, f"{runs.label(point)}: {line.strip()}")
            proc.wait()
        finally:
            store.end_progress(h)
        store.write_log(h, "\n".join(head + tail) + "\n")
        if proc.returncode != 0 or not out_path.exists():
            raise RunError(f"{point['mode']} seed {point['seed']}: the engine failed (exit {proc.returncode}): "
                           + " | ".join(tail[-5:]))
        result = json.loads(out_path.read_text())
    tables, summary = runs.analyse(point, spec, result)
    tables = {kind: [{"hash": h, **r} for r in rows] for kind, rows in tables.items()}
    wall = time.time() - t0
    row = {**{k: point.get(k) for k in runs.POINT_COLUMNS}, "hash": h, "status": "ok", "wall_s": round(wall, 1),
           "worker": socket.gethostname(), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "versions": json.dumps(versions()), "point": json.dumps(point, sort_keys=True, default=str), **summary}
    store.write_run(h, tables, row)
    return {"hash": h, "status": "ok", "wall_s": wall}
