"""Base (ECMP) forwarding for one switch, computed from the fabric description.

Downward traffic is matched by destination prefix (the smallest prefix that
covers exactly the hosts below a port); upward traffic goes to a select group
over the uplinks, which Open vSwitch spreads by a hash of the flow; every
bucket watches its port, so a dead uplink stops being chosen at once. ARP is sent
to the controller at the ToRs, which answers from the host table, so nothing
is ever flooded in the looped fabric.

After a failure (``dead`` links), the uplink group keeps only live uplinks,
and a destination ToR that only some of them still reach (a dead link further
away: in a fat-tree a dead aggregation-core link cuts that core off from one
pod) gets its own group over those, in the ``ecmp-avoid`` band; a ToR no
uplink reaches gets an explicit drop.
"""

from __future__ import annotations

import bisect
import ipaddress
from dataclasses import replace

from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import Bucket, Flow, Group, Meter, Output, ToController, ToGroup, match
from topology.fabric import Fabric
from topology.paths import Reachability

UPLINK_GROUP = pipeline.UPLINK_GROUP.first

PRIO_MISS = pipeline.prio("miss")
PRIO_UP = pipeline.prio("ecmp-up")
PRIO_AVOID = pipeline.prio("ecmp-avoid")
PRIO_DOWN = pipeline.prio("down")
PRIO_HOST = pipeline.prio("host")
PRIO_ARP = pipeline.prio("arp")
PRIO_GUARD_PASS = pipeline.prio("guard-pass")
PRIO_GUARD_DROP = pipeline.prio("guard-drop")
PRIO_LLDP = pipeline.prio("lldp")
PRIO_LLDP_HOST = pipeline.prio("lldp-host")
ETH_LLDP = 0x88CC

ETH_ARP = 0x0806
ETH_IPV4 = 0x0800


