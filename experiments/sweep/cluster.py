"""A Dask cluster as a user starts one on two machines: ``dask scheduler`` and ``dask worker`` processes of
their own (single-threaded workers without a nanny, so a killed worker stays dead, as a lost machine).
Used by ``freeway bench sweep`` and the sweep tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from experiments.harness.procs import free_port

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class Cluster:
    def __init__(self, tmp: Path, workers: int):
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler = start([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
                                "--dashboard-address", ":0"], tmp / "scheduler.log")
        self.workers = [start([str(BIN / "dask"), "worker", self.address, "--nthreads", "1", "--no-nanny",
                               "--name", f"w{i}", "--memory-limit", "0"], tmp / f"worker{i}.log")
                        for i in range(workers)]
        from distributed import Client

        deadline = time.time() + 60
        while True:
            try:
                with Client(self.address, timeout="5s") as c:
                    if len(c.scheduler_info()["workers"]) == workers:
                        return
            except OSError:
                pass
            if time.time() > deadline:
                self.close()
                raise RuntimeError(f"the cluster did not come up: {(tmp / 'scheduler.log').read_text()[-2000:]}")
            time.sleep(0.5)

    def close(self) -> None:
        for p in [*self.workers, self.scheduler]:
            stop(p)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
