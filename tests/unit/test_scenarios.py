import pytest

from experiments.scenarios import papers as scenarios
from experiments.workloads.collisions import aggregate_mbps


def test_modes_are_checked_per_scenario_and_ecmp_comes_first():
    assert scenarios.check_modes("efm-collisions", ["efm-biggest", "hedera"]) == ["ecmp", "efm-biggest", "hedera"]
    assert scenarios.check_modes("many-to-one", ["ecmp+isolation"]) == ["ecmp+isolation"]
    with pytest.raises(scenarios.ScenarioError, match="many-to-one runs ecmp, ecmp\\+isolation; not freeway"):
        scenarios.check_modes("many-to-one", ["ecmp", "freeway"])
    with pytest.raises(scenarios.ScenarioError, match="not freeway\\+isolation"):
        scenarios.check_modes("efm-collisions", ["freeway+isolation"])


def _flow(fct, nbytes=6_000_000, background=False):
    return {"goodput_mbps": nbytes * 8 / fct / 1e6, "bytes": nbytes, "fct_s": fct, "background": background}


def test_aggregate_is_bytes_over_the_time_to_the_last_finish():
    # one flow done at 9.6 s, two at 14.4 s: their average rates sum to 11.67 Mbit/s, but the link moved 10
    flows = {"F1": _flow(9.6), "F2": _flow(14.4), "F3": _flow(14.4), "F4": _flow(5, 2_000_000, background=True)}
    assert sum(f["goodput_mbps"] for k, f in flows.items() if k != "F4") == pytest.approx(11.67, abs=0.01)
    assert aggregate_mbps(flows) == pytest.approx(10.0)
    assert aggregate_mbps({"F1": {**_flow(1), "fct_s": None}}) == 0.0


def test_collision_table_gains_against_ecmp():
    tests = {1: {"kind": "upstream",
                 "ecmp": {"flows": {"F1": _flow(14.4), "F2": _flow(14.4), "F3": _flow(14.4)}, "reroutes": 0},
                 "efm-biggest": {"flows": {"F1": _flow(4.8), "F2": _flow(9.6), "F3": _flow(9.6)}, "reroutes": 2}}}
    rows = scenarios.collision_table(tests)
    assert [r["mode"] for r in rows] == ["ecmp", "efm-biggest"]
    ecmp, efm = rows
    assert ecmp["aggregate_mbps"] == pytest.approx(10.0) and "fct_gain_pct" not in ecmp
    assert efm["fct_mean_s"] == 8.0 and efm["reroutes"] == 2
    assert efm["fct_gain_pct"] == pytest.approx(round(100 * ((14.4 - 4.8) / 14.4 + 2 * (14.4 - 9.6) / 14.4) / 3, 1))
    assert efm["aggregate_gain_pct"] == pytest.approx(50.0)
