"""What path placement alone can give: the benchmark's flows in a fluid model, an engine without packets (pure).

Every flow is a fluid: at each arrival and departure, the active flows get their max-min fair rates
(``fair_rates``, as ``ryu_apps.algorithms.maxmin``) over the links they cross, and hold them until the
next event. No queues, no TCP, no control delay: what is left is how the flows share links, so the difference
between two placements here is what placement itself costs, with every scheme's other losses taken
away. Placements:

- ``ideal``: host links only (one non-blocking switch; per-packet spraying on a fat-tree comes near it);
- ``ecmp``: one of the ToR pair's shortest paths per flow, drawn uniformly (a hash);
- ``least-loaded``: one path per flow, chosen at its arrival with perfect knowledge: the path whose
  busiest fabric link carries the fewest active flows (ties drawn), never moved afterwards;
- ``least-loaded-large``: the same for flows of ``large`` bytes or more only, the others as ``ecmp``
  (Freeway's split: announced elephants placed, mice hashed);
- ``least-loaded-hol``: ``least-loaded-large`` with the large flows kept off one aggregation plane (the
  ``a*_<lol_plane>`` switches and their links), as Freeway's partition keeps its fixed low-latency paths
  for the mice (at k=4 and k=8 they are the ``a*_0`` plane); the others still hashed over every path.

``python -m experiments.engines.fluid --k 8 --workload websearch --load 0.7 --seed 2`` prints the mean
slowdown (a flow's time over its size at line rate) of flows of 1 MB and more, and of all flows, per
placement, and each placement's ratio to the ideal. Issue 58's T2 asks Freeway's single path per
elephant to come within 1.1 x of per-packet spraying; a single-path placement that misses it even here,
with perfect knowledge and no loss, cannot meet it on a packet-level engine either.
"""

from __future__ import annotations

import argparse
import json
import random

from experiments.workloads import fct
from topology.fabric import Fabric, fattree
from topology.paths import path_links, tor_paths

PLACEMENTS = ("ideal", "ecmp", "least-loaded", "least-loaded-large", "least-loaded-hol")
LARGE = 1_000_000


def fair_rates(flows: dict[object, list], cap: float) -> dict[object, float]:
    """Max-min fair rates of ``flows`` (each a list of links, every link of capacity ``cap``): the same
    progressive filling as ``ryu_apps.algorithms.maxmin.max_min`` (a test holds them equal), keeping each
    link's count of unfrozen flows as flows freeze instead of counting them again every step (at k=8 and
    load 0.7, hundreds of flows over a thousand links, that recount made one event take seconds)."""
    on: dict[object, list] = {}
    for f, lk in flows.items():
        for ln in lk:
            on.setdefault(ln, []).append(f)
    left = dict.fromkeys(on, cap)
    users = {ln: len(fs) for ln, fs in on.items()}
    rate = dict.fromkeys(flows, 0.0)
    frozen = {f for f, lk in flows.items() if not lk}
    level = 0.0
    while len(frozen) < len(flows):
        live = [ln for ln in users if users[ln]]
        step = min(left[ln] / users[ln] for ln in live)
        level += step
        for ln in live:
            left[ln] -= step * users[ln]
        for ln in live:
            if left[ln] <= 1e-9 * cap:
                for f in on[ln]:
                    if f not in frozen:
                        frozen.add(f)
                        rate[f] = level
                        for other in flows[f]:
                            users[other] -= 1
    return rate


