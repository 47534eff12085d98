"""The experiment pipeline end to end, short: every run generates and completes flows, numbers are sane,
results, CSV and plots are written."""

import csv
import json

from experiments.runner import run_experiment


def test_mixed_smoke(tmp_path):
    r = run_experiment("mixed", ["ecmp", "freeway+isolation"], duration=6, seed=3, out=tmp_path, mice_load=0.05)
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["results"]) == {"floor (mice alone)", "ceiling (non-blocking switch)", "ecmp",
                                   "freeway+isolation"}
    for name, run in res["results"].items():
        mice, els = run["mice"], run["elephants"]
        if not name.startswith("ceiling"):
            assert mice["all"]["n"] > 0.8 * res["config"]["mice_flows"], (name, mice)
            assert 0 < mice["all"]["p50"] <= mice["all"]["p99"] < 30
        if not name.startswith("floor"):
            assert els["n"] == 4 and all(0 < g <= 10.5 for g in els["per_flow_mbps"]), (name, els)
    ceiling = res["results"]["ceiling (non-blocking switch)"]["elephants"]["aggregate_mbps"]
    for row in res["table"]:
        assert row["elephant_mbps"] <= 1.1 * ceiling
    rows = list(csv.DictReader(open(tmp_path / "flows.csv")))
    assert {r["kind"] for r in rows} == {"mouse", "elephant"}
    assert all(r["announced"] == "ack" for r in rows if r["run"] == "freeway+isolation" and r["kind"] == "elephant")
    for p in ("fct_cdf.png", "elephants.png", "utilisation_cdf.png", "lol_paths.png"):
        assert (tmp_path / p).stat().st_size > 10_000, p
    assert r["plots"]
