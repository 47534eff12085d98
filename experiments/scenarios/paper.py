"""``freeway experiment paper``: the Freeway paper's comparison, on the packet-level engine.

Its setting (Section III.A): a k=8 fat-tree, 16 cores, 10 servers an edge switch (320 servers), a
workload from SWIM's Facebook traces, four schemes: ECMP, Hedera (Global First Fit every second),
per-packet load balancing to the least-loaded path (PerPktLB) and Freeway. What it leaves open is
declared here and written to results.json before the first run (``declared``): the link rate (100 Mbit/s
by default: the paper's 1 Gbit/s costs ns-3 about 1,000 CPU-seconds per simulated second on this
machine), buffers (the emulator's 100 standard frames a port; with isolation 60 for mice, 40 for
elephants), TCP (Cubic, Linux's minimum RTO), the workload (``experiments.workloads.swim``'s reconstruction, its
mix measured), the seeds. Freeway runs with isolation.

Each (mode, seed) is one run in its own process, several at once (``--jobs``); a run already written
with the same spec is read back, so an interrupted comparison resumes. The results, beside the paper's
own: mice latency (mean and p99 FCT, Fig. 6(b)), elephant bytes delivered (Fig. 6(a)), retransmission
timeouts (Fig. 7), link utilisation by class (Fig. 8(a)), core switches' drops sorted (Fig. 8(b)),
Freeway's low-latency paths over time (Fig. 5).
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis import stats
from experiments.analysis.plots import save
from experiments.workloads.fct import IDEAL, ideal_fabric
from experiments.workloads.flowlist import mix
from topology.fabric import fattree

MODES = ("ideal", "ecmp", "hedera-1s", "perpkt", "freeway+isolation")
BOUNDARY = 1_000_000  # a mouse: under 1 MB (the mix the reconstruction is matched to)
# the paper's numbers (Section III.B), as ratios of Freeway's to each scheme's
PAPER = {
    "mice_latency_vs": {"ecmp": 1 - 0.878, "hedera-1s": 1 - 0.858, "perpkt": 1 - 0.669},
    "elephant_bytes_vs": {"hedera-1s": 1.087},
    "core_drops_vs": {"ecmp": 1 - 0.427},
    "mice_rto_vs": {"ecmp": 1 - 0.881, "hedera-1s": 1 - 0.849, "perpkt": 1 - 0.443},
    "lol_utilisation": [0.2, 0.325],
    "hol_utilisation_most": [0.5, 0.65],
    "mix": {"mice_share_of_flows": 0.854, "mice_share_of_bytes": 0.11, "flows": 15963},
}


class PaperError(ValueError):
    pass


def plan(modes: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    return [(m, s) for s in seeds for m in modes]


def run(out: Path, modes: list[str], seeds: list[int], k: int = 8, hosts_per_edge: int = 10,
        link_mbps: float = 100.0, duration: float = 10.0, grace: float = 10.0, jobs: int = 0,
        settings: dict | None = None, derivation: dict | None = None, queues: str | None = None) -> dict:
    """``queues``: every switch port's discipline in every run (``topology.queues``); by default the mode's
    own (strict with +isolation, fifo without)."""
    from experiments.engines.ns3.engine import Settings, run_all, spec_of
    from experiments.engines.runner import ExperimentError, _controller_mode, _controller_settings, _mode_parts
    from experiments.workloads.swim import Derivation, derive, load

    for m in modes:
        try:
            if m != IDEAL:
                _mode_parts(m)
        except ExperimentError as e:
            raise PaperError(str(e)) from None
    modes = sorted(modes, key=lambda m: m != IDEAL)  # the ideal is the first row
    out.mkdir(parents=True, exist_ok=True)
    fabric = fattree(k, link_mbps, hosts_per_edge)
    base_settings = dict(settings or {})
    declared = {"fabric": {"topo": "fattree", "k": k, "hosts_per_edge": hosts_per_edge, "link_mbps": link_mbps,
                           "servers": len(fabric.hosts)},
                "workload": {"derivation": {**Derivation().__dict__, **(derivation or {}), "duration_s": duration},
                             "mice_boundary_bytes": BOUNDARY},
                "modes": modes, "seeds": seeds, "queues": queues,
                "engine": {**Settings().__dict__, **base_settings, "grace_s": grace},
                "paper": PAPER}
    (out / "declared.json").write_text(json.dumps(declared, indent=1) + "\n")
    jobs_list = []
    mixes = {}
    for mode, seed in plan(modes, seeds):
        d = Derivation(**{**(derivation or {}), "duration_s": duration, "seed": seed})
        flows = derive(load(), fabric, d)
        mixes[seed] = mix(flows, BOUNDARY)
        label = f"{mode.replace('+', '_')}-s{seed}"
        if mode == IDEAL:  # the same flows on one non-blocking switch, every port a plain FIFO
            st = Settings(**{**base_settings, "seed": seed, "grace_s": grace, "queues": "fifo"})
            jobs_list.append(spec_of(label, mode, ideal_fabric(fabric), "ecmp", False, flows, st, BOUNDARY))
            continue
        base, iso = _mode_parts(mode)
        st = Settings(**{**base_settings, "seed": seed, "grace_s": grace,
                         "queues": queues or ("strict" if iso else "fifo"),
                         "controller": _controller_settings(base)})
        jobs_list.append(spec_of(label, mode, fabric, _controller_mode(base), iso, flows, st, BOUNDARY))

    runs = run_all(out, jobs_list, jobs, "paper")
    results = analyse(runs, fabric, modes, seeds)
    results["mix"] = mixes
    results["declared"] = declared
    results["plots"] = plot(out, runs, results, fabric)
    stats.write_json(out / "results.json", results)
    return results


def _core_by_switch(run: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for dev, n in run["core_drops"].items():
        sw = dev.split("-eth")[0]
        out[sw] = out.get(sw, 0) + n
    return out


def one_run(run: dict) -> dict:
    """One run's figures: mice FCT (mean, p50, p99) and timeouts, elephant bytes delivered, core drops."""
    mice = [m for m in run["mice"] if m["ok"]]
    fcts = [m["fct_s"] for m in mice]
    els = [b for b in run["bulk"] if b["size"] >= BOUNDARY]
    return {"mice": len(run["mice"]), "mice_done": len(mice),
            "mice_fct_mean_s": sum(fcts) / len(fcts) if fcts else None,
            "mice_fct_p50_s": stats.percentile(fcts, 50), "mice_fct_p99_s": stats.percentile(fcts, 99),
            "mice_rto": sum(m["rto"] or 0 for m in run["mice"]),
            "elephants": len(els), "elephants_done": sum(1 for b in els if b["ok"]),
            "elephant_bytes": sum(b["bytes"] for b in els), "elephant_rto": sum(b["rto"] or 0 for b in els),
            "core_drops": sum(run["core_drops"].values()), "core_drops_by_switch": _core_by_switch(run),
            "wall_per_simulated_s": run.get("wall_per_simulated_s"), "seconds": run.get("seconds")}


