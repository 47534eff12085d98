"""The FCT benchmark's targets as ``freeway report`` judges them (docs/fct.md), on a cell made by hand."""

from experiments.sweep.report import targets


def _row(mode, small_p99, large_mean, unfinished=0, seed=1):
    per = {"<100KB": {"p99": {seed: small_p99}, "mean": {seed: None}},
           ">=1MB": {"mean": {seed: large_mean}, "p99": {seed: None}}}
    return {"x": 0.7, "mode": mode, "seeds": [seed], "unfinished_total": unfinished,
            "unfinished_by_seed": {seed: unfinished},
            "pooled": {"<100KB": {"p99": small_p99}, ">=1MB": {"mean": large_mean}}, "per_seed": per}


def _cell(**over):
    figs = {"ecmp": (100.0, 3.4), "ecmp+isolation": (30.0, 3.6), "perpkt": (24.0, 2.5), "hedera-1s": (117.0, 3.3),
            "freeway": (48.0, 3.1), "freeway+isolation": (6.0, 3.08)}
    figs.update(over)
    return {"xs": [0.7], "rows": [_row(m, *v) for m, v in figs.items()]}


def test_each_target_is_judged_against_the_modes_it_names():
    (seed, pooled) = targets(_cell())
    assert seed["seed"] == 1 and pooled["seed"] == "pooled"
    assert seed["t1"] is True  # 6 <= 50 and <= 30
    assert seed["t2"] is False and seed["best"] == "perpkt"  # 3.08 > 1.1 x 2.5
    assert seed["t3"] is True and seed["t4"] is True


def test_a_small_flow_tail_above_ecmp_with_queues_misses_t1_and_freeway_above_ecmp_misses_t3():
    (seed, _) = targets(_cell(**{"freeway+isolation": (31.0, 2.6), "freeway": (101.0, 3.0)}))
    assert seed["t1"] is False and seed["t2"] is True and seed["t3"] is False


def test_an_unfinished_flow_misses_t4_and_a_missing_mode_is_not_judged():
    cell = _cell()
    cell["rows"] = [r for r in cell["rows"] if r["mode"] != "ecmp+isolation"]
    cell["rows"][0]["unfinished_total"] = cell["rows"][0]["unfinished_by_seed"][1] = 2
    (seed, pooled) = targets(cell)
    assert seed["t1"] is None and seed["t4"] is False and pooled["unfinished"] == 2
    cell["rows"] = [r for r in cell["rows"] if r["mode"].startswith("freeway")]  # Freeway alone (a variant's cell)
    assert targets(cell) == []


def _runs_and_flows():
    """Freeway+isolation by default on seeds 1 and 2, and with one variant on seed 2 only; ECMP on seed 2."""
    import pandas as pd

    runs, flows = [], []

    def run(h, mode, seed, variant="default", small=(1.0,), large=(2.0,), rto=10):
        runs.append({"scenario": "fct", "workload": "websearch", "k": 8, "load": 0.7, "announce_above": 0.0,
                     "queues": "", "variant": variant, "mode": mode, "seed": seed, "hash": h, "status": "ok",
                     "mice_rto": 1, "elephant_rto": rto, "meter_drops": 0, "nacks": 0, "all_drops": 100,
                     "core_drops": 10, "unfinished": 0})
        flows.extend({"hash": h, "bytes": 50_000, "bucket": "<100KB", "slowdown": v} for v in small)
        flows.extend({"hash": h, "bytes": 2_000_000, "bucket": "1-10MB", "slowdown": v} for v in large)

    run("a1", "freeway+isolation", 1, large=(9.0,), rto=99)  # a seed the variant did not run: left out
    run("a2", "freeway+isolation", 2, large=(2.0,), rto=10)
    run("b2", "freeway+isolation", 2, variant="meters-all", large=(3.0,), rto=30)
    run("e2", "ecmp", 2, large=(4.0,))  # no change of its own: no ablation
    return pd.DataFrame(runs), pd.DataFrame(flows)


