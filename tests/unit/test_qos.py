"""The isolation queues kept by the controller through OVSDB (issue 15): what is wrong, and the repair."""

from ryu_apps.control import queue_keeper as qos
from topology import queues
from topology.fabric import fattree, scramble
from topology.queues import IsolationConfig

F = scramble(fattree(4, 10), 3)
CFG = IsolationConfig()


def _tables(ports):
    """OVSDB tables: ports = [(switch, ofport, qos)] with qos None, ('other', ...) or (max_rate, {n: (min, max, prio)})."""
    t = {"bridge": {"headings": ["datapath_id", "ports"], "data": []},
         "port": {"headings": ["_uuid", "name", "interfaces", "qos"], "data": []},
         "interface": {"headings": ["_uuid", "ofport"], "data": []},
         "qos": {"headings": ["_uuid", "type", "other_config", "queues", "external_ids"], "data": []},
         "queue": {"headings": ["_uuid", "other_config"], "data": []}}
    by_sw = {}
    for n, (sw, ofport, spec) in enumerate(ports):
        t["interface"]["data"].append([["uuid", f"i{n}"], ofport])
        qref = ["set", []]
        if spec is not None:
            qref = ["uuid", f"q{n}"]
            if spec[0] == "other":
                t["qos"]["data"].append([["uuid", f"q{n}"], "linux-hfsc", ["map", []], ["map", []], ["map", []]])
            else:
                rate, qs = spec
                qmap = []
                for i, (lo, hi, pr) in qs.items():
                    t["queue"]["data"].append([["uuid", f"u{n}_{i}"], ["map", [["min-rate", str(lo)], ["max-rate", str(hi)],
                                                                                ["priority", str(pr)]]]])
                    qmap.append([i, ["uuid", f"u{n}_{i}"]])
                t["qos"]["data"].append([["uuid", f"q{n}"], "linux-htb", ["map", [["max-rate", str(rate)]]],
                                         ["map", qmap], ["map", [["freeway", "1"]]]])
        t["port"]["data"].append([["uuid", f"p{n}"], f"{sw}-x{ofport}", ["uuid", f"i{n}"], qref])
        by_sw.setdefault(sw, []).append(["uuid", f"p{n}"])
    for sw, refs in by_sw.items():
        t["bridge"]["data"].append(["%016x" % F.switches[sw].dpid, ["set", refs]])
    return t


def _good(sw, port):
    w = queues.desired(F, CFG)[(sw, port)]
    return (w.max_rate, {i: (s.min_rate, s.max_rate, s.priority) for i, s in w.queues})


def test_every_switch_port_wants_its_link_speed_and_the_two_queues():
    want = queues.desired(F, CFG)
    assert len(want) == 20 * 4
    up = F.port_to("e0_0", "a0_0")
    assert want[("e0_0", up)] == queues.PortQos(10_000_000, ((0, queues.QueueSpec(10_000_000, 10_000_000, 0)),
                                                          (1, queues.QueueSpec(12_000, 10_000_000, 1))))


def test_what_is_missing_or_different_is_named_and_only_that_is_repaired():
    e = F.switches["e0_0"]
    ports = sorted(p for (sw, p) in queues.desired(F, CFG) if sw == "e0_0")
    rate, qs = _good("e0_0", ports[0])
    rows = [("e0_0", ports[0], (rate, qs)),  # right
            ("e0_0", ports[1], None),  # no QoS at all
            ("e0_0", ports[2], (rate, {0: qs[0]})),  # the elephants' queue gone
            ("e0_0", ports[3], (rate, {0: qs[0], 1: (12_000, 5_000_000, 1)}))]  # a queue changed
    have = queues.held(F, _tables(rows))
    assert set(have) == {("e0_0", p) for p in ports} and e.name == "e0_0"
    wrong = qos.plan(queues.desired(F, CFG), have)
    assert wrong == [(("e0_0", ports[1]), "no QoS record"), (("e0_0", ports[2]), "queue 1 missing"),
                     (("e0_0", ports[3]), "queue 1 is QueueSpec(min_rate=12000, max_rate=5000000, priority=1), "
                                          "want QueueSpec(min_rate=12000, max_rate=10000000, priority=1)")]
    args = qos.repair_args(queues.desired(F, CFG), have, [k for k, _ in wrong])
    assert args.count("create") == 3 * 3  # a QoS and two queues for each wrong port, nothing for the right one
    assert "p0" not in args and {"p1", "p2", "p3"} <= set(args)
    assert ["--if-exists", "destroy", "qos", "q2"] == args[args.index("q2") - 3:args.index("q2") + 1]
    assert "other-config:max-rate=10000000" in args


