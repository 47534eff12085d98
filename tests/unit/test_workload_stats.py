"""Flow-size distributions, Poisson schedules, statistics and the CSV/JSON writers."""

import csv
import json
import random

import pytest

from experiments import stats
from experiments.workload import SizeCDF, WorkloadError, poisson_schedule


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
