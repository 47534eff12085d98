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

from experiments.analysis import stats
from experiments.sweep.runs import BUCKET_COLUMNS
from experiments.workloads.fct import IDEAL

BUCKETS = ["<100KB", "100KB-1MB", "1-10MB", ">10MB"]
CELL_KEYS = ("scenario", "workload", "k", "topo", "link_mbps", "duration", "announce_above", "local_share",
             "queues", "demote_after", "tcp", "mtu", "max_bytes", "hosts_per_edge", "variant", "announce", "flow_list")
HEADLINE = (("<100KB", "p99"), (">=1MB", "mean"))  # the field's two headline figures
PAPER_FIGURES = ("mice_fct_mean_s", "mice_fct_p99_s", "mice_rto", "elephant_bytes", "core_drops", "unfinished")
TIMED_FIGURES = ("goodput_mean_mbps", "goodput_min_mbps", "goodput_p1_mbps")  # flows that send for a time


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
    if keep.pop("announce", False) is True:
        parts.append("announced")
    if "flow_list" in keep:
        parts.append(Path(str(keep.pop("flow_list"))).name)
    for k in ("variant", "queues"):
        if k in keep:
            parts.append(f"{k} {keep.pop(k)}")
    if keep.get("demote_after"):
        parts.append(f"hosts demote after {keep.pop('demote_after') / 1e3:g} KB")
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
    runs = _shared_runs(_filled(runs[runs["status"] == "ok"]))
    flows = store.table("flows")
    cells: dict[str, dict] = {}
    keys = [k for k in CELL_KEYS if k in runs.columns and k != x]
    for ckey, group in runs.groupby(keys, dropna=False, sort=True):
        cell = dict(zip(keys, ckey if isinstance(ckey, tuple) else (ckey,), strict=True))
        name = _cell_name(cell)
        xs = (sorted(group[x].dropna().unique().tolist()) if x in group.columns else []) or [None]
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
                       "runs": len(mine), "pooled": {}, "per_seed": {},
                       "hashes": {int(sd): sorted(h) for sd, h in mine.groupby("seed")["hash"]}}
                for b in ["all", *BUCKETS, ">=1MB"]:
                    row["pooled"][b] = _pooled(fl, b) if not fl.empty else None
                    col = BUCKET_COLUMNS[b]
                    row["per_seed"][b] = {stat: dict(zip(mine["seed"].astype(int), mine[f"{col}_{stat}"],
                                                         strict=True)) for stat in ("mean", "p99")}
                for fig in PAPER_FIGURES + TIMED_FIGURES:
                    vals = [v for v in (mine[fig].tolist() if fig in mine.columns else [])
                            if v is not None and not _nan(v)]
                    row[fig] = sum(vals) / len(vals) if vals else None
                    row[f"{fig}_seeds"] = [min(vals), max(vals)] if vals else None
                row["unfinished_total"] = int(mine["unfinished"].sum())
                row["unfinished_by_seed"] = {int(sd): int(u) for sd, u in zip(mine["seed"], mine["unfinished"],
                                                                               strict=True)}
                row["flows_total"] = int(mine["flows"].sum())
                out["rows"].append(row)
            _common(out, xv, flows)
        out["ratios"] = _ratios(out, lambda r, seeds, b: _on_seeds(flows, r, seeds, b))
        cells[name] = out
    return {"store": str(store.root), "runs": len(runs), "cells": cells, "ablations": ablations(runs, flows, x)}


def _filled(runs):
    """Runs stored before a point parameter existed had its default: ``demote_after`` 0 (hosts never demote)."""
    if "demote_after" in runs.columns:
        runs = runs.assign(demote_after=runs["demote_after"].fillna(0.0))
    return runs


