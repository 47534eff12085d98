"""The exact solution of Freeway's Eq. 1, for judging Bin-Pack offline.

Minimise the maximum link utilisation t subject to every flow's rate being
carried on its allowed paths: as a linear programme (flows may split across
paths: the paper's Eq. 1, a lower bound) and as a mixed-integer programme
(each flow whole on one path: what Bin-Pack is allowed to do). Both solved
with SciPy's HiGHS. Offline only: the controller never calls this.
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.paths import Path
from topology.paths import path_links as links


@dataclass(frozen=True)
class Flow:
    paths: tuple[Path, ...]
    rate: float


def solve(flows: list[Flow], capacity: dict, base: dict | None = None, split: bool = True) -> tuple[float, list]:
    """(optimal max utilisation, per flow the {path index: rate} it uses)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    base = base or {}
    unit = max(capacity.values())  # work in units of the largest capacity: HiGHS's tolerances are absolute
    flows = [Flow(fl.paths, fl.rate / unit) for fl in flows]
    capacity = {ln: c / unit for ln, c in capacity.items()}
    base = {ln: v / unit for ln, v in base.items()}
    cols = [(f, p) for f, fl in enumerate(flows) for p in range(len(fl.paths))]
    n = len(cols) + 1  # last variable: t
    all_links = sorted({ln for fl in flows for p in fl.paths for ln in links(p)} | set(base))
    li = {ln: i for i, ln in enumerate(all_links)}
    a_link = np.zeros((len(all_links), n))
    a_sum = np.zeros((len(flows), n))
    for j, (f, p) in enumerate(cols):
        scale = 1.0 if split else flows[f].rate  # split: x = rate on path; whole: y in {0, 1}
        for ln in links(flows[f].paths[p]):
            a_link[li[ln], j] += scale
        a_sum[f, j] = 1.0
    for ln, i in li.items():
        a_link[i, -1] = -capacity[ln]
    ub_link = np.array([-base.get(ln, 0.0) for ln in all_links])
    rhs = np.array([fl.rate if split else 1.0 for fl in flows])
    c = np.zeros(n)
    c[-1] = 1.0
    integrality = np.zeros(n)
    if not split:
        integrality[:-1] = 1
    ub = np.full(n, np.inf)
    if not split:
        ub[:-1] = 1
    res = milp(c, constraints=[LinearConstraint(a_link, -np.inf, ub_link), LinearConstraint(a_sum, rhs, rhs)],
               integrality=integrality, bounds=Bounds(np.zeros(n), ub), options={"time_limit": 60})
    if res.x is None:
        raise RuntimeError(f"HiGHS found no solution: {res.message}")
    assign: list[dict[int, float]] = [{} for _ in flows]
    for j, (f, p) in enumerate(cols):
        v = res.x[j] * (1.0 if split else flows[f].rate)
        if v > 1e-9:
            assign[f][p] = v * unit
    return float(res.x[-1]), assign
