"""Switches on many hosts (issue 15): sFlow samples identified by agent and ifIndex, mapped per agent."""

import pytest

from monitoring import portmap
from monitoring.collector import Collector
from monitoring.estimator import Estimator, MonitorConfig
from ryu_apps.simswitch import sflow as enc
from topology.fabric import fattree

F = fattree(4, 10)


def _tables(bridges):
    """OVSDB tables as ``ovs-vsctl --format=json list`` gives them: bridges (name, dpid, agent or None, ports)."""
    t = {"bridge": {"headings": ["name", "datapath_id", "ports", "sflow"], "data": []},
         "port": {"headings": ["_uuid", "name", "interfaces"], "data": []},
         "interface": {"headings": ["_uuid", "name", "ifindex", "ofport"], "data": []},
         "sflow": {"headings": ["_uuid", "agent"], "data": []}}
    for name, dpid, agent, ports in bridges:
        sf = ["set", []]
        if agent is not None:
            t["sflow"]["data"].append([["uuid", f"sf-{name}"], agent])
            sf = ["uuid", f"sf-{name}"]
        pids = []
        for ofport, ifindex in ports:
            t["port"]["data"].append([["uuid", f"p-{name}-{ofport}"], f"{name}-eth{ofport}",
                                      ["uuid", f"i-{name}-{ofport}"]])
            t["interface"]["data"].append([["uuid", f"i-{name}-{ofport}"], f"{name}-eth{ofport}", ifindex, ofport])
            pids.append(["uuid", f"p-{name}-{ofport}"])
        t["bridge"]["data"].append([name, "%016x" % dpid, ["set", pids], sf])
    return t


def test_each_bridges_agent_comes_from_its_sflow_record_or_the_endpoint():
    d = {n: F.switches[n].dpid for n in ("e0_0", "a0_0", "c1")}
    t = _tables([("e0_0", d["e0_0"], "192.0.2.1", [(3, 7)]), ("a0_0", d["a0_0"], "eth0", [(1, 7)]),
                 ("c1", d["c1"], None, [(1, 8)])])
    assert portmap.bridge_agents(t) == {d["e0_0"]: "192.0.2.1", d["a0_0"]: None, d["c1"]: None}
    assert portmap.bridge_agents(t, "198.51.100.7") == {d["e0_0"]: "192.0.2.1", d["a0_0"]: "198.51.100.7",
                                                         d["c1"]: "198.51.100.7"}
    assert portmap.endpoint_host("tcp:198.51.100.7:6640") == "198.51.100.7"
    assert portmap.endpoint_host("tcp:localhost:6640") == "127.0.0.1"  # a name: its address
    assert portmap.endpoint_host("unix:/run/openvswitch/db.sock") is None and portmap.endpoint_host(None) is None
    assert portmap.parse_endpoints("") == [None]
    assert portmap.parse_endpoints("tcp:10.9.0.1:6640, tcp:10.9.0.2:6640") == ["tcp:10.9.0.1:6640", "tcp:10.9.0.2:6640"]
    m = portmap.agent_map(F, t, "tcp:198.51.100.7:6640")
    assert m == {("192.0.2.1", 7): ("e0_0", 3), ("198.51.100.7", 7): ("a0_0", 1), ("198.51.100.7", 8): ("c1", 1)}


def test_the_same_ifindex_at_two_agents_is_two_ports():
    """Two switch hosts both number a port 7: only the agent tells e0_0's uplink from a0_0's downlink."""
    est = Estimator(F, MonitorConfig(ewma_alpha=1.0))
    est.set_ifmap({("192.0.2.1", 7): ("e0_0", F.port_to("e0_0", "a0_0")),
                   ("192.0.2.2", 7): ("a0_0", F.port_to("a0_0", "e0_0"))})
    col = Collector(est)
    for t, octets in ((0.0, 0), (1.0, 500_000)):
        col.handle(t, enc.datagram([enc.counter_sample([enc.if_counters(7, out_octets=octets)])], agent="192.0.2.1"))
        col.handle(t, enc.datagram([enc.counter_sample([enc.if_counters(7, out_octets=2 * octets)])], agent="192.0.2.2"))
    assert est.link_bps[("e0_0", "a0_0")] == pytest.approx(4e6)
    assert est.link_bps[("a0_0", "e0_0")] == pytest.approx(8e6)
    assert est.agents == {"192.0.2.1", "192.0.2.2"}


def test_a_datagram_from_an_agent_not_in_the_fabric_is_counted_and_changes_nothing():
    """Every switch exports under its own address: a third address is no switch of the fabric (spoofed or
    misdirected), so its counters and samples are dropped before they reach a link (issue 40)."""
    est = Estimator(F, MonitorConfig(ewma_alpha=1.0))
    up = F.port_to("e0_0", "a0_0")
    est.set_ifmap({("192.0.2.1", 7): ("e0_0", up), ("192.0.2.2", 7): ("a0_0", F.port_to("a0_0", "e0_0"))})
    col = Collector(est)
    for t, octets in ((0.0, 0), (1.0, 100_000)):
        col.handle(t, enc.datagram([enc.counter_sample([enc.if_counters(7, out_octets=octets)])], agent="192.0.2.1"))
    load = est.link_bps[("e0_0", "a0_0")]
    forged = enc.datagram([enc.counter_sample([enc.if_counters(7, out_octets=10**12)])],
                          agent="192.0.2.3")
    assert col.handle(2.0, forged) == [] and col.handle(2.1, forged) == []
    assert col.stats["unknown_agent"] == 2 and col.stats["datagrams"] == 2
    assert est.link_bps[("e0_0", "a0_0")] == load and "192.0.2.3" not in est.agents
    assert est.knows_agent("192.0.2.1") and not est.knows_agent("192.0.2.3")
    est.set_ifmap({7: ("c1", 1), ("192.0.2.1", 7): ("e0_0", up)})  # one host's map holds for any agent: all pass
    assert est.knows_agent("192.0.2.3")


