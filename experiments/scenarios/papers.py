"""The papers' own scenarios as ``freeway experiment`` runs.

- ``efm-collisions``: the EFM paper's four collision tests on a 10 Mbit/s k=4
  fat-tree (``experiments/workloads/collisions.py``), each under every mode, ECMP first:
  per test and mode the colliding flows' mean FCT, their aggregate (bytes over
  the longest of their completion times), and the gains against ECMP.
- ``many-to-one``: the isolation paper's many-to-one case on a leaf-spine:
  elephants from several hosts and a stream of 10 KB mice into one host,
  with isolation off and on, plus mice alone and elephants alone.

On the emulator both reuse the benchmarks' measurement code (``benches.reroute.reroute``,
``benches.reroute.isolation_bench``); with ``--engine ns3`` the same flows run as flow
lists on the packet-level engine (the collisions' initial paths pinned by the
same entries, ``collisions.pins``; the bottleneck's bytes read at the same
moments), and both write the same results.json, table and plot.
"""

from __future__ import annotations

from pathlib import Path

from experiments.analysis import stats
from experiments.analysis.plots import save

COLLISION_MODES = ("ecmp", "hedera", "efm-biggest", "efm-smallest", "freeway")
MANY_TO_ONE_MODES = ("ecmp", "ecmp+isolation")
DEFAULT_MODES = {
    "mixed": "ecmp,hedera,efm-biggest,freeway,freeway+isolation",
    "permutation": "ecmp,hedera,efm-biggest,freeway,freeway-paper",
    "paper": "ideal,ecmp,hedera-1s,perpkt,freeway+isolation",
    "fct": "ideal,ideal+isolation,ecmp,ecmp+isolation,perpkt,hedera-1s,efm-biggest,freeway,freeway+isolation",
    "cut-in": "ecmp",
    "flow-control": "ecmp",
    "efm-collisions": "ecmp,hedera,efm-biggest,efm-smallest",
    "many-to-one": "ecmp,ecmp+isolation",
    "flows": "ecmp,hedera,efm-biggest,freeway",
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
    from experiments.workloads.collisions import aggregate_mbps

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


def run_efm_collisions(modes: list[str], size: int, out: Path, engine: str = "emulator", jobs: int = 0,
                       ns3: dict | None = None) -> dict:
    modes = check_modes("efm-collisions", modes)
    print(f"[experiment] efm-collisions: the EFM paper's 4 tests on k=4 at 10 Mbit/s, {size} bytes per flow, "
          f"modes {', '.join(modes)} ({engine})", flush=True)
    if engine == "ns3":
        r = collisions_ns3(modes, size, out, jobs, ns3 or {})
    else:
        from experiments.benches import reroute

        r = reroute.reroute(0, size, modes, out)
    table = collision_table(r["tests"])
    plots = [_plot_collisions(out, table, modes)]
    result = {"config": {"scenario": "efm-collisions", "engine": engine, "modes": modes, "flow_bytes": size,
                         "fabric": r["fabric"], **({"ns3": r["settings"]} if engine == "ns3" else {})},
              "machine": r["machine"], "tests": r["tests"], "table": table, "plots": plots}
    stats.write_json(out / "results.json", result)
    return result


def run_many_to_one(modes: list[str], duration: float, out: Path, mice_rate: float = 6.0,
                    elephants: int = 3, engine: str = "emulator", jobs: int = 0, ns3: dict | None = None) -> dict:
    modes = check_modes("many-to-one", modes)
    print(f"[experiment] many-to-one: {elephants} elephants and {mice_rate:g} mice/s of 10 KB into one host of a "
          f"leaf-spine, {duration:.0f} s per run ({engine})", flush=True)
    if engine == "ns3":
        r = many_to_one_ns3(duration, mice_rate, elephants, out, jobs, ns3 or {})
    else:
        from experiments.benches import reroute

        r = reroute.isolation_bench(duration, mice_rate, elephants, out)
    names = {"ecmp": "isolation-off", "ecmp+isolation": "isolation-on"}
    keep = {"mice-only", "elephants-only", *(names[m] for m in modes)}
    runs = {k: v for k, v in r["runs"].items() if k in keep}
    table = [{"run": k, **v} for k, v in runs.items()]
    plots = [_plot_many_to_one(out, runs)]
    result = {"config": {"scenario": "many-to-one", "engine": engine, "modes": modes, **r["many_to_one"],
                         "fabric": r["fabric"], **({"ns3": r["settings"]} if engine == "ns3" else {})},
              "machine": r["machine"], "runs": runs, "table": table, "plots": plots,
              "mice_p50_reduction_pct": r["mice_p50_reduction_pct"],
              "mice_p99_reduction_pct": r["mice_p99_reduction_pct"]}
    stats.write_json(out / "results.json", result)
    return result


# ----- the same scenarios on the packet-level engine -----------------------------------------------------
COLLISION_START_S = 2.0  # the flows start this long after the program is in (the emulator: reachable, then 2 s)


def collisions_ns3(modes: list[str], size: int, out: Path, jobs: int, ns3: dict) -> dict:
    """The four collision tests on ns-3, in the shape ``benches.reroute.reroute`` gives them: per test and mode the
    flows' goodput, bytes and completion time, and the mode's reroutes. Each run starts a fresh controller
    on an empty fabric, as on the emulator; the flows' first paths are pinned by the emulator's entries."""
    from dataclasses import asdict

    from experiments.benches.controller import machine
    from experiments.engines.ns3.engine import Settings, run_all, spec_of
    from experiments.engines.runner import _controller_mode, _mode_parts
    from experiments.workloads import collisions
    from experiments.workloads.flowlist import Flow
    from topology.fabric import fattree

    fabric = fattree(4, 10)
    settings = Settings(**ns3)
    specs, keys = [], []
    for test_no, (_kind, cflows) in collisions.TESTS.items():
        steered, pins = collisions.pins(fabric, cflows)
        t0 = COLLISION_START_S
        flows = [Flow(t0, f.src, f.dst, 0 if f.rate_mbps else size, "bulk", False,
                      t0 + collisions.background_seconds(size) if f.rate_mbps else None, f.port + 1000, 0, f.port,
                      f.rate_mbps or 0.0) for f in steered]
        for mode in modes:
            base, iso = _mode_parts(mode)
            st = Settings(**{**asdict(settings), "queues": "strict" if iso else "fifo"})
            specs.append(spec_of(f"test{test_no}-{mode}", mode, fabric, _controller_mode(base), iso, flows, st,
                                 pins=pins))
            keys.append((test_no, mode, steered))
    runs = run_all(out, specs, jobs, "efm-collisions")
    tests: dict = {}
    for (test_no, mode, steered), run in zip(keys, runs, strict=True):
        tests.setdefault(test_no, {"kind": collisions.TESTS[test_no][0]})
        by_id = {b["id"]: b for b in run["bulk"]} | {e["id"]: e for e in run["elephants"]}
        flows = {}
        for n, f in enumerate(steered):
            b = by_id.get(n, {})
            flows[f.name] = {"goodput_mbps": round(b.get("goodput_mbps") or 0.0, 3), "bytes": b.get("bytes", 0),
                             "fct_s": b.get("fct_s"), "background": f.rate_mbps is not None}
        tests[test_no][mode] = {"flows": flows, "reroutes": sum(1 for e in run["events"] if e.get("type") == "reroute"),
                                "aggregate_mbps": round(collisions.aggregate_mbps(flows), 3)}
        print(f"[experiment] test {test_no} {mode}: {collisions.describe(flows)}", flush=True)
    return {"fabric": "fattree k=4, 10 Mbit/s", "machine": machine(), "tests": tests, "settings": asdict(settings)}


def many_to_one_ns3(seconds: float, mice_rate: float, elephants: int, out: Path, jobs: int, ns3: dict) -> dict:
    """The isolation paper's many-to-one on ns-3, as ``benches.reroute.isolation_bench`` runs it on the emulator: the
    same leaf-spine, senders, receiver and mice server; elephants from 0, the 10 KB mice from 2 s, one every
    1/``mice_rate`` s for ``seconds``; the bottleneck (the receiver's switch port) read at the mice's start
    and end."""
    from dataclasses import asdict

    from experiments.analysis.stats import percentile
    from experiments.benches.controller import machine
    from experiments.engines.ns3.engine import Settings, run_all, spec_of
    from experiments.workloads.flowlist import Flow
    from topology.fabric import leafspine

    fabric = leafspine(2, 4, 2, 10)
    receiver, server = "h0_0", ("h3_1" if elephants < 6 else "h1_1")
    senders = ["h1_0", "h2_0", "h3_0", "h1_1", "h2_1", "h3_1"][:elephants]
    port = next(h.port for h in fabric.hosts if h.name == receiver)
    t0, t1 = 2.0, 2.0 + seconds
    n_mice = int(seconds * mice_rate)
    settings = Settings(**ns3)
    plan = (("mice-only", True, True, False), ("elephants-only", True, False, True),
            ("isolation-off", False, True, True), ("isolation-on", True, True, True))
    specs = []
    for name, iso, with_mice, with_elephants in plan:
        flows = [Flow(0.0, s, receiver, 0, "bulk", False, t1 + 2.0) for s in senders] if with_elephants else []
        flows += [Flow(t0 + i / mice_rate, receiver, server, 10_000, "rr") for i in range(n_mice)] if with_mice else []
        st = Settings(**{**asdict(settings), "queues": "strict" if iso else "fifo", "grace_s": 10.0})
        specs.append(spec_of(name, "ecmp+isolation" if iso else "ecmp", fabric, "ecmp", iso, flows, st,
                             tx_at=[t0, t1]))
    runs = {}
    for (name, *_), run in zip(plan, run_all(out, specs, jobs, "many-to-one"), strict=True):
        fcts = sorted(m["fct_s"] for m in run["mice"] if m["ok"])
        (a, b) = run["port_tx"][:2]
        dev = f"{fabric.hosts_on('l0')[0].switch}-eth{port}"
        util = (b["tx"][dev] - a["tx"][dev]) * 8 / (b["t"] - a["t"]) / 10e6
        runs[name] = {"mice": len(fcts), "mice_p50_ms": round(percentile(fcts, 50) * 1e3, 2) if fcts else None,
                      "mice_p99_ms": round(percentile(fcts, 99) * 1e3, 2) if fcts else None,
                      "bottleneck_utilisation": round(util, 4)}
        print(f"[experiment] many-to-one {name}: {runs[name]}", flush=True)
    on, off = runs["isolation-on"], runs["isolation-off"]
    return {"machine": machine(), "fabric": "leafspine 2 spines x 4 leaves x 2 hosts, 10 Mbit/s",
            "many_to_one": {"receiver": receiver, "elephant_senders": senders, "mice_server": server,
                            "mice_per_s": mice_rate, "mice_bytes": 10_000, "seconds": seconds},
            "runs": runs, "settings": asdict(settings),
            "mice_p50_reduction_pct": round(100 * (1 - on["mice_p50_ms"] / off["mice_p50_ms"]), 2),
            "mice_p99_reduction_pct": round(100 * (1 - on["mice_p99_ms"] / off["mice_p99_ms"]), 2)}


# ----- a flow list of the user's, on either engine -------------------------------------------------------
def run_flow_list(path: str, modes: list[str], out: Path, fabric, engine: str = "emulator", mtu: int = 1500,
                  jobs: int = 0, ns3: dict | None = None, controller_config: str | None = None,
                  tcp: str = "cubic") -> dict:
    """``freeway experiment flows --flows FILE``: the CSV's flows (``experiments.workloads.flowlist``) under each mode,
    on the emulator (``runner.run_flows``) or ns-3, analysed alike: mice FCT, sized bulk flows' completion
    times, the goodput of flows without a size, core drops."""
    from dataclasses import asdict

    from experiments.engines.runner import ExperimentError, _controller_mode, _controller_settings, _mode_parts, analyse
    from experiments.engines.runner import run_flows as emulator_run
    from experiments.workloads.flowlist import MICE_BOUNDARY, FlowListError, read_csv

    try:
        flows = read_csv(path, {h.name for h in fabric.hosts})
    except FlowListError as e:
        raise ExperimentError(f"--flows: {e}") from None
    if not flows:
        raise ExperimentError(f"--flows: {path} holds no flow")
    out.mkdir(parents=True, exist_ok=True)
    for m in modes:
        _mode_parts(m)
    print(f"[experiment] flows: {len(flows)} flows from {path} on a {fabric.topo} {fabric.params} ({engine}), "
          f"modes {', '.join(modes)}", flush=True)
    if engine == "ns3":
        from experiments.engines.ns3.engine import Settings, run_all, spec_of

        specs = []
        for m in modes:
            base, iso = _mode_parts(m)
            st = Settings(**{**(ns3 or {}), "mtu": mtu, "queues": "strict" if iso else "fifo",
                             "controller": _controller_settings(base)})
            specs.append(spec_of(m.replace("+", "_"), m, fabric, _controller_mode(base), iso, flows, st))
        runs = run_all(out, specs, jobs, "flows")
    else:
        runs = [emulator_run(out, m.replace("+", "_"), fabric, m, flows, mtu, controller_config, tcp=tcp)
                for m in modes]
    results, table, rows = {}, [], []
    for m, run in zip(modes, runs, strict=True):
        a = analyse(run, fabric)
        big = [b for b in run["bulk"] if b["size"] >= MICE_BOUNDARY]
        fcts = [b["fct_s"] for b in big if b["ok"]]
        a["bulk"] = {"n": len(big), "done": len(fcts), "fct_mean_s": sum(fcts) / len(fcts) if fcts else None,
                     "fct_p50_s": stats.percentile(fcts, 50), "fct_p99_s": stats.percentile(fcts, 99)}
        results[m] = a
        mice = a["mice"]["all"]
        table.append({"mode": m, "mice": mice.get("n"), "mice_failed": a["mice"].get("failed"),
                      "mice_p50_ms": _scaled(mice.get("p50")), "mice_p99_ms": _scaled(mice.get("p99")),
                      "bulk_done": f"{len(fcts)}/{len(big)}", "bulk_fct_mean_s": _scaled(a["bulk"]["fct_mean_s"], 1),
                      "elephant_mbps": round(a["elephants"]["aggregate_mbps"], 2), "core_drops": a["core_drops"]})
        rows += [{"mode": m, "kind": "mouse", "src": x["client"], "dst": x["server"], "size": x["size"],
                  "start": x["start"], "fct_s": x["fct_s"], "ok": x["ok"]} for x in run["mice"]]
        rows += [{"mode": m, "kind": "bulk", "src": x["src"], "dst": x["dst"], "size": x["size"], "start": x["start"],
                  "fct_s": x["fct_s"], "ok": x["ok"], "goodput_mbps": x["goodput_mbps"], "announced": x["announced"]}
                 for x in run["bulk"]]
        rows += [{"mode": m, "kind": "elephant", "src": x["src"], "dst": x["dst"], "goodput_mbps": x["goodput_mbps"],
                  "announced": x["announced"]} for x in run["elephants"]]
    stats.write_csv(out / "flows.csv", rows)
    from experiments.analysis.plots import plot_all

    public = {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in results.items()}
    plots = plot_all(out, results, [{"label": m, "mice": run["mice"]} for m, run in zip(modes, runs, strict=True)])
    config = {"scenario": "flows", "engine": engine, "flows_file": str(Path(path).resolve()), "flows": len(flows),
              "topo": fabric.topo, "fabric": fabric.params, "link_mbps": fabric.link_rate_mbps, "modes": modes,
              "mtu": mtu, **({"ns3": asdict(Settings(**{**(ns3 or {}), "mtu": mtu}))} if engine == "ns3" else {})}
    result = {"config": config, "results": public, "table": table, "plots": plots,
              "engine_runs": {m: {"seconds": r.get("seconds"), "simulated_s": r.get("simulated_s")}
                              for m, r in zip(modes, runs, strict=True)}}
    stats.write_json(out / "results.json", result)
    return result


def _scaled(x, scale=1e3):
    return None if x is None else round(x * scale, 2 if scale == 1e3 else 3)


def print_flow_list(table: list[dict]) -> None:
    print(f"{'mode':<20} {'mice':>5} {'p50 ms':>8} {'p99 ms':>8} {'bulk done':>9} {'bulk FCT s':>10} "
          f"{'elephants Mb/s':>14} {'core drops':>10}")
    for r in table:
        print(f"{r['mode']:<20} {r['mice'] or 0:>5} {_f(r['mice_p50_ms'], 1):>8} {_f(r['mice_p99_ms'], 1):>8} "
              f"{r['bulk_done']:>9} {_f(r['bulk_fct_mean_s'], 3):>10} {r['elephant_mbps']:>14.2f} "
              f"{r['core_drops']:>10}")


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
