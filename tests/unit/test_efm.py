"""EFM selection: biggest/smallest, threshold arithmetic, no path, next elephant, hold-down, fresh samples."""

import pytest

from monitoring.sflow import FiveTuple
from ryu_apps.algorithms.efm_rounds import EFM, EFMConfig, EFMConfigError
from topology.fabric import fattree

F = fattree(4, 10)
A = FiveTuple("10.0.0.2", "10.2.0.2", 6, 40001, 5001)  # e0_0 -> a0_0 -> c1 -> a2_0 -> e2_0
B = FiveTuple("10.0.1.2", "10.3.0.2", 6, 40002, 5001)  # e0_1 -> a0_0 -> c1 -> a3_0 -> e3_0
PATHS = {A: ["e0_0", "a0_0", "c1", "a2_0", "e2_0"], B: ["e0_1", "a0_0", "c1", "a3_0", "e3_0"]}
RATES = {A: 6e6, B: 3.5e6}
HOT = ("a0_0", "c1")


def _links(p):
    return set(zip(p, p[1:], strict=False))


def _world(extra_load=None):
    bps = {}
    for f, p in PATHS.items():
        for ln in _links(p):
            bps[ln] = bps.get(ln, 0.0) + RATES[f]
    bps.update(extra_load or {})
    times = dict.fromkeys(bps, 5.0)
    return bps, times


def _decide(efm, now=5.0, extra_load=None, times=None):
    bps, t = _world(extra_load)
    return efm.decide(now, bps, times or t,
                      lambda ln: [(f, RATES[f]) for f, p in PATHS.items() if ln in _links(p)],
                      lambda f: _links(PATHS[f]))


def test_biggest_moves_the_6_mbps_flow_to_the_first_fitting_path():
    r = _decide(EFM(F, EFMConfig(pick="biggest")))
    (m,) = r.moves
    assert m.flow == A and m.link == HOT and m.new_path == ("e0_0", "a0_0", "c2", "a2_0", "e2_0")


def test_smallest_moves_the_3_5_mbps_flow():
    (m,) = _decide(EFM(F, EFMConfig(pick="smallest"))).moves
    assert m.flow == B and m.new_path[2] == "c2"


def test_threshold_arithmetic_is_inclusive_and_counts_the_flow():
    # c2's uplink already carries 1 Mbit/s: 1 + 6 = 7.0 Mbit/s = exactly 70%: allowed
    (m,) = _decide(EFM(F), extra_load={("a0_0", "c2"): 1e6}).moves
    assert m.new_path[2] == "c2"
    # 1.01 Mbit/s more: 70.1% on c2; the next path (via a0_1, c3) fits
    (m,) = _decide(EFM(F), extra_load={("a0_0", "c2"): 1.01e6}).moves
    assert m.new_path[1:3] == ("a0_1", "c3")


def test_no_path_for_the_biggest_tries_the_next_elephant_and_records_why():
    busy = {("a0_0", "c2"): 2e6, ("e0_0", "a0_1"): 5e6}  # A (6 Mbit/s) fits nowhere; B (3.5) fits via c2
    r = _decide(EFM(F), extra_load=busy)
    (m,) = r.moves
    assert m.flow == B
    everything = {ln: 9e6 for p in ([("a0_0", "c2")], [("e0_0", "a0_1")], [("e0_1", "a0_1")]) for ln in p}
    r = _decide(EFM(F), extra_load=everything)
    assert r.moves == [] and "no path stays under 70%" in r.stuck[HOT]


def test_hold_down_and_fresh_samples():
    efm = EFM(F, EFMConfig(hold_down_s=10))
    assert len(_decide(efm, now=5.0).moves) == 1
    # the same measurement again: no new trigger on that link
    assert _decide(efm, now=6.0).moves == []
    # a fresh measurement still congested: A is held down, so B goes
    bps, times = _world()
    (m,) = _decide(efm, now=7.0, times=dict.fromkeys(times, 7.0)).moves
    assert m.flow == B
    assert "held down" not in _decide(efm, now=30.0, times=dict.fromkeys(times, 30.0)).stuck.get(HOT, "")


