"""``freeway report STORE``: tables and plots from a results store, the same for 4 runs or 400.

Runs are grouped into *cells* (everything but the mode, the seed and the x parameter, by default the
load). In each cell, per mode and x: slowdown by size bucket (mean and p99) over the seeds' flows pooled,
with each seed's own figure for the spread; ratios between modes taken per seed (the same seed is the
same flows) and pooled (the ratio of the pooled figures), with the seeds' lowest and highest. The ideal
is the first row of every table and dashed in every plot. Written: ``report.md`` (the tables the README
and the docs include), ``report.json`` (every figure), and the plots.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from experiments import stats
from experiments.fct import IDEAL
from experiments.sweep.runs import BUCKET_COLUMNS

BUCKETS = ["<100KB", "100KB-1MB", "1-10MB", ">10MB"]
CELL_KEYS = ("scenario", "workload", "k", "topo", "link_mbps", "duration", "announce_above", "local_share",
             "queues", "tcp", "mtu", "max_bytes", "hosts_per_edge", "variant")
HEADLINE = (("<100KB", "p99"), (">=1MB", "mean"))  # the field's two headline figures
PAPER_FIGURES = ("mice_fct_mean_s", "mice_fct_p99_s", "mice_rto", "elephant_bytes", "core_drops", "unfinished")


class ReportError(ValueError):
    pass


def _mode_order(modes) -> list[str]:
    first = [m for m in modes if m.partition("+")[0] == IDEAL]
    return sorted(first) + sorted(m for m in modes if m not in first)


def _cell_name(cell: dict) -> str:
    keep = {k: v for k, v in cell.items() if v not in (None, "", "default") and not (isinstance(v, float) and
                                                                                     math.isnan(v))}
    parts = [str(keep.pop("scenario", "")), str(keep.pop("workload", ""))]
    if "k" in keep:
        parts.append(f"k={int(keep.pop('k'))}")
    if "announce_above" in keep:
        a = keep.pop("announce_above")
        parts.append("unannounced" if not a else f"announced >= {a / 1e6:g} MB")
    if keep.get("local_share"):
        parts.append(f"{keep.pop('local_share'):g} local")
    for k in ("variant", "queues"):
        if k in keep:
            parts.append(f"{k} {keep.pop(k)}")
    return " ".join(p for p in parts if p)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").replace("--", "-")


def _fmt(x, nd=2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}"


def _pooled(flows, bucket: str) -> dict:
    sel = flows if bucket == "all" else (flows[flows["bytes"] >= 1_000_000] if bucket == ">=1MB"
                                         else flows[flows["bucket"] == bucket])
    sd = [x for x in sel["slowdown"].tolist() if x is not None and not math.isnan(x)]
    return {"flows": len(sel), "done": len(sd), "mean": sum(sd) / len(sd) if sd else None,
            "p99": stats.percentile(sd, 99)}


def build(store, x: str = "load") -> dict:
    """Every cell's figures, from the store's runs and flows."""
    runs = store.index()
    if runs.empty:
        raise ReportError(f"{store.root}: no run stored")
    runs = runs[runs["status"] == "ok"]
    flows = store.table("flows")
    cells: dict[str, dict] = {}
    keys = [k for k in CELL_KEYS if k in runs.columns and k != x]
    for ckey, group in runs.groupby(keys, dropna=False, sort=True):
        cell = dict(zip(keys, ckey if isinstance(ckey, tuple) else (ckey,), strict=True))
        name = _cell_name(cell)
        xs = sorted(group[x].dropna().unique().tolist()) if x in group.columns else [None]
        modes = _mode_order(group["mode"].unique().tolist())
        out = {"cell": {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in cell.items()},
               "x": x, "xs": xs, "modes": modes, "rows": []}
        for xv in xs:
            at = group if xv is None else group[group[x] == xv]
            for mode in modes:
                mine = at[at["mode"] == mode]
                if mine.empty:
                    continue
                fl = flows[flows["hash"].isin(mine["hash"])] if not flows.empty else flows
                row = {"x": xv, "mode": mode, "seeds": sorted(int(s) for s in mine["seed"]),
                       "runs": len(mine), "pooled": {}, "per_seed": {}}
                for b in ["all", *BUCKETS, ">=1MB"]:
                    row["pooled"][b] = _pooled(fl, b) if not fl.empty else None
                    col = BUCKET_COLUMNS[b]
                    row["per_seed"][b] = {stat: dict(zip(mine["seed"].astype(int), mine[f"{col}_{stat}"],
                                                         strict=True)) for stat in ("mean", "p99")}
                for fig in PAPER_FIGURES:
                    vals = [v for v in mine[fig].tolist() if v is not None and not _nan(v)]
                    row[fig] = sum(vals) / len(vals) if vals else None
                    row[f"{fig}_seeds"] = [min(vals), max(vals)] if vals else None
                row["unfinished_total"] = int(mine["unfinished"].sum())
                row["flows_total"] = int(mine["flows"].sum())
                out["rows"].append(row)
        out["ratios"] = _ratios(out)
        cells[name] = out
    return {"store": str(store.root), "runs": len(runs), "cells": cells}


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _ratios(cell: dict) -> list[dict]:
    """Each mode against the ideal and against ECMP, per headline figure: pooled, and per seed (low-high)."""
    out = []
    refs = [r for r in (next((m for m in cell["modes"] if m.partition("+")[0] == IDEAL), None), "ecmp")
            if r in cell["modes"]]
    for xv in cell["xs"]:
        rows = {r["mode"]: r for r in cell["rows"] if r["x"] == xv}
        for ref in refs:
            if ref not in rows:
                continue
            for mode, r in rows.items():
                if mode == ref or mode.partition("+")[0] == IDEAL:
                    continue
                for b, stat in HEADLINE:
                    a, base = (r["pooled"][b] or {}).get(stat), (rows[ref]["pooled"][b] or {}).get(stat)
                    per = [r["per_seed"][b][stat].get(s) / rows[ref]["per_seed"][b][stat].get(s)
                           for s in r["seeds"] if rows[ref]["per_seed"][b][stat].get(s)
                           and r["per_seed"][b][stat].get(s) is not None and not _nan(r["per_seed"][b][stat].get(s))]
                    out.append({"x": xv, "mode": mode, "vs": ref, "figure": f"{b} {stat}",
                                "pooled": a / base if a is not None and base else None,
                                "seeds": [min(per), max(per)] if per else None})
    return out


def markdown(rep: dict) -> str:
    lines = [f"<!-- written by freeway report {rep['store']}: do not edit by hand -->", ""]
    for name, cell in rep["cells"].items():
        lines += [f"### {name}", ""]
        paper = cell["cell"].get("scenario") == "paper"
        for xv in cell["xs"]:
            rows = [r for r in cell["rows"] if r["x"] == xv]
            if not rows:
                continue
            seeds = sorted({s for r in rows for s in r["seeds"]})
            head = f"{cell['x']} {xv}, " if xv is not None else ""
            lines.append(f"{head}seeds {', '.join(map(str, seeds))} pooled (each seed's low-high in brackets):")
            lines.append("")
            if paper:
                lines += ["| mode | mice mean FCT ms | mice p99 ms | mice RTOs | elephant MB | core drops | "
                          "unfinished |", "|---|---|---|---|---|---|---|"]
                for r in rows:
                    lines.append(f"| {r['mode']} | {_fmt(_ms(r['mice_fct_mean_s']), 0)} | "
                                 f"{_fmt(_ms(r['mice_fct_p99_s']), 0)} | {_fmt(r['mice_rto'], 0)} | "
                                 f"{_fmt((r['elephant_bytes'] or 0) / 1e6, 0)} | {_fmt(r['core_drops'], 0)} | "
                                 f"{r['unfinished_total']} |")
            else:
                lines += ["| mode | " + " | ".join(f"{b} mean | {b} p99" for b in BUCKETS)
                          + " | >=1MB mean | unfinished |", "|---" * (2 * len(BUCKETS) + 3) + "|"]
                for r in rows:
                    cells = []
                    for b in [*BUCKETS]:
                        p = r["pooled"][b] or {}
                        cells += [_fmt(p.get("mean")) + _spread(r, b, "mean"), _fmt(p.get("p99")) + _spread(r, b, "p99")]
                    big = r["pooled"][">=1MB"] or {}
                    lines.append(f"| {r['mode']} | " + " | ".join(cells)
                                 + f" | {_fmt(big.get('mean'))}{_spread(r, '>=1MB', 'mean')} | "
                                 f"{r['unfinished_total']}/{r['flows_total']} |")
            lines.append("")
        rat = [q for q in cell["ratios"] if q["pooled"] is not None]
        if rat and not paper:
            lines += ["Ratios (pooled; each seed's low-high):", "",
                      "| " + cell["x"] + " | mode | against | <100KB p99 | >=1MB mean |", "|---|---|---|---|---|"]
            keyed: dict = {}
            for q in rat:
                keyed.setdefault((q["x"], q["mode"], q["vs"]), {})[q["figure"]] = q
            for (xv, mode, vs), figs in keyed.items():
                lines.append(f"| {xv} | {mode} | {vs} | {_ratio_cell(figs, '<100KB p99')} | "
                             f"{_ratio_cell(figs, '>=1MB mean')} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def _ratio_cell(figs: dict, figure: str) -> str:
    q = figs.get(figure)
    if q is None:
        return "-"
    s = q["seeds"]
    return f"{q['pooled']:.2f}" + (f" ({s[0]:.2f}-{s[1]:.2f})" if s else "")


def _ms(x):
    return None if x is None else x * 1e3


def _spread(r: dict, b: str, stat: str) -> str:
    vals = [v for v in r["per_seed"][b][stat].values() if v is not None and not _nan(v)]
    if len(vals) < 2:
        return ""
    return f" ({min(vals):.2f}-{max(vals):.2f})"


def plot(rep: dict, out: Path, store) -> list[str]:
    """Per cell: slowdown against x per bucket (mean and p99, a line per mode, the ideal dashed); the
    small flows' slowdown CDF per x; elephant bytes and core drops per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.plots import save

    names = []
    flows = store.table("flows")
    for name, cell in rep["cells"].items():
        slug = _slug(name)
        modes, xs = cell["modes"], cell["xs"]
        if cell["cell"].get("scenario") != "paper" and xs != [None]:
            fig, axes = plt.subplots(2, len(BUCKETS), figsize=(4 * len(BUCKETS), 7), squeeze=False)
            for j, b in enumerate(BUCKETS):
                for i, stat in enumerate(("mean", "p99")):
                    ax = axes[i][j]
                    for mode in modes:
                        pts = [(r["x"], (r["pooled"][b] or {}).get(stat)) for r in cell["rows"] if r["mode"] == mode]
                        pts = [(a, v) for a, v in pts if v is not None]
                        if not pts:
                            continue
                        style = "k--" if mode.partition("+")[0] == IDEAL else "-o"
                        ax.plot([a for a, _ in pts], [v for _, v in pts], style, label=mode, markersize=3)
                        lows = [min(vs) if (vs := [v for v in r["per_seed"][b][stat].values() if v and not _nan(v)])
                                else None for r in cell["rows"] if r["mode"] == mode]
                        highs = [max(vs) if (vs := [v for v in r["per_seed"][b][stat].values() if v and not _nan(v)])
                                 else None for r in cell["rows"] if r["mode"] == mode]
                        if len(pts) == len(lows) and all(v is not None for v in lows + highs) and len(pts) > 1:
                            ax.fill_between([a for a, _ in pts], lows, highs, alpha=0.1)
                    ax.set_title(f"{b} {stat}", fontsize=9)
                    ax.set_xlabel(cell["x"])
                    ax.set_ylabel("slowdown")
                    ax.grid(True, alpha=0.3)
            axes[0][0].legend(fontsize=7)
            fig.suptitle(f"FCT slowdown against {cell['x']}: {name}")
            names.append(save(fig, out / f"{slug}-slowdown.png"))
        if not flows.empty:
            fig, axes = plt.subplots(1, len(xs), figsize=(5 * len(xs), 3.8), squeeze=False)
            for j, xv in enumerate(xs):
                ax = axes[0][j]
                for mode in modes:
                    hs = [h for r in cell["rows"] if r["mode"] == mode and r["x"] == xv
                          for h in _hashes(store, cell, mode, xv)]
                    sel = flows[flows["hash"].isin(hs)]
                    small = sel[sel["bytes"] < 100_000]["slowdown"].dropna().tolist()
                    if small:
                        xs_, ys = stats.cdf_points(small)
                        ax.plot(xs_, ys, "k--" if mode.partition("+")[0] == IDEAL else "-", label=mode)
                ax.set_xscale("log")
                ax.set_xlabel("slowdown of flows < 100 KB")
                ax.set_ylabel("CDF")
                ax.set_title(f"{cell['x']} {xv}" if xv is not None else "", fontsize=9)
                ax.grid(True, alpha=0.3)
            axes[0][0].legend(fontsize=7)
            fig.suptitle(f"small flows' slowdown: {name}")
            names.append(save(fig, out / f"{slug}-small-cdf.png"))
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        width = 0.8 / max(1, len(xs))
        for j, xv in enumerate(xs):
            rows = {r["mode"]: r for r in cell["rows"] if r["x"] == xv}
            pos = [i + j * width for i in range(len(modes))]
            axes[0].bar(pos, [(rows[m]["elephant_bytes"] or 0) / 1e6 if m in rows else 0 for m in modes], width,
                        label=f"{cell['x']} {xv}" if xv is not None else None)
            axes[1].bar(pos, [(rows[m]["core_drops"] or 0) if m in rows else 0 for m in modes], width)
        for ax, lab in zip(axes, ("bytes of flows >= 1 MB delivered (MB, mean of seeds)", "core drops (mean of seeds)"),
                           strict=True):
            ax.set_xticks(range(len(modes)), modes, rotation=25, fontsize=7)
            ax.set_ylabel(lab, fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
        if xs != [None]:
            axes[0].legend(fontsize=7)
        fig.suptitle(name)
        names.append(save(fig, out / f"{slug}-bytes-drops.png"))
    return names


def _hashes(store, cell: dict, mode: str, xv) -> list[str]:
    runs = store.index()
    sel = runs[(runs["mode"] == mode) & (runs["status"] == "ok")]
    for k, v in cell["cell"].items():
        if k in sel.columns:
            sel = sel[sel[k].isna()] if v is None else sel[sel[k] == v]
    if xv is not None:
        sel = sel[sel["load"] == xv] if "load" in sel.columns else sel
    return sel["hash"].tolist()


def report(store, out: Path, x: str = "load", plots: bool = True) -> dict:
    rep = build(store, x)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(markdown(rep))
    rep["plots"] = plot(rep, out, store) if plots else []
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=_json) + "\n")
    return rep


def _json(o):
    try:
        return o.item()
    except AttributeError:
        return str(o)
