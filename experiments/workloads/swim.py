"""Flows reconstructed from SWIM's Facebook 2009 trace (pure): the Freeway paper's workload, as near as a
job trace allows.

The Freeway paper ran "a workload generated using SWIM" (Facebook, 13,630 mice flows, over 85% of the
flows, carrying 11% of the bytes; 2,333 elephants carrying 89%) and gives no more. SWIM's sample
(``experiments/workloads/data/swim/``, one day of FB-2009: 24 random hours of a 600-machine cluster, BSD
3-clause) holds MapReduce *jobs* (submit time, map input, shuffle and output bytes), not flows. This
module derives flows from jobs, as a MapReduce cluster would move them:

- a job's map input is split into tasks of ``task_bytes`` (64 MiB, Hadoop's block) and its shuffle into
  reduce tasks of the same size, at most ``max_reducers``; tasks run on servers chosen at random (seeded),
  maps on ``ceil(maps / maps_per_server)`` servers;
- the shuffle: every map server sends each reduce server its share (shuffle / (map servers x reducers)),
  one flow per server pair (the tasks of a server share a connection's worth of time); a map and a
  reduce on the same server move nothing over the network;
- the output: each reducer writes its part to two more servers (HDFS's three replicas: the local one,
  one in another pod, one beside that), each a flow;
- time: the jobs submitted in ``[start_s, start_s + window_s)`` of the trace, compressed into
  ``duration_s`` of the run (``time_scale`` = window / duration); a job's shuffle flows start at its
  (compressed) submit time, spread over ``spread_s``, its output flows after them;
- bytes: every flow's size times ``byte_scale`` (at least one byte), so that a window's load fits the
  simulated fabric.

The mix it gives (``flowlist.mix``) is measured and reported with every run: it is a reconstruction,
not the paper's own workload. Flows of at least ``elephant_bytes`` announce themselves (the paper's
hosts handshake their elephants). The defaults were chosen, before any scheme ran on them, as the
whole hour of the day's trace and the knobs whose mix on the paper's fabric (k=8, 10 servers an edge
switch) came nearest the paper's: 1,933 flows, 84.0% of them under 1 MB carrying 10.9% of the 5.7 GB
(the paper: 85.4% and 11%, of 15,963 flows), over 24 hours x byte scales 0.01/0.02/0.05 x at most
16/64 reducers x 4/16 map tasks a server, among windows of 4 to 20 GB.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from experiments.workloads.flowlist import Flow

TRACE = Path(__file__).parent / "data" / "swim" / "FB-2009_samples_24_times_1hr_0.tsv"
MIB = 2**20


class SwimError(ValueError):
    pass


@dataclass(frozen=True)
class Job:
    name: str
    submit_s: float
    input_bytes: int
    shuffle_bytes: int
    output_bytes: int


@dataclass(frozen=True)
class Derivation:
    """How jobs become flows (every knob is recorded with the run)."""

    start_s: float = 3600.0 * 5  # where in the day's trace the window begins: its sixth hour
    window_s: float = 3600.0
    duration_s: float = 10.0  # the run's seconds the window is compressed into
    byte_scale: float = 0.02
    task_bytes: int = 64 * MIB
    max_reducers: int = 16
    maps_per_server: int = 4
    spread_s: float = 0.5  # a job's shuffle flows start over this long (run time)
    elephant_bytes: int = 1_000_000  # at least this: announced (and an elephant in the results)
    seed: int = 1


def load(path: str | Path = TRACE) -> list[Job]:
    """The trace's jobs; a malformed line is refused with its number."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        try:
            out.append(Job(parts[0], float(parts[1]), int(parts[3]), int(parts[4]), int(parts[5])))
        except (IndexError, ValueError):
            raise SwimError(f"{path}: line {n}: not 'job, submit s, gap s, input, shuffle, output bytes'") from None
    return out


def _pod(fabric, host: str) -> int:
    return fabric.switches[next(h.switch for h in fabric.hosts if h.name == host)].pod


def derive(jobs: list[Job], fabric, d: Derivation = Derivation()) -> list[Flow]:
    """The flows of the jobs submitted in the window, on ``fabric``'s hosts."""
    if d.window_s <= 0 or d.duration_s <= 0 or d.byte_scale <= 0 or d.task_bytes <= 0:
        raise SwimError("window_s, duration_s, byte_scale and task_bytes must be positive")
    rng = random.Random(d.seed)
    hosts = [h.name for h in fabric.hosts]
    pods: dict[int, list[str]] = {}
    for h in fabric.hosts:
        pods.setdefault(fabric.switches[h.switch].pod, []).append(h.name)
    scale = d.duration_s / d.window_s
    out: list[Flow] = []

    def flow(t: float, src: str, dst: str, size: float) -> None:
        if src == dst or size <= 0:
            return
        b = max(1, round(size * d.byte_scale))
        out.append(Flow(round(t, 6), src, dst, b, "bulk", b >= d.elephant_bytes))

    for job in jobs:
        if not d.start_s <= job.submit_s < d.start_s + d.window_s:
            continue
        t0 = (job.submit_s - d.start_s) * scale
        maps = max(1, math.ceil(job.input_bytes / d.task_bytes))
        reducers = min(d.max_reducers, math.ceil(job.shuffle_bytes / d.task_bytes)) if job.shuffle_bytes else 0
        map_servers = rng.sample(hosts, min(len(hosts), math.ceil(maps / d.maps_per_server)))
        reduce_servers = [rng.choice(hosts) for _ in range(reducers)]
        for r in reduce_servers:
            share = job.shuffle_bytes / (len(map_servers) * reducers)
            for m in map_servers:
                flow(t0 + rng.uniform(0, d.spread_s), m, r, share)
        writers = reduce_servers or map_servers[:1]
        for w in writers:
            part = job.output_bytes / len(writers)
            other = [p for p in pods if p != _pod(fabric, w)]
            far = rng.choice(pods[rng.choice(other)]) if other else rng.choice(hosts)
            near = rng.choice([h for h in pods[_pod(fabric, far)] if h != far] or [far])
            t = t0 + d.spread_s + rng.uniform(0, d.spread_s)
            flow(t, w, far, part)
            flow(t, far, near, part)
    return sorted(out, key=lambda f: (f.start, f.src, f.dst))