def test_an_ablation_compares_a_change_with_the_default_on_the_seeds_both_ran():
    from experiments.sweep.report import ablation_markdown, ablations

    (abl,) = ablations(*_runs_and_flows())
    assert abl["mode"] == "freeway+isolation" and abl["xv"] == 0.7
    (row,) = abl["rows"]
    assert row["change"] == "variant meters-all" and row["seeds"] == [2]
    assert row["default"][">=1MB mean"] == 2.0 and row["default"]["elephant_rto"] == 10  # seed 1's 9.0 and 99 out
    assert row["ratio"][">=1MB mean"] == 1.5 and row["ratio"]["elephant_rto"] == 3.0
    text = "\n".join(ablation_markdown([abl]))
    assert "| (default) | 2 | 1.00 | 2.00 | 2.00 | 1 | 10 |" in text
    assert "| variant meters-all | 2 | 1.00 (1.00x) | 3.00 (1.50x) |" in text


def test_a_change_without_a_default_on_a_common_seed_is_no_ablation():
    from experiments.sweep.report import ablations

    runs, flows = _runs_and_flows()
    assert ablations(runs[runs["hash"] != "a2"], flows) == []  # the default ran seed 1 only
    assert ablations(runs[runs["variant"] == "default"], flows) == []  # nothing changed


def test_modes_that_ran_different_seeds_are_compared_on_the_seeds_both_ran():
    """ECMP ran seeds 1 and 2, Freeway+isolation seed 2 only: its ratio to ECMP and the pooled targets are
    taken on seed 2's flows, not against ECMP's two seeds pooled (different traffic)."""
    import pandas as pd

    from experiments.sweep.report import _common, _on_seeds, _pooled, _ratios

    flows = pd.DataFrame([
        {"hash": "e1", "bytes": 2_000_000, "bucket": "1-10MB", "slowdown": 10.0},  # ECMP seed 1: a bad seed
        {"hash": "e2", "bytes": 2_000_000, "bucket": "1-10MB", "slowdown": 2.0},
        {"hash": "f2", "bytes": 2_000_000, "bucket": "1-10MB", "slowdown": 3.0},
    ])

    def row(mode, hashes):
        fl = flows[flows["hash"].isin([h for hs in hashes.values() for h in hs])]
        per = {b: {"mean": {}, "p99": {}} for b in ("<100KB", ">=1MB")}
        return {"x": 0.7, "mode": mode, "seeds": sorted(hashes), "hashes": hashes, "per_seed": per,
                "pooled": {b: _pooled(fl, b) for b in ("all", "<100KB", "100KB-1MB", "1-10MB", ">10MB", ">=1MB")}}

    cell = {"xs": [0.7], "modes": ["ecmp", "freeway+isolation"],
            "rows": [row("ecmp", {1: ["e1"], 2: ["e2"]}), row("freeway+isolation", {2: ["f2"]})]}
    assert cell["rows"][0]["pooled"][">=1MB"]["mean"] == 6.0  # ECMP's own two seeds pooled
    _common(cell, 0.7, flows)
    assert [r["common_seeds"] for r in cell["rows"]] == [[2], [2]]
    assert cell["rows"][0]["common"][">=1MB"]["mean"] == 2.0
    (q,) = [q for q in _ratios(cell, lambda r, seeds, b: _on_seeds(flows, r, seeds, b)) if q["figure"] == ">=1MB mean"]
    assert q["on_seeds"] == [2] and q["pooled"] == 1.5  # 3.0 / 2.0, not 3.0 / 6.0


def test_fig5_fills_the_seconds_a_pair_was_not_listed_with_the_fixed_paths_and_picks_the_pair_widened_longest():
    """A run lists a ToR pair only while it has more low-latency paths than the fixed number: Fig. 5's line
    is the fixed number at every other second, for the pair widened the most seconds."""
    import pandas as pd

    from experiments.sweep.report import fig5_series

    pairs = pd.DataFrame([{"t": 3.0, "pair": "e0>e1", "lol_paths": 6},
                          {"t": 2.0, "pair": "e2>e3", "lol_paths": 5}, {"t": 3.0, "pair": "e2>e3", "lol_paths": 5}])
    pair, series, n_min = fig5_series(pairs, [1.0, 2.0, 3.0, 4.0], 4)
    assert pair == "e2>e3" and series == [4, 5, 5, 4] and n_min == 4
    assert fig5_series(pairs.iloc[:0], [1.0], 4)[0] is None
