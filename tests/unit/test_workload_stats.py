"""Flow-size distributions, Poisson schedules, statistics and the CSV/JSON writers."""

import csv
import json
import random

import pytest

from experiments.analysis import stats
from experiments.workloads.workload import SizeCDF, WorkloadError, poisson_schedule


def test_shipped_distributions_have_their_published_means():
    ws, dm = SizeCDF.load("websearch"), SizeCDF.load("datamining")
    assert ws.mean() == pytest.approx(1.67e6, rel=0.02)  # about 1.6 MB in the DCTCP/pFabric literature
    assert dm.mean() == pytest.approx(7.47e6, rel=0.02)  # about 7.4 MB (VL2)
    assert ws.cdf(6 * 1460) == pytest.approx(0.15) and dm.cdf(1460) == pytest.approx(0.5)
    with pytest.raises(WorkloadError, match="unknown 'nope'"):
        SizeCDF.load("nope")


def test_quantile_inverts_the_cdf_and_mice_are_cut_at_the_boundary():
    ws = SizeCDF.load("websearch")
    for u in (0.2, 0.35, 0.6, 0.85):
        assert ws.cdf(ws.quantile(u)) == pytest.approx(u, abs=1e-9)
    mice = ws.mice(100_000)
    rng = random.Random(4)
    draws = [mice.sample(rng) for _ in range(5000)]
    assert max(draws) <= 100_000 and min(draws) >= 6 * 1460 - 1
    # conditional distribution: P(size <= 50 KB | mouse) = P(<= 50 KB) / P(<= 100 KB)
    frac = sum(d <= 50_000 for d in draws) / len(draws)
    assert frac == pytest.approx(ws.cdf(50_000) / ws.cdf(100_000), abs=0.03)
    with pytest.raises(WorkloadError, match="below every flow"):
        ws.mice(1000)


def test_poisson_schedule_offers_the_asked_load_and_repeats_with_the_seed():
    mice = SizeCDF.load("websearch").mice(100_000)
    sched = poisson_schedule(random.Random(1), mice, 0.1, 10e6, 300, ["10.0.0.2", "10.1.0.2"])
    offered = sum(s for _, _, s in sched) * 8 / 300 / 10e6
    assert offered == pytest.approx(0.1, rel=0.2)
    assert all(0 <= t < 300 for t, _, _ in sched) and [t for t, _, _ in sched] == sorted(t for t, _, _ in sched)
    assert sched == poisson_schedule(random.Random(1), mice, 0.1, 10e6, 300, ["10.0.0.2", "10.1.0.2"])
    with pytest.raises(WorkloadError, match="mice load"):
        poisson_schedule(random.Random(1), mice, 1.5, 10e6, 10, ["x"])
    with pytest.raises(WorkloadError, match="non-decreasing"):
        SizeCDF.of([(10, 0.0), (5, 0.5), (20, 1.0)])


def test_percentiles_and_fct_summary():
    assert stats.percentile([], 50) is None
    xs = list(range(1, 101))
    assert stats.percentile(xs, 50) == 50 and stats.percentile(xs, 99) == 99 and stats.percentile(xs, 100) == 100
    flows = [{"ok": True, "size": 5000, "fct_s": 0.01}, {"ok": True, "size": 50_000, "fct_s": 0.3},
             {"ok": True, "size": 20_000, "fct_s": 0.02}, {"ok": False, "size": 1000}]
    s = stats.fct_summary(flows)
    assert s["failed"] == 1 and s["over_200ms"] == 1 and s["all"]["n"] == 3
    assert s["with_rto"] is None and s["rto_total"] is None  # no counts from the kernel: unknown, not zero
    flows[0]["rto"], flows[1]["rto"], flows[2]["rto"] = 0, 2, 0
    s = stats.fct_summary(flows)
    assert s["with_rto"] == 1 and s["rto_total"] == 2
    assert s["<10KB"]["n"] == 1 and s["10-100KB"]["p99"] == 0.3
    assert s["all"]["mean"] == pytest.approx(0.11)


def test_writers(tmp_path):
    rows = [{"a": 1, "b": "x"}, {"a": 2, "c": 3.5}]
    stats.write_csv(tmp_path / "f.csv", rows)
    back = list(csv.DictReader(open(tmp_path / "f.csv")))
    assert back == [{"a": "1", "b": "x", "c": ""}, {"a": "2", "b": "", "c": "3.5"}]
    stats.write_json(tmp_path / "r.json", {"x": [1, 2], "p": tmp_path})
    assert json.loads((tmp_path / "r.json").read_text())["x"] == [1, 2]


