"""The controller process against a k=8 fat-tree's 80 switches emulated at the socket (issue 41): every
switch programmed through its own OpenFlow connection, every ToR pair and every host reached by walking
packets through the tables those messages built, an aggregation-core link cut (its ports reported down)
routed around with no pair lost and used again once restored, a SIGKILLed controller that reads every
switch back and changes nothing; then the steady state: every port's sFlow counters and the flow samples of
a synthetic load (the port map read from a real ovsdb-server), and hosts announcing elephants meanwhile; an
sFlow worker process killed and replaced."""

from pathlib import Path

from experiments.benches import fabricscale


def test_a_k8_fabric_emulated_at_the_socket_is_programmed_walked_and_read_back_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)  # the output directory relative, as the command's default (results/bench)
    r = fabricscale.run(8, Path(tmp_path.name), pairs=0, timeout=120, steady_s=3.0, active_pairs=100, handshake_s=2.0,
                        view_grouped=True, cuts=2, probe_gap_s=0.5, sflow_workers="1")
    assert r["switches"] == 80 and r["startup_s"] is not None and r["startup_s"] < 30, r
    assert r["switch_errors"] == 0
    w = r["walk"]
    assert w["tor_pairs_walked"] == 32 * 31 and w["tor_pairs_failed"] == 0, w["failures"]
    assert w["hosts"] == 128 and w["hosts_failed"] == 0, w["failures"]
    cut = r["link_cut"]  # both ends report the port down: the switches that routed over it are changed
    assert cut["switches_changed"] > 0 and cut["s"] is not None and cut["s"] < 5, cut
    assert cut["walk"]["tor_pairs_failed"] == 0, cut["walk"]["failures"]  # no pair lost, none over the dead link
    assert r["link_restored"]["switches_changed"] > 0, r["link_restored"]
    assert len(r["link_cuts"]) == 2 and r["link_cuts"][0]["link"] != r["link_cuts"][1]["link"], r["link_cuts"]
    for c in r["link_cuts"]:  # another pod's link, cut after the first came back: reprogrammed too
        assert c["switches_changed"] > 0 and c["s"] is not None and c["restored_switches_changed"] > 0, c
    rs = r["restart"]
    assert rs["s"] is not None and rs["changes"] == 0 and rs["switches_whose_tables_changed"] == 0, rs
    assert r["metrics_bytes"] > 0 and r["api_fabric_bytes"] > 0
    assert 0 < r["api_groups_bytes"] < r["api_fabric_bytes"] / 5 and 0 < r["api_group_bytes"] < r["api_fabric_bytes"] / 4
    v = r["view"]  # opened at #level=groups in Chromium: 8 pods, then pod 0 alone (its 4+4 switches, the
    # 16 cores, 16 hosts; 2*16 edge-agg, 2*16 agg-core and 2*16 host links)
    assert (v["tiles"], v["lines"], v["group"], v["group_lines"], v["group_nodes"]) == (8, 0, "pod0", 96, 40), v
    assert v["redraws_per_s"] >= 0.5, v
    st = r["steady"]
    assert st["flows_unrouted"] == 0 and st["ports"] == 80 * 8, st
    first = st["levels"][0]  # the product's defaults: counters every second, flow samples 1-in-10
    assert (first["counter_interval_s"], first["sampling"]) == (1.0, 10)
    for lv in st["levels"]:  # whatever was lost, nothing read was malformed or from an unknown port
        assert lv["decode_errors"] == 0 and lv["unmapped_samples"] == 0, lv
    ok = [lv for lv in st["levels"] if lv["sustained"]]
    assert ok, st["levels"]  # 80 switches' agents at some level the controller keeps up with
    # a level is sustained only as offered: the agents sent (nearly) every port's counters each interval
    assert all(lv["offered"] and 0.95 <= lv["offered_share"] <= 1.05 for lv in ok), ok
    assert ok[0]["received_datagrams"] >= 0.99 * ok[0]["sent"]["datagrams"] and ok[0]["periods"] >= 2, ok[0]
    assert ok[0]["elephants"] >= 50, ok[0]  # the load's 100 elephants (20% of a link each) seen by sampling
    hs = st["handshake"]  # 100 announces a second for 2 s, while the sustained sFlow load goes on
    assert hs["sent"] == 200 and hs["unanswered"] == 0 and hs["acks"] > 0, hs
    # they began once the levels before had stopped changing the controller, on a load already steady
    assert hs["settled"]["settled"] and hs["settled"]["elephants_left"] >= 0, hs["settled"]
    assert hs["warm_up_s"] >= hs["under"]["counter_interval_s"], hs
    # the sFlow workers (issue 63; one here): one SIGKILLed mid-level is seen gone, its links
    # stale meanwhile, a new one started and every link measured again within seconds; its counts kept
    det = st["detection"]  # unannounced elephants under that load: found by sampling and placed, each of them
    assert det["placed"] == det["of"] == 10 and det["median_s"] < 2.0, det
    wk = st["worker_killed"]
    assert wk["gone_s"] is not None and wk["gone_s"] < 2.0, wk
    assert wk["stale_links_max"] > 0 and wk["restarted_s"] < 5.0 and wk["measured_again_s"] < 8.0, wk
    after = wk["status_after"]
    assert after["restarts"] == wk["restarts_before"] + 1 and after["alive"] == after["workers"] >= 1, after
    assert after["stale_links"] == 0 and wk["level"]["received_datagrams"] > 0, wk


def test_a_controller_given_cpus_runs_there_with_its_sflow_workers_and_they_can_be_moved_apart(tmp_path):
    """``fabric-scale --cpus``: the controller started on a CPU runs there from its first thread on, and so do
    the sFlow workers it starts; the workers are then moved to another, the controller staying put."""
    import os
    import time

    from experiments.harness.procs import ControllerProcess
    from topology.fabric import fattree

    cpus = sorted(os.sched_getaffinity(0))
    fattree(4, 10.0).save(tmp_path / "f.json")
    with ControllerProcess(tmp_path / "f.json", extra=["--sflow-workers", "1"], cpus={cpus[0]}) as ctl:
        deadline = time.monotonic() + 20
        while "workers" not in (got := fabricscale.affinities(ctl.proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got["controller"] == [cpus[0]] and got["workers"] == [cpus[0]], got
        assert len(os.listdir(f"/proc/{ctl.proc.pid}/task")) > 1  # (every thread of it, not the first only)
        assert all(os.sched_getaffinity(int(t)) == {cpus[0]} for t in os.listdir(f"/proc/{ctl.proc.pid}/task"))
        assert len(fabricscale.pin_workers(ctl.proc.pid, {cpus[-1]})) == 1
        got = fabricscale.affinities(ctl.proc.pid)
        assert got["workers"] == [cpus[-1]] and got["controller"] == [cpus[0]], got
