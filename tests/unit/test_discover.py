"""Discovery (issue 15): Clos roles from the graph alone, the same description back, and clear refusals."""

import pytest

from topology.discover import DiscoverError, Observed, differences, infer
from topology.fabric import fattree, leafspine, scramble


def observe(fabric, speed=10.0):
    """What discovery would see of a running fabric: every port's speed, every probe both ways, every host."""
    obs = Observed()
    for sw in fabric.switches.values():
        obs.switches[sw.dpid] = {}
    d = {sw.name: sw.dpid for sw in fabric.switches.values()}
    for ln in fabric.links:
        a, b = (d[ln.a], ln.a_port), (d[ln.b], ln.b_port)
        obs.heard |= {(a, b), (b, a)}
        obs.switches[a[0]][a[1]] = obs.switches[b[0]][b[1]] = speed
    for h in fabric.hosts:
        obs.switches[d[h.switch]][h.port] = speed
        obs.host_seen(h.mac, h.ip, d[h.switch], h.port)
    return obs


@pytest.mark.parametrize("make", [lambda: fattree(4), lambda: fattree(6), lambda: fattree(8), lambda: leafspine(2, 4, 2),
                                  lambda: leafspine(4, 6, 3), lambda: scramble(fattree(4), 1),
                                  lambda: scramble(fattree(6), 2), lambda: scramble(leafspine(3, 5, 2), 3)])
def test_the_description_comes_back_from_what_the_fabric_shows(make):
    truth = make()
    found = infer(observe(truth))
    assert differences(truth, found) == []
    wrong = infer(observe(scramble(truth, 99)))  # another fabric of the same shape: every dpid differs
    assert differences(truth, wrong) != []


def test_names_follow_datapath_ids_so_the_same_fabric_always_reads_the_same():
    import random

    truth = scramble(fattree(4), 5)
    a = infer(observe(truth))
    shuffled = Observed()  # the same observations, arriving in another order
    ref = observe(truth)
    rng = random.Random(4)
    for d in rng.sample(sorted(ref.switches), len(ref.switches)):
        shuffled.switches[d] = ref.switches[d]
    shuffled.heard = set(rng.sample(sorted(ref.heard), len(ref.heard)))
    for mac in rng.sample(sorted(ref.hosts), len(ref.hosts)):
        shuffled.host_seen(mac, *ref.hosts[mac])
    b = infer(shuffled)
    assert a.to_dict() == b.to_dict()
    tors = sorted((sw for sw in a.switches.values() if sw.role == "edge"), key=lambda s: (s.pod, s.index))
    assert [s.dpid for s in tors if s.pod == 0] == sorted(s.dpid for s in tors if s.pod == 0)


def test_port_speeds_give_capacities_and_a_rate_overrides_them():
    truth = fattree(4)
    obs = observe(truth, speed=1000.0)
    assert {ln.capacity_mbps for ln in infer(obs).links} == {1000.0}
    assert infer(obs, rate_mbps=10).link_rate_mbps == 10.0
    first = truth.links[0]
    d = {sw.name: sw.dpid for sw in truth.switches.values()}
    obs.switches[d[first.a]][first.a_port] = 100.0  # a slower port: the link runs at the slower end
    caps = {ln.capacity_mbps for ln in infer(obs).links}
    assert caps == {1000.0, 100.0}
    obs.switches[d[first.a]][first.a_port] = 0
    with pytest.raises(DiscoverError, match="speed of port .* is unknown: give --link-mbps"):
        infer(obs)


def _drop_link(obs, fabric, i):
    d = {sw.name: sw.dpid for sw in fabric.switches.values()}
    ln = fabric.links[i]
    a, b = (d[ln.a], ln.a_port), (d[ln.b], ln.b_port)
    obs.heard -= {(a, b), (b, a)}
    return a, b


