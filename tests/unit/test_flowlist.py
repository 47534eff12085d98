"""Workloads as flow lists (pure): the CSV both engines read, the permutation, the mixed workload's list."""

import pytest

from experiments.engines.runner import mixed_workload
from experiments.workloads.flowlist import Flow, FlowListError, from_mixed, mix, permutation, read_csv, write_csv
from topology.fabric import fattree, leafspine

F = fattree(4, 10)
HOSTS = {h.name for h in F.hosts}


def test_a_csv_round_trips_and_the_kind_follows_the_size(tmp_path):
    p = tmp_path / "flows.csv"
    p.write_text("start_s,src,dst,bytes,announced\n0.5,h0_0_0,h2_0_1,20000,0\n1,h0_0_1,h3_1_0,5000000,yes\n")
    flows = read_csv(p, HOSTS)
    assert flows == [Flow(0.5, "h0_0_0", "h2_0_1", 20000, "rr", False), Flow(1.0, "h0_0_1", "h3_1_0", 5000000, "bulk", True)]
    write_csv(tmp_path / "again.csv", flows)
    assert read_csv(tmp_path / "again.csv", HOSTS) == flows


def test_ports_and_a_pace_are_read_and_round_trip(tmp_path):
    p = tmp_path / "flows.csv"
    p.write_text("start_s,src,dst,bytes,kind,stop_s,sport,dport,rate_mbps\n2,h0_0_1,h1_0_1,0,bulk,14,6300,5300,4\n")
    flows = read_csv(p, HOSTS)
    assert flows == [Flow(2.0, "h0_0_1", "h1_0_1", 0, "bulk", False, 14.0, 6300, 0, 5300, 4.0)]
    write_csv(tmp_path / "again.csv", flows)
    assert read_csv(tmp_path / "again.csv", HOSTS) == flows


@pytest.mark.parametrize("line,why", [
    ("0,h0_0_0,h9_9_9,100", "'h9_9_9' is not a host"),
    ("0,h0_0_0,h0_0_0,100", "source and destination are both h0_0_0"),
    ("x,h0_0_0,h2_0_1,100", "must be numbers"),
    ("0,h0_0_0,h2_0_1,100,maybe", "announced must be 0/1"),
    ("0,h0_0_0,h2_0_1,0", "needs a stop time"),
    ("1,h0_0_0,h2_0_1,0,,bulk,0.5", "stop_s must be after"),
    ("0,h0_0_0,h2_0_1,900,,rr,,,7000", "dport and rate_mbps are for bulk flows"),
    ("0,h0_0_0,h2_0_1,900,,bulk,,70000", "ports must be 0..65535"),
    ("0,h0_0_0,h2_0_1,900,,bulk,,,,fast", "must be numbers"),
])
def test_a_bad_line_is_refused_with_its_number(tmp_path, line, why):
    p = tmp_path / "flows.csv"
    p.write_text("start_s,src,dst,bytes,announced,kind,stop_s,sport,dport,rate_mbps\n0,h0_0_0,h2_0_1,100,0\n"
                 + line + "\n")
    with pytest.raises(FlowListError, match=f"line 3: .*{why}"):
        read_csv(p, HOSTS)


def test_a_csv_without_the_columns_is_refused(tmp_path):
    p = tmp_path / "flows.csv"
    p.write_text("when,from,to\n1,a,b\n")
    with pytest.raises(FlowListError, match="header must name"):
        read_csv(p, HOSTS)


@pytest.mark.parametrize("fabric", [fattree(4), fattree(6), leafspine(4, 4, 4)], ids=["k4", "k6", "leafspine"])
def test_a_permutation_sends_one_and_receives_one_flow_per_host_never_inside_a_pod(fabric):
    flows = permutation(fabric, 7, 25.0)
    group = {h.name: (fabric.switches[h.switch].pod if fabric.topo == "fattree" else h.switch) for h in fabric.hosts}
    assert sorted(f.src for f in flows) == sorted(h.name for h in fabric.hosts)
    assert sorted(f.dst for f in flows) == sorted(h.name for h in fabric.hosts)
    assert all(group[f.src] != group[f.dst] and f.kind == "bulk" and f.stop == 25.0 for f in flows)
    assert permutation(fabric, 7, 25.0) == flows and permutation(fabric, 8, 25.0) != flows  # seeded


def test_the_mixed_workload_as_a_flow_list_keeps_its_flows_and_timing():
    wl = mixed_workload(F, 10.0, 3, 0.1, "websearch", 100_000)
    flows = from_mixed(wl, F, announce=True)
    els = [f for f in flows if f.kind == "bulk"]
    assert [(f.src, f.dst) for f in els] == wl.elephants and all(f.announced and f.stop == 10.0 for f in els)
    mice = [f for f in flows if f.kind == "rr"]
    assert len(mice) == sum(len(v) for v in wl.mice.values()) and min(f.start for f in mice) >= 2.0
    m = mix(flows)
    assert m["mice"] == len(mice) and m["mice_share_of_flows"] == 1.0  # the elephants have no size
