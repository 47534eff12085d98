"""``freeway sweep SPEC``: every point of a sweep as a task on Dask distributed.

With no scheduler given, a local cluster of one single-threaded worker process per core is started (so
``freeway sweep spec.yaml`` needs nothing else running); ``--scheduler tcp://HOST:8786`` sends the same
tasks to a running cluster (``dask scheduler`` and ``dask worker`` on other machines, or ``dask-jobqueue``
on Slurm/PBS). Dask does the scheduling, the retries (``retries``) and the moving of a dead worker's task
to another worker; a run already in the store is not sent at all (``rerun`` forces it).

Progress: a line every ``every_s`` seconds and at each run's end: runs done, running and failed, and the
time left at the mean run's wall time over the workers.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

from experiments.sweep.runs import label
from experiments.sweep.spec import Spec
from experiments.sweep.store import Store
from experiments.sweep.task import plan, run_point

RETRIES = 2  # a task that raised is run again this many times (a worker that died: Dask's allowed-failures)


class SweepError(RuntimeError):
    pass


@dataclass
class Outcome:
    points: int
    stored_before: int
    ran: int = 0
    failed: list[tuple[dict, str]] = field(default_factory=list)
    lost: bool = False  # the scheduler went away
    interrupted: bool = False  # ^C: what was not running was cancelled, what was running stopped
    missing: list[dict] = field(default_factory=list)  # points not in the store at the end
    wall_s: float = 0.0
    run_walls: list[float] = field(default_factory=list)
    workers: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.lost and not self.interrupted and not self.missing


def sweep(spec: Spec, store: Store, scheduler: str | None = None, workers: int = 0, rerun: bool = False,
          every_s: float = 10.0, progress=print, nice: int = 0) -> Outcome:
    """Run every point of ``spec`` that ``store`` lacks; what happened. ``nice``: each run's priority
    (``task.run_point``), so that a sweep takes only what the machine leaves idle."""
    from distributed import Client, LocalCluster, as_completed

    store.check_writable()
    points = spec.points()
    planned = list({h: (p, h) for p, h in ((p, plan(p)[1]) for p in points)}.values())  # points that are the
    todo = [(p, h) for p, h in planned if rerun or not store.has(h)]  # same run (a mode that announces nothing,
    out = Outcome(len(planned), len(planned) - len(todo))  # under two announce thresholds) run once
    progress(f"[sweep] {len(planned)} runs: {out.stored_before} already stored, {len(todo)} to run; store "
             f"{store.root}")
    if not todo:
        return out
    t0 = time.time()
    cluster = None
    # ^C sets a flag the loop reads (a KeyboardInterrupt raised inside Dask's own waits can be swallowed there)
    stop: list[int] = []
    old_handler = (signal.signal(signal.SIGINT, lambda *_: stop.append(1))
                   if threading.current_thread() is threading.main_thread() else None)
    if scheduler is None:
        n = workers or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=40)
        client = Client(cluster)
    else:
        client = Client(scheduler, timeout="20s")
    try:
        out.workers = len(client.scheduler_info().get("workers", {})) or 1
        progress(f"[sweep] on {scheduler or 'a local cluster'}: {out.workers} workers; dashboard "
                 f"{client.dashboard_link}")
        futures = {client.submit(run_point, p, str(store.root.resolve()), h, rerun, nice, key=f"freeway-run-{h}",
                                 retries=RETRIES, pure=False): (p, h) for p, h in todo}
        keys = {f.key for f in futures}
        done = failed = 0
        last = time.time()
        pending = as_completed(futures, with_results=False)
        while not pending.is_empty():
            if stop:
                raise KeyboardInterrupt
            batch = pending.next_batch(block=False) if pending.has_ready() else []
            if not batch:
                time.sleep(0.5)
            for fut in batch:
                p, h = futures[fut]
                if fut.status == "finished":
                    res = fut.result()
                    done += 1
                    out.ran += res["status"] == "ok"
                    if res["status"] == "ok":
                        out.run_walls.append(res["wall_s"])
                    progress(f"[sweep] done {label(p)} in {res['wall_s']:.0f} s")
                    continue
                failed += 1
                try:
                    err = repr(fut.exception())
                except Exception as e:  # noqa: BLE001  (the scheduler itself may be gone)
                    err = repr(e)
                out.failed.append((p, err))
                progress(f"[sweep] FAILED {label(p)}: {err[:300]}")
            if client.status in ("closed", "closing") or (client.scheduler_comm is None and client.status != "running"):
                out.lost = True
                break
            now = time.time()
            if now - last >= every_s or (batch and done + failed == len(todo)):
                last = now
                running = min(_running(client, keys), out.workers)
                left = len(todo) - done - failed
                mean = sum(out.run_walls) / len(out.run_walls) if out.run_walls else None
                eta = "" if mean is None else f"; about {_hms(mean * left / out.workers)} left"
                progress(f"[sweep] {done}/{len(todo)} done, {running} running, {failed} failed{eta}"
                         + "".join(f"\n[sweep]   {line}" for line in store.progress_lines()))
    except (OSError, TimeoutError) as e:
        out.lost = True
        progress(f"[sweep] the scheduler went away: {e!r}")
    except KeyboardInterrupt:  # ^C: no run starts after it; the runs under way stop with their workers
        out.interrupted = True
        progress("[sweep] interrupted: cancelling what is left")
        try:
            client.cancel(list(futures), force=True)
        except Exception:  # noqa: BLE001  (futures not made yet, or the scheduler gone)
            pass
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
        try:
            client.close(timeout=5)
        except Exception:  # noqa: BLE001  (closing a client whose scheduler died)
            pass
        if cluster is not None:  # (its workers' runs die with them: PDEATHSIG)
            cluster.close(timeout=10)
    out.wall_s = time.time() - t0
    out.missing = [p for p, h in planned if not store.has(h)]
    return out


def _running(client, keys: set) -> int:
    try:
        return sum(1 for ks in client.processing().values() for k in ks if k in keys)
    except Exception:  # noqa: BLE001  (only for the progress line)
        return 0


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min {s % 60:02d} s"
