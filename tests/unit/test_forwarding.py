"""Base ECMP forwarding intents, checked by walking packets through them."""

import ipaddress

import pytest

from ryu_apps.openflow.intents import Output, ToController, ToGroup
from ryu_apps.programs.forwarding import PRIO_ARP, UPLINK_GROUP, base_program, covering_prefixes
from topology.fabric import fattree, leafspine
from topology.paths import tor_paths


def _lookup(flows, dst_ip):
    """The highest-priority IPv4 flow matching dst_ip (what the switch would do)."""
    best = None
    for f in flows:
        m = dict(f.match)
        if m.get("eth_type") != 0x0800:
            continue
        d = m.get("ipv4_dst")
        if d is not None:
            addr, mask = d if isinstance(d, tuple) else (d, "255.255.255.255")
            if ipaddress.IPv4Network(f"{addr}/{mask}") != ipaddress.IPv4Network(f"{dst_ip}/{mask}", strict=False):
                continue
        if best is None or f.priority > best.priority:
            best = f
    return best


def _walk(fabric, programs, src_host, dst_host, choose=0):
    """Follow the flows hop by hop; at a group take bucket ``choose`` (mod size)."""
    sw, hops = src_host.switch, []
    for _ in range(10):
        hops.append(sw)
        groups, flows = programs[sw]
        f = _lookup(flows, dst_host.ip)
        assert f is not None, f"no route on {sw} to {dst_host.ip}"
        (action,) = f.actions
        if isinstance(action, ToGroup):
            (g,) = [g for g in groups if g.group_id == action.group_id]
            action = g.buckets[choose % len(g.buckets)].actions[0]
        peer, _ = fabric.peer(sw, action.port)
        if peer == dst_host.name:
            return tuple(hops)
        assert peer in fabric.switches, f"{sw} sent {dst_host.ip} to host {peer}"
        sw = peer
    raise AssertionError("forwarding loop")


@pytest.mark.parametrize("fabric", [fattree(4), fattree(6), leafspine(2, 4, 2)], ids=["k4", "k6", "ls"])
def test_every_pair_every_bucket_reaches_on_a_shortest_path(fabric):
    programs = {s: base_program(fabric, s) for s in fabric.switches}
    hosts = fabric.hosts
    for a in hosts[:: max(1, len(hosts) // 8)]:
        for b in hosts:
            if a is b:
                continue
            valid = set(tor_paths(fabric, a.switch, b.switch))
            for choose in range(3):
                assert _walk(fabric, programs, a, b, choose) in valid


def test_edge_program_shape():
    f = fattree(4)
    groups, flows = base_program(f, "e0_0")
    assert [(g.group_id, [b.actions[0].port for b in g.buckets]) for g in groups] == [(UPLINK_GROUP, [3, 4])]
    arp = [x for x in flows if x.priority == PRIO_ARP]  # per host port, through its punt meter
    assert [(dict(x.match)["in_port"], x.meter_id) for x in arp] == [(1, 3), (2, 4)]
    assert all(x.actions == (ToController(),) for x in arp)
    from ryu_apps.programs.forwarding import punt_meters
    assert [(m.meter_id, m.pktps) for m in punt_meters(f, "e0_0")] == [(3, True), (4, True)]
    assert punt_meters(f, "a0_0") == []
    assert _lookup(flows, "10.0.0.3").actions == (Output(2),)


def test_core_has_no_group_and_uses_pod_prefixes():
    groups, flows = base_program(fattree(4), "c2")
    assert groups == []
    assert dict(_lookup(flows, "10.3.1.2").match)["ipv4_dst"] == ("10.3.0.0", "255.255.0.0")


def test_covering_prefixes():
    all_ips = sorted(int(ipaddress.IPv4Address(x)) for x in ["10.0.0.2", "10.0.0.3", "10.0.1.2", "10.1.0.2"])
    assert covering_prefixes(["10.0.0.2", "10.0.0.3"], all_ips) == [("10.0.0.0", 24)]
    assert covering_prefixes(["10.0.0.2", "10.0.0.3", "10.0.1.2"], all_ips) == [("10.0.0.0", 16)]
    # no prefix separates 10.0.0.2 from 10.0.0.3: fall back to host routes
    assert covering_prefixes(["10.0.0.2"], all_ips) == [("10.0.0.2", 32)]
    assert covering_prefixes([], all_ips) == []


def test_the_prefix_routes_below_a_switch_are_kept_per_fabric_and_never_shared_or_changed_by_a_caller():
    """Issue 16 (k=8): a link change recomputes every switch's program; the down routes do not depend
    on what is dead, so they are computed once per switch of a fabric."""
    from ryu_apps.programs.forwarding import PRIO_DOWN, base_program
    from topology.fabric import fattree, leafspine

    f = fattree(4, 10)
    first = base_program(f, "a0_0")[1]
    down = [x for x in first if x.priority == PRIO_DOWN]
    assert len(down) == 2  # one prefix per ToR below
    first.clear()  # a caller changing its list changes nothing kept
    dead = frozenset({("a0_0", "e0_0"), ("e0_0", "a0_0")})
    again = [x for x in base_program(f, "a0_0", dead=dead)[1] if x.priority == PRIO_DOWN]
    assert again == down
    other = leafspine(2, 4, 2, 10)  # another fabric's switch of the same name is its own
    spine = next(s for s in other.switches if not other.switches[s].is_tor and other.down_neighbors(s))
    assert [x for x in base_program(other, spine)[1] if x.priority == PRIO_DOWN] != down
