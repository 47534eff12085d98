"""The two engines side by side (pure): the same ``mixed`` workload's results from the emulator and from
ns-3, compared as issue 38's cross-validation asks: the same ranking of modes on mice p99 and on
goodput, and Freeway with isolation's p99 against its floor and goodput against its ceiling within
25% of the emulator's. ``freeway bench crossval --emulator DIR --ns3 DIR`` writes crossval.json and a
plot; where they differ more, the numbers are there to find out which engine is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis import stats
from experiments.analysis.plots import save

TOLERANCE = 0.25


def _table(path: Path) -> dict:
    r = json.loads((path / "results.json").read_text())
    return {"config": r["config"], "valid": r.get("valid", True), "rows": {row["mode"]: row for row in r["table"]}}


def ranking(rows: dict, key: str, lower_is_better: bool) -> list[str]:
    return sorted((m for m in rows if rows[m].get(key) is not None), key=lambda m: rows[m][key],
                  reverse=not lower_is_better)


def compare(emulator: Path, ns3: Path, mode: str = "freeway+isolation") -> dict:
    emu, sim = _table(emulator), _table(ns3)
    modes = [m for m in emu["rows"] if m in sim["rows"]]
    e = {m: emu["rows"][m] for m in modes}
    s = {m: sim["rows"][m] for m in modes}
    out = {"emulator": str(emulator), "ns3": str(ns3), "modes": modes,
           "emulator_valid": emu["valid"], "ns3_valid": sim["valid"],
           "same_config": {k: (emu["config"].get(k), sim["config"].get(k)) for k in
                           ("scenario", "k", "link_mbps", "duration_s", "seed", "mtu", "mice_load", "repeats")},
           "ranking": {}, "checks": {}}
    for key, low in (("mice_p99_ms", True), ("elephant_mbps", False)):
        re, rs = ranking(e, key, low), ranking(s, key, low)
        out["ranking"][key] = {"emulator": re, "ns3": rs, "same": re == rs}
    for key in ("p99_vs_floor", "goodput_vs_ceiling", "p99_vs_ecmp", "goodput_vs_ecmp"):
        a, b = (e.get(mode) or {}).get(key), (s.get(mode) or {}).get(key)
        rel = None if a in (None, 0) or b is None else round(b / a - 1, 3)
        out["checks"][key] = {"emulator": a, "ns3": b, "relative_difference": rel,
                              "within": None if rel is None else abs(rel) <= TOLERANCE}
    out["met"] = (all(r["same"] for r in out["ranking"].values())
                  and all(out["checks"][k]["within"] for k in ("p99_vs_floor", "goodput_vs_ceiling")))
    out["table"] = [{"mode": m, **{f"emulator_{k}": e[m].get(k) for k in ("mice_p50_ms", "mice_p99_ms", "elephant_mbps",
                                                                           "p99_vs_floor", "goodput_vs_ceiling")},
                     **{f"ns3_{k}": s[m].get(k) for k in ("mice_p50_ms", "mice_p99_ms", "elephant_mbps",
                                                          "p99_vs_floor", "goodput_vs_ceiling")}} for m in modes]
    return out


def run(emulator: Path, ns3: Path, out: Path) -> dict:
    r = compare(emulator, ns3)
    out.mkdir(parents=True, exist_ok=True)
    r["plot"] = plot(out, r)
    stats.write_json(out / "crossval.json", r)
    return r


def plot(out: Path, r: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = r["modes"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    xs = range(len(modes))
    for ax, key, label in ((axes[0], "mice_p99_ms", "mice p99 FCT (ms)"), (axes[1], "elephant_mbps",
                                                                         "elephant goodput (Mbit/s)")):
        ax.bar([x - 0.2 for x in xs], [row[f"emulator_{key}"] or 0 for row in r["table"]], 0.4, label="emulator")
        ax.bar([x + 0.2 for x in xs], [row[f"ns3_{key}"] or 0 for row in r["table"]], 0.4, label="ns-3")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(modes, rotation=20, fontsize=8)
        ax.set_ylabel(label)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle("The same mixed workload on both engines")
    return save(fig, out / "crossval.png")
