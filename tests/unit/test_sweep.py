"""Sweeps (issue 59): the spec refused line by line before anything runs, the grid expanded, the store
written whole and read without Freeway; the FCT benchmark's workload and slowdown (issue 58)."""

from __future__ import annotations

import math
import random

import pytest

from experiments.sweep import runs
from experiments.sweep.spec import SpecError, parse
from experiments.sweep.store import Store, StoreError, config_hash
from experiments.workloads import fct
from topology.fabric import fattree

GOOD = """\
scenario: fct
grid:
  mode: [ideal, ecmp, freeway+isolation]
  seed: [1, 2]
fixed:
  k: 4
  load: 0.5
variants:
  default: {}
  cap: {freeway: {host_elephants: 8}}
"""


def test_a_spec_expands_to_every_combination_of_its_grid():
    spec = parse(GOOD)
    pts = spec.points()
    assert len(pts) == 6 and {(p["mode"], p["seed"]) for p in pts} == {
        (m, s) for m in ("ideal", "ecmp", "freeway+isolation") for s in (1, 2)}
    assert all(p["k"] == 4 and p["load"] == 0.5 and p["workload"] == "websearch" for p in pts)  # fixed and defaults


@pytest.mark.parametrize("text, where, why", [
    (GOOD.replace("scenario: fct", "scenario: fctt"), ":1:", "unknown 'fctt'"),
    (GOOD.replace("  seed: [1, 2]", "  seeds: [1, 2]"), ":4:", "grid.seeds: unknown parameter"),
    (GOOD.replace("freeway+isolation]", "fastest]"), ":3:", "mode: a known mode"),
    (GOOD.replace("  load: 0.5", "  load: 1.5"), ":7:", "load: a fraction in (0, 1)"),
    (GOOD.replace("host_elephants: 8", "host_elefants: 8"), ":10:", "freeway.host_elefants: unknown setting"),
    (GOOD.replace("host_elephants: 8", "host_elephants: -1"), ":10:", "host_elephants"),
    (GOOD + "engine: emulator\n", ":11:", "sweeps run on: ns3"),
    (GOOD.replace("  k: 4", "  k: 5"), ":6:", "an even arity"),
    (GOOD.replace("fixed:", "fixd:"), ":5:", "'fixd': unknown key"),
    (GOOD.replace("  seed: [1, 2]", "  seed: [1, 1]"), ":4:", "listed twice"),
    (GOOD.replace("  load: 0.5", "  load: 0.5\n  hosts_per_edge: 3"), ":8:", "scenario fct does not take it"),
    ("scenario: fct\ngrid: [1, 2\n", ":3:", "not YAML"),
])
def test_a_bad_spec_is_refused_with_its_line_and_why(text, where, why):
    with pytest.raises(SpecError) as e:
        parse(text, "s.yaml")
    assert f"s.yaml{where}" in str(e.value) and why in str(e.value), str(e.value)


def test_a_variant_not_named_in_the_spec_is_refused():
    with pytest.raises(SpecError, match="grid.variant|variant: a variant the spec names"):
        parse(GOOD.replace("  seed: [1, 2]", "  seed: [1, 2]\n  variant: [nocap]"))


def test_the_same_point_is_the_same_run_and_another_seed_another():
    spec = parse(GOOD.replace("  k: 4", "  k: 4\n  link_mbps: 10\n  duration: 0.5"))
    a, b = [p for p in spec.points() if p["mode"] == "ecmp"]
    sa, sb = runs.engine_spec(a), runs.engine_spec(b)
    assert config_hash(sa) == config_hash(runs.engine_spec(dict(a))) != config_hash(sb)
    ideal = runs.engine_spec(next(p for p in spec.points() if p["mode"] == "ideal"))
    assert ideal["fabric"]["switches"] and len(ideal["fabric"]["switches"]) == 1 and not ideal["fabric"]["links"]
    assert ideal["flows"] == sa["flows"]  # the ideal carries the very same flows


def test_the_store_writes_whole_runs_and_reads_them_back_without_freeway(tmp_path):
    import duckdb

    st = Store(tmp_path / "store")
    st.check_writable()
    st.write_run("aa", {"flows": [{"hash": "aa", "mode": "ecmp", "bytes": 10, "slowdown": 1.5}]},
                 {"hash": "aa", "mode": "ecmp", "status": "ok", "seed": 1})
    st.write_run("bb", {"flows": [{"hash": "bb", "mode": "ideal", "bytes": 10, "slowdown": 1.1}]},
                 {"hash": "bb", "mode": "ideal", "status": "ok", "seed": 1})
    assert st.has("aa") and st.has("bb") and not st.has("cc")
    assert not list((tmp_path / "store").rglob("*.tmp"))  # renamed into place, nothing half-written left
    got = duckdb.sql(f"select mode, avg(slowdown) s from read_parquet('{tmp_path}/store/flows/*.parquet') "
                     "group by mode order by mode").fetchall()
    assert got == [("ecmp", 1.5), ("ideal", 1.1)]
    assert sorted(st.index()["hash"]) == ["aa", "bb"]


