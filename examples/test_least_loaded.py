"""The example plug-in mode (examples/least-loaded, installed by make install), run through its entry point
alone: Freeway is not edited to know it. On ns-3 (``ns3_fabric``) and on Open vSwitch (``ovs_fabric``)."""

import pytest

from experiments.workloads.flowlist import Flow


@pytest.mark.fabric("fattree", k=4, rate_mbps=10)
def test_the_plugin_mode_moves_colliding_elephants_apart_on_ns3(ns3_fabric):
    pytest.importorskip("freeway_least_loaded", reason="the example mode is not installed (make install)")
    # four elephants from two ToRs to two others: under ECMP some share an uplink; once sFlow sees them the
    # mode pins each on the path whose busiest link is least busy
    flows = [Flow(0.0, s, d, 0, "bulk", False, 6.0) for s, d in
             (("h0_0_0", "h2_0_0"), ("h0_0_1", "h2_0_1"), ("h1_0_0", "h3_0_0"), ("h1_0_1", "h3_0_1"))]
    res = ns3_fabric("least-loaded", flows)
    placed = [e for e in res["events"] if e.get("type") == "placement" and e.get("how") == "least-loaded"]
    assert len(placed) >= 2, [e for e in res["events"] if e.get("type") == "placement"]
    assert sum(e["goodput_mbps"] for e in res["elephants"]) >= 0.8 * 4 * 10 * 0.75  # most of what four can get


@pytest.mark.fabric("fattree", k=4)
def test_the_plugin_mode_runs_a_fabric_of_open_vswitch(controller, ovs_fabric):
    pytest.importorskip("freeway_least_loaded", reason="the example mode is not installed (make install)")
    ctl = controller.freeway("least-loaded")
    fn = ovs_fabric(ctl.address)
    took, missing = fn.wait_reachable(60)
    assert not missing, missing[:5]
