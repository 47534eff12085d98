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

from experiments.engines.ns3.compile import mac_int
from topology.fabric import Fabric
from topology.queues import FRAME_BYTES, IsolationConfig, SettingError, parse_discipline

PORT_QUEUE_PKTS = 100  # the emulator's port buffer, in standard frames (topology/builder.py)
HOST_QUEUE_BYTES = 4_000_000  # a host's own queue, when it must be one that can be paused (per band)
ASSURED_BURST_FRAMES = 2  # the elephant band's assured rate (elephant_min_share): its bucket, in standard frames
SWITCH_NET = int(ipaddress.IPv4Address("172.16.0.0"))


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
    host_queues: dict[str, object] = field(default_factory=dict)  # name -> its own interface's queue disc

    def now(self) -> float:
        return self.ns.Simulator.Now().GetSeconds()


def build(fabric: Fabric, *, link_delay_s: float = 5e-6, mtu: int = 1500, queues: str = "fifo",
          iso: IsolationConfig | None = None, sampling: int = 0, seed: int = 1, per_packet: bool = False,
          own_queues: bool = False, host_send: str = "link") -> Net:
    """The network for ``fabric``; ``queues``: every switch port's discipline (``topology.queues``): ``fifo``
    (one drop-tail queue of the emulator's 100 standard frames) and ``strict`` (mice first, 60 and 40
    frames, by DSCP) as ns-3's own FifoQueueDisc and PrioQueueDisc; ``cq`` (cut-in over one 100-frame
    buffer) and any ``+ecn`` (CE marks above K) or ``+pfc`` (the mice band paused hop by hop) as
    ``fw::PortQueue``; ``shared`` (strict priority by DSCP over one 100-frame buffer: a mouse arriving at a
    full buffer pushes the oldest elephant packet out, the head of the elephant band) as ``fw::PortQueue`` too;
    ``sampling``: each switch's 1-in-N flow samples (0: none)."""
    from experiments.engines.ns3.native import load

    try:
        base, mods = parse_discipline(queues)
    except SettingError as e:
        raise NetError(str(e)) from None
    iso = iso or IsolationConfig()
    # our PortQueue; else ns-3's own for fifo, strict (strict with the elephants' assured share is ours too)
    assured = base != "fifo" and iso.elephant_min_share > 0
    own = own_queues or base in ("cq", "shared") or bool(mods) or assured
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

    def port_queue(dev, host: bool = False, rate_bps: float = 0.0):
        q = fw.InstallPortQueue(dev)
        if host:  # pausable as the switch ports are: one band under fifo, two otherwise
            q.Configure(1 if base == "fifo" else 2, False, HOST_QUEUE_BYTES, HOST_QUEUE_BYTES, iso.mice_dscp,
                        iso.elephant_dscp)
            return q
        two = base != "fifo"
        q.Configure(2 if two else 1, base in ("cq", "shared"), (PORT_QUEUE_PKTS if base != "strict" else
                                                                 iso.mice_queue_len) * FRAME_BYTES,
                    iso.elephant_queue_len * FRAME_BYTES, iso.mice_dscp, iso.elephant_dscp)
        if base == "cq":
            q.SetCutIn(iso.cq_short_bytes, iso.cq_decay_ms / 1000, iso.cq_backoff_frames * FRAME_BYTES)
        elif base == "shared":
            q.SetShared()
        if assured:  # the elephants' HTB class is assured this share of the port (topology.queues.queue_specs)
            q.SetMinRate(rate_bps * iso.elephant_min_share / 8, ASSURED_BURST_FRAMES * FRAME_BYTES)
        if "ecn" in mods:
            k = iso.ecn_k_frames * FRAME_BYTES
            q.SetEcn(0 if two else k, k if two else 0)
        return q

    def switch_port(sw: str, port: int, dev, peer: str, peer_mac: int, rate_bps: float) -> None:
        next_addr[0] += 1
        node = net.nodes[sw]
        if own:
            qd = port_queue(dev, rate_bps=rate_bps)
            fw.Attach(qd, net.switches[sw], node.GetId())
        elif base == "strict":
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
    host_queues = {}
    for h in fabric.hosts:
        rate = fabric.capacity_bps((h.name, h.switch))
        devs = fw.Link(net.nodes[h.name], net.nodes[h.switch], rate, link_delay_s, mtu)
        if host_send == "unshaped":
            fw.SetRate(devs.Get(0), rate * 100)
        elif host_send != "link":
            raise NetError(f"host_send: 'link' or 'unshaped', got {host_send!r}")
        host_queues[h.name] = port_queue(devs.Get(0), host=True) if "pfc" in mods else fw.HostQueue(devs.Get(0))
        fw.Interface(net.nodes[h.name], devs.Get(0), int(ipaddress.IPv4Address(h.ip)), 0xFF000000)
        switch_port(h.switch, h.port, devs.Get(1), h.name, mac_int(h.mac), rate)
    if "pfc" in mods:  # each switch pauses the queue at the other end of each of its ports
        for sw in net.switches.values():
            sw.SetPfc(iso.pfc_xoff_bytes, iso.pfc_xon_bytes, iso.elephant_dscp, base == "fifo")
        for (sw, port), p in net.ports.items():
            peer = p.peer
            up = host_queues[peer] if peer in host_queues else net.ports[
                (peer, fabric.port_to(peer, sw))].queue
            net.switches[sw].Upstream(port, up, link_delay_s)
    net.host_queues = host_queues
    return net


def _port_mac(switch: str, port: int) -> int:
    """A MAC for a switch port (what a frame from it carries as its source): stable, locally administered."""
    return (0x02 << 40) | (zlib.crc32(f"{switch}:{port}".encode()) << 8)
