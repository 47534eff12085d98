"""Permutation runs pooled: ``python -m experiments.analysis.pooled --out DIR RESULTS_DIR...``.

Each RESULTS_DIR is one ``freeway experiment permutation`` (its results.json: one permutation, its
rounds). Per mode, pooled over every run and round: the aggregate elephant goodput (mean over the
runs), against the non-blocking ideal (every host at its link rate) and against the better of Hedera
and EFM; per run, the ratio to that better one; the lowest per-flow goodput. Writes pooled.json and a
bar plot (pooled.png) with each run's ratio as a dot.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.analysis import stats
from experiments.analysis.plots import save

RIVALS = ("hedera", "efm-biggest")


def pool(dirs: list[Path]) -> dict:
    runs = []
    for d in dirs:
        r = json.loads((d / "results.json").read_text())
        cfg = r["config"]
        ideal = cfg["link_mbps"] * len(cfg["elephants"])  # every host sends one: each at its link rate
        for label, res in r["results"].items():
            if label.startswith("ceiling") or label.startswith("floor"):
                continue
            el = res["elephants"]
            runs.append({"dir": str(d), "topo": cfg["topo"], "announce": cfg["announce"], "seed": cfg["seed"],
                         "mode": label, "aggregate_mbps": el["aggregate_mbps"], "ideal_mbps": ideal,
                         "lowest_flow_mbps": min(el["per_flow_mbps"]) if el.get("per_flow_mbps") else None,
                         "rounds": cfg.get("repeats", 1)})
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    out = {"runs": runs, "modes": {}}
    for m in modes:
        mine = [r for r in runs if r["mode"] == m]
        agg = sum(r["aggregate_mbps"] for r in mine) / len(mine)
        ideal = sum(r["ideal_mbps"] for r in mine) / len(mine)
        vs = []
        for r in mine:
            rivals = [x["aggregate_mbps"] for x in runs if x["dir"] == r["dir"] and x["mode"] in RIVALS]
            if rivals:
                vs.append(round(r["aggregate_mbps"] / max(rivals), 3))
        out["modes"][m] = {"runs": len(mine), "aggregate_mbps": round(agg, 2), "of_ideal": round(agg / ideal, 3),
                           "vs_better_rival_each": vs, "vs_better_rival_lowest": min(vs) if vs else None,
                           "lowest_flow_mbps": min((r["lowest_flow_mbps"] for r in mine
                                                    if r["lowest_flow_mbps"] is not None), default=None)}
    return out


def plot(result: dict, path: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(result["modes"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(range(len(modes)), [result["modes"][m]["of_ideal"] for m in modes], color="#9ab")
    for i, m in enumerate(modes):
        pts = [r["aggregate_mbps"] / r["ideal_mbps"] for r in result["runs"] if r["mode"] == m]
        ax.plot([i] * len(pts), pts, "k.", alpha=0.6)
    ax.set_xticks(range(len(modes)), modes, rotation=20)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("aggregate goodput / non-blocking ideal")
    ax.set_title("permutations, pooled (bar) and each run (dots)")
    return save(fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.analysis.pooled", description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", help="results directories of freeway experiment permutation")
    p.add_argument("--out", required=True, help="where to write pooled.json and pooled.png")
    a = p.parse_args(argv)
    dirs = [Path(d) for d in a.dirs]
    missing = [str(d) for d in dirs if not (d / "results.json").is_file()]
    if missing:
        print(f"experiments.analysis.pooled: error: no results.json in {', '.join(missing)}", file=sys.stderr)
        return 2
    res = pool(dirs)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res["plot"] = plot(res, out / "pooled.png")
    stats.write_json(out / "pooled.json", res)
    for m, v in res["modes"].items():
        print(f"{m:20s} {v['aggregate_mbps']:7.2f} Mbit/s  {v['of_ideal']:.3f} of ideal  vs better of Hedera/EFM "
              f"{v['vs_better_rival_each']}  lowest flow {v['lowest_flow_mbps']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