def test_an_unwritable_store_is_refused_before_any_run(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "flows").write_text("a file where a folder must be")
    with pytest.raises(StoreError, match="cannot write there"):
        Store(ro).check_writable()
    with pytest.raises(StoreError, match="MiB free"):
        Store(tmp_path / "ok").check_writable(need_bytes=1 << 62)


def test_poisson_flows_offer_the_load_asked_with_uniform_destinations():
    f = fattree(4, 100)
    flows = fct.poisson_flows(f, "websearch", 0.5, 40.0, 3)
    offered = sum(x.bytes for x in flows) * 8 / 40.0 / (len(f.hosts) * 100e6)
    assert 0.4 <= offered <= 0.6, offered  # heavy-tailed sizes: a loose bound
    assert all(x.src != x.dst for x in flows)
    cross = sum(f.host(x.src).switch != f.host(x.dst).switch for x in flows) / len(flows)
    assert abs(cross - 14 / 15) < 0.04, cross  # 14 of a host's 15 others are under another ToR
    assert all((x.bytes >= 1_000_000) == x.announced for x in flows)
    local = fct.poisson_flows(f, "websearch", 0.5, 20.0, 3, local_share=1.0, announce_above=None)
    assert all(f.host(x.src).switch == f.host(x.dst).switch and not x.announced for x in local)


def test_data_mining_is_conditioned_on_its_cap_and_the_load_follows_the_conditioned_mean():
    cdf = fct.size_cdf("datamining", 30e6)
    assert cdf.sizes[-1] == 30e6 and cdf.mean() < fct.size_cdf("datamining").mean() / 5
    rng = random.Random(1)
    assert max(cdf.sample(rng) for _ in range(20_000)) <= 30e6


def test_idle_fct_is_handshake_bytes_at_line_rate_and_store_and_forward():
    rates = [100e6] * 6
    one = fct.idle_fct(rates, 1448)  # one full segment
    frame = (1500 + 2) * 8 / 100e6
    assert one == pytest.approx(2 * 6 * (56 * 8 / 100e6 + 5e-6) + 6 * frame + 6 * 5e-6)
    big = fct.idle_fct(rates, 10_000_000)
    assert big == pytest.approx(math.ceil(10e6 / 1448) * frame, rel=0.01)
    assert fct.hops(fattree(4), "h0_0_0", "h0_0_1") == [10e6] * 2
    assert len(fct.hops(fattree(4), "h0_0_0", "h0_1_0")) == 4 and len(fct.hops(fattree(4), "h0_0_0", "h3_1_1")) == 6


def test_slowdowns_are_summarised_by_bucket():
    rows = [{"bytes": b, "bucket": fct.bucket_of(b), "slowdown": s} for b, s in
            [(5_000, 2.0), (50_000, 4.0), (500_000, 1.5), (5_000_000, 1.2), (20_000_000, 1.1), (2_000_000, None)]]
    s = fct.summarise(rows)
    assert s["<100KB"]["flows"] == 2 and s["<100KB"]["mean"] == 3.0 and s["<100KB"]["p99"] == 4.0
    assert s[">=1MB"]["flows"] == 3 and s[">=1MB"]["done"] == 2
    assert s["all"]["done"] == 5


def test_the_ideal_switch_carries_every_host_of_a_k8_fabric():
    """The ideal's one switch has a port per host: 128 at k=8, past the 97 punt meters a ToR has (they are
    shared round beyond that: the ideal's engine run failed on host 98)."""
    from ryu_apps import config, modes
    from ryu_apps.openflow.intents import Meter
    from ryu_apps.simswitch.fabric import SimFabric

    ideal = fct.ideal_fabric(fattree(8, 100))
    pol = modes.make(config.Config.from_mapping({"fabric": "x", "mode": "ecmp"}), ideal)
    prog = pol.program(fct.IDEAL_SWITCH)
    from ryu_apps.openflow import pipeline

    r = pipeline.HOST_PUNT_METERS
    meters = [m.meter_id for m in prog if isinstance(m, Meter) and r.first <= m.meter_id <= r.last]
    assert len(meters) == len(set(meters)) == 97
    sim = SimFabric(ideal, pol)
    from monitoring.sflow import FiveTuple

    a, b = ideal.hosts[0], ideal.hosts[127]
    assert sim.send(a.name, FiveTuple(a.ip, b.ip, 6, 40000, 5001)).delivered_to == b.name


