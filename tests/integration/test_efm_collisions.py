"""EFM on a real 10 Mbit/s k=4 fat-tree: the paper's upstream and downstream collisions, against ECMP
in the same test run (the controller is restarted in the other mode on the same fabric)."""

import time
from pathlib import Path

import pytest

from experiments.harness.procs import ControllerProcess
from experiments.workloads import collisions
from tests.integration.conftest import start_fabric
from topology.builder import ofctl
from topology.fabric import fattree

SIZE = 6_000_000


@pytest.fixture(scope="module")
def fabric_and_ports(tmp_path_factory):
    """One fabric; each test run restarts the controller on the same ports in the mode it compares."""
    fn, ctl = start_fabric(tmp_path_factory, "efm", fattree(4, 10))
    ctl.stop()
    try:
        yield fn, Path(ctl.fabric_file).parent, ctl.port, ctl.sflow_port
    finally:
        fn.stop()


def _run(fabric_and_ports, mode, test_no, connected=20):
    fn, d, port, sflow_port = fabric_and_ports
    for sw in fn.fabric.switches:  # each run starts from empty switches: a restarted controller keeps the
        ofctl("del-flows", sw)     # previous one's pins (hitless restart), which would pre-empt this run's
        ofctl("del-groups", sw)
    with ControllerProcess(d / "fabric.json", port=port, sflow_port=sflow_port, mode=mode,
                           events_file=d / f"{mode}-{test_no}.jsonl", log_file=d / f"{mode}-{test_no}.log") as ctl:
        ctl.wait_programmed(connected)
        fn.wait_reachable(30)
        time.sleep(2)  # the monitor has its ifIndex map and a first counter sample
        flows = collisions.steer(fn.fabric, collisions.TESTS[test_no][1])
        res = collisions.run(fn, flows, SIZE)
        collisions.unsteer(fn.fabric)
        moves = [e for e in ctl.events(("reroute",))]
        return res, moves, ctl.log_text()


@pytest.mark.parametrize("test_no", [1, 3], ids=["upstream", "downstream"])
def test_efm_moves_a_colliding_elephant_and_beats_ecmp(fabric_and_ports, test_no):
    ecmp, moves0, _ = _run(fabric_and_ports, "ecmp", test_no)
    efm, moves, log = _run(fabric_and_ports, "efm-biggest", test_no)
    agg = {"ecmp": collisions.aggregate_mbps(ecmp), "efm": collisions.aggregate_mbps(efm)}
    assert moves0 == []
    assert moves, log[-3000:]
    # the collision's core link carries all three flows; the edge link two of them share (F2 and F3 up from e0_1,
    # F1 and F3 down into e2_0) carries two thirds of a link at a fair share, and over EFM's 70% whenever TCP
    # shares unevenly: EFM moves off whichever it measures over first (a full run of `make test` once saw the
    # edge link first), and either move takes the flow off the core link
    hot, shared = ("a0_0>c1", "e0_1>a0_0") if test_no == 1 else ("c1>a2_0", "a2_0>e2_0")
    assert moves[0]["link"] in (hot, shared), moves
    core_link = tuple(hot.split(">"))
    assert not any(core_link == tuple(p[i:i + 2]) for p in moves[0]["paths"] for i in range(len(p) - 1)), moves
    assert moves[0]["wall"] - efm["_start_wall"] < 6.0  # within a few 1 s sampling periods
    assert 0 < agg["ecmp"] < 10.5, (agg, ecmp)  # three flows squeezed through one 10 Mbit/s link
    assert agg["efm"] > 1.25 * agg["ecmp"], (agg, ecmp, efm)  # seen: 13.8-23.1 against 9.51-9.55


def test_a_reroute_through_a_missing_switch_is_rolled_back(fabric_and_ports):
    """c2 loses its controller: EFM's first choice (via c2) cannot be installed; the entries already sent to
    the other hops are removed again, the controller keeps going, and every flow completes."""
    import subprocess

    from topology.builder import ofctl

    fn, d, port, sflow_port = fabric_and_ports
    subprocess.run(["ovs-vsctl", "del-controller", "c2"], check=True)
    try:
        res, moves, log = _run(fabric_and_ports, "efm-biggest", 1, connected=19)
    finally:
        subprocess.run(["ovs-vsctl", "set-controller", "c2", f"tcp:127.0.0.1:{port}"], check=True)
    assert "rolled back: switch c2 is not connected" in log, log[-3000:]
    assert all(v["goodput_mbps"] > 0 for k, v in res.items() if k.startswith("F"))
    # nothing half-installed is left behind on the egress side of the refused path
    leftovers = [ln for ln in ofctl("dump-flows", "a2_0").splitlines() if "priority=500" in ln and "n_packets=0" in ln]
    assert leftovers == [], leftovers


def test_hedera_places_the_colliding_flows_on_different_cores(fabric_and_ports):
    import re

    res, _, log = _run(fabric_and_ports, "hedera", 1)
    placed = re.findall(r"hedera: (\S+) is large \(demand [\d.]+ Mbit/s\): placed on (\S+)", log)
    cores = {path.split("-")[2] for _, path in placed}
    assert len(placed) >= 3 and len(cores) == 3, log[-2000:]  # Global First Fit: one flow per core
    assert all(v["goodput_mbps"] > 0 for k, v in res.items() if k.startswith("F"))
