"""OpenFlow plans for EFM and Hedera: pinning order, cookies, rollback, the Hedera punt and edge entries."""

from monitoring.sflow import FiveTuple
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import SEND_FLOW_REM, DeleteFlows, Flow, ToController, ToGroup
from ryu_apps.programs import hedera_edges, pins
from topology.fabric import fattree

F = fattree(4, 10)
FLOW = FiveTuple("10.0.0.2", "10.2.0.2", 6, 40001, 5001)
PATH = ("e0_0", "a0_0", "c2", "a2_0", "e2_0")


def test_pin_is_make_before_break():
    install, after, rollback, cookie = pins.pin(F, PATH, FLOW, pipeline.EFM, 7, 1, 10, old_cookie=123)
    assert [sw for sw, _ in install] == ["e2_0", "a2_0", "c2", "a0_0", "e0_0"]  # egress side first
    flows = [f for _, fs in install for f in fs]
    assert all(isinstance(f, Flow) and f.cookie == cookie and f.priority == 500 for f in flows)
    assert flows[-1].flags == SEND_FLOW_REM and all(f.flags == 0 for f in flows[:-1])
    assert cookie >> 56 == pipeline.EFM.owner
    assert {sw for sw, _ in after} == set(F.switches) and after[0][1] == [DeleteFlows(123)]
    assert rollback == [(sw, [DeleteFlows(cookie)]) for sw in ["e2_0", "a2_0", "c2", "a0_0", "e0_0"]]
    _, after2, _, cookie2 = pins.pin(F, PATH, FLOW, pipeline.EFM, 7, 2, 10, old_cookie=cookie)
    assert cookie2 != cookie and after2[0][1] == [DeleteFlows(cookie)]
    assert pins.pin(F, PATH, FLOW, pipeline.EFM, 7, 0, 10)[1] == []  # nothing to remove the first time


def test_hedera_punt_only_at_tors_and_edge_entry_uses_ecmp():
    punts = hedera_edges.hedera_edge_flows(F, "e1_1")  # one per host port, through that host's punt meter
    assert [dict(p.match) for p in punts] == [{"eth_type": 0x0800, "ip_proto": 6, "in_port": h.port}
                                              for h in F.hosts_on("e1_1")]
    assert all(p.priority == hedera_edges.PRIO_HEDERA_PUNT and p.actions == (ToController(128),) for p in punts)
    assert [p.meter_id for p in punts] == [2 + h.port for h in F.hosts_on("e1_1")]
    assert hedera_edges.hedera_edge_flows(F, "a1_1") == [] and hedera_edges.hedera_edge_flows(F, "c1") == []
    e = hedera_edges.hedera_edge_entry(FLOW, 9, 10)
    assert e.priority == hedera_edges.PRIO_HEDERA_EDGE and e.actions == (ToGroup(1),) and e.idle_timeout == 10
    assert dict(e.match)["tcp_src"] == 40001 and e.cookie >> 56 == pipeline.HEDERA.owner
    # below the host routes (300) and the schemes' pinned entries (500), above ECMP (10)
    assert 10 < hedera_edges.PRIO_HEDERA_PUNT < 300 < hedera_edges.PRIO_HEDERA_EDGE < 500