def _on_seeds(flows, row: dict, seeds: list[int], bucket: str) -> dict | None:
    """A row's figures pooled over ``seeds`` only (its own pooled figures when those are all it ran)."""
    if list(seeds) == row["seeds"]:
        return row["pooled"][bucket]
    hashes = [h for sd in seeds for h in row.get("hashes", {}).get(sd, [])]
    if not hashes or flows.empty:
        return None
    return _pooled(flows[flows["hash"].isin(hashes)], bucket)


def _common(cell: dict, xv, flows) -> None:
    """Each row of ``xv`` pooled over the seeds *every* mode at ``xv`` ran as well (``common``, on
    ``common_seeds``): a mode that ran fewer seeds than another is compared with it on the same flows only."""
    rows = [r for r in cell["rows"] if r["x"] == xv]
    common = sorted(set.intersection(*(set(r["seeds"]) for r in rows))) if rows else []
    for r in rows:
        r["common_seeds"] = common
        r["common"] = {b: (_on_seeds(flows, r, common, b) if common else None) for b in ["all", *BUCKETS, ">=1MB"]}


def _shared_runs(runs):
    """A mode whose hosts announce nothing runs the same whether or not the flows would announce (one run,
    ``runs.ANNOUNCING``): its row stands in every cell that differs only in ``announce_above``."""
    import pandas as pd

    from experiments.sweep.runs import ANNOUNCING

    if "announce_above" not in runs.columns or runs.empty:
        return runs
    values = runs["announce_above"].dropna().unique().tolist()
    quiet = ~runs["mode"].str.partition("+")[0].isin(ANNOUNCING) & runs["announce_above"].notna()
    copies = [runs[~quiet]]  # (a scenario without announce_above, a permutation's, as it is)
    for v in values:
        copies.append(runs[quiet].assign(announce_above=v))
    out = pd.concat(copies, ignore_index=True)
    keys = [k for k in (*CELL_KEYS, "mode", "seed", "load") if k in out.columns]
    return out.drop_duplicates(subset=keys, keep="first")  # (one run per point, whichever was stored first)


CHANGE_KEYS = ("variant", "queues", "demote_after")  # what an ablation changes against its default (variant default, the mode's queues)
ABLATION_FIGURES = (("<100KB", "p99"), (">=1MB", "mean"), ("1-10MB", "mean"))
ABLATION_COUNTS = ("mice_rto", "elephant_rto", "meter_drops", "nacks", "all_drops", "core_drops",
                   "host_demoted_packets")


def _is_default(key: str, v) -> bool:
    return (v is None or _nan(v) or v == "" or (key == "variant" and v == "default")
            or (key == "demote_after" and v == 0))


def ablations(runs, flows, x: str = "load") -> list[dict]:
    """Each changed setting (a variant, a queue discipline) against the same mode's default runs in the same
    cell and x, **on the seeds both have** (a seed is the same flows; pooling over different seeds would
    compare different traffic): the headline figures pooled over those seeds' flows, and per run the counts
    (timeouts, meter drops, refusals, drops), each with its ratio to the default's. One entry per cell, x
    and mode that has a default and at least one change."""
    if runs.empty or not any(k in runs.columns for k in CHANGE_KEYS):
        return []
    changes = [k for k in CHANGE_KEYS if k in runs.columns]
    keys = [k for k in CELL_KEYS if k in runs.columns and k not in changes and k != x]
    group_keys = [*keys, *([x] if x in runs.columns else []), "mode"]
    out = []
    for gkey, group in runs.groupby(group_keys, dropna=False, sort=True):
        gkey = gkey if isinstance(gkey, tuple) else (gkey,)
        cell = dict(zip(group_keys, gkey, strict=True))
        label = group.apply(lambda r: " ".join(f"{k} {r[k]}" for k in changes if not _is_default(k, r[k])),
                            axis=1)
        if (label == "").sum() == 0 or label.nunique() < 2:
            continue
        base = group[label == ""]
        rows = []
        for change in sorted(set(label) - {""}):
            mine = group[label == change]
            seeds = sorted(set(mine["seed"].astype(int)) & set(base["seed"].astype(int)))
            if not seeds:
                continue
            b, m = _figures(base, flows, seeds), _figures(mine, flows, seeds)
            rows.append({"change": change, "seeds": seeds, "default": b, "changed": m,
                         "ratio": {k: (m[k] / b[k] if m[k] is not None and b[k] else None) for k in m}})
        if rows:
            name = _cell_name({k: v for k, v in cell.items() if k in keys})
            xv = cell.get(x)
            out.append({"cell": name, "x": x, "xv": None if xv is None or _nan(xv) else xv,
                        "mode": cell["mode"], "rows": rows})
    return out


