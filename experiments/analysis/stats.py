"""Statistics and writers for experiment results (pure)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

BUCKETS = ((0, 10_000, "<10KB"), (10_000, 100_000, "10-100KB"), (100_000, 1_000_000, "100KB-1MB"),
           (1_000_000, math.inf, ">1MB"))


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(1, math.ceil(q / 100 * len(s)))
    return s[k - 1]


def summary(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0, "mean": None, "p50": None, "p99": None}
    return {"n": len(xs), "mean": sum(xs) / len(xs), "p50": percentile(xs, 50), "p99": percentile(xs, 99)}


def fct_summary(flows: list[dict], rto_s: float = 0.2) -> dict:
    """FCT statistics of mice overall and by size bucket; flows that took at least one retransmission
    timeout (counted by the kernel; None when it does not count them), and flows slower than ``rto_s``
    (Linux's minimum RTO)."""
    done = [f for f in flows if f.get("ok")]
    counted = [f for f in done if f.get("rto") is not None]
    out = {"all": summary([f["fct_s"] for f in done]), "failed": len(flows) - len(done),
           "with_rto": sum(1 for f in counted if f["rto"] > 0) if counted else None,
           "rto_total": sum(f["rto"] for f in counted) if counted else None,
           "over_200ms": sum(1 for f in done if f["fct_s"] >= rto_s)}
    for lo, hi, name in BUCKETS:
        sel = [f["fct_s"] for f in done if lo <= f["size"] < hi]
        if sel:
            out[name] = summary(sel)
    return out


def cdf_points(xs: list[float]) -> tuple[list[float], list[float]]:
    s = sorted(xs)
    return s, [(i + 1) / len(s) for i in range(len(s))]


def write_csv(path: Path, rows: list[dict]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow(r)


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, default=str) + "\n")
