"""The papers' own scenarios as ``freeway experiment`` runs.

- ``efm-collisions``: the EFM paper's four collision tests on a 10 Mbit/s k=4
  fat-tree (``experiments/collisions.py``), each under every mode, ECMP first:
  per test and mode the colliding flows' mean FCT, their aggregate (bytes over
  the longest of their completion times), and the gains against ECMP.
- ``many-to-one``: the isolation paper's many-to-one case on a leaf-spine:
  elephants from several hosts and a stream of 10 KB mice into one host,
  with isolation off and on, plus mice alone and elephants alone.

Both reuse the benchmarks' measurement code (``bench.reroute``,
``bench.isolation_bench``) and add the experiment's results.json, table and
plot.
"""

from __future__ import annotations

from pathlib import Path

from experiments import stats
from experiments.plots import save

COLLISION_MODES = ("ecmp", "hedera", "efm-biggest", "efm-smallest", "freeway")
MANY_TO_ONE_MODES = ("ecmp", "ecmp+isolation")
DEFAULT_MODES = {
    "mixed": "ecmp,hedera,efm-biggest,freeway,freeway+isolation",
    "permutation": "ecmp,hedera,efm-biggest,freeway",
    "paper": "ecmp,hedera-1s,perpkt,freeway+isolation",
    "cut-in": "ecmp",
    "flow-control": "ecmp",
    "efm-collisions": "ecmp,hedera,efm-biggest,efm-smallest",
    "many-to-one": "ecmp,ecmp+isolation",
}


class ScenarioError(ValueError):
    pass


def check_modes(scenario: str, modes: list[str]) -> list[str]:
    """The modes a named scenario can run, ECMP first; a clear error for the others."""
    allowed = COLLISION_MODES if scenario == "efm-collisions" else MANY_TO_ONE_MODES
    bad = [m for m in modes if m not in allowed]
    if bad:
        raise ScenarioError(f"--modes: {scenario} runs {', '.join(allowed)}; not {', '.join(bad)}")
    if not modes:
        raise ScenarioError("--modes: give at least one mode")
    if scenario == "efm-collisions" and "ecmp" not in modes:
        modes = ["ecmp", *modes]  # every gain is against ECMP in the same run
    return sorted(set(modes), key=modes.index)


def collision_table(tests: dict) -> list[dict]:
    """One row per (test, mode): mean FCT of the colliding flows, their aggregate, gains against ECMP."""
    from experiments.collisions import aggregate_mbps

    rows = []
    for test_no, t in sorted(tests.items()):
        base = t.get("ecmp")
        for mode, r in t.items():
            if mode == "kind":
                continue
            main = {k: v for k, v in r["flows"].items() if not v["background"]}
            fcts = [v["fct_s"] for v in main.values() if v["fct_s"]]
            agg = aggregate_mbps(r["flows"])
            row = {"test": test_no, "kind": t["kind"], "mode": mode,
                   "fct_mean_s": round(sum(fcts) / len(fcts), 3) if len(fcts) == len(main) and fcts else None,
                   "aggregate_mbps": round(agg, 3), "reroutes": r.get("reroutes")}
            if base and mode != "ecmp":
                b = base["flows"]
                pairs = [(b[k]["fct_s"], v["fct_s"]) for k, v in main.items() if v["fct_s"] and b[k]["fct_s"]]
                row["fct_gain_pct"] = round(100 * sum((x - y) / x for x, y in pairs) / len(pairs), 1) if pairs else None
                base_agg = aggregate_mbps(b)
                row["aggregate_gain_pct"] = round(100 * (agg / base_agg - 1), 1) if base_agg else None
            rows.append(row)
    return rows


def run_efm_collisions(modes: list[str], size: int, out: Path) -> dict:
    from experiments import bench

    modes = check_modes("efm-collisions", modes)
    print(f"[experiment] efm-collisions: the EFM paper's 4 tests on k=4 at 10 Mbit/s, {size} bytes per flow, "
          f"modes {', '.join(modes)}", flush=True)
    r = bench.reroute(0, size, modes, out)
    table = collision_table(r["tests"])
    plots = [_plot_collisions(out, table, modes)]
    result = {"config": {"scenario": "efm-collisions", "modes": modes, "flow_bytes": size,
                         "fabric": r["fabric"]}, "machine": r["machine"], "tests": r["tests"], "table": table,
              "plots": plots}
    stats.write_json(out / "results.json", result)
    return result