def _figures(runs, flows, seeds: list[int]) -> dict:
    """The ablation's figures of ``runs`` on ``seeds``: pooled slowdowns, and counts as a mean per run."""
    sel = runs[runs["seed"].astype(int).isin(seeds)]
    fl = flows[flows["hash"].isin(sel["hash"])] if not flows.empty else flows
    out = {f"{b} {stat}": ((_pooled(fl, b) or {}).get(stat) if not fl.empty else None)
           for b, stat in ABLATION_FIGURES}
    for c in ABLATION_COUNTS:
        vals = [float(v) for v in (sel[c].tolist() if c in sel.columns else []) if v is not None and not _nan(v)]
        out[c] = sum(vals) / len(vals) if vals else None
    out["unfinished"] = int(sel["unfinished"].sum()) if "unfinished" in sel.columns else None
    return out


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _ratios(cell: dict, on_seeds=None) -> list[dict]:
    """Each mode against the ideal and against ECMP, per headline figure: pooled over the seeds both ran
    (``on_seeds(row, seeds, bucket)`` pools a row over some of its seeds; without it, each row's own pooled
    figures), and per seed (low-high)."""
    out = []
    ideals = [m for m in cell["modes"] if m.partition("+")[0] == IDEAL]

    def ideal_of(mode: str) -> str | None:
        """A mode's ideal: the one with its queues (ideal+isolation for a mode with isolation)."""
        want = f"{IDEAL}+isolation" if mode.endswith("+isolation") else IDEAL
        return want if want in ideals else (ideals[0] if ideals else None)

    for xv in cell["xs"]:
        rows = {r["mode"]: r for r in cell["rows"] if r["x"] == xv}
        for kind in ("ideal", "ecmp"):
            for mode, r in rows.items():
                ref = ideal_of(mode) if kind == "ideal" else "ecmp"
                if ref is None or ref not in rows or mode == ref or mode.partition("+")[0] == IDEAL:
                    continue
                both = sorted(set(r["seeds"]) & set(rows[ref]["seeds"]))
                for b, stat in HEADLINE:
                    if on_seeds is None:
                        a, base = (r["pooled"][b] or {}).get(stat), (rows[ref]["pooled"][b] or {}).get(stat)
                    else:
                        a = (on_seeds(r, both, b) or {}).get(stat) if both else None
                        base = (on_seeds(rows[ref], both, b) or {}).get(stat) if both else None
                    per = [r["per_seed"][b][stat].get(s) / rows[ref]["per_seed"][b][stat].get(s)
                           for s in r["seeds"] if rows[ref]["per_seed"][b][stat].get(s)
                           and r["per_seed"][b][stat].get(s) is not None and not _nan(r["per_seed"][b][stat].get(s))]
                    out.append({"x": xv, "mode": mode, "vs": ref, "figure": f"{b} {stat}", "on_seeds": both,
                                "pooled": a / base if a is not None and base else None,
                                "seeds": [min(per), max(per)] if per else None})
    return out


