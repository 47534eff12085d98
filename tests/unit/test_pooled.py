"""experiments.analysis.pooled: permutation runs pooled against the non-blocking ideal and the better of Hedera
and EFM, per run."""

import json

from experiments.analysis import pooled


def _run(tmp_path, name, seed, aggregates, lowest=5.0):
    d = tmp_path / name
    d.mkdir()
    results = {"ceiling (non-blocking switch)": {"elephants": {"aggregate_mbps": 155.0, "per_flow_mbps": [9.0]}}}
    for mode, agg in aggregates.items():
        results[mode] = {"elephants": {"aggregate_mbps": agg, "per_flow_mbps": [lowest, agg / 16]}}
    cfg = {"topo": "fattree", "announce": "send", "seed": seed, "link_mbps": 10.0,
           "elephants": [["a", "b"]] * 16, "repeats": 1}
    (d / "results.json").write_text(json.dumps({"config": cfg, "results": results}))
    return d


def test_pooled_means_ratios_to_the_better_rival_and_the_lowest_flow(tmp_path):
    a = _run(tmp_path, "s1", 1, {"hedera": 130.0, "efm-biggest": 140.0, "freeway": 147.0})
    b = _run(tmp_path, "s2", 2, {"hedera": 150.0, "efm-biggest": 120.0, "freeway": 141.0}, lowest=3.0)
    out = pooled.pool([a, b])
    fw = out["modes"]["freeway"]
    assert fw["aggregate_mbps"] == 144.0 and fw["of_ideal"] == 0.9
    assert fw["vs_better_rival_each"] == [1.05, 0.94] and fw["vs_better_rival_lowest"] == 0.94
    assert fw["lowest_flow_mbps"] == 3.0
    assert "ceiling (non-blocking switch)" not in out["modes"]  # a reference, not a mode
    assert out["modes"]["efm-biggest"]["vs_better_rival_each"] == [1.0, 0.8]


def test_a_directory_without_results_is_refused(tmp_path, capsys):
    assert pooled.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no results.json" in capsys.readouterr().err