def simulate(fabric: Fabric, flows, placement: str, seed: int = 1, large: int = LARGE, lol_plane: int = 0
             ) -> list[dict]:
    """Each flow's fluid completion: ``[{"bytes", "start", "fct_s", "slowdown", "links"}]`` in the flows'
    order (``links``: the fabric links it was placed on)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement: one of {', '.join(PLACEMENTS)}, got {placement!r}")
    cap = fabric.link_rate_mbps * 1e6
    rng = random.Random(seed)
    hosts = {h.name: h for h in fabric.hosts}
    paths_of: dict[tuple[str, str], list] = {}
    plane = {name for name, sw in fabric.switches.items() if sw.role == "agg" and sw.index == lol_plane}
    order = sorted(range(len(flows)), key=lambda i: flows[i].start)
    active: dict[int, list] = {}  # flow -> its links
    left: dict[int, float] = {}  # flow -> bits to go
    on: dict[tuple[str, str], int] = {}  # fabric link -> active flows crossing it
    via: dict[int, tuple] = {}  # flow -> the fabric links it took (none: host links only)
    out: list[dict | None] = [None] * len(flows)
    now, nxt = 0.0, 0

    def place(i: int) -> list:
        f = flows[i]
        s, d = hosts[f.src], hosts[f.dst]
        lk = [(s.name, s.switch), (d.switch, d.name)]
        if placement == "ideal" or s.switch == d.switch:
            return lk
        pair = (s.switch, d.switch)
        if pair not in paths_of:
            paths_of[pair] = [path_links(p) for p in tor_paths(fabric, *pair)]
        options = paths_of[pair]
        if placement == "least-loaded-hol" and f.bytes >= large:
            options = [p for p in options if not any(sw in plane for ln in p for sw in ln)] or options
        if placement == "ecmp" or (placement in ("least-loaded-large", "least-loaded-hol") and f.bytes < large):
            chosen = options[rng.randrange(len(options))]
        else:
            def busiest(p):
                return max(on.get(ln, 0) for ln in p)
            best = min(busiest(p) for p in options)
            tied = [p for p in options if busiest(p) == best]
            chosen = tied[rng.randrange(len(tied))]
        for ln in chosen:
            on[ln] = on.get(ln, 0) + 1
        via[i] = tuple(chosen)
        return lk + list(chosen)

    while nxt < len(order) or active:
        rates = fair_rates(active, cap) if active else {}
        t_arrive = flows[order[nxt]].start if nxt < len(order) else float("inf")
        done_at = min((now + left[i] / rates[i] for i in active if rates[i] > 0), default=float("inf"))
        t = min(t_arrive, done_at)
        for i in active:
            left[i] -= rates[i] * (t - now)
        now = t
        for i in [i for i in active if left[i] <= 1e-6 * flows[i].bytes * 8 + 1e-9]:
            f = flows[i]
            del active[i], left[i]
            for ln in via.get(i, ()):
                on[ln] -= 1
            alone = f.bytes * 8 / cap
            out[i] = {"bytes": f.bytes, "start": f.start, "fct_s": now - f.start, "slowdown": (now - f.start) / alone,
                      "links": via.get(i, ())}
        while nxt < len(order) and flows[order[nxt]].start <= now:
            i = order[nxt]
            nxt += 1
            if flows[i].bytes <= 0:
                continue
            active[i] = place(i)
            left[i] = flows[i].bytes * 8.0
    return [r for r in out if r is not None]


def summary(rows: list[dict], large: int = LARGE) -> dict:
    big = [r["slowdown"] for r in rows if r["bytes"] >= large]
    return {"flows": len(rows), "all_mean": sum(r["slowdown"] for r in rows) / len(rows),
            "ge1MB_flows": len(big), "ge1MB_mean": sum(big) / len(big) if big else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.engines.fluid", description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--link-mbps", type=float, default=100.0)
    ap.add_argument("--workload", default="websearch", choices=sorted(fct.DISTRIBUTIONS))
    ap.add_argument("--load", type=float, default=0.7)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    fabric = fattree(a.k, a.link_mbps)
    flows = fct.poisson_flows(fabric, a.workload, a.load, a.duration, a.seed, max_bytes=30_000_000)
    res = {}
    for p in a.placements.split(","):
        res[p] = summary(simulate(fabric, flows, p, a.seed))
        if not a.json:
            r = res[p]
            ideal = res.get("ideal", {}).get("ge1MB_mean")
            rel = f" ({r['ge1MB_mean'] / ideal:.3f} x the ideal)" if ideal and p != "ideal" else ""
            print(f"{p:20s} >=1MB mean slowdown {r['ge1MB_mean']:.3f}{rel}; all flows {r['all_mean']:.3f} "
                  f"({r['flows']} flows)", flush=True)
    if a.json:
        print(json.dumps({"k": a.k, "workload": a.workload, "load": a.load, "seed": a.seed, "results": res}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
