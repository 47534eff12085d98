"""The field's standard flow-scheduling benchmark (pFabric, pHost, Homa): Poisson flows, FCT slowdown.

Every host starts flows as a Poisson process whose offered load is a fraction of its access link; each
flow's size is drawn from the web-search (DCTCP) or data-mining (VL2) distribution and its destination is
uniform over every other host (or, with ``local_share``, over the hosts of its own rack or pod that
often). A flow's **slowdown** is its completion time over its completion time alone on the idle fabric
(``idle_fct``: its connection's handshake, its bytes at line rate with every header, and the last
packet's store-and-forward and propagation along its path); it is reported by size bucket (< 100 KB,
100 KB-1 MB, 1-10 MB, > 10 MB), mean and p99, for every mode and for the **ideal**: the same flows on
one non-blocking output-queued switch with the same host links, TCP and per-port buffers
(``ideal_fabric``). Slowdowns of every run, the ideal's included, are taken against the scheme's
fabric's idle FCT, so that the ideal's are the floor any scheme on that fabric can reach.

Pure: the workload and the figures. Running it is ``experiments.sweep`` (one run a task).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from experiments.analysis import stats
from experiments.workloads.flowlist import Flow
from experiments.workloads.workload import SizeCDF, WorkloadError
from topology.fabric import Fabric, Switch, make_dpid

IDEAL = "ideal"  # the reference "mode": the flows on one non-blocking switch
IDEAL_SWITCH = "ideal"
SLOWDOWN_BUCKETS = ((0, 100_000, "<100KB"), (100_000, 1_000_000, "100KB-1MB"), (1_000_000, 10_000_000, "1-10MB"),
                    (10_000_000, math.inf, ">10MB"))
DISTRIBUTIONS = ("websearch", "datamining")
LOCAL_SCOPES = ("rack", "pod")
PPP_HEADER = 2  # ns-3's point-to-point frames carry a 2-byte PPP header, no Ethernet
SMALL_FRAME = 54 + PPP_HEADER  # a SYN, SYN-ACK or ACK with TCP timestamps


def size_cdf(dist: str, max_bytes: float | None = None) -> SizeCDF:
    """The distribution, conditioned on sizes up to ``max_bytes`` when given (VL2's data-mining tail reaches
    973 MB: 78 s alone at 100 Mbit/s)."""
    cdf = SizeCDF.load(dist)
    return cdf.mice(max_bytes) if max_bytes and max_bytes < cdf.sizes[-1] else cdf


def poisson_flows(fabric: Fabric, dist: str, load: float, duration: float, seed: int, *,
                  local_share: float = 0.0, local_scope: str = "rack", announce_above: float | None = 1_000_000,
                  max_bytes: float | None = None) -> list[Flow]:
    """Every host's flows for ``duration`` seconds: Poisson arrivals offering ``load`` of its access link,
    sizes from ``dist``, destinations uniform over all other hosts (``local_share`` of them inside the
    host's ``local_scope``). Flows of ``announce_above`` bytes or more announce themselves (None: none)."""
    if dist not in DISTRIBUTIONS:
        raise WorkloadError(f"workload: unknown {dist!r} (known: {', '.join(DISTRIBUTIONS)})")
    if not 0 < load < 1:
        raise WorkloadError(f"load: a fraction of the access link in (0, 1), got {load!r}")
    if duration <= 0:
        raise WorkloadError(f"duration: seconds of arrivals, above 0, got {duration!r}")
    if not 0 <= local_share <= 1:
        raise WorkloadError(f"local_share: a fraction in [0, 1], got {local_share!r}")
    if local_scope not in LOCAL_SCOPES:
        raise WorkloadError(f"local_scope: rack or pod, got {local_scope!r}")
    cdf = size_cdf(dist, max_bytes)
    rng = random.Random(seed)
    hosts = list(fabric.hosts)
    if len(hosts) < 2:
        raise WorkloadError("the fabric needs at least two hosts")

    def scope(h) -> object:
        return h.switch if local_scope == "rack" or fabric.topo != "fattree" else fabric.switches[h.switch].pod

    near = {h.name: [o.name for o in hosts if o.name != h.name and scope(o) == scope(h)] for h in hosts}
    flows: list[Flow] = []
    for h in hosts:
        others = [o.name for o in hosts if o.name != h.name]
        rate = load * fabric.capacity_bps((h.name, h.switch)) / 8 / cdf.mean()  # flows a second
        t = 0.0
        while True:
            t += rng.expovariate(rate)
            if t >= duration:
                break
            local = local_share > 0 and near[h.name] and rng.random() < local_share
            dst = rng.choice(near[h.name] if local else others)
            size = cdf.sample(rng)
            flows.append(Flow(round(t, 6), h.name, dst, size, "bulk",
                              announce_above is not None and size >= announce_above))
    flows.sort(key=lambda f: (f.start, f.src))
    return flows


def ideal_fabric(fabric: Fabric) -> Fabric:
    """The same hosts (names, addresses, access links) on one switch with a port each: non-blocking and
    output-queued, the reference every scheme is measured against."""
    sw = Switch(IDEAL_SWITCH, "leaf", 0, 0, make_dpid("leaf", 0, 0))
    hosts = [replace(h, switch=IDEAL_SWITCH, port=i + 1,
                     capacity_mbps=fabric.capacity_bps((h.name, h.switch)) / 1e6) for i, h in enumerate(fabric.hosts)]
    return Fabric("leafspine", {"spines": 0, "leaves": 1, "hosts_per_leaf": len(hosts), "ideal_of": fabric.topo},
                  fabric.link_rate_mbps, {IDEAL_SWITCH: sw}, [], hosts)


def hops(fabric: Fabric, src: str, dst: str) -> list[float]:
    """The link rates (bit/s) along a shortest path from host ``src`` to host ``dst``: its access link, the
    switch links of a shortest path between their ToRs, the destination's access link (every shortest
    path of a Clos fabric has the same rates)."""
    a, b = fabric.host(src), fabric.host(dst)
    prev = {a.switch: None}
    frontier = [a.switch]
    while b.switch not in prev and frontier:
        nxt = []
        for s in frontier:
            for n in fabric.neighbors(s):
                if n not in prev:
                    prev[n] = s
                    nxt.append(n)
        frontier = nxt
    path = [b.switch]
    while prev.get(path[-1]) is not None:
        path.append(prev[path[-1]])
    path.reverse()
    return ([fabric.capacity_bps((a.name, a.switch))] + [fabric.capacity_bps((x, y)) for x, y in zip(path, path[1:], strict=False)]
            + [fabric.capacity_bps((b.name, b.switch))])


def idle_fct(rates: list[float], size: int, mtu: int = 1500, link_delay_s: float = 5e-6) -> float:
    """A flow's completion time alone on an idle path of links at ``rates``: the SYN and SYN-ACK (a small
    frame each way), then its segments back to back at the slowest link's rate, the last one stored and
    forwarded at every other hop, and the propagation of every link (``link_delay_s`` each)."""
    mss = mtu - 52
    n = max(1, math.ceil(size / mss))
    frame = (mtu + PPP_HEADER) * 8
    last = ((size - (n - 1) * mss) + 52 + PPP_HEADER) * 8
    small = sum(SMALL_FRAME * 8 / r + link_delay_s for r in rates)
    slow = min(rates)
    body = (n - 1) * frame / slow + sum(last / r for r in rates) + len(rates) * link_delay_s
    return 2 * small + body


TIMED = "timed"  # the bucket of a flow that sends for a time rather than a size (no slowdown: its goodput)


def bucket_of(size: int) -> str:
    return next(name for lo, hi, name in SLOWDOWN_BUCKETS if lo <= size < hi)


def flow_rows(run: dict, fabric: Fabric, flows: list[Flow], mtu: int, link_delay_s: float) -> list[dict]:
    """One row per flow of a run: its size, bucket, FCT, idle FCT on ``fabric`` and slowdown (None when it
    did not finish), retransmission timeouts and the handshake's answer."""
    by_id = {b["id"]: b for b in run.get("bulk", [])}
    timed = {e["id"]: e for e in run.get("elephants", []) if "id" in e}
    cache: dict[tuple[str, str], list[float]] = {}
    rows = []
    for n, f in enumerate(flows):
        if f.bytes == 0:  # a flow that sends for a time (a permutation's): what it delivered, at what rate
            e = timed.get(n, {})
            rows.append({"flow": n, "src": f.src, "dst": f.dst, "start_s": f.start, "bytes": 0, "bucket": TIMED,
                         "announce": f.announced, "hops": None, "fct_s": None, "idle_fct_s": None,
                         "slowdown": None, "done": n in timed, "rto": None, "answer": e.get("announced"),
                         "delivered": e.get("bytes"), "goodput_mbps": e.get("goodput_mbps")})
            continue
        key = (fabric.host(f.src).switch, fabric.host(f.dst).switch)
        rates = cache.get(key)
        if rates is None:
            rates = cache[key] = hops(fabric, f.src, f.dst)
        idle = idle_fct(rates, f.bytes, mtu, link_delay_s)
        b = by_id.get(n, {})
        fct = b.get("fct_s")
        rows.append({"flow": n, "src": f.src, "dst": f.dst, "start_s": f.start, "bytes": f.bytes,
                     "bucket": bucket_of(f.bytes), "announce": f.announced, "hops": len(rates),
                     "fct_s": fct, "idle_fct_s": idle, "slowdown": None if fct is None else fct / idle,
                     "done": fct is not None, "rto": b.get("rto"), "answer": b.get("announced")})
    return rows


def summarise(rows: list[dict]) -> dict:
    """Slowdown by size bucket (and over all flows): flows, finished, mean, p50, p99; the largest's mean
    goodput share too."""
    out = {}
    for name in ["all"] + [b[2] for b in SLOWDOWN_BUCKETS]:
        sel = [r for r in rows if (name == "all" and r["bucket"] != TIMED) or r["bucket"] == name]
        sd = [r["slowdown"] for r in sel if r["slowdown"] is not None]
        out[name] = {"flows": len(sel), "done": len(sd), "mean": sum(sd) / len(sd) if sd else None,
                     "p50": stats.percentile(sd, 50), "p99": stats.percentile(sd, 99)}
    timed = [r["goodput_mbps"] for r in rows if r["bucket"] == TIMED and r.get("goodput_mbps") is not None]
    out[TIMED] = {"flows": sum(1 for r in rows if r["bucket"] == TIMED), "done": len(timed),
                  "mean": sum(timed) / len(timed) if timed else None, "min": min(timed) if timed else None,
                  "p50": stats.percentile(timed, 50), "p1": stats.percentile(timed, 1)}
    big = [r["slowdown"] for r in rows if r["bytes"] >= 1_000_000 and r["slowdown"] is not None]
    out[">=1MB"] = {"flows": sum(1 for r in rows if r["bytes"] >= 1_000_000), "done": len(big),
                    "mean": sum(big) / len(big) if big else None, "p50": stats.percentile(big, 50),
                    "p99": stats.percentile(big, 99)}
    return out