def markdown(rep: dict) -> str:
    lines = [f"<!-- written by freeway report {rep['store']}: do not edit by hand -->", ""]
    for name, cell in rep["cells"].items():
        lines += [f"### {name}", ""]
        paper = cell["cell"].get("scenario") == "paper"
        timed = cell["cell"].get("scenario") == "permutation"
        for xv in cell["xs"]:
            rows = [r for r in cell["rows"] if r["x"] == xv]
            if not rows:
                continue
            seeds = sorted({s for r in rows for s in r["seeds"]})
            head = f"{cell['x']} {xv}, " if xv is not None else ""
            lines.append(f"{head}seeds {', '.join(map(str, seeds))} pooled (each seed's low-high in brackets; a "
                         "mode that ran fewer seeds says which):")
            lines.append("")
            if timed:
                ideal = next((r for r in rows if r["mode"].partition("+")[0] == IDEAL), None)
                lines += ["| mode | goodput mean Mbit/s | x ideal | min | p1 | core drops |",
                          "|---|---|---|---|---|---|"]
                for r in rows:
                    share = (r["goodput_mean_mbps"] / ideal["goodput_mean_mbps"]
                             if ideal and r["goodput_mean_mbps"] and ideal["goodput_mean_mbps"] else None)
                    lines.append(f"| {r['mode']} | {_fmt(r['goodput_mean_mbps'])}{_seeds(r, 'goodput_mean_mbps')} | "
                                 f"{_fmt(share)} | {_fmt(r['goodput_min_mbps'])} | {_fmt(r['goodput_p1_mbps'])} | "
                                 f"{_fmt(r['core_drops'], 0)} |")
            elif paper:
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
                    name = r["mode"] + (f" (seed{'s' * (len(r['seeds']) > 1)} {', '.join(map(str, r['seeds']))})"
                                        if r["seeds"] != seeds else "")
                    for b in [*BUCKETS]:
                        p = r["pooled"][b] or {}
                        cells += [_fmt(p.get("mean")) + _spread(r, b, "mean"), _fmt(p.get("p99")) + _spread(r, b, "p99")]
                    big = r["pooled"][">=1MB"] or {}
                    lines.append(f"| {name} | " + " | ".join(cells)
                                 + f" | {_fmt(big.get('mean'))}{_spread(r, '>=1MB', 'mean')} | "
                                 f"{r['unfinished_total']}/{r['flows_total']} |")
            lines.append("")
        rat = [q for q in cell["ratios"] if q["pooled"] is not None]
        if rat and not paper and not timed:
            lines += ["Ratios (pooled over the seeds both modes ran; each seed's low-high):", "",
                      "| " + cell["x"] + " | mode | against | seeds | <100KB p99 | >=1MB mean |",
                      "|---|---|---|---|---|---|"]
            keyed: dict = {}
            for q in rat:
                keyed.setdefault((q["x"], q["mode"], q["vs"]), {})[q["figure"]] = q
            for (xv, mode, vs), figs in keyed.items():
                on = next(iter(figs.values())).get("on_seeds") or []
                lines.append(f"| {'-' if xv is None else xv} | {mode} | {vs} | {', '.join(map(str, on))} | "
                             f"{_ratio_cell(figs, '<100KB p99')} | {_ratio_cell(figs, '>=1MB mean')} |")
            lines.append("")
        verdicts = targets(cell) if not paper and not timed else []
        if verdicts:
            lines += ["Targets (docs/fct.md: T1 Freeway+isolation's <100KB p99 at most half ECMP's and at most "
                      "ECMP+isolation's; T2 its >=1MB mean at most 1.1x the best of ECMP, Hedera, EFM and PerPktLB; "
                      "T3 Freeway's two figures at most ECMP's; T4 every flow finished):", "",
                      f"| {cell['x']} | seed | T1: FI <100KB p99 (ECMP, ECMP+iso) | T2: FI >=1MB mean (best, which) "
                      "| T3: Freeway's (ECMP's) | T4: unfinished |", "|---|---|---|---|---|---|"]
            for v in verdicts:
                who = (f"pooled ({', '.join(map(str, v['pooled_seeds']))})" if v["seed"] == "pooled"
                       and v.get("pooled_seeds") is not None else v["seed"])
                lines.append(
                    f"| {'-' if v['x'] is None else v['x']} | {who} | {_verdict(v['t1'])} {_fmt(v['fi_small'])} "
                    f"({_fmt(v['ecmp_small'])}, {_fmt(v['ecmpi_small'])}) | {_verdict(v['t2'])} {_fmt(v['fi_large'])} "
                    f"({_fmt(v['best_large'])}, {v['best'] or '-'}) | {_verdict(v['t3'])} {_fmt(v['fw_small'])} / "
                    f"{_fmt(v['fw_large'])} ({_fmt(v['ecmp_small'])} / {_fmt(v['ecmp_large'])}) | "
                    f"{_verdict(v['t4'])} {v['unfinished']} |")
            lines.append("")
    lines += ablation_markdown(rep.get("ablations") or [])
    return "\n".join(lines) + "\n"


