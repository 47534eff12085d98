"""PNG plots of an experiment: mice FCT CDFs, elephant goodput, link utilisation (LOL/HOL), LOL paths."""

from __future__ import annotations

from pathlib import Path

from experiments.analysis import stats


def plot_all(out: Path, results: dict, runs: list[dict]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    files = []

    # 1. mice FCT CDF per run
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        fcts = [m["fct_s"] * 1e3 for m in run["mice"] if m.get("ok")]
        if fcts:
            x, y = stats.cdf_points(fcts)
            ax.plot(x, y, label={"floor": "mice alone (floor)", "ceiling": "non-blocking switch (ceiling run)"}
                    .get(run["label"], run["label"]))
    ax.set_xscale("log")
    _cdf_axes(ax, "mice flow-completion time (ms, log)", "Mice FCT")
    files.append(save(fig, out / "fct_cdf.png"))

    # 2. elephant aggregate goodput per run, with the ceiling
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels, vals, spread = [], [], [[], []]
    ceiling = None
    for name, r in results.items():
        if name.startswith("ceiling"):
            ceiling = r["elephants"]["aggregate_mbps"]
        elif r["elephants"]["n"]:
            labels.append(name)
            vals.append(r["elephants"]["aggregate_mbps"])
            reps = [x["elephant_mbps"] for x in r.get("repeats", [])] or [vals[-1]]
            spread[0].append(vals[-1] - min(reps))
            spread[1].append(max(reps) - vals[-1])
    repeated = any(lo or hi for lo, hi in zip(*spread, strict=True))
    ax.bar(labels, vals, color="tab:blue", yerr=spread if repeated else None, capsize=4,
           label="mean, lowest-highest of the repeats" if repeated else None)
    if ceiling:
        ax.axhline(ceiling, color="tab:red", linestyle="--", label=f"non-blocking ceiling {ceiling:.1f}")
    if ceiling or repeated:
        ax.legend(fontsize=8, loc="lower right")
    ax.set_ylabel("elephant aggregate goodput (Mbit/s)")
    ax.set_title("Elephant throughput")
    ax.tick_params(axis="x", rotation=20, labelsize=8)
    files.append(save(fig, out / "elephants.png"))

    # 3. link utilisation CDFs, LOL and HOL apart where the partition exists (Freeway's Fig. 8)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in results.items():
        u = r.get("_util", {})
        if u.get("lol"):
            for part in ("lol", "hol"):
                if u[part]:
                    x, y = stats.cdf_points(u[part])
                    ax.plot(x, y, label=f"{name} {part.upper()}")
        elif u.get("all") and not name.startswith(("floor", "ceiling")):
            x, y = stats.cdf_points(u["all"])
            ax.plot(x, y, label=name)
    _cdf_axes(ax, "link utilisation (per second, per directed switch link)", "Link utilisation")
    files.append(save(fig, out / "utilisation_cdf.png"))

    # 4. low-latency paths of one ToR pair over time against the mice load (Freeway's Fig. 5)
    series = [(name, r["_lol_series"]) for name, r in results.items() if r.get("_lol_series") and
              any(s["mice_load"] is not None for s in r["_lol_series"])]
    if series:
        name, ser = series[-1]
        pairs = {p for s in ser for p in s["lol_paths"]}
        pair = max(pairs, key=lambda p: sum(1 for s in ser if p in s["lol_paths"])) if pairs else None
        t0 = ser[0]["t"]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        minimum = min((s["lol_min"] for s in ser if s.get("lol_min")), default=0)
        counts = [s["lol_paths"].get(pair, minimum) if pair else minimum for s in ser]
        ax.step([s["t"] - t0 for s in ser], counts, where="post",
                label=f"low-latency paths of {pair}" if pair else
                f"low-latency paths (no pair left its fixed minimum of {minimum})")
        ax2 = ax.twinx()
        ax2.plot([s["t"] - t0 for s in ser], [s["mice_load"] or 0 for s in ser], color="tab:orange", alpha=0.6,
                 label="summed load of LOL links")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("low-latency paths")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax2.set_ylabel("LOL link load (sum of utilisations)")
        ax.set_title(f"Path partition over time ({name})")
        ax.legend(loc="upper left", fontsize=8)
        ax2.legend(loc="upper right", fontsize=8)
        files.append(save(fig, out / "lol_paths.png"))
    return files


def _cdf_axes(ax, xlabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel("CDF")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def save(fig, path: Path) -> str:
    """Lay out, write as PNG, close; the file name."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name
