"""From what a fabric shows to its description: Clos roles inferred from the graph alone (pure).

Input (``Observed``): the switches with their ports' advertised speeds, the
LLDP probes heard (which port of which switch reached which), and the hosts
seen sending (MAC, IP, switch, port). Output: a ``Fabric`` the validator
accepts, or ``DiscoverError`` naming why the fabric is not a Clos this
controller can run.

The roles come from the shape, never from datapath ids or port numbers:

- leaf-spine: the switch graph is complete bipartite; the side with hosts is
  the leaves;
- fat-tree: ``5k^2/4`` switches; ToRs are the switches with ``k/2`` switch
  neighbours, aggregation switches their neighbours, cores the rest; a pod
  is a connected group of ToRs and aggregation switches once the cores are
  taken away; every aggregation switch reaches ``k/2`` cores, and the cores
  fall into ``k/2`` groups, one aggregation switch of every pod per group.

Names follow the builder's (``e{pod}_{i}``, ``a{pod}_{group}``, ``c{n}``,
``l{i}``, ``s{n}``, hosts by their ToR and port order), ordered by datapath
id, so the same fabric always gets the same description.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass, field

from topology.fabric import ROLE_LEVEL, Fabric, FabricError, Host, Link, Switch

PortRef = tuple[int, int]  # (datapath id, port)


class DiscoverError(ValueError):
    """The fabric as seen cannot be described (the message says why)."""


@dataclass
class Observed:
    switches: dict[int, dict[int, float]] = field(default_factory=dict)  # dpid -> port -> speed Mbit/s (0: unknown)
    heard: set[tuple[PortRef, PortRef]] = field(default_factory=set)  # (probe left by, arrived at)
    hosts: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # mac -> (ip, dpid, port)
    conflicts: list[str] = field(default_factory=list)  # what was seen that cannot be (a MAC on two ports...)
    ports_up: set[PortRef] = field(default_factory=set)  # switch ports whose link is up
    by_arp: set[str] = field(default_factory=set)  # MACs whose address an ARP said

    def host_seen(self, mac: str, ip: str, dpid: int, port: int, arp: bool = False) -> None:
        """A host's frame arrived at (dpid, port): an ARP (its sender address is the host's own) or an
        IPv4 packet (its source, which ARP's overrides: a router forwards others' sources)."""
        if ip in ("0.0.0.0", "") or int(mac.split(":")[0], 16) & 1:
            return  # DHCP-style probes, multicast sources: no host
        was = self.hosts.get(mac)
        if was is not None and was[1:] != (dpid, port):
            self.conflicts.append(f"host {mac} seen on {was[1]:016x} port {was[2]} and on {dpid:016x} port {port}")
        if was is not None and was[0] != ip and mac in self.by_arp:
            if not arp:
                return  # ARP said this host's address; an IPv4 source does not change it
            self.conflicts.append(f"host {mac} says it is both {was[0]} and {ip} (one address per host)")
        if arp:
            self.by_arp.add(mac)
        self.hosts[mac] = (ip, dpid, port)

    def silent_ports(self) -> list[PortRef]:
        """Ports that are up but where no probe arrived and no host spoke: a switch that never connected,
        a cable LLDP does not cross, or a silent host. Reported, since the description will lack them."""
        heard = {dst for _, dst in self.heard} | {src for src, _ in self.heard}
        hosts = {(d, p) for _, d, p in self.hosts.values()}
        return sorted(p for p in self.ports_up if p not in heard and p not in hosts and p[0] in self.switches)


def _links(obs: Observed) -> dict[PortRef, PortRef]:
    """Each switch port's peer, checked: heard both ways, one peer per port, one link per switch pair."""
    peer: dict[PortRef, PortRef] = {}
    for src, dst in sorted(obs.heard):
        if src[0] not in obs.switches or dst[0] not in obs.switches:
            continue  # a switch that never connected to us
        if dst in peer and peer[dst] != src:
            raise DiscoverError(f"port {_ref(dst)} hears two switches, {_ref(peer[dst])} and {_ref(src)}")
        peer[dst] = src
    for dst, src in peer.items():
        if peer.get(src) != dst:
            raise DiscoverError(f"the link {_ref(src)} -> {_ref(dst)} is heard only one way (a one-way fault, "
                                "or discovery ran too briefly)")
    pairs: dict[frozenset, PortRef] = {}
    for a, b in peer.items():
        if a[0] == b[0]:
            raise DiscoverError(f"switch {a[0]:016x} is looped to itself ({_ref(a)} - {_ref(b)})")
        key = frozenset((a[0], b[0]))
        if key in pairs and pairs[key] not in (a, b):
            raise DiscoverError(f"switches {a[0]:016x} and {b[0]:016x} have more than one link between them")
        pairs[key] = a
    return peer