ABLATION_HEAD = ("<100KB p99", ">=1MB mean", "1-10MB mean", "mice RTOs", "elephant RTOs", "meter drops", "NACKs",
                 "drops", "core drops", "packets hosts demoted")


def ablation_markdown(abl: list[dict]) -> list[str]:
    """Each ablation as a table: the default's row, then each change with its ratio to the default."""
    if not abl:
        return []
    lines = ["## Ablations: each change against the default, on the seeds both ran", ""]
    keys = ("<100KB p99", ">=1MB mean", "1-10MB mean", *ABLATION_COUNTS)
    for a in abl:
        at = f", {a['x']} {a['xv']:g}" if a["xv"] is not None else ""
        lines += [f"### {a['cell']}{at}: {a['mode']}", "",
                  "| change | seeds | " + " | ".join(ABLATION_HEAD) + " | unfinished |",
                  "|---" * (len(ABLATION_HEAD) + 3) + "|"]
        seen = set()
        for r in a["rows"]:
            seeds = ", ".join(map(str, r["seeds"]))
            if tuple(r["seeds"]) not in seen:  # the default on these seeds
                seen.add(tuple(r["seeds"]))
                d = r["default"]
                lines.append(f"| (default) | {seeds} | " + " | ".join(
                    _fmt(d[k], 2 if i < 3 else 0) for i, k in enumerate(keys)) + f" | {d['unfinished']} |")
            c, q = r["changed"], r["ratio"]
            lines.append(f"| {r['change']} | {seeds} | " + " | ".join(
                _fmt(c[k], 2 if i < 3 else 0) + (f" ({q[k]:.2f}x)" if q[k] is not None else "")
                for i, k in enumerate(keys)) + f" | {c['unfinished']} |")
        lines.append("")
    return lines


BASELINES = ("ecmp", "hedera-1s", "efm-biggest", "perpkt")  # T2's: the best of them on large flows