def analyse(runs: list[dict], fabric, modes: list[str], seeds: list[int]) -> dict:
    per = {}
    for r in runs:
        per.setdefault(r["mode"], []).append(one_run(r))

    def pooled(mode: str, key: str) -> float | None:
        vals = [x[key] for x in per.get(mode, []) if x[key] is not None]
        return sum(vals) / len(vals) if vals else None

    table = []
    fw = "freeway+isolation" if "freeway+isolation" in modes else ("freeway" if "freeway" in modes else None)
    for mode in modes:
        row = {"mode": mode, "runs": len(per.get(mode, []))}
        for key in ("mice_fct_mean_s", "mice_fct_p99_s", "mice_rto", "elephant_bytes", "core_drops",
                    "wall_per_simulated_s"):
            row[key] = pooled(mode, key)
        table.append(row)
    ideal = {}
    if IDEAL in modes:  # every scheme against the ideal: the headline ratio
        base = {k: pooled(IDEAL, k) for k in ("mice_fct_mean_s", "mice_fct_p99_s", "elephant_bytes", "core_drops",
                                              "mice_rto")}
        for mode in modes:
            if mode != IDEAL:
                ideal[mode] = {k.replace("_s", "") + "_ratio": (round(pooled(mode, k) / v, 3)
                                                              if v and pooled(mode, k) is not None else None)
                               for k, v in base.items()}
    ours = {}
    if fw:
        f = {k: pooled(fw, k) for k in ("mice_fct_mean_s", "mice_fct_p99_s", "elephant_bytes", "core_drops",
                                        "mice_rto")}
        for mode in modes:
            if mode == fw:
                continue
            o = {k: pooled(mode, k) for k in f}
            ours[mode] = {k.replace("_s", "") + "_ratio": (round(f[k] / o[k], 3) if f[k] is not None and o[k] else None)
                          for k in f}
    util = _utilisation(runs, fabric)
    return {"per_run": per, "table": table, "freeway_vs": ours, "vs_ideal": ideal, "utilisation": util}


def _utilisation(runs: list[dict], fabric) -> dict:
    """Per mode, the switch links' utilisation samples (once a second), Freeway's by class (LOL, HOL)."""
    from experiments.engines.runner import analyse as run_analysis

    out = {}
    for r in runs:
        a = run_analysis({**r, "mice": r["mice"], "elephants": r["elephants"]}, fabric)
        u = out.setdefault(r["mode"], {"all": [], "lol": [], "hol": []})
        for k in u:
            u[k] += a["_util"][k]
    return {m: {k: {"n": len(v), "p10": stats.percentile(v, 10), "p50": stats.percentile(v, 50),
                    "p90": stats.percentile(v, 90)} for k, v in u.items()} for m, u in out.items()}