def _ref(p: PortRef) -> str:
    return f"{p[0]:016x}:{p[1]}"


def infer(obs: Observed, rate_mbps: float | None = None) -> Fabric:
    """The description of the observed fabric; ``rate_mbps`` overrides the ports' advertised speeds."""
    if obs.conflicts:
        raise DiscoverError(obs.conflicts[0])
    if not obs.switches:
        raise DiscoverError("no switch connected")
    peer = _links(obs)
    adj: dict[int, set[int]] = {d: set() for d in obs.switches}
    for a, b in peer.items():
        adj[a[0]].add(b[0])
    _connected(adj)
    hosts_at: dict[int, list[tuple[int, str, str]]] = defaultdict(list)  # dpid -> (port, mac, ip)
    ips: dict[str, str] = {}
    for mac, (ip, dpid, port) in sorted(obs.hosts.items()):
        if (dpid, port) in peer or dpid not in obs.switches:
            continue  # a frame that came over a fabric link is not a host's own port
        if ip in ips:
            raise DiscoverError(f"address {ip} is used by two hosts, {ips[ip]} and {mac}")
        ips[ip] = mac
        hosts_at[dpid].append((port, mac, ip))
    if not hosts_at:
        raise DiscoverError("no host was seen: have the hosts send something (a ping) while discovery runs")
    shape = _leafspine(adj, hosts_at) or _fattree(adj, hosts_at)
    topo, params, roles = shape
    return _describe(obs, peer, hosts_at, topo, params, roles, rate_mbps)