def targets(cell: dict) -> list[dict]:
    """The FCT benchmark's four targets for one cell, per x, per seed and pooled (docs/fct.md): None where a
    mode they need was not run. Pooled is over the seeds every mode at that x ran (``common``, where the
    report worked it out), so that no mode is judged on flows the others did not carry."""
    out = []
    for xv in cell["xs"]:
        rows = {r["mode"]: r for r in cell["rows"] if r["x"] == xv}
        if "freeway+isolation" not in rows and "freeway" not in rows:
            continue
        if not any(m in rows for m in ("ecmp+isolation", *BASELINES)):
            continue  # (a cell of Freeway alone, an ablation's variant: nothing to judge it against)
        seeds = sorted({s for r in rows.values() for s in r["seeds"]})
        for seed in [*seeds, "pooled"]:
            def fig(mode, bucket, stat, rows=rows, seed=seed):
                r = rows.get(mode)
                if r is None:
                    return None
                v = (((r["common"] if "common" in r else r["pooled"])[bucket] or {}).get(stat) if seed == "pooled"
                     else r["per_seed"][bucket][stat].get(seed))
                return None if v is None or _nan(v) else float(v)

            fi_s, fi_l = fig("freeway+isolation", "<100KB", "p99"), fig("freeway+isolation", ">=1MB", "mean")
            e_s, e_l = fig("ecmp", "<100KB", "p99"), fig("ecmp", ">=1MB", "mean")
            ei_s = fig("ecmp+isolation", "<100KB", "p99")
            fw_s, fw_l = fig("freeway", "<100KB", "p99"), fig("freeway", ">=1MB", "mean")
            base = {m: v for m in BASELINES if (v := fig(m, ">=1MB", "mean")) is not None}
            best = min(base, key=base.get) if base else None
            pooled_seeds = next((r["common_seeds"] for r in rows.values() if "common_seeds" in r), None)
            unfinished = sum((sum(r["unfinished_by_seed"].get(sd, 0) for sd in pooled_seeds)
                              if pooled_seeds is not None else int(r["unfinished_total"])) if seed == "pooled"
                             else r["unfinished_by_seed"].get(seed, 0) for r in rows.values())
            out.append({
                "x": xv, "seed": seed, "pooled_seeds": pooled_seeds if seed == "pooled" else None, "fi_small": fi_s, "fi_large": fi_l, "ecmp_small": e_s, "ecmp_large": e_l,
                "ecmpi_small": ei_s, "fw_small": fw_s, "fw_large": fw_l, "best": best,
                "best_large": base.get(best) if best else None, "unfinished": unfinished,
                "t1": None if None in (fi_s, e_s, ei_s) else fi_s <= 0.5 * e_s and fi_s <= ei_s,
                "t2": None if fi_l is None or best is None else fi_l <= 1.1 * base[best],
                "t3": None if None in (fw_s, fw_l, e_s, e_l) else fw_s <= e_s and fw_l <= e_l,
                "t4": unfinished == 0})
    return out


def _verdict(t) -> str:
    return "-" if t is None else ("met" if t else "**missed**")


def _seeds(r: dict, fig: str) -> str:
    s = r.get(f"{fig}_seeds")
    return f" ({s[0]:.2f}-{s[1]:.2f})" if s and s[0] != s[1] else ""


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

    from experiments.analysis.plots import save

    names = []
    flows = store.table("flows")
    for name, cell in rep["cells"].items():
        slug = _slug(name)
        modes, xs = cell["modes"], cell["xs"]
        if cell["cell"].get("scenario") in ("fct", "flows") and xs != [None]:
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
        if not flows.empty and cell["cell"].get("scenario") != "permutation":
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