def test_a_run_is_known_by_every_setting_it_runs_with_defaults_included():
    """The store's hash covers the controller's effective settings, not only those the spec names: a
    setting given at its default is the same run; another value, or a default that changed in the code,
    is another (a run stored before a default changed is not taken for one after)."""
    from experiments.sweep.task import plan

    base = GOOD.replace("  k: 4", "  k: 4\n  link_mbps: 10\n  duration: 0.3")

    def h(variant_body: str) -> str:
        text = base.replace("  cap: {freeway: {host_elephants: 8}}", f"  cap: {variant_body}")
        text = text.replace("  seed: [1, 2]", "  seed: [1]\n  variant: [cap]")
        p = next(p for p in parse(text).points() if p["mode"] == "freeway+isolation")
        return plan(p)[1]

    assert h("{freeway: {elephant_idle_s: 2}}") == h("{}")  # 2 is the default
    assert h("{freeway: {elephant_idle_s: 10}}") != h("{}")


def test_a_flow_list_sweep_reads_its_list_beside_the_spec_and_refuses_a_bad_one(tmp_path):
    (tmp_path / "mine.csv").write_text("start_s,src,dst,bytes\n0.0,h0_0_0,h3_1_1,200000\n")
    spec = tmp_path / "own.yaml"
    spec.write_text("scenario: flows\ngrid:\n  mode: [ecmp]\nfixed:\n  k: 4\n  flow_list: mine.csv\n")
    from experiments.sweep.spec import load

    (p,) = load(str(spec)).points()
    assert p["flow_list"] == str(tmp_path / "mine.csv")
    flows = runs.flows_of(p, runs.fabric_of(p))
    assert [(f.src, f.dst, f.bytes, f.kind) for f in flows] == [("h0_0_0", "h3_1_1", 200000, "bulk")]
    (tmp_path / "mine.csv").write_text("start_s,src,dst,bytes\n0.0,h0_0_0,h9_9_9,200000\n")
    with pytest.raises(SpecError, match=r"own.yaml: flow_list: .*line 2: 'h9_9_9' is not a host"):
        load(str(spec))
    spec.write_text("scenario: flows\ngrid:\n  mode: [ecmp]\nfixed:\n  k: 4\n")
    with pytest.raises(SpecError, match="flow_list: scenario flows needs one"):
        load(str(spec))
    with pytest.raises(SpecError, match=":5: fixed.workload: scenario permutation does not take it"):
        parse("scenario: permutation\ngrid:\n  mode: [ecmp]\nfixed:\n  workload: websearch\n", "p.yaml")


def test_a_permutation_point_sends_one_flow_from_and_to_every_host_across_pods():
    (p,) = parse("scenario: permutation\ngrid:\n  mode: [ecmp]\nfixed:\n  k: 4\n  duration: 3\n").points()
    fabric = runs.fabric_of(p)
    flows = runs.flows_of(p, fabric)
    pod = {h.name: fabric.switches[h.switch].pod for h in fabric.hosts}
    assert sorted(f.src for f in flows) == sorted(pod) == sorted(f.dst for f in flows)
    assert all(pod[f.src] != pod[f.dst] and f.bytes == 0 and f.stop == 3.0 for f in flows)


def test_a_niceness_outside_0_19_is_refused_by_the_command_and_by_the_task(tmp_path):
    import argparse

    from experiments.sweep.cli import _nice
    from experiments.sweep.task import RunError, run_point

    assert _nice("19") == 19 and _nice("0") == 0
    for bad in ("20", "-1", "low"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a niceness within 0-19"):
            _nice(bad)
    with pytest.raises(RunError, match="nice: 25 is not within 0-19"):
        run_point({"scenario": "fct", "mode": "ecmp", "seed": 1}, str(tmp_path), nice=25)
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_runs_scheduling_group_is_set_to_its_niceness_and_tried_again_while_the_kernel_refuses(monkeypatch):
    """``--nice``: the engine's own session's group at the niceness (sched(7): a niceness alone orders a process
    only within its group). The kernel takes one such write every 100 ms from an unprivileged user (EAGAIN), and
    a sweep starts its runs together: the write is tried again, and a group it could not set is said."""
    import builtins
    import subprocess
    from pathlib import Path

    from experiments.sweep import task

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        path = Path(f"/proc/{child.pid}/autogroup")
        refusals = []

        def opener(file, mode="r", *a, **kw):
            if str(file) == str(path) and "w" in mode and len(refusals) < 3:
                refusals.append(file)
                raise BlockingIOError(11, "Resource temporarily unavailable")
            return builtins.open(file, mode, *a, **kw)

        monkeypatch.setattr(task, "open", opener, raising=False)
        assert task._group_nice(child.pid, 7) is None and len(refusals) == 3
        if path.exists():  # (a kernel with autogroup)
            assert path.read_text().strip().endswith("nice 7")
        monkeypatch.setattr(task, "GROUP_TRIES_S", 0.2)
        refusals.clear()
        monkeypatch.setattr(task, "open", lambda *a, **kw: (_ for _ in ()).throw(BlockingIOError(11, "again")),
                            raising=False)
        why = task._group_nice(child.pid, 7)
        assert why is not None and why.startswith("the kernel refused it for 0.2 s")
    finally:
        child.kill()
        child.wait()