def _connected(adj: dict[int, set[int]]) -> None:
    start = next(iter(adj))
    seen, todo = {start}, [start]
    while todo:
        for n in adj[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    if len(seen) != len(adj):
        lone = sorted(set(adj) - seen)
        raise DiscoverError(f"not one fabric: {len(adj) - len(seen)} switches (e.g. {lone[0]:016x}) are not "
                            f"connected to {start:016x} by any link heard")


Roles = dict[int, tuple[str, str, int, int]]  # dpid -> (name, role, pod, index)


def _leafspine(adj, hosts_at) -> tuple[str, dict, Roles] | None:
    """A complete bipartite switch graph with the hosts on one side; None if the graph is not one."""
    side: dict[int, int] = {}
    for start in sorted(adj):
        if start in side:
            continue
        side[start] = 0
        todo = [start]
        while todo:
            n = todo.pop()
            for m in adj[n]:
                if m not in side:
                    side[m] = 1 - side[n]
                    todo.append(m)
                elif side[m] == side[n]:
                    return None  # not bipartite
    parts = [sorted(d for d in adj if side[d] == s) for s in (0, 1)]
    if any(adj[d] != set(parts[1 - side[d]]) for d in adj):
        return None  # bipartite, not complete: a fat-tree or not a Clos
    with_hosts = [s for s in (0, 1) if any(d in hosts_at for d in parts[s])]
    if len(with_hosts) != 1:
        raise DiscoverError("a two-tier fabric with hosts on both tiers: not a leaf-spine")
    leaves, spines = parts[with_hosts[0]], parts[1 - with_hosts[0]]
    if len(leaves) < 2:
        raise DiscoverError("a leaf-spine needs at least two leaves with hosts")
    roles: Roles = {d: (f"s{i + 1}", "spine", 0, i + 1) for i, d in enumerate(spines)}
    roles.update({d: (f"l{i}", "leaf", 0, i) for i, d in enumerate(leaves)})
    params = {"spines": len(spines), "leaves": len(leaves),
              "hosts_per_leaf": max(len(hosts_at.get(d, ())) for d in leaves)}
    return "leafspine", params, roles


def _fattree(adj, hosts_at) -> tuple[str, dict, Roles]:
    n = len(adj)
    k = round((4 * n / 5) ** 0.5)
    if k < 4 or k % 2 or 5 * k * k // 4 != n:
        raise DiscoverError(f"not a Clos: {n} switches is neither a complete leaf-spine nor a fat-tree "
                            "(5k^2/4 switches for an even k)")
    h = k // 2
    tors = sorted(d for d in adj if len(adj[d]) == h)
    if len(tors) != k * h:
        raise DiscoverError(f"not a fat-tree of k={k}: {len(tors)} switches have {h} switch links, a fat-tree's "
                            f"ToRs are {k * h}")
    aggs = sorted(set().union(*(adj[t] for t in tors)))
    cores = sorted(set(adj) - set(tors) - set(aggs))
    if len(aggs) != k * h or len(cores) != h * h:
        raise DiscoverError(f"not a fat-tree of k={k}: the ToRs' neighbours are {len(aggs)} switches (want "
                            f"{k * h}), which leaves {len(cores)} cores (want {h * h})")
    for d in aggs + cores:
        if len(adj[d]) != k:
            raise DiscoverError(f"not a fat-tree of k={k}: switch {d:016x} has {len(adj[d])} switch links, not {k}")
    for d in cores:
        if not adj[d] <= set(aggs):
            raise DiscoverError(f"not a fat-tree: core {d:016x} is linked to a switch that is not an aggregation")
    off = [d for d in hosts_at if d not in tors]
    if off:
        raise DiscoverError(f"hosts on switch {off[0]:016x}, which is not a ToR")
    pods = _pods(adj, set(tors) | set(aggs))
    if len(pods) != k:
        raise DiscoverError(f"not a fat-tree of k={k}: {len(pods)} pods, not {k}")
    groups: dict[frozenset, int] = {}
    roles: Roles = {}
    pods.sort(key=lambda p: min(d for d in p if d in set(tors)))
    for p, pod in enumerate(pods):
        p_tors = sorted(d for d in pod if d in set(tors))
        p_aggs = sorted(d for d in pod if d in set(aggs))
        if len(p_tors) != h or len(p_aggs) != h or any(adj[t] != set(p_aggs) for t in p_tors):
            raise DiscoverError(f"not a fat-tree: pod of {p_tors[0]:016x} is not {h} ToRs each linked to the same "
                                f"{h} aggregation switches")
        for t_i, t in enumerate(p_tors):
            roles[t] = (f"e{p}_{t_i}", "edge", p, t_i)
        for a in p_aggs:
            ups = frozenset(adj[a] & set(cores))
            groups.setdefault(ups, len(groups))
    if len(groups) != h or any(len(g) != h for g in groups):
        raise DiscoverError(f"not a fat-tree: the aggregation switches reach {len(groups)} different sets of "
                            f"cores; a fat-tree's reach {h} sets of {h}")
    order = sorted(groups, key=min)  # group j: the cores with the j-th smallest least datapath id
    index = {g: j for j, g in enumerate(order)}
    for p, pod in enumerate(pods):
        seen_groups = set()
        for a in (d for d in pod if d in set(aggs)):
            j = index[frozenset(adj[a] & set(cores))]
            if j in seen_groups:
                raise DiscoverError(f"not a fat-tree: two aggregation switches of pod {p} reach the same cores")
            seen_groups.add(j)
            roles[a] = (f"a{p}_{j}", "agg", p, j)
    for j, g in enumerate(order):
        for m, c in enumerate(sorted(g)):
            roles[c] = (f"c{j * h + m + 1}", "core", 0, j * h + m + 1)
    return "fattree", {"k": k}, roles


def _pods(adj, members: set[int]) -> list[set[int]]:
    out, seen = [], set()
    for start in sorted(members):
        if start in seen:
            continue
        pod, todo = {start}, [start]
        while todo:
            for m in adj[todo.pop()] & members:
                if m not in pod:
                    pod.add(m)
                    todo.append(m)
        seen |= pod
        out.append(pod)
    return out


def _describe(obs, peer, hosts_at, topo, params, roles: Roles, rate_mbps) -> Fabric:
    def speed(*ends: PortRef) -> float:
        if rate_mbps is not None:
            return float(rate_mbps)
        speeds = [obs.switches[d].get(p, 0) for d, p in ends]
        if not all(speeds):
            raise DiscoverError(f"the speed of port {_ref(ends[speeds.index(0)])} is unknown: give --link-mbps")
        return float(min(speeds))

    order = sorted(obs.switches, key=lambda d: (-ROLE_LEVEL[roles[d][1]], roles[d][2], roles[d][3]))
    switches = {roles[d][0]: Switch(roles[d][0], roles[d][1], roles[d][2], roles[d][3], d) for d in order}
    links = []
    for a, b in sorted(peer.items()):
        if a < b:
            (x, xp), (y, yp) = sorted(((roles[a[0]][0], a[1]), (roles[b[0]][0], b[1])),
                                      key=lambda e: (switches[e[0]].level, e[0]))
            links.append(Link(x, xp, y, yp, speed(a, b)))
    links.sort(key=lambda ln: (ln.a, ln.a_port))
    seen = []
    for d in sorted(hosts_at, key=lambda d: roles[d][0]):
        tor = roles[d][0]
        for x, (port, mac, ip) in enumerate(sorted(hosts_at[d])):
            ipaddress.IPv4Address(ip)
            seen.append((Host(f"h{tor[1:]}_{x}", ip, mac, tor, port), speed((d, port))))
    rate = min(mbps for _, mbps in seen)  # the fabric's host rate; a faster host port says its own
    hosts = [h if mbps == rate else Host(h.name, h.ip, h.mac, h.switch, h.port, mbps) for h, mbps in seen]
    try:
        return Fabric(topo, params, rate, switches, links, hosts)
    except FabricError as e:
        raise DiscoverError(f"the fabric as seen is not a valid description: {e}") from None


def differences(truth: Fabric, found: Fabric) -> list[str]:
    """What differs between two descriptions of one fabric, by datapath id (names are only labels)."""
    def shape(f: Fabric):
        by = {sw.name: sw.dpid for sw in f.switches.values()}
        roles = {sw.dpid: sw.role for sw in f.switches.values()}
        pods = {frozenset(sw.dpid for sw in f.switches.values() if sw.pod == p and sw.role != "core")
                for p in {sw.pod for sw in f.switches.values() if sw.role != "core"}}
        links = {(frozenset(((by[ln.a], ln.a_port), (by[ln.b], ln.b_port))), ln.capacity_mbps) for ln in f.links}
        hosts = {(h.ip, h.mac.lower(), by[h.switch], h.port, f.capacity_bps((h.name, h.switch))) for h in f.hosts}
        return {"topo": {f.topo}, "params": {tuple(sorted(f.params.items()))}, "roles": set(roles.items()),
                "pods": pods, "links": links, "hosts": hosts, "link rate": {f.link_rate_mbps}}

    a, b = shape(truth), shape(found)
    out = []
    for key in a:
        if a[key] != b[key]:
            out.append(f"{key}: only in the first: {sorted(map(str, a[key] - b[key]))[:3]}; only in the second: "
                       f"{sorted(map(str, b[key] - a[key]))[:3]}")
    return out