def test_ceiling_workload_is_the_same_traffic_on_the_non_blocking_switch():
    from experiments.engines.runner import mixed_workload, non_blocking, remap_workload
    from topology.fabric import fattree

    ft = fattree(4, 10.0)
    wl = mixed_workload(ft, 10, 2, 0.1, "websearch", 100_000)
    nb, hmap = non_blocking(ft)
    moved = remap_workload(wl, ft, nb, hmap)
    nb_ip = {h.name: h.ip for h in nb.hosts}
    ft_name = {h.ip: h.name for h in ft.hosts}
    assert moved.elephants == [(hmap[s], hmap[t]) for s, t in wl.elephants]
    assert sum(map(len, moved.mice.values())) == sum(map(len, wl.mice.values())) > 0
    for client, sched in wl.mice.items():
        got = moved.mice[hmap[client]]
        assert [(o, size) for o, _, size in got] == [(o, size) for o, _, size in sched]
        # every mouse goes to the same server, now at its address on the non-blocking switch
        assert [srv for _, srv, _ in got] == [nb_ip[hmap[ft_name[srv]]] for _, srv, _ in sched]
    assert set(moved.mice) <= set(nb_ip) and moved.duration == wl.duration


def _analysis(fcts, agg, per_flow, util, cpu, drops=0, mode="ecmp"):
    mice = [{"ok": True, "fct_s": f, "size": 20_000, "rto": 0} for f in fcts]
    return {"mode": mode, "label": mode, "mice": stats.fct_summary(mice),
            "elephants": {"n": len(per_flow), "aggregate_mbps": agg, "per_flow_mbps": per_flow},
            "link_utilisation": {}, "core_drops": drops, "switch_cpu": cpu,
            "_util": {"all": util, "lol": [], "hol": []},
            "_lol_series": [{"t": 0, "lol_paths": {}, "lol_min": None, "mice_load": None}], "_mice": mice}


def test_repeats_pool_the_mice_and_average_the_elephants():
    from experiments.engines.runner import merge_repeats

    a = _analysis([0.01] * 98 + [0.5] * 2, 20.0, [10.0, 10.0], [0.2, 0.4], {"mean": 0.5, "max": 0.6}, drops=3)
    b = _analysis([0.02] * 100, 30.0, [12.0, 18.0], [0.6], {"mean": 0.7, "max": 0.9}, drops=4)
    assert merge_repeats([a]) is a
    m = merge_repeats([a, b])
    assert m["mice"]["all"]["n"] == 200
    # pooled: 98 x 10 ms, 100 x 20 ms, 2 x 500 ms; rank 198 of 200 is 20 ms, where repeat a alone had 500 ms
    assert m["mice"]["all"]["p50"] == 0.02 and m["mice"]["all"]["p99"] == 0.02
    assert m["elephants"] == {"n": 2, "aggregate_mbps": 25.0, "per_flow_mbps": [11.0, 14.0]}
    assert m["link_utilisation"]["all"]["n"] == 3 and m["core_drops"] == 4  # 3.5 rounds to even
    assert m["switch_cpu"] == {"mean": 0.6, "max": 0.9, "waiting": None}  # older runs: no wait recorded
    assert [r["mice_p99"] for r in m["repeats"]] == [0.5, 0.02]
    assert [r["elephant_mbps"] for r in m["repeats"]] == [20.0, 30.0]


def test_spread_takes_each_repeat_against_its_own_references():
    from experiments.engines.runner import add_spread, comparison

    def repeat(floor99, ceil, ecmp99, ecmp_agg, fw99, fw_agg):
        return {"floor (mice alone)": _analysis([floor99] * 100, 0.0, [], [], None),
                "ceiling (non-blocking switch)": _analysis([0.08] * 100, ceil, [ceil], [], None),
                "ecmp": _analysis([ecmp99] * 100, ecmp_agg, [ecmp_agg], [], None),
                "freeway+isolation": _analysis([fw99] * 100, fw_agg, [fw_agg], [], None, mode="freeway+isolation")}

    reps = [repeat(0.1, 40.0, 0.4, 20.0, 0.2, 30.0), repeat(0.2, 40.0, 0.3, 10.0, 0.3, 36.0)]
    modes = ["ecmp", "freeway+isolation"]
    table = comparison(reps[0], modes, True)
    add_spread(table, [comparison(r, modes, True) for r in reps])
    fw = table[1]["spread"]
    assert fw["p99_vs_floor"] == [1.5, 2.0] and fw["goodput_vs_ceiling"] == [0.75, 0.9]
    assert fw["p99_vs_ecmp"] == [0.5, 1.0] and fw["goodput_vs_ecmp"] == [1.5, 3.6]
    assert fw["mice_p99_ms"] == [200.0, 300.0] and table[0]["spread"]["p99_vs_ecmp"] == [1.0, 1.0]