def covering_prefixes(under: list[str], all_sorted: list[int], parsed: dict[str, int] | None = None) -> list[tuple[str, int]]:
    """The shortest prefix (/8, /16 or /24) holding every address in ``under``
    and no other address of ``all_sorted``; else one /32 per address (``parsed``: the addresses
    already as integers)."""
    ints = sorted(parsed[ip] if parsed is not None else int(ipaddress.IPv4Address(ip)) for ip in under)
    if not ints:
        return []
    for plen in (8, 16, 24):
        mask = (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
        net = ints[0] & mask
        if ints[-1] & mask != net:
            continue
        lo = bisect.bisect_left(all_sorted, net)
        hi = bisect.bisect_right(all_sorted, net | (~mask & 0xFFFFFFFF))
        if hi - lo == len(ints):
            return [(str(ipaddress.IPv4Address(net)), plen)]
    return [(str(ipaddress.IPv4Address(i)), 32) for i in ints]


def _prefix_match(addr: str, plen: int):
    if plen == 32:
        return match(eth_type=ETH_IPV4, ipv4_dst=addr)
    mask = str(ipaddress.IPv4Network(f"0.0.0.0/{plen}").netmask)
    return match(eth_type=ETH_IPV4, ipv4_dst=(addr, mask))


def uplink_group(fabric: Fabric, switch: str, weights: dict[int, int] | None = None,
                 dead=frozenset()) -> Group | None:
    """The ECMP select group over a switch's live uplinks (all of them if none is; None at the top tier)."""
    ups = fabric.up_neighbors(switch)
    if not ups:
        return None
    ups = [n for n in ups if (switch, n) not in dead] or ups
    weights = weights or {}
    ports = [fabric.port_to(switch, n) for n in ups]
    return Group(UPLINK_GROUP, tuple(Bucket((Output(p),), weights.get(p, 1)) for p in ports))


def _addresses(fabric: Fabric) -> tuple[dict[str, int], list[int]]:
    """Every host's address as an integer, and all of them sorted: parsed once per fabric (parsing a
    k=32 fat-tree's 8,192 addresses again for each of its 1,280 switches took 14 s of start-up)."""
    got = fabric.__dict__.get("_addresses_cache")
    if got is None:
        parsed = {h.ip: int(ipaddress.IPv4Address(h.ip)) for h in fabric.hosts}
        got = fabric.__dict__["_addresses_cache"] = (parsed, sorted(parsed.values()))
    return got


def tor_prefixes(fabric: Fabric) -> dict[str, list]:
    """Each ToR's covering prefixes as matches."""
    parsed, all_sorted = _addresses(fabric)
    return {t: [_prefix_match(a, p) for a, p in covering_prefixes([h.ip for h in fabric.hosts_on(t)], all_sorted, parsed)]
            for t in fabric.tors()}


def pod_prefixes(fabric: Fabric) -> dict[int, list]:
    """A fat-tree's pods whose hosts' addresses have covering prefixes shorter than /32 (10.pod.0.0/16
    as Freeway numbers them), as matches; other fabrics have none."""
    if fabric.topo != "fattree":
        return {}
    parsed, all_sorted = _addresses(fabric)
    by_pod: dict[int, list[str]] = {}
    for t in fabric.tors():
        by_pod.setdefault(fabric.switches[t].pod, []).extend(h.ip for h in fabric.hosts_on(t))
    out = {}
    for pod, ips in by_pod.items():
        prefixes = covering_prefixes(ips, all_sorted, parsed)
        if prefixes and all(p < 32 for _, p in prefixes):
            out[pod] = [_prefix_match(a, p) for a, p in prefixes]
    return out


def detour(fabric: Fabric, switch: str, dst_tor: str, dead, reach: Reachability) -> list[str] | None:
    """The up-neighbors that still reach ``dst_tor`` when the live uplinks do not all reach it (None:
    the uplink group serves it, or it is below)."""
    if dst_tor in reach.below[switch]:
        return None
    hops = reach.next_hops(switch, dst_tor)
    return None if hops == [n for n in fabric.up_neighbors(switch) if (switch, n) not in dead] else hops


def detours(fabric: Fabric, switch: str, dead, reach: Reachability | None = None) -> dict[str, list[str]]:
    """Destination ToRs that the live uplinks do not all reach, with the up-neighbors that still do
    (those ``detour`` names, found from the ToRs each uplink does not reach, in the fabric's order)."""
    if not dead:
        return {}
    reach = reach or Reachability(fabric, lambda ln: ln not in dead)
    ups = [n for n in fabric.up_neighbors(switch) if (switch, n) not in dead]
    missed = frozenset().union(*(reach.unreached(n) for n in ups)) - reach.below[switch]
    if not missed:
        return {}
    order = _tor_order(fabric)
    return {t: [n for n in ups if t not in reach.unreached(n)] for t in sorted(missed, key=order.__getitem__)}


def _tor_order(fabric: Fabric) -> dict[str, int]:
    got = fabric.__dict__.get("_tor_order_cache")
    if got is None:
        got = fabric.__dict__["_tor_order_cache"] = {t: i for i, t in enumerate(fabric.tors())}
    return got


def dead_key(fabric: Fabric, switch: str, dead, reach: Reachability | None = None) -> tuple:
    """All that ``base_program`` takes from the dead links for ``switch``: its dead uplinks and its
    detours. Two liveness models with the same key give the switch the same base program, so a link
    change recomputes (and diffs) only the switches whose key moved."""
    lost = tuple(n for n in fabric.up_neighbors(switch) if (switch, n) in dead)
    return lost, tuple((t, tuple(h)) for t, h in detours(fabric, switch, dead, reach).items())


def _down_flows(fabric: Fabric, switch: str) -> list[Flow]:
    """The prefix routes below ``switch``: fixed by the description, whatever is dead (a dead down
    link is avoided by the failure groups), so computed once per switch and kept on the fabric (a
    link change recomputes every switch's program; parsing every address again held the loop)."""
    cache = fabric.__dict__.setdefault("_down_flows_cache", {})
    if switch not in cache:
        parsed, all_sorted = _addresses(fabric)
        out = []
        for n in fabric.down_neighbors(switch):
            port = fabric.port_to(switch, n)
            for addr, plen in covering_prefixes([h.ip for h in fabric.hosts_below(n)], all_sorted, parsed):
                out.append(Flow(PRIO_DOWN, _prefix_match(addr, plen), (Output(port),)))
        cache[switch] = tuple(out)
    return list(cache[switch])


def base_program(fabric: Fabric, switch: str, dead=frozenset(), reach: Reachability | None = None,
                 prefixes: dict[str, list] | None = None) -> tuple[list[Group], list[Flow]]:
    """Groups and flows that give ``switch`` ECMP forwarding to every host, around ``dead`` links."""
    groups: list[Group] = []
    flows: list[Flow] = [Flow(PRIO_MISS, match())]  # explicit drop, so misses are counted
    sw = fabric.switches[switch]
    if sw.is_tor:
        for h in fabric.hosts_on(switch):  # ARP from each host through its own punt meter (``punt_meters``)
            flows.append(Flow(PRIO_ARP, match(eth_type=ETH_ARP, in_port=h.port), (ToController(),),
                              meter_id=pipeline.host_punt_meter(fabric.host_slot(h))))
        for h in fabric.hosts_on(switch):
            flows.append(Flow(PRIO_HOST, match(eth_type=ETH_IPV4, ipv4_dst=h.ip), (Output(h.port),)))
    flows += _down_flows(fabric, switch)
    group = uplink_group(fabric, switch, dead=dead)
    if group is not None:
        groups.append(group)
        flows.append(Flow(PRIO_UP, match(eth_type=ETH_IPV4), (ToGroup(group.group_id),)))
    if dead:
        prefixes = prefixes or tor_prefixes(fabric)
        index = _tor_order(fabric)
        for t, hops in detours(fabric, switch, dead, reach).items():
            actions: tuple = ()
            if hops:
                g = Group(pipeline.AVOID_GROUPS.id(index[t]),
                          tuple(Bucket((Output(fabric.port_to(switch, n)),)) for n in hops))
                groups.append(g)
                actions = (ToGroup(g.group_id),)
            flows += [Flow(PRIO_AVOID, m, actions) for m in prefixes[t]]
    return groups, flows


def tor_tables(fabric: Fabric, switch: str, flows: list[Flow]) -> list[Flow]:
    """A ToR's flows in its three tables (``pipeline``): each in its band's table, then the guard
    (per host port: that host's own IPv4 and ARP go on, anything else from the port is dropped; per
    uplink: everything goes on; any other port: dropped) and the miss that goes on from ingress to
    forward."""
    out = [replace(f, table_id=pipeline.table_for(f.priority, True)) for f in flows]
    guard, ingress, fwd = (t.table_id for t in pipeline.TABLES)
    for h in fabric.hosts_on(switch):
        mac = h.mac.lower()
        out += [Flow(PRIO_GUARD_PASS, match(in_port=h.port, eth_type=ETH_IPV4, eth_src=mac, ipv4_src=h.ip),
                     table_id=guard, goto=ingress),
                Flow(PRIO_GUARD_PASS, match(in_port=h.port, eth_type=ETH_ARP, eth_src=mac, arp_spa=h.ip),
                     table_id=guard, goto=ingress),
                Flow(PRIO_GUARD_DROP, match(in_port=h.port), table_id=guard)]
    out += [Flow(PRIO_GUARD_PASS, match(in_port=fabric.port_to(switch, n)), table_id=guard, goto=ingress)
            for n in fabric.up_neighbors(switch)]  # what comes down from the fabric goes on
    out += [Flow(PRIO_MISS, match(), table_id=guard),  # any other port (undescribed, LOCAL): dropped
            Flow(PRIO_MISS, match(), table_id=ingress, goto=fwd)]
    return out


LLDP_PPS, LLDP_BURST = 200, 100  # a switch's LLDP probes to the controller (k=48: 48 ports at 1 s are 48/s)
STRAY_PPS, STRAY_BURST = 10, 10  # LLDP from ports the description has nothing on (a few cables' probes a second)


def lldp_program(fabric: Fabric, switch: str) -> list:
    """Every switch punts the LLDP probes it receives on a port facing another switch through its LLDP
    meter; at a ToR, those from a host port go through that host's punt meter instead (a host cannot
    starve the link check); on any other port (unused, undescribed) LLDP goes to the controller through a
    meter of its own, a few a second, so that a cable the description lacks is still reported while a
    flood there no longer shares the probes' meter (issue 60 item 6)."""
    lldp, stray = pipeline.LLDP_METER.id(0), pipeline.STRAY_LLDP_METER.id(0)
    out: list = [Meter(lldp, LLDP_PPS, LLDP_BURST, pktps=True), Meter(stray, STRAY_PPS, STRAY_BURST, pktps=True),
                 Flow(PRIO_LLDP, match(eth_type=ETH_LLDP), (ToController(),), meter_id=stray)]
    out += [Flow(PRIO_LLDP_HOST, match(in_port=fabric.port_to(switch, n), eth_type=ETH_LLDP), (ToController(),),
                 meter_id=lldp) for n in fabric.neighbors(switch) if n in fabric.switches]
    out += [Flow(PRIO_LLDP_HOST, match(in_port=h.port, eth_type=ETH_LLDP), (ToController(),),
                 meter_id=pipeline.host_punt_meter(fabric.host_slot(h))) for h in fabric.hosts_on(switch)]
    return out


PUNT_PPS, PUNT_BURST = 200, 50  # what one host may send to the controller, unless the mode says otherwise


def punt_meters(fabric: Fabric, switch: str, pps: int = PUNT_PPS, burst: int = PUNT_BURST) -> list[Meter]:
    """At a ToR, one packets-per-second meter per host port for everything that host sends to the
    controller (ARP, handshakes, Hedera's first packets): a host flooding the controller is held to
    ``pps`` and its neighbours keep theirs."""
    if not fabric.switches[switch].is_tor:
        return []
    ids = dict.fromkeys(pipeline.host_punt_meter(fabric.host_slot(h)) for h in fabric.hosts_on(switch))
    return [Meter(mid, pps, burst, pktps=True) for mid in ids]


def up_group(fabric: Fabric, switch: str, dst_tor: str | None, dead=frozenset(),
             reach: Reachability | None = None) -> int | None:
    """The group that sends traffic for ``dst_tor`` up from ``switch`` (None: no uplink reaches it)."""
    if not dead or dst_tor is None:
        return UPLINK_GROUP
    hops = detour(fabric, switch, dst_tor, dead, reach or Reachability(fabric, lambda ln: ln not in dead))
    if hops is None:
        return UPLINK_GROUP
    return pipeline.AVOID_GROUPS.id(fabric.tors().index(dst_tor)) if hops else None
