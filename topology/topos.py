"""Mininet topologies for Freeway fabrics, built from the fabric description.

Usable by the project's builder and by plain Mininet:

    mn --custom topology/topos.py --topo fattree,4 --switch ovs,datapath=user \
       --controller freeway,ip=127.0.0.1,port=6653

(``--controller freeway`` is Mininet's remote controller checked with a TCP connect: Mininet's own
``remote`` check runs telnet and decodes what the controller says first, an OpenFlow HELLO that is
not UTF-8, and fails now and then with a UnicodeDecodeError.)

Switches get the description's datapath ids and port numbers, OpenFlow 1.3,
fail-mode secure and the userspace datapath; hosts get 10.pod.edge.host
addresses, fixed MACs, and TCP checksum offload turned off (the userspace
datapath needs that for TCP to work between namespaces).
"""

import inspect
import os
import socket
import sys

if __package__ in (None, ""):  # loaded by 'mn --custom' (exec'd without __file__): make the project importable
    _here = os.path.abspath(inspect.currentframe().f_code.co_filename)
    sys.path.insert(0, os.path.dirname(os.path.dirname(_here)))

from mininet.log import warn  # noqa: E402
from mininet.node import Host, RemoteController  # noqa: E402
from mininet.topo import Topo  # noqa: E402

from topology.fabric import Fabric, fattree, leafspine  # noqa: E402

SWITCH_OPTS = {"datapath": "user", "protocols": "OpenFlow13", "failMode": "secure"}


class FreewayHost(Host):
    """A Mininet host with checksum offload and IPv6 off on its interfaces."""

    def config(self, **params):
        r = super().config(**params)
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd(f"ethtool -K {intf.name} tx off >/dev/null 2>&1")
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
        return r


class FabricTopo(Topo):
    """Any fabric description as a Mininet topology."""

    def build(self, fabric: Fabric, dbs: dict | None = None):
        """``dbs``: switch -> the OVSDB of the Open vSwitch process it runs in (``topology.ovsproc``)."""
        self.fabric = fabric
        for sw in fabric.switches.values():
            extra = {"db": dbs[sw.name]} if dbs else {}
            self.addSwitch(sw.name, dpid="%016x" % sw.dpid, **SWITCH_OPTS, **extra)
        for h in fabric.hosts:
            self.addHost(h.name, ip=f"{h.ip}/8", mac=h.mac, cls=FreewayHost)
            self.addLink(h.name, h.switch, port1=0, port2=h.port)
        for ln in fabric.links:
            self.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port)


class FatTree(FabricTopo):
    """k-ary fat-tree (even k >= 4)."""

    def __init__(self, k=4, rate=10, **opts):
        super().__init__(fattree(int(k), float(rate)), **opts)


class LeafSpine(FabricTopo):
    """Leaf-spine: every leaf connected to every spine."""

    def __init__(self, spines=2, leaves=4, hosts_per_leaf=2, rate=10, **opts):
        super().__init__(leafspine(int(spines), int(leaves), int(hosts_per_leaf), float(rate)), **opts)


class FreewayController(RemoteController):
    """A remote controller (``--controller freeway,ip=IP,port=PORT``) that Mininet finds listening by a plain
    TCP connect. Mininet's own check pipes telnet's output through UTF-8, and the first bytes a controller
    sends are an OpenFlow HELLO: now and then it failed with a UnicodeDecodeError."""

    def isListening(self, ip, port):
        try:
            with socket.create_connection((ip, int(port)), timeout=2):
                return True
        except OSError:
            warn(f"Unable to contact the remote controller at {ip}:{port}\n")
            return False


topos = {"fattree": FatTree, "leafspine": LeafSpine}
controllers = {"freeway": FreewayController}