def test_a_broken_floor_is_said_and_gets_no_ratio(capsys):
    """Issue 16: mice alone that take timeouts, or whose median is far above the non-blocking switch's,
    mean the emulator could not carry the workload: the run says so and shows no ratio to that floor."""
    from experiments.engines.runner import comparison, floor_check, print_table

    def results(floor_fcts, rto, ceil_fcts):
        floor = _analysis(floor_fcts, 0.0, [], [], None)
        floor["mice"]["with_rto"] = rto
        return {"floor (mice alone)": floor, "ceiling (non-blocking switch)": _analysis(ceil_fcts, 40.0, [40.0], [], None),
                "ecmp": _analysis([0.4] * 100, 20.0, [20.0], [], None)}

    good = results([0.07] * 100, 0, [0.06] * 100)
    assert floor_check(good) == [] and comparison(good, ["ecmp"], True)[0]["p99_vs_floor"] == round(0.4 / 0.07, 3)
    slow = results([8.19] * 100, 1, [0.067] * 100)  # the k=6 run: p50 8,190 ms against 67 ms
    assert floor_check(slow) == ["the floor's mice p50 (8190 ms) is 122.2 times the same mice's on the non-blocking "
                                 "switch (67 ms)"]
    assert comparison(slow, ["ecmp"], True)[0]["p99_vs_floor"] is None
    timeouts = results([0.07] * 100, 3, [0.06] * 100)
    assert floor_check(timeouts) == ["3 of the floor's 100 mice took a retransmission timeout with no elephant running"]
    print_table(comparison(timeouts, ["ecmp"], True), timeouts)
    out = capsys.readouterr().out
    assert "INVALID RUN: 3 of the floor's 100 mice" in out and "could not carry this workload" in out


def test_repeated_runs_are_plotted(tmp_path):
    from experiments.analysis.plots import plot_all
    from experiments.engines.runner import merge_repeats

    reps = [_analysis([0.01 * (i + 1)] * 50, agg, [agg], [0.3], None) for i, agg in enumerate((20.0, 26.0))]
    results = {"ecmp": merge_repeats(reps)}
    files = plot_all(tmp_path, results, [{"label": "ecmp", "mice": results["ecmp"]["_mice"]}])
    assert {"fct_cdf.png", "elephants.png", "utilisation_cdf.png"} <= set(files)
    assert (tmp_path / "elephants.png").stat().st_size > 10_000


def test_the_switch_thread_counts_as_saturated_when_busy_and_waiting_for_a_cpu_together_reach_the_limit():
    """Issue 16: at k=6 and k=8 the forwarding thread showed only 65-75% busy while packets waited
    seconds inside the emulator: it also waited for a CPU the machine's other processes held."""
    from experiments.engines.runner import cpu_warnings

    w = cpu_warnings({"floor": {"switch_cpu": {"mean": 0.7, "waiting": 0.22}},
                      "ecmp": {"switch_cpu": {"mean": 0.6, "waiting": 0.1}}})
    assert len(w) == 1 and w[0].startswith("warning: floor:") and "70% busy and 22% waiting for a CPU" in w[0]
    out = cpu_warnings({"ecmp": {"switch_cpu": {"mean": 0.6, "waiting": 0.1}},
                        "old": {"switch_cpu": {"mean": 0.85}}})
    assert len(out) == 1 and out[0].startswith("warning: old:") and "waiting" not in out[0]


def test_the_switch_thread_reading_gives_its_cpu_share_and_its_wait():
    import os
    import time

    from experiments.harness.procs import SwitchCpu

    cpu = SwitchCpu(pid=os.getpid())  # this process's main thread, spinning
    t = time.monotonic()
    while time.monotonic() - t < 0.3:
        pass
    busy = cpu.busy()
    assert busy is not None and busy > 0.3
    assert cpu.last_waiting is not None and 0.0 <= cpu.last_waiting <= 1.0
    assert SwitchCpu(pid=2 ** 22 + 7).busy() is None  # no such process: nothing, not an error


def test_a_bad_controller_config_is_refused_before_any_run_naming_the_key(tmp_path):
    from experiments.engines.runner import ExperimentError, run_experiment

    bad = tmp_path / "bad.yaml"
    bad.write_text("controller:\n  lldp_intervall_s: 0\n")
    with pytest.raises(ExperimentError, match=r"--controller-config: controller.lldp_intervall_s: unknown setting; "
                                              r"did you mean lldp_interval_s\?"):
        run_experiment("mixed", ["ecmp"], 30, 1, tmp_path / "out", controller_config=str(bad))
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
    with pytest.raises(ExperimentError, match="cannot read"):
        run_experiment("mixed", ["ecmp"], 30, 1, tmp_path / "out", controller_config=str(tmp_path / "none.yaml"))


def test_a_bad_mtu_is_refused_before_any_run(tmp_path):
    from experiments.engines.runner import ExperimentError, run_experiment

    for bad in (1499, 9001, 0):
        with pytest.raises(ExperimentError, match=rf"--mtu: must be a whole number of bytes from 1500 to 9000, "
                                                  rf"got {bad}"):
            run_experiment("mixed", ["ecmp"], 30, 1, tmp_path / "out", mtu=bad)
    assert not (tmp_path / "out").exists()