def test_a_qos_of_another_kind_is_replaced_but_not_destroyed_and_other_switches_are_not_judged():
    port = F.port_to("a1_0", "c1")
    have = queues.held(F, _tables([("a1_0", port, ("other",))]))
    assert qos.plan(queues.desired(F, CFG), have) == [(("a1_0", port), "a QoS record that is not linux-htb")]
    args = qos.repair_args(queues.desired(F, CFG), have, [("a1_0", port)])
    assert "destroy" not in args  # not ours: left for its owner


def test_a_slower_link_gets_its_own_rate():
    from dataclasses import replace

    from topology.fabric import Fabric

    links = [replace(ln, capacity_mbps=1.0) if {ln.a, ln.b} == {"e0_0", "a0_0"} else ln for ln in F.links]
    f = Fabric(F.topo, F.params, F.link_rate_mbps, F.switches, links, F.hosts)
    want = queues.desired(f, CFG)
    assert want[("e0_0", f.port_to("e0_0", "a0_0"))].max_rate == 1_000_000
    assert want[("a0_0", f.port_to("a0_0", "e0_0"))].queues[1][1].max_rate == 1_000_000


def test_a_shared_qos_record_is_not_destroyed_when_one_of_its_ports_is_repaired():
    ports = sorted(p for (sw, p) in queues.desired(F, CFG) if sw == "e0_0")
    t = _tables([("e0_0", ports[0], (1_000_000, {0: (12_000, 1_000_000, 0)})), ("e0_0", ports[1], None)])
    t["port"]["data"][1][3] = ["uuid", "q0"]  # the second port points at the first one's record
    have = queues.held(F, t)
    assert have[("e0_0", ports[0])].owned == () and have[("e0_0", ports[1])].owned == ()
    args = qos.repair_args(queues.desired(F, CFG), have, [("e0_0", ports[0]), ("e0_0", ports[1])])
    assert "destroy" not in args


def test_one_database_away_does_not_stop_the_others(monkeypatch):
    def read(db, timeout=10):
        if db == "tcp:192.0.2.9:6640":
            raise RuntimeError("ovs-vsctl list bridge: database connection failed")
        return _tables([(sw, p, _good(sw, p)) for (sw, p) in queues.desired(F, CFG)])

    monkeypatch.setattr(qos, "read", read)
    done, errors, seen = qos.keep(F, CFG, ["tcp:192.0.2.9:6640", None])
    assert len(seen) == 80 and done == [] and errors == ["tcp:192.0.2.9:6640: ovs-vsctl list bridge: database connection failed"]
    monkeypatch.setattr(qos, "read", lambda db, timeout=10: _tables([("e0_0", p, _good("e0_0", p))
                                                                      for (sw, p) in queues.desired(F, CFG) if sw == "e0_0"]))
    done, errors, seen = qos.keep(F, CFG, [None])
    assert done == [] and len(errors) == 1 and errors[0].startswith("no OVSDB holds switches ")
    done, errors, seen = qos.keep(F, CFG, [None], only={"e0_0"})  # only the connected switches are judged
    assert done == [] and errors == [] and {sw for sw, _ in seen} == {"e0_0"}
