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