def paper_figures(rep: dict, out: Path, store) -> list[str]:
    """For a cell of the Freeway paper's scenario, its Figs. 5, 6 and 8 beside what the paper describes:
    Fig. 5, one ToR pair's low-latency paths over time with the mice traffic between its racks (the pair
    whose count moved most, Freeway with isolation, the first seed); Fig. 6, each scheme's elephant bytes
    delivered and its mice's FCT CDF, the ideal dashed; Fig. 8, link utilisation CDFs (Freeway's LOL and
    HOL links apart) and core switches' drops sorted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.analysis.plots import save

    names = []
    runs = store.index()
    flows, links, pairs = store.table("flows"), store.table("links"), store.table("pairs")
    for name, cell in rep["cells"].items():
        if cell["cell"].get("scenario") != "paper":
            continue
        slug = _slug(name)
        modes = cell["modes"]
        mine = {m: _hashes(store, cell, m, None) for m in modes}
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        rows = {r["mode"]: r for r in cell["rows"]}
        axes[0].bar(range(len(modes)), [(rows[m]["elephant_bytes"] or 0) / 1e6 for m in modes],
                    color=["#bbb" if m.partition("+")[0] == IDEAL else "#6a9" for m in modes])
        for i, m in enumerate(modes):
            lo_hi = rows[m].get("elephant_bytes_seeds")
            if lo_hi:
                axes[0].plot([i, i], [lo_hi[0] / 1e6, lo_hi[1] / 1e6], "k-")
        axes[0].set_xticks(range(len(modes)), modes, rotation=25, fontsize=7)
        axes[0].set_ylabel("elephant bytes delivered, MB (mean of seeds, low-high)")
        axes[0].set_title("(a) throughput (paper: Freeway 1.087 x Hedera)", fontsize=9)
        for m in modes:
            sel = flows[flows["hash"].isin(mine[m]) & (flows["bytes"] < 1_000_000)]["fct_s"].dropna().tolist()
            if sel:
                xs, ys = stats.cdf_points([x * 1e3 for x in sel])
                axes[1].plot(xs, ys, "k--" if m.partition("+")[0] == IDEAL else "-", label=m)
        axes[1].set_xscale("log")
        axes[1].set_xlabel("mice FCT (ms), flows under 1 MB, seeds pooled")
        axes[1].set_ylabel("CDF")
        axes[1].set_title("(b) latency (paper: Freeway's mean 0.122 x ECMP's)", fontsize=9)
        axes[1].legend(fontsize=7)
        fig.suptitle(f"the Freeway paper's Fig. 6: {name}")
        names.append(save(fig, out / f"{slug}-fig6.png"))
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for m in modes:
            sel = links[links["hash"].isin(mine[m])] if not links.empty else links
            if sel.empty:
                continue
            if (sel["cls"] == "lol").any():
                for cls, style in (("lol", "-"), ("hol", "--")):
                    xs, ys = stats.cdf_points(sel[sel["cls"] == cls]["util"].tolist())
                    axes[0].plot(xs, ys, style, label=f"{m} {cls.upper()}")
            else:
                xs, ys = stats.cdf_points(sel["util"].tolist())
                axes[0].plot(xs, ys, ":", label=m)
        axes[0].set_xlabel("link utilisation (once a second)")
        axes[0].set_ylabel("CDF")
        axes[0].set_title("(a) paper: LOL 0.2-0.325, HOL mostly 0.5-0.65", fontsize=9)
        axes[0].legend(fontsize=6)
        for m in modes:
            if m.partition("+")[0] == IDEAL:
                continue
            per = runs[runs["hash"].isin(mine[m])]
            total: dict = {}
            for blob in per.get("core_drops_by_switch", []):
                for sw, n in json.loads(blob or "{}").items():
                    total[sw] = total.get(sw, 0) + n
            if total:
                axes[1].plot(range(1, len(total) + 1), sorted(total.values()), marker=".", label=m)
        axes[1].set_xlabel("core switches, sorted")
        axes[1].set_ylabel("drops (all seeds)")
        axes[1].set_title("(b) paper: Freeway's at most 0.573 x ECMP's", fontsize=9)
        axes[1].legend(fontsize=7)
        fig.suptitle(f"the Freeway paper's Fig. 8: {name}")
        names.append(save(fig, out / f"{slug}-fig8.png"))
        fw = next((m for m in ("freeway+isolation", "freeway") if m in modes), None)
        if fw and not pairs.empty:
            first = runs[runs["hash"].isin(mine[fw])].sort_values("seed").head(1)
            if not first.empty:
                h = first["hash"].iloc[0]
                ts = sorted(links[links["hash"] == h]["t"].unique().tolist()) if not links.empty else []
                pair, series, n_min = fig5_series(pairs[pairs["hash"] == h], ts, _lol_min(store, h, pairs))
                if pair is not None:
                    fig, ax = plt.subplots(figsize=(8, 3.8))
                    ax.step(ts, series, where="post", label="low-latency paths")
                    ax.set_xlabel("time (s)")
                    ax.set_ylabel(f"low-latency paths of {pair}")
                    ax.set_ylim(n_min - 1.5, max(series) + 1.5)
                    mice = _pair_mice_mbps(flows[flows["hash"] == h], pair, store, ts)
                    if mice:
                        ax2 = ax.twinx()
                        ax2.plot(ts, mice, "r:", label="mice traffic")
                        ax2.set_ylabel("mice traffic between the racks (Mbit/s)", color="r")
                    widened = sum(1 for v in series if v > n_min)
                    ax.set_title(f"paper: 4 most of the time, 5-6 in bursts, back to 4; here {n_min} fixed, "
                                 f"widened {widened} s of {len(ts)}", fontsize=9)
                    fig.suptitle(f"the Freeway paper's Fig. 5 ({fw}, seed {int(first['seed'].iloc[0])})")
                    names.append(save(fig, out / f"{slug}-fig5.png"))
    return names


def fig5_series(pairs, ts: list[float], n_min: int) -> tuple[str | None, list[int], int]:
    """Fig. 5's ToR pair and its low-latency paths at each of ``ts``: a run's ``pairs`` table lists a pair only
    while it has more than the fixed ``n_min`` (the partition keeps no record of the others), so a second
    it is absent from is a second at ``n_min``. The pair is the one widened the most seconds (then the
    widest); None when no pair ever widened (nothing to draw but a flat line: the caller says so)."""
    if pairs.empty or not ts:
        return None, [], n_min
    by_pair = pairs.groupby("pair").agg(n=("t", "size"), hi=("lol_paths", "max"))
    pair = by_pair.sort_values(["n", "hi"], ascending=False).index[0]
    at = {round(float(t), 3): int(v) for t, v in pairs[pairs["pair"] == pair][["t", "lol_paths"]].itertuples(index=False)}
    return str(pair), [at.get(round(float(t), 3), n_min) for t in ts], n_min


def _lol_min(store, h: str, pairs) -> int:
    """The fixed low-latency paths of a run's ToR pairs: recorded with its pairs (runs since 2026-12-02),
    else the partition's default on the run's fabric."""
    mine = pairs[pairs["hash"] == h]
    if "lol_min" in mine.columns and mine["lol_min"].notna().any():
        return int(mine["lol_min"].dropna().iloc[0])
    from experiments.sweep.runs import fabric_of
    from ryu_apps.algorithms.partition import Partition

    point = json.loads(store.index().set_index("hash").loc[h, "point"])
    return Partition(fabric_of(point)).n_min


def _pair_mice_mbps(flows, pair: str, store, ts: list[float]) -> list[float]:
    """The mice (flows under 1 MB) between a pair's two racks, in Mbit/s per second: each flow's bytes spread
    over its completion time."""
    import ast

    if ">" in pair:  # (as the runs record it, "e3_1>e2_3")
        src_tor, _, dst_tor = pair.partition(">")
    else:
        try:
            src_tor, dst_tor = ast.literal_eval(pair)
        except (ValueError, SyntaxError):
            return []
    from experiments.sweep.runs import fabric_of

    point = json.loads(store.index().set_index("hash").loc[flows["hash"].iloc[0], "point"]) if not flows.empty else None
    if point is None:
        return []
    fabric = fabric_of(point)
    tor = {h.name: h.switch for h in fabric.hosts}
    sel = flows[(flows["bytes"] < 1_000_000) & flows["fct_s"].notna()]
    out = []
    for t in ts:
        bits = 0.0
        for r in sel.itertuples():
            if tor.get(r.src) == src_tor and tor.get(r.dst) == dst_tor and r.start_s < t <= r.start_s + r.fct_s + 1:
                overlap = min(t, r.start_s + r.fct_s) - max(t - 1.0, r.start_s)
                if overlap > 0:
                    bits += r.bytes * 8 * overlap / r.fct_s
        out.append(bits / 1e6)
    return out


def _hashes(store, cell: dict, mode: str, xv) -> list[str]:
    runs = _shared_runs(store.index())
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
    rep["plots"] = (plot(rep, out, store) + paper_figures(rep, out, store)) if plots else []
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=_json) + "\n")
    return rep


def _json(o):
    try:
        return o.item()
    except AttributeError:
        return str(o)