def test_a_missing_link_an_extra_link_or_a_ring_is_not_a_clos():
    f = fattree(4)
    obs = observe(f)
    _drop_link(obs, f, 0)
    with pytest.raises(DiscoverError, match="not a fat-tree"):
        infer(obs)
    obs = observe(f)
    d = {sw.name: sw.dpid for sw in f.switches.values()}
    extra = ((d["e0_0"], 90), (d["e1_0"], 90))
    obs.heard |= {extra, extra[::-1]}
    with pytest.raises(DiscoverError, match="not a fat-tree"):
        infer(obs)
    ring = Observed(switches={n: {1: 10.0, 2: 10.0, 3: 10.0} for n in range(1, 6)})
    for n in range(1, 6):
        m = n % 5 + 1
        ring.heard |= {((n, 1), (m, 2)), ((m, 2), (n, 1))}
    ring.host_seen("02:00:00:00:00:01", "10.0.0.1", 1, 3)
    with pytest.raises(DiscoverError, match="not a Clos: 5 switches"):
        infer(ring)


@pytest.mark.parametrize("spoil,message", [
    ("one-way", "heard only one way"),
    ("two-peers", "hears two switches"),
    ("no-hosts", "no host was seen"),
    ("host-on-agg", "not a ToR"),
    ("apart", "not one fabric"),
    ("same-ip", "used by two hosts"),
    ("mac-moves", "seen on"),
])
def test_what_cannot_be_a_fabric_is_refused_with_the_reason(spoil, message):
    f = fattree(4)
    obs = observe(f)
    d = {sw.name: sw.dpid for sw in f.switches.values()}
    if spoil == "one-way":
        a, b = _drop_link(obs, f, 3)
        obs.heard.add((a, b))
    elif spoil == "two-peers":
        ln = f.links[0]
        obs.heard.add(((d["c1"], 77), (d[ln.a], ln.a_port)))
    elif spoil == "no-hosts":
        obs.hosts.clear()
    elif spoil == "host-on-agg":
        obs.host_seen("02:00:00:00:99:01", "10.9.9.9", d["a0_0"], 99)
    elif spoil == "apart":
        obs.switches[12345] = {1: 10.0}
    elif spoil == "same-ip":
        obs.host_seen("02:00:00:00:99:01", f.hosts[0].ip, d["e1_1"], 99)
    elif spoil == "mac-moves":
        obs.host_seen(f.hosts[0].mac, f.hosts[0].ip, d["e1_1"], 99)
    with pytest.raises(DiscoverError, match=message):
        infer(obs)


def test_a_frame_that_came_over_a_fabric_link_is_not_a_host():
    f = fattree(4)
    obs = observe(f)
    d = {sw.name: sw.dpid for sw in f.switches.values()}
    obs.host_seen("02:00:00:00:99:01", "10.9.9.9", d["a0_0"], f.port_to("a0_0", "e0_0"))
    assert differences(f, infer(obs)) == []


def test_a_host_on_a_faster_port_gets_its_own_speed_and_the_controller_uses_it():
    truth = fattree(4)
    obs = observe(truth, speed=10.0)
    h = truth.hosts[5]
    obs.switches[truth.switches[h.switch].dpid][h.port] = 100.0
    found = infer(obs)
    assert found.link_rate_mbps == 10.0
    (fh,) = [x for x in found.hosts if x.ip == h.ip]
    assert fh.capacity_mbps == 100.0 and found.capacity_bps((fh.name, fh.switch)) == 100e6
    assert found.host_rate_bps(h.ip) == 100e6 and found.host_rate_bps(truth.hosts[0].ip) == 10e6
    again = type(found).from_dict(found.to_dict())  # the optional key survives the file
    assert again.to_dict() == found.to_dict() and "capacity_mbps" not in again.to_dict()["hosts"][0]


def test_an_arp_says_a_hosts_address_and_a_forwarded_source_does_not_change_it():
    f = fattree(4)
    obs = observe(f)
    h, d = f.hosts[0], f.switches[f.hosts[0].switch].dpid
    obs.host_seen(h.mac, h.ip, d, h.port, arp=True)
    obs.host_seen(h.mac, "10.99.0.1", d, h.port)  # a packet it forwarded (a router's, a VM's)
    assert differences(f, infer(obs)) == []
    obs.host_seen(h.mac, "10.99.0.1", d, h.port, arp=True)  # but it claims two addresses itself
    with pytest.raises(DiscoverError, match="says it is both"):
        infer(obs)


def test_ports_that_are_up_but_silent_are_listed():
    f = fattree(4)
    obs = observe(f)
    d = f.switches["e0_0"].dpid
    obs.ports_up |= {(d, f.hosts_on("e0_0")[0].port), (d, 60)}
    assert obs.silent_ports() == [(d, 60)]
