"""Base (ECMP) forwarding for one switch, computed from the fabric description.

Downward traffic is matched by destination prefix (the smallest prefix that
covers exactly the hosts below a port); upward traffic goes to a select group
over the uplinks, which Open vSwitch spreads by a hash of the flow. ARP is sent
to the controller at the ToRs, which answers from the host table, so nothing
is ever flooded in the looped fabric.
"""

from __future__ import annotations

import bisect
import ipaddress

from topology.fabric import Fabric

from . import pipeline
from .intents import Bucket, Flow, Group, Output, ToController, ToGroup, match

UPLINK_GROUP = pipeline.UPLINK_GROUP.first

PRIO_MISS = pipeline.prio("miss")
PRIO_UP = pipeline.prio("ecmp-up")
PRIO_DOWN = pipeline.prio("down")
PRIO_HOST = pipeline.prio("host")
PRIO_ARP = pipeline.prio("arp")

ETH_ARP = 0x0806
ETH_IPV4 = 0x0800


def covering_prefixes(under: list[str], all_sorted: list[int]) -> list[tuple[str, int]]:
    """The shortest prefix (/8, /16 or /24) holding every address in ``under``
    and no other address of ``all_sorted``; else one /32 per address."""
    ints = sorted(int(ipaddress.IPv4Address(ip)) for ip in under)
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


def uplink_group(fabric: Fabric, switch: str, weights: dict[int, int] | None = None) -> Group | None:
    """The ECMP select group over a switch's uplinks (None at the top tier)."""
    ports = [fabric.port_to(switch, n) for n in fabric.up_neighbors(switch)]
    if not ports:
        return None
    weights = weights or {}
    return Group(UPLINK_GROUP, tuple(Bucket((Output(p),), weights.get(p, 1)) for p in ports))


def base_program(fabric: Fabric, switch: str) -> tuple[list[Group], list[Flow]]:
    """Groups and flows that give ``switch`` ECMP forwarding to every host."""
    groups: list[Group] = []
    flows: list[Flow] = [Flow(PRIO_MISS, match())]  # explicit drop, so misses are counted
    sw = fabric.switches[switch]
    all_sorted = sorted(int(ipaddress.IPv4Address(h.ip)) for h in fabric.hosts)
    if sw.is_tor:
        flows.append(Flow(PRIO_ARP, match(eth_type=ETH_ARP), (ToController(),)))
        for h in fabric.hosts_on(switch):
            flows.append(Flow(PRIO_HOST, match(eth_type=ETH_IPV4, ipv4_dst=h.ip), (Output(h.port),)))
    for n in fabric.down_neighbors(switch):
        port = fabric.port_to(switch, n)
        for addr, plen in covering_prefixes([h.ip for h in fabric.hosts_below(n)], all_sorted):
            flows.append(Flow(PRIO_DOWN, _prefix_match(addr, plen), (Output(port),)))
    group = uplink_group(fabric, switch)
    if group is not None:
        groups.append(group)
        flows.append(Flow(PRIO_UP, match(eth_type=ETH_IPV4), (ToGroup(group.group_id),)))
    return groups, flows
