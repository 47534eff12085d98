"""A fabric description as an ns-3 network: one node per switch and host, one point-to-point link per
described link (its speed, a settable delay, the fabric's MTU), the switches' ports numbered as the
description numbers them, each switch port's queue discipline, and hosts with Linux's default queue.

Switch nodes route with ``fw::Switch`` (fwsim.cc), which carries out the OpenFlow program; hosts keep
ns-3's own stack with their description's address (in 10.0.0.0/8, where the handshake's service
address is too). Switch interfaces get addresses of their own (172.16.0.0/12) that nothing routes to.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass, field

from experiments.ns3.compile import mac_int
from topology.fabric import Fabric
from topology.queues import FRAME_BYTES, IsolationConfig

PORT_QUEUE_PKTS = 100  # the emulator's port buffer, in standard frames (topology/builder.py)
SWITCH_NET = int(ipaddress.IPv4Address("172.16.0.0"))
DISCIPLINES = ("fifo", "strict")


class NetError(ValueError):
    pass


@dataclass
class Port:
    """One switch port: its interface, device and queue disc, and what it leads to."""

    iface: int
    device: object
    queue: object
    peer: str


@dataclass
class Net:
    """The built network: ns-3 objects by the description's names."""

    fabric: Fabric
    ns: object
    fw: object
    nodes: dict[str, object] = field(default_factory=dict)
    switches: dict[str, object] = field(default_factory=dict)  # name -> fw::Switch
    ports: dict[tuple[str, int], Port] = field(default_factory=dict)  # (switch, OpenFlow port) -> Port
    hosts: dict[str, object] = field(default_factory=dict)  # name -> fw::Host

    def now(self) -> float:
        return self.ns.Simulator.Now().GetSeconds()


def build(fabric: Fabric, *, link_delay_s: float = 5e-6, mtu: int = 1500, queues: str = "fifo",
          iso: IsolationConfig | None = None, sampling: int = 0, seed: int = 1, per_packet: bool = False) -> Net:
    """The network for ``fabric``; ``queues``: every switch port's discipline (``fifo``: one drop-tail
    queue of the emulator's 100 standard frames; ``strict``: mice first, 60 and 40 frames, by DSCP);
    ``sampling``: each switch's 1-in-N flow samples (0: none)."""
    from experiments.ns3.native import load

    if queues not in DISCIPLINES:
        raise NetError(f"queues: unknown discipline {queues!r} (known: {', '.join(DISCIPLINES)})")
    iso = iso or IsolationConfig()
    ns, fw = load()
    net = Net(fabric, ns, fw)
    names = sorted(fabric.switches, key=fabric._order) + [h.name for h in fabric.hosts]
    container = ns.NodeContainer()
    container.Create(len(names))
    for i, name in enumerate(names):
        net.nodes[name] = container.Get(i)
    ns.InternetStackHelper().Install(container)
    for i, name in enumerate(sorted(fabric.switches, key=fabric._order)):
        sw = ns.CreateObject[fw.Switch]()
        sw.Configure(fabric.switches[name].dpid & 0xFFFFFFFF, sampling, per_packet, seed * 7919 + i)
        net.nodes[name].GetObject[ns.Ipv4]().SetRoutingProtocol(sw)
        net.switches[name] = sw
    next_addr = [SWITCH_NET]

    def switch_port(sw: str, port: int, dev, peer: str, peer_mac: int, rate_bps: float) -> None:
        next_addr[0] += 1
        node = net.nodes[sw]
        if queues == "strict":
            qd = fw.Strict(dev, iso.mice_queue_len * FRAME_BYTES, iso.elephant_queue_len * FRAME_BYTES,
                           iso.elephant_dscp)
        else:
            qd = fw.Fifo(dev, PORT_QUEUE_PKTS * FRAME_BYTES)
        iface = fw.Interface(node, dev, next_addr[0], 0xFFFFFFFF)
        net.switches[sw].MapPort(iface, port, peer_mac)
        fw.WatchTx(net.switches[sw], dev, port)
        net.ports[(sw, port)] = Port(iface, dev, qd, peer)

    for ln in fabric.links:
        devs = fw.Link(net.nodes[ln.a], net.nodes[ln.b], ln.capacity_mbps * 1e6, link_delay_s, mtu)
        switch_port(ln.a, ln.a_port, devs.Get(0), ln.b, _port_mac(ln.b, ln.b_port), ln.capacity_mbps * 1e6)
        switch_port(ln.b, ln.b_port, devs.Get(1), ln.a, _port_mac(ln.a, ln.a_port), ln.capacity_mbps * 1e6)
    for h in fabric.hosts:
        rate = fabric.capacity_bps((h.name, h.switch))
        devs = fw.Link(net.nodes[h.name], net.nodes[h.switch], rate, link_delay_s, mtu)
        fw.HostQueue(devs.Get(0))
        fw.Interface(net.nodes[h.name], devs.Get(0), int(ipaddress.IPv4Address(h.ip)), 0xFF000000)
        switch_port(h.switch, h.port, devs.Get(1), h.name, mac_int(h.mac), rate)
    return net


def _port_mac(switch: str, port: int) -> int:
    """A MAC for a switch port (what a frame from it carries as its source): stable, locally administered."""
    return (0x02 << 40) | (zlib.crc32(f"{switch}:{port}".encode()) << 8)
