"""The fabric as a networkx graph (switches and hosts as nodes, ports on edges)."""

from __future__ import annotations

import networkx as nx

from topology.fabric import Fabric


def to_networkx(fabric: Fabric) -> nx.Graph:
    g = nx.Graph()
    for sw in fabric.switches.values():
        g.add_node(sw.name, kind="switch", role=sw.role, pod=sw.pod, index=sw.index, dpid=sw.dpid)
    for h in fabric.hosts:
        g.add_node(h.name, kind="host", ip=h.ip, mac=h.mac)
        g.add_edge(h.name, h.switch, ports={h.switch: h.port}, capacity_mbps=fabric.capacity_bps((h.name, h.switch)) / 1e6)
    for ln in fabric.links:
        g.add_edge(ln.a, ln.b, ports={ln.a: ln.a_port, ln.b: ln.b_port}, capacity_mbps=ln.capacity_mbps)
    return g