def run_many_to_one(modes: list[str], duration: float, out: Path, mice_rate: float = 6.0,
                    elephants: int = 3) -> dict:
    from experiments import bench

    modes = check_modes("many-to-one", modes)
    print(f"[experiment] many-to-one: {elephants} elephants and {mice_rate:g} mice/s of 10 KB into one host of a "
          f"leaf-spine, {duration:.0f} s per run", flush=True)
    r = bench.isolation_bench(duration, mice_rate, elephants, out)
    names = {"ecmp": "isolation-off", "ecmp+isolation": "isolation-on"}
    keep = {"mice-only", "elephants-only", *(names[m] for m in modes)}
    runs = {k: v for k, v in r["runs"].items() if k in keep}
    table = [{"run": k, **v} for k, v in runs.items()]
    plots = [_plot_many_to_one(out, runs)]
    result = {"config": {"scenario": "many-to-one", "modes": modes, **r["many_to_one"], "fabric": r["fabric"]},
              "machine": r["machine"], "runs": runs, "table": table, "plots": plots,
              "mice_p50_reduction_pct": r["mice_p50_reduction_pct"],
              "mice_p99_reduction_pct": r["mice_p99_reduction_pct"]}
    stats.write_json(out / "results.json", result)
    return result


def print_collisions(table: list[dict]) -> None:
    print(f"{'test':<16} {'mode':<14} {'FCT mean s':>10} {'together Mb/s':>13} {'FCT gain':>9} {'agg gain':>9} "
          f"{'reroutes':>8}")
    for r in table:
        print(f"{str(r['test']) + ' ' + r['kind']:<16} {r['mode']:<14} {_f(r['fct_mean_s']):>10} "
              f"{r['aggregate_mbps']:>13.2f} {_pct(r.get('fct_gain_pct')):>9} {_pct(r.get('aggregate_gain_pct')):>9} "
              f"{_f(r.get('reroutes'), 0):>8}")


def print_many_to_one(table: list[dict]) -> None:
    print(f"{'run':<16} {'mice':>5} {'mice p50 ms':>11} {'mice p99 ms':>11} {'bottleneck':>10}")
    for r in table:
        print(f"{r['run']:<16} {r['mice']:>5} {_f(r['mice_p50_ms']):>11} {_f(r['mice_p99_ms']):>11} "
              f"{r['bottleneck_utilisation']:>10.0%}")


def _f(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def _pct(x):
    return "-" if x is None else f"{x:+.1f}%"


def _plot_collisions(out: Path, table: list[dict], modes: list[str]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tests = sorted({r["test"] for r in table})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        rows = {r["test"]: r for r in table if r["mode"] == mode}
        xs = [t + (i - (len(modes) - 1) / 2) * width for t in tests]
        axes[0].bar(xs, [rows[t]["fct_mean_s"] or 0 for t in tests], width, label=mode)
        axes[1].bar(xs, [rows[t]["aggregate_mbps"] for t in tests], width, label=mode)
    for ax, what in zip(axes, ("colliding flows' mean FCT (s)", "together (Mbit/s)"), strict=True):
        ax.set_xticks(tests)
        ax.set_xticklabels([f"test {t}" for t in tests])
        ax.set_ylabel(what)
        ax.grid(True, axis="y", alpha=0.3)
    axes[1].axhline(10, color="tab:red", linestyle="--", linewidth=1, label="one link")
    axes[1].legend(fontsize=8)
    fig.suptitle("EFM collision tests (k=4, 10 Mbit/s)")
    return save(fig, out / "collisions.png")


def _plot_many_to_one(out: Path, runs: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k, v in runs.items() if v["mice_p50_ms"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [runs[n]["mice_p50_ms"] for n in names], 0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [runs[n]["mice_p99_ms"] for n in names], 0.4, label="p99")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names)
    ax.set_ylabel("10 KB mice FCT (ms)")
    ax.set_title("Many-to-one on a leaf-spine")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out / "many_to_one.png")
