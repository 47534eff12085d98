"""The queueing papers' own experiments on the packet-level engine (issue 39).

``cut-in`` (the CQ slides, Liu et al., ICPP 2021): many-to-one through one switch: two long flows and
ON/OFF bursts of short flows into one receiver, under ``fifo``, ``strict`` and ``cq``, for NewReno,
Cubic, BBR and DCTCP (DCTCP with ``+ecn`` on every discipline, so that it gets its marks everywhere):
the bottleneck's queueing delay and drop rate, short flows' completion times, long flows' throughput
(the slides' four panels).

``flow-control`` (the isolation paper, its Fig. 1): a leaf-spine, every sender under three leaves, the
receiver under the fourth; mice (at most 5% of the load) only, elephants only, and both; with
per-priority pause only (``fifo+pfc``, Cubic), ECN with DCTCP only (``fifo+ecn``), both on one queue
(``fifo+pfc+ecn``, DCTCP) and isolated queues (``strict+pfc+ecn``, DCTCP: pause on the mice band, marks
on the elephant band): mice latency, the bottleneck's utilisation, pause frames.

Hosts mark their flows' priority themselves (short or mice: DSCP 46; long or elephants: DSCP 8), as DCB
hosts do; the switches run ECMP and leave the marks alone. Each run is one engine process, several at
once; a run already written with the same spec is kept.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from experiments.analysis import stats
from experiments.analysis.plots import save
from experiments.workloads.flowlist import Flow
from topology.fabric import leafspine

MICE, ELEPHANT = 46, 8
TCPS = ("newreno", "cubic", "bbr", "dctcp")
CQ_DISCIPLINES = ("fifo", "strict", "cq")
FC_CONFIGS = {"pfc": ("fifo+pfc", "cubic"), "ecn": ("fifo+ecn", "dctcp"), "hybrid": ("fifo+pfc+ecn", "dctcp"),
              "isolated": ("strict+pfc+ecn", "dctcp")}
FC_TRAFFIC = ("mice", "elephants", "mixed")


def _run_all(out: Path, specs: list[dict], jobs: int) -> list[dict]:
    from experiments.engines.ns3.engine import run_all

    return run_all(out, specs, jobs, "queues", 6 * 3600)


# ----- cut-in queueing ------------------------------------------------------------------------------
SHORT_SENDERS = {1: ("h0_3",), 3: ("h0_3", "h0_1", "h0_2")}


def cut_in_flows(rate_mbps: float, duration: float, seed: int, burst: int = 16, short_senders: int = 1) -> list[Flow]:
    """h0_1 and h0_2 send long flows to h0_0 for the whole run; every ON period ``burst`` short flows
    (10-100 KB, log-uniform) start at once: the bursts come every 200 ms at 100 Mbit/s, every 2 ms at
    10 Gbit/s (the same bytes per burst against a buffer of the same size). ``short_senders``: 1, all from
    h0_3 (they reach the switch at most at one link's rate); 3, dealt in turn to h0_3, h0_1 and h0_2 (an
    incast of short flows: up to three links' rate into the receiver's port)."""
    rng = random.Random(seed)
    period = 0.2 * 100 / rate_mbps
    senders = SHORT_SENDERS[short_senders]
    out = [Flow(0.0, src, "h0_0", 0, "bulk", False, duration, 0, ELEPHANT) for src in ("h0_1", "h0_2")]
    t = period / 2
    while t < duration - period:
        for i in range(burst):
            size = int(math.exp(rng.uniform(math.log(10_000), math.log(100_000))))
            out.append(Flow(round(t + rng.uniform(0, period / 20), 9), senders[i % len(senders)], "h0_0", size, "bulk",
                            False, None, 0, MICE))
        t += period
    return out


def cut_in(out: Path, rates: list[float], tcps: list[str], disciplines: list[str], duration: dict, seed: int = 1,
           jobs: int = 0, short_senders: int = 1) -> dict:
    from experiments.engines.ns3.engine import Settings, spec_of

    specs = []
    for rate in rates:
        fabric = leafspine(1, 2, 4, rate)
        flows = cut_in_flows(rate, duration[rate], seed, short_senders=short_senders)
        for tcp in tcps:
            for disc in disciplines:
                queues = disc + ("+ecn" if tcp == "dctcp" else "")
                st = Settings(tcp=tcp, queues=queues, own_queues=True, seed=seed, grace_s=1.0,
                              link_delay_s=5e-6 if rate >= 1000 else 20e-6)
                specs.append(spec_of(f"cq-{int(rate)}-{tcp}-{disc}", queues, fabric, "ecmp", False, flows, st))
    runs = _run_all(out, specs, jobs)
    rows = [cut_in_row(spec, run) for spec, run in zip(specs, runs, strict=True)]
    result = {"scenario": "cut-in", "rates_mbps": rates, "tcps": tcps, "disciplines": disciplines, "seed": seed,
              "short_senders": list(SHORT_SENDERS[short_senders]),
              "duration_s": duration, "rows": rows, "checks": cut_in_checks(rows)}
    result["plots"] = [_plot_cut_in(out, rows, rate) for rate in rates]
    stats.write_json(out / "results.json", result)
    return result


def cut_in_row(spec: dict, run: dict) -> dict:
    label = spec["label"]
    _, rate, tcp, disc = label.split("-", 3)
    q = run["queues"]["l0-eth1"]  # the receiver's port: the bottleneck
    rate_bps = float(rate) * 1e6
    short = sorted(m["fct_s"] for m in run["mice"] if m["ok"])
    longs = run["elephants"]
    packets = sum(q["sent"]) + sum(q["drops"]) + q["evictions"]
    return {"rate_mbps": float(rate), "tcp": tcp, "discipline": disc, "queues": spec["settings"]["queues"],
            "queueing_delay_ms": round(q["average_bytes"] * 8 / rate_bps * 1e3, 4),
            "drop_rate": round((sum(q["drops"]) + q["evictions"]) / packets, 5) if packets else None,
            "evictions": q["evictions"], "backed_off": q.get("backed_off", 0), "short_flows": len(run["mice"]),
            "short_done": len(short),
            "short_p50_ms": _ms(stats.percentile(short, 50)), "short_p99_ms": _ms(stats.percentile(short, 99)),
            "short_mean_ms": _ms(sum(short) / len(short)) if short else None,
            "long_mbps": round(sum(e["goodput_mbps"] for e in longs), 3)}


def _ms(x):
    return None if x is None else round(x * 1e3, 3)


def cut_in_checks(rows: list[dict]) -> list[dict]:
    """Per rate and TCP: cq's short-flow p99 against fifo's and strict's, its long throughput against fifo's
    (the issue's targets: at least 50% and 20% lower, at least 95%)."""
    out = []
    for rate in sorted({r["rate_mbps"] for r in rows}):
        for tcp in dict.fromkeys(r["tcp"] for r in rows):
            by = {r["discipline"]: r for r in rows if r["rate_mbps"] == rate and r["tcp"] == tcp}
            if not {"fifo", "strict", "cq"} <= set(by):
                continue
            cq, fifo, strict = by["cq"], by["fifo"], by["strict"]
            v_fifo = _ratio(cq["short_p99_ms"], fifo["short_p99_ms"])
            v_strict = _ratio(cq["short_p99_ms"], strict["short_p99_ms"])
            tput = _ratio(cq["long_mbps"], fifo["long_mbps"])
            out.append({"rate_mbps": rate, "tcp": tcp, "p99_vs_fifo": v_fifo, "p99_vs_strict": v_strict,
                        "long_vs_fifo": tput,
                        "met": bool(v_fifo is not None and v_fifo <= 0.5 and v_strict is not None and v_strict <= 0.8
                                    and tput is not None and tput >= 0.95)})
    return out


def _ratio(a, b):
    return None if a is None or not b else round(a / b, 3)


def _plot_cut_in(out: Path, rows: list[dict], rate: float) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [r for r in rows if r["rate_mbps"] == rate]
    tcps = list(dict.fromkeys(r["tcp"] for r in sel))
    discs = list(dict.fromkeys(r["discipline"] for r in sel))
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    width = 0.8 / len(discs)
    for i, d in enumerate(discs):
        xs = [t + (i - (len(discs) - 1) / 2) * width for t in range(len(tcps))]
        by = {r["tcp"]: r for r in sel if r["discipline"] == d}
        for ax, key in zip(axes, ("queueing_delay_ms", "drop_rate", "short_p99_ms", "long_mbps"), strict=True):
            ax.bar(xs, [by[t][key] or 0 for t in tcps], width, label=d)
    for ax, what in zip(axes, ("(a) queueing delay (ms)", "(b) drop rate", "(c) short-flow FCT p99 (ms)",
                               "(d) long-flow throughput (Mbit/s)"), strict=True):
        ax.set_xticks(range(len(tcps)))
        ax.set_xticklabels(tcps)
        ax.set_title(what, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    rate_name = f"{rate / 1000:g} Gbit/s" if rate >= 1000 else f"{rate:g} Mbit/s"
    fig.suptitle(f"Cut-in queueing, many-to-one at {rate_name} (the CQ slides' four panels)")
    return save(fig, out / f"cut_in_{int(rate)}.png")


# ----- flow control per queue -------------------------------------------------------------------------
def flow_control_flows(traffic: str, rate_mbps: float, duration: float, seed: int, senders: int = 12,
                       mice_load: float = 0.05, mice_bytes: int = 4000) -> list[Flow]:
    """Every host under leaves 0-2 sends to h3_0: a long flow each (elephants) and Poisson messages of
    ``mice_bytes`` (mice, ``mice_load`` of the bottleneck in all)."""
    rng = random.Random(seed)
    hosts = [f"h{leaf}_{i}" for leaf in range(3) for i in range(4)][:senders]
    out = []
    if traffic in ("elephants", "mixed"):
        out += [Flow(0.0, h, "h3_0", 0, "bulk", False, duration, 0, ELEPHANT) for h in hosts]
    if traffic in ("mice", "mixed"):
        per_s = mice_load * rate_mbps * 1e6 / 8 / mice_bytes
        t = 0.01
        while True:
            t += rng.expovariate(per_s)
            if t >= duration:
                break
            out.append(Flow(round(t, 9), rng.choice(hosts), "h3_0", mice_bytes, "bulk", False, None, 0, MICE))
    return sorted(out, key=lambda f: f.start)


def flow_control(out: Path, rate: float, duration: float, configs: list[str], traffic: list[str], seed: int = 1,
                 jobs: int = 0) -> dict:
    from experiments.engines.ns3.engine import Settings, spec_of

    fabric = leafspine(2, 4, 4, rate)
    specs = []
    for name in configs:
        queues, tcp = FC_CONFIGS[name]
        for tr in traffic:
            flows = flow_control_flows(tr, rate, duration, seed)
            st = Settings(tcp=tcp, queues=queues, own_queues=True, seed=seed, grace_s=0.5, link_delay_s=1e-6)
            specs.append(spec_of(f"fc-{name}-{tr}", queues, fabric, "ecmp", False, flows, st, tx_at=[duration]))
    runs = _run_all(out, specs, jobs)
    rows = []
    for spec, run in zip(specs, runs, strict=True):
        _, name, tr = spec["label"].split("-", 2)
        q = run["queues"]["l3-eth1"]  # the receiver's port
        mice = [m["fct_s"] for m in run["mice"] if m["ok"]]
        rows.append({"config": name, "queues": FC_CONFIGS[name][0], "tcp": FC_CONFIGS[name][1], "traffic": tr,
                     "mice": len(run["mice"]), "mice_done": len(mice),
                     "mice_mean_us": round(sum(mice) / len(mice) * 1e6, 1) if mice else None,
                     "mice_p99_us": round(stats.percentile(mice, 99) * 1e6, 1) if mice else None,
                     "utilisation": round(_tx_at(run, "l3-eth1", duration) * 8 / (rate * 1e6 * duration), 4),
                     "pause_frames": sum(v["pause_frames"] for v in run["pfc"].values()),
                     "drops": sum(sum(v["drops"]) for v in run["queues"].values()),
                     "marks": sum(sum(v["marks"]) for v in run["queues"].values()),
                     "bottleneck_average_kb": round(q["average_bytes"] / 1000, 2)})
    result = {"scenario": "flow-control", "rate_mbps": rate, "duration_s": duration, "seed": seed, "rows": rows,
              "checks": flow_control_checks(rows)}
    result["plots"] = [_plot_flow_control(out, rows)]
    stats.write_json(out / "results.json", result)
    return result


def _tx_at(run: dict, port: str, t: float) -> int:
    """The bytes ``port`` had sent by time ``t`` (the run goes on past it: a paused backlog drains)."""
    return next(s["tx"][port] for s in run["port_tx"] if abs(s["t"] - t) < 1e-6)


def flow_control_checks(rows: list[dict]) -> dict:
    """Isolated queues against both on one queue, mixed traffic: mice latency at least 30% lower and the
    bottleneck at least 95% used (the paper's claim)."""
    by = {(r["config"], r["traffic"]): r for r in rows}
    iso, hyb = by.get(("isolated", "mixed")), by.get(("hybrid", "mixed"))
    if not iso or not hyb:
        return {}
    ratio = _ratio(iso["mice_mean_us"], hyb["mice_mean_us"])
    return {"mice_latency_vs_hybrid": ratio, "utilisation": iso["utilisation"],
            "met": bool(ratio is not None and ratio <= 0.7 and iso["utilisation"] >= 0.95)}


def _plot_flow_control(out: Path, rows: list[dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r["config"] for r in rows))
    traffic = list(dict.fromkeys(r["traffic"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    width = 0.8 / len(traffic)
    for i, tr in enumerate(traffic):
        xs = [c + (i - (len(traffic) - 1) / 2) * width for c in range(len(configs))]
        by = {r["config"]: r for r in rows if r["traffic"] == tr}
        for ax, key in zip(axes, ("mice_mean_us", "utilisation", "pause_frames"), strict=True):
            ax.bar(xs, [(by[c][key] or 0) if c in by else 0 for c in configs], width, label=tr)
    for ax, what in zip(axes, ("mice latency (us, mean)", "bottleneck utilisation", "pause frames"), strict=True):
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs)
        ax.set_title(what, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Flow control per queue, many-to-one on a leaf-spine (the isolation paper's Fig. 1)")
    return save(fig, out / "flow_control.png")