def test_a_map_for_any_agent_still_serves_one_host_and_an_agents_own_entry_wins():
    est = Estimator(F, MonitorConfig(ewma_alpha=1.0))
    est.set_ifmap({7: ("c1", 1), 8: ("c2", 1), ("192.0.2.1", 7): ("e0_0", 3)})
    assert est.locate("127.0.0.1", 7) == ("c1", 1)
    assert est.locate("192.0.2.1", 7) == ("e0_0", 3)
    assert est.locate("192.0.2.1", 8) is None  # an agent with a map of its own is never read in another's
    assert est.locate(None, 9) is None


def test_a_decoder_bug_drops_the_datagram_and_counts_it_and_the_next_is_read(monkeypatch):
    """A datagram the decoder cannot handle (an exception other than SFlowDecodeError, as a header under
    14 bytes once raised) is counted as a decode error; the collector goes on with the next one."""
    import monitoring.collector as collector

    est = Estimator(F, MonitorConfig(ewma_alpha=1.0))
    col = Collector(est)
    good = enc.datagram([enc.counter_sample([enc.if_counters(7, out_octets=0)])])
    real = collector.decode_datagram
    monkeypatch.setattr(collector, "decode_datagram",
                        lambda d, **kw: (_ for _ in ()).throw(ValueError("not enough values")) if d == b"bug" else real(d, **kw))
    assert col.handle(0.0, b"bug") == []
    assert col.stats["decode_errors"] == 1 and "ValueError" in col.last_error
    col.handle(0.1, good)
    assert col.stats["datagrams"] == 1 and col.stats["counter_samples"] == 1


def test_spoofed_agent_addresses_under_a_map_for_any_agent_are_not_kept_without_bound():
    """With one host's map (it holds for any agent) every source address passes the agent check; the
    addresses kept as seen are those whose ifIndex the map knows, and at most one per switch and
    AGENTS_SLACK more, whatever is sent."""
    from monitoring.estimator import AGENTS_SLACK

    est = Estimator(F, MonitorConfig(ewma_alpha=1.0))
    est.set_ifmap({7: ("e0_0", F.port_to("e0_0", "a0_0"))})
    col = Collector(est)
    col.handle(0.0, enc.datagram([enc.counter_sample([enc.if_counters(7, out_octets=0)])], agent="192.0.2.1"))
    for i in range(3000):  # an unknown ifIndex: no address kept
        col.handle(0.5, enc.datagram([enc.counter_sample([enc.if_counters(9, out_octets=0)])],
                                     agent=f"198.51.{i // 256}.{i % 256}"))
    assert est.agents == {"192.0.2.1"}
    for i in range(3000):
        col.handle(1.0, enc.datagram([enc.counter_sample([enc.if_counters(7, out_octets=0)])],
                                     agent=f"203.0.{i // 256}.{i % 256}"))
    assert len(est.agents) == len(F.switches) + AGENTS_SLACK and "192.0.2.1" in est.agents


def test_a_datagram_must_come_from_the_agent_it_names():
    """Issue 60: the agent filter read the address written inside the datagram, never where it came from.
    Bound to the UDP source (``sflow_sources`` agent, the default), a datagram naming a switch's agent from
    any other address is counted and dropped; a fabric emulated on this host (agents and sources on
    loopback) still passes, and ``any`` takes every source (a relay)."""
    from monitoring.collector import Collector, source_matches

    assert source_matches("192.0.2.7", "192.0.2.7") and source_matches("127.0.1.3", "127.0.0.1")
    assert not source_matches("192.0.2.7", "192.0.2.8") and not source_matches("192.0.2.7", "127.0.0.1")
    assert not source_matches("127.0.1.3", "192.0.2.8")
    est = Estimator(F)
    est.set_ifmap({("192.0.2.7", 5): ("e0_0", F.port_to("e0_0", "a0_0"))})
    dg = enc.datagram([enc.counter_sample([enc.if_counters(5, out_octets=1000)])], agent="192.0.2.7")
    col = Collector(est)
    assert col.handle(1.0, dg, source="198.51.100.9") == [] and col.stats["agent_not_source"] == 1
    assert col.stats["counter_samples"] == 0
    col.handle(1.0, dg, source="192.0.2.7")
    assert col.stats["counter_samples"] == 1
    relay = Collector(est, "any")
    relay.handle(2.0, dg, source="198.51.100.9")
    assert relay.stats["counter_samples"] == 1 and relay.stats["agent_not_source"] == 0
