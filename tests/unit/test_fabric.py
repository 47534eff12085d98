"""The fabric description: construction, addressing, validation, round trip."""

import copy
import json

import networkx as nx
import pytest

from topology.fabric import Fabric, FabricError, fattree, leafspine, make_dpid
from topology.model import to_networkx


@pytest.mark.parametrize("k", [4, 6, 8])
def test_fattree_sizes(k):
    f = fattree(k)
    roles = [s.role for s in f.switches.values()]
    assert roles.count("core") == k * k // 4
    assert roles.count("agg") == roles.count("edge") == k * k // 2
    assert len(f.hosts) == k ** 3 // 4
    # every switch uses exactly k ports
    ports = {}
    for ln in f.links:
        ports.setdefault(ln.a, set()).add(ln.a_port)
        ports.setdefault(ln.b, set()).add(ln.b_port)
    for h in f.hosts:
        ports.setdefault(h.switch, set()).add(h.port)
    assert all(p == set(range(1, k + 1)) for p in ports.values())


def test_fattree_addressing_and_dpids():
    f = fattree(4)
    h = next(h for h in f.hosts if h.name == "h2_1_0")
    assert (h.ip, h.switch, h.port, h.mac) == ("10.2.1.2", "e2_1", 1, "02:00:0a:02:01:02")
    assert f.switches["a3_1"].dpid == make_dpid("agg", 3, 1) == 0x0002000003000001
    assert f.switch_by_dpid(0x0001000000000004).name == "c4"
    # aggregation j connects to cores j*k/2+1 .. (j+1)*k/2
    assert f.up_neighbors("a1_1") == ["c3", "c4"]
    assert f.down_neighbors("c3") == [f"a{p}_1" for p in range(4)]


def test_hosts_below():
    f = fattree(4)
    assert {h.name for h in f.hosts_below("a2_0")} == {f"h2_{e}_{x}" for e in range(2) for x in range(2)}
    assert len(f.hosts_below("c1")) == 16


def test_leafspine():
    f = leafspine(2, 4, 3)
    assert sorted(s.name for s in f.switches.values()) == ["l0", "l1", "l2", "l3", "s1", "s2"]
    assert len(f.hosts) == 12
    assert f.port_to("l2", "s2") == 5 and f.port_to("s2", "l2") == 3


def test_capacity_of_every_directed_link():
    """A switch link at its description's capacity both ways; an access link at its host's own speed when the
    description gives one, else the fabric's rate, both ways; a pair the fabric does not have at the fabric's rate."""
    d = fattree(4, 100).to_dict()
    d["links"][0]["capacity_mbps"] = 40
    d["hosts"][0]["capacity_mbps"] = 25
    f = Fabric.from_dict(d)
    ln, h, other = f.links[0], f.hosts[0], f.hosts[1]
    assert f.capacity_bps((ln.a, ln.b)) == f.capacity_bps((ln.b, ln.a)) == 40e6
    assert f.capacity_bps((h.name, h.switch)) == f.capacity_bps((h.switch, h.name)) == 25e6
    assert f.capacity_bps((other.name, other.switch)) == f.capacity_bps((other.switch, other.name)) == 100e6
    assert f.capacity_bps((f.links[1].a, f.links[1].b)) == 100e6
    assert f.capacity_bps(("nowhere", "nothing")) == 100e6


@pytest.mark.parametrize("topo", [fattree(4), leafspine(2, 4, 2)])
def test_round_trip(topo, tmp_path):
    p = tmp_path / "f.json"
    topo.save(p)
    g = Fabric.load(p)
    assert g.to_dict() == topo.to_dict()


def test_networkx_model():
    g = to_networkx(fattree(4))
    assert g.number_of_nodes() == 36 and nx.is_connected(g)
    assert g.edges["e0_0", "a0_1"]["ports"] == {"e0_0": 4, "a0_1": 1}
    assert g.nodes["h0_0_0"]["kind"] == "host"


def _desc():
    return fattree(4).to_dict()