def test_a_links_trigger_mark_is_forgotten_once_the_link_is_measured_after_the_move():
    """The mark a move leaves on the link it relieved (no new move there before a reading taken after it)
    is dropped at the first round that sees such a reading: the table goes back to its size before (the
    3,200 short flows of ``test_faults`` found it one larger after an elephant moved meanwhile, 2026-12-06)."""
    efm = EFM(F, EFMConfig(hold_down_s=10))
    assert len(_decide(efm, now=5.0).moves) == 1 and HOT in efm.triggered_at
    assert _decide(efm, now=6.0).moves == [] and HOT in efm.triggered_at  # (no reading since: kept)
    bps, times = _world()
    _decide(efm, now=7.0, times={**times, HOT: 5.0 + 0.05})  # a reading partly before the move's entries
    assert HOT in efm.triggered_at
    _decide(efm, now=8.0, times=dict.fromkeys(times, 8.0), extra_load={HOT: 1e6})  # measured, cool
    assert efm.triggered_at == {}


def test_config_errors():
    with pytest.raises(EFMConfigError, match="pick"):
        EFMConfig(pick="middle")
    with pytest.raises(EFMConfigError, match="threshold"):
        EFMConfig(threshold=1.5)


def test_a_link_with_only_ineligible_elephants_says_so():
    bps, times = _world()
    sampled = lambda ln: [(f, RATES[f]) for f, p in PATHS.items() if ln in _links(p)]  # noqa: E731
    r = EFM(F).decide(5.0, bps, times, sampled, lambda f: _links(PATHS[f]), eligible=lambda f: False)
    assert r.moves == [] and "placed by the handshake" in r.stuck[HOT]
    r = EFM(F).decide(5.0, bps, times, lambda ln: [], lambda f: set())
    assert r.moves == [] and r.stuck[HOT] == "no elephant sampled on it"


def test_a_round_soon_after_another_counts_the_moves_its_readings_have_not_seen():
    """Early rounds run 0.2 s apart, faster than the counters: seen in the EFM collision test 2, three
    elephants were sent onto the same free uplink by three rounds in 0.4 s. A move's rate counts on its
    links until a reading taken after it arrives."""
    efm = EFM(F, EFMConfig(pick="smallest"))
    (m,) = _decide(efm).moves  # B (3.5 Mbit/s) goes via c2
    assert m.flow == B and m.new_path[2] == "c2"
    # 0.2 s later, nothing measured since (readings at 5.0): A (6 Mbit/s) must not join B on a0_0->c2
    bps, times = _world({HOT: 9.5e6})
    times[HOT] = 5.2  # only the hot link has a newer reading
    r = efm.decide(5.2, bps, times, lambda ln: [(A, RATES[A])] if ln == HOT else [], lambda f: _links(PATHS[f]))
    (m2,) = r.moves
    assert m2.flow == A and ("a0_0", "c2") not in _links(m2.new_path)
    # a0_0->c2 measured from 5.05 (a counter delta that began then): mostly before the move's entries
    # carried B (SETTLE_S after the decision), so still not measured after it
    efm2 = EFM(F, EFMConfig(pick="smallest"))
    _decide(efm2)
    times[("a0_0", "c2")] = 5.05
    (m3,) = efm2.decide(5.2, bps, times, lambda ln: [(A, RATES[A])] if ln == HOT else [],
                        lambda f: _links(PATHS[f])).moves
    assert ("a0_0", "c2") not in _links(m3.new_path)
    # once a0_0->c2 is measured wholly after the move (and still free), it counts as measured
    efm3 = EFM(F, EFMConfig(pick="smallest"))
    _decide(efm3)
    times[("a0_0", "c2")] = 5.15
    (m4,) = efm3.decide(5.2, bps, times, lambda ln: [(A, RATES[A])] if ln == HOT else [],
                        lambda f: _links(PATHS[f])).moves
    assert m4.new_path[2] == "c2"