def plot(out: Path, runs: list[dict], results: dict, fabric) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    table = results["table"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    modes = [r["mode"] for r in table]
    axes[0].bar(modes, [(r["elephant_bytes"] or 0) / 1e6 for r in table])
    axes[0].set_ylabel("elephant bytes delivered (MB)")
    axes[1].bar(modes, [(r["mice_fct_mean_s"] or 0) * 1e3 for r in table], label="mean")
    axes[1].plot(modes, [(r["mice_fct_p99_s"] or 0) * 1e3 for r in table], "kD", label="p99")
    axes[1].set_ylabel("mice FCT (ms)")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=20)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Freeway paper's Fig. 6 on the packet-level engine")
    names.append(save(fig, out / "fig6_throughput_latency.png"))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    from experiments.engines.runner import analyse as run_analysis

    pooled: dict = {}
    for r in runs:
        a = run_analysis(r, fabric)
        p = pooled.setdefault(r["mode"], {"all": [], "lol": [], "hol": []})
        for k in p:
            p[k] += a["_util"][k]
    for mode, u in pooled.items():
        series = [("lol", f"{mode} LOL"), ("hol", f"{mode} HOL")] if u["lol"] else [("all", mode)]
        for key, lab in series:
            if u[key]:
                xs, ys = stats.cdf_points(u[key])
                axes[0].plot(xs, ys, label=lab)
    axes[0].set_xlabel("link utilisation")
    axes[0].set_ylabel("CDF")
    axes[0].legend(fontsize=7)
    for r in table:
        drops = sorted(sum((one_run(x)["core_drops_by_switch"].get(sw, 0) for x in runs if x["mode"] == r["mode"]), 0)
                       for sw in sorted({d.split("-eth")[0] for x in runs for d in x["core_drops"]}))
        axes[1].plot(range(1, len(drops) + 1), drops, marker=".", label=r["mode"])
    axes[1].set_xlabel("core switches, sorted")
    axes[1].set_ylabel("drops (all seeds)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Freeway paper's Fig. 8 on the packet-level engine")
    names.append(save(fig, out / "fig8_utilisation_drops.png"))
    lol = _lol_series(runs, fabric)
    if lol:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for (mode, seed), series in sorted(lol.items()):
            ts = [p["t"] - series[0]["t"] for p in series]
            ax.plot(ts, [p["mean"] for p in series], label=f"{mode} seed {seed}: mean per ToR pair")
            ax.plot(ts, [p["max"] for p in series], ":", label=f"{mode} seed {seed}: most")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("low-latency paths of a ToR pair")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        fig.suptitle("Freeway paper's Fig. 5 on the packet-level engine: LOL paths over time")
        names.append(save(fig, out / "fig5_lol_paths.png"))
    return names


def _lol_series(runs: list[dict], fabric) -> dict:
    """Freeway's low-latency paths per ToR pair, once a second (its partition's own record), per run."""
    from experiments.engines.runner import analyse as run_analysis

    out = {}
    for r in runs:
        series = []
        for p in run_analysis(r, fabric).get("_lol_series", []):
            counts = [v if isinstance(v, (int, float)) else len(v) for v in (p.get("lol_paths") or {}).values()]
            if counts:
                series.append({"t": p["t"], "mean": sum(counts) / len(counts), "max": max(counts)})
        if series:
            out[(r["mode"], (r.get("settings") or {}).get("seed", 0))] = series
    return out


def print_table(results: dict) -> None:
    print(f"{'mode':<20} {'runs':>4} {'mice mean ms':>12} {'mice p99 ms':>11} {'mice RTO':>8} {'elephant MB':>11} "
          f"{'core drops':>10} {'wall/sim s':>10}")
    for r in results["table"]:
        def f(x, scale=1.0, nd=1):
            return "-" if x is None else f"{x * scale:.{nd}f}"
        print(f"{r['mode']:<20} {r['runs']:>4} {f(r['mice_fct_mean_s'], 1e3):>12} {f(r['mice_fct_p99_s'], 1e3):>11} "
              f"{f(r['mice_rto'], 1, 0):>8} {f(r['elephant_bytes'], 1e-6):>11} {f(r['core_drops'], 1, 0):>10} "
              f"{f(r['wall_per_simulated_s']):>10}")
    for mode, ratios in results.get("vs_ideal", {}).items():
        print(f"{mode} / ideal: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    for mode, ratios in results["freeway_vs"].items():
        paper = {k: PAPER[k].get(mode) for k in ("mice_latency_vs", "elephant_bytes_vs", "core_drops_vs")}
        print(f"Freeway / {mode}: " + ", ".join(f"{k} {v}" for k, v in ratios.items()) + f"   (paper: {paper})")