def _broken(mutate):
    d = copy.deepcopy(_desc())
    mutate(d)
    return d


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.pop("links"), "missing key 'links'"),
    (lambda d: d["switches"][0].pop("dpid"), "switches[0]: missing key 'dpid'"),
    (lambda d: d["params"].update(k=5), "k: a fat-tree needs an even k >= 4, got 5"),
    (lambda d: d["links"][0].update(b="nowhere"), "switch 'nowhere' is not in the description"),
    (lambda d: d["hosts"][1].update(ip=d["hosts"][0]["ip"]), "duplicate ip 10.0.0.2"),
    (lambda d: d["hosts"][1].update(mac=d["hosts"][0]["mac"]), "duplicate mac"),
    (lambda d: d["hosts"][0].update(port=3), "port 3 on e0_0 already used"),
    (lambda d: d["hosts"][0].update(switch="c1", port=99), "not a ToR"),
    (lambda d: d["switches"][1].update(dpid=d["switches"][0]["dpid"]), "already used by c1"),
    (lambda d: d["switches"][0].update(role="router"), "unknown role 'router'"),
    (lambda d: d["links"][0].update(capacity_mbps=0), "capacity_mbps must be positive"),
    (lambda d: d["links"][0].update(a_port="3"), "links[0].a_port: wrong type str"),
    (lambda d: d["hosts"][0].update(ip="10.0.0.300"), "is not an IPv4 address"),
    (lambda d: d["hosts"][0].update(colour="red"), "unknown key 'colour'"),
    (lambda d: d.update(version=9), "unsupported description version 9"),
    (lambda d: d.update(topo="torus"), "unknown topology 'torus'"),
])
def test_invalid_descriptions_name_the_problem(mutate, needle):
    with pytest.raises(FabricError) as e:
        Fabric.from_dict(_broken(mutate))
    assert needle in str(e.value)


def test_load_errors(tmp_path):
    with pytest.raises(FabricError, match="cannot read fabric description"):
        Fabric.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(FabricError, match="not valid JSON"):
        Fabric.load(bad)
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(FabricError, match="top level must be a JSON object"):
        Fabric.load(bad)


@pytest.mark.parametrize("k", [3, 2, 0, "4", True])
def test_bad_k(k):
    with pytest.raises(FabricError, match="k: a fat-tree needs an even k"):
        fattree(k)


def test_bad_leafspine():
    with pytest.raises(FabricError, match="leaves: must be an integer in 2..254"):
        leafspine(2, 1, 2)


def test_neighbour_limits_hold_every_hosts_arp_entries():
    from topology.builder import neighbour_limits

    assert neighbour_limits(16) == (4096, 8192, 16384)  # Mininet's own values suffice for k=4
    t1, t2, t3 = neighbour_limits(128)  # k=8: 16,256 entries after a full ping sweep
    assert t1 >= 128 * 127 and t1 < t2 < t3


class _Host:
    def __init__(self, name, runs):
        self.name, self.runs, self.cmds = name, runs, []

    def cmd(self, c):
        self.cmds.append(c)
        return self.runs + "\n"


def test_congestion_control_is_set_in_every_host_and_read_back():
    from topology.builder import set_congestion_control

    hosts = [_Host("h0", "reno"), _Host("h1", "reno")]
    assert set_congestion_control(hosts, "newreno") == "newreno"  # ns-3's name, Linux's reno
    assert all("tcp_congestion_control=reno" in h.cmds[0] for h in hosts)


def test_a_host_that_keeps_another_congestion_control_is_named():
    from topology.builder import BuildError, set_congestion_control

    with pytest.raises(BuildError, match="h1 runs 'bbr', not 'cubic'"):
        set_congestion_control([_Host("h0", "cubic"), _Host("h1", "bbr")], "cubic")
    with pytest.raises(BuildError, match="not a congestion control"):
        set_congestion_control([_Host("h0", "cubic")], "cubic; reboot")
    assert set_congestion_control([_Host("h0", "bbr")], None) == "bbr"  # left as the machine has it


def test_the_controller_raises_its_open_file_limit_to_the_hard_limit():
    import resource

    from ryu_apps.launcher import raise_fd_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        now = raise_fd_limit()
        assert now == resource.getrlimit(resource.RLIMIT_NOFILE)
        assert now[0] == hard or hard == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
