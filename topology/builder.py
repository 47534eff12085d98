"""Bring a fabric up on Open vSwitch under Mininet, shape it, and tear it down.

Link rate is enforced on every switch egress port with Open vSwitch QoS
records (linux-htb, max-rate), so it is real OVS configuration
(``ovs-vsctl list qos``) that later features extend with priority queues.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from topology.fabric import Fabric
from topology.sflow_agent import SFlowAgentConfig

QOS_TAG = "external-ids:freeway=1"
# Packets each switch port can queue without isolation: the same as isolation's mice and elephant queues
# together (60 + 40, ryu_apps/programs/isolation.py), so that every mode is compared with the same buffers.
PORT_QUEUE_PKTS = 100


class BuildError(RuntimeError):
    """The fabric cannot be built here; the message says why."""


def db_args(db: str | None) -> list[str]:
    """ovs-vsctl's --db for one switch process's database (none for the system's)."""
    return [f"--db={db}"] if db else []


def vsctl(*args: str, timeout: float = 60) -> str:
    r = subprocess.run(["ovs-vsctl", "--timeout=30", *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise BuildError(f"ovs-vsctl {' '.join(args[:3])}...: {r.stderr.strip()}")
    return r.stdout


def check_environment() -> None:
    """Root, Mininet and a running Open vSwitch are needed; say which is missing."""
    if os.geteuid() != 0:
        raise BuildError("building a fabric needs root (Mininet creates network namespaces)")
    for tool in ("ovs-vsctl", "mnexec", "ethtool"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} not found: run 'make install' first")
    r = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError("Open vSwitch is not running: start it with "
                         "'/usr/share/openvswitch/scripts/ovs-ctl start' (or 'make install')")
    have = send_buffer_bytes()
    if have < SEND_BUFFER_MIN:
        raise BuildError(f"Open vSwitch's packet send buffer is {have} bytes, below {SEND_BUFFER_MIN}: every port "
                         "of the userspace datapath sends through one packet socket, and packets waiting in any "
                         "port's queue count against its buffer, so sends fail and packets vanish uncounted. "
                         "Run 'make install' (it sets net.core.wmem_default and restarts ovs-vswitchd when no "
                         "bridge exists)")


# ovs-vswitchd (userspace datapath) sends on every system port through one AF_PACKET socket, created at
# its first send with net.core.wmem_default as its buffer. Packets queued in a port's tc qdisc stay
# charged to that buffer, so the buffer caps the packets queued in the whole fabric: at Linux's default
# (208 KB, about 90 full-size packets) sends fail with EAGAIN, ovs-vswitchd drops the packet (logging
# "error sending Ethernet packet ... Resource temporarily unavailable"), and no drop counter shows it.
# Under the mixed experiment that lost 6-14% of a ping's packets, mice SYNs included.
SEND_BUFFER_MIN = 16 * 1024 * 1024


def send_buffer_bytes() -> int:
    """The send buffer of ovs-vswitchd's shared packet socket; net.core.wmem_default if it has none yet."""
    r = subprocess.run(["ss", "-0", "-m", "-n", "-p"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if '"ovs-vswitchd"' in line and "[0]:*" in line:
            m = re.search(r"tb(\d+)", line)
            if m:
                return int(m.group(1))
    try:
        return int(Path("/proc/sys/net/core/wmem_default").read_text())
    except (OSError, ValueError):
        return 0


def check_controller(host: str, port: int, wait: float = 10.0) -> None:
    """Wait up to ``wait`` seconds for something to accept TCP at the controller address."""
    deadline = time.monotonic() + wait
    last = "no answer"
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as e:
            last = e.strerror or str(e)
        if time.monotonic() >= deadline:
            raise BuildError(f"--controller: no controller reachable at {host}:{port} ({last})")
        time.sleep(0.2)


def switch_ports(fabric: Fabric) -> list[tuple[str, int, float]]:
    """(switch, port, Mbit/s) of every switch port."""
    ports = [(ln.a, ln.a_port, ln.capacity_mbps) for ln in fabric.links]
    ports += [(ln.b, ln.b_port, ln.capacity_mbps) for ln in fabric.links]
    ports += [(h.switch, h.port, fabric.capacity_bps((h.name, h.switch)) / 1e6) for h in fabric.hosts]
    return ports


def shape_ports(fabric: Fabric, isolation=None, mtu: int = 1500, db_of: dict[str, str | None] | None = None) -> int:
    """Put a linux-htb QoS record with max-rate on every switch port; returns the port count.

    Each port's FIFO holds ``PORT_QUEUE_PKTS`` standard frames (``queues.fifo``: in bytes with jumbo frames).
    With isolation the controller creates each port's QoS and queues itself (``ryu_apps.control.queue_keeper``): the
    builder leaves the ports to it and adds only the tc steps once the queues are there."""
    if isolation is not None:
        return 0
    cmds: dict[str | None, list[str]] = {}
    n = 0
    for sw, port, mbps in switch_ports(fabric):
        bps = int(mbps * 1_000_000)
        cmds.setdefault((db_of or {}).get(sw), []).extend([
            "--", "set", "port", f"{sw}-eth{port}", f"qos=@q{n}",
            "--", f"--id=@q{n}", "create", "qos", "type=linux-htb", f"other-config:max-rate={bps}",
            QOS_TAG, f"queues:0=@r{n}",
            "--", f"--id=@r{n}", "create", "queue", f"other-config:max-rate={bps}", QOS_TAG])
        n += 1
    for db, cmd in cmds.items():
        vsctl(*db_args(db), *cmd[1:], timeout=300)
    from topology.queues import fifo

    for sw, port, _ in switch_ports(fabric):  # the same buffer as isolation's two queues together
        c = ["tc", "qdisc", "replace", "dev", f"{sw}-eth{port}", "parent", "1:1", "handle", "10:",
             *fifo(PORT_QUEUE_PKTS, mtu)]
        r = subprocess.run(c, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"{' '.join(c[:5])}...: {r.stderr.strip()}")
    return n


def isolation_tc(fabric: Fabric, iso, mtu: int = 1500) -> int:
    """The emulator-only half of isolation: tc filters mapping the DSCP marks to the HTB classes of the
    queues the controller created (the userspace datapath's ``set_queue`` does not steer), and each
    class's FIFO length. Returns the port count."""
    from topology.queues import tc_commands

    ports = switch_ports(fabric)
    for sw, port, _ in ports:
        for c in tc_commands(f"{sw}-eth{port}", iso, mtu):
            r = subprocess.run(c, capture_output=True, text=True)
            if r.returncode != 0:
                raise BuildError(f"{' '.join(c[:6])}...: {r.stderr.strip()}")
    return len(ports)


def queues_set(fabric: Fabric, dbs: list[str | None] = (None,)) -> tuple[int, int]:
    """(ports whose QoS has the mice and elephant queues, switch ports): how far the controller is."""
    from topology.queues import held, read

    have = {key: h for db in dbs for key, h in held(fabric, read(db)).items()}
    want = {(sw, port) for sw, port, _ in switch_ports(fabric)}
    done = sum(1 for key in want if (h := have.get(key)) is not None and h.qos is not None
               and {n for n, _ in h.qos.queues} >= {0, 1})
    return done, len(want)


def black_hole(dev: str, on: bool = True) -> None:
    """A silent one-way link failure for tests and benchmarks: everything ``dev`` sends goes into an 8
    bit/s HTB class with a one-packet queue (lost), while both ports stay up. tc's drop action would be
    simpler, but this kernel cannot load it."""
    cmds = (f"class add dev {dev} parent 1: classid 1:99 htb rate 8bit ceil 8bit burst 2b cburst 2b quantum 1500\n"
            f"qdisc add dev {dev} parent 1:99 handle 99: pfifo limit 1\n"
            f"filter add dev {dev} parent 1: protocol all prio 1 u32 match u32 0 0 flowid 1:99\n") if on else (
            f"filter del dev {dev} parent 1: prio 1\nclass del dev {dev} classid 1:99\n")
    r = subprocess.run(["tc", "-b", "-"], input=cmds, text=True, capture_output=True)
    if r.returncode != 0:
        raise BuildError(f"tc on {dev}: {r.stderr.strip()}")


def remove_qos() -> None:
    """Destroy the QoS, Queue and sFlow records Freeway created (tagged external-ids:freeway=1)."""
    for table in ("qos", "queue", "sflow"):
        out = subprocess.run(["ovs-vsctl", "--timeout=30", "--bare", "--columns=_uuid", "find", table,
                              "external-ids:freeway=1"], capture_output=True, text=True).stdout
        uuids = out.split()
        if uuids:
            args: list[str] = []
            for u in uuids:
                args += ["--", "--if-exists", "destroy", table, u]
            subprocess.run(["ovs-vsctl", "--timeout=30", *args[1:]], capture_output=True)


NEIGH_KEYS = ("net.ipv4.neigh.default.gc_thresh1", "net.ipv4.neigh.default.gc_thresh2",
              "net.ipv4.neigh.default.gc_thresh3")


def neighbour_limits(n_hosts: int) -> tuple[int, int, int]:
    """ARP-table thresholds for a fabric of ``n_hosts``. The kernel's neighbour table and its limits are
    shared by every network namespace, so all hosts' ARP caches count together: a full ping sweep of a
    k=8 fat-tree makes 128 x 127 = 16,256 entries, right at Mininet's own gc_thresh3 of 16,384. Beyond
    it, new entries fail and packets are dropped ("neighbor table overflow"). Keep every entry (thresh1)
    with room to spare."""
    need = max(4096, 2 * n_hosts * n_hosts)
    return need, 2 * need, 4 * need


def raise_neighbour_limits(n_hosts: int) -> None:
    """Raise (never lower) the kernel's ARP-table thresholds for this many hosts."""
    for key, want in reversed(list(zip(NEIGH_KEYS, neighbour_limits(n_hosts), strict=True))):  # top first
        path = Path("/proc/sys") / key.replace(".", "/")
        if int(path.read_text()) < want:
            path.write_text(str(want))


def quiet_switch_interfaces(net) -> None:
    """Turn IPv6 off on the switches' veths (they live in the root namespace): otherwise the kernel's
    own router solicitations and MLD reports go out on fabric links and show up in port counters."""
    keys = [f"net.ipv6.conf.{intf.name.replace('.', '/')}.disable_ipv6=1"
            for sw in net.switches for intf in sw.intfList() if intf.name != "lo"]
    for i in range(0, len(keys), 200):
        subprocess.run(["sysctl", "-q", "-w", *keys[i:i + 200]], capture_output=True)


def set_mtu(net, mtu: int) -> None:
    """Every interface of the fabric, hosts' and switches', at ``mtu`` bytes. Done before the switches
    start, so that Open vSwitch reads the new MTU when it adds each port (its receive buffers and its
    HTB classes' quantum follow it)."""
    names = [intf.name for sw in net.switches for intf in sw.intfList() if intf.name != "lo"]
    r = subprocess.run(["ip", "-batch", "-"], input="".join(f"link set dev {n} mtu {mtu}\n" for n in names),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"mtu {mtu} on the switches' interfaces: {r.stderr.strip()[-300:]}")
    for h in net.hosts:
        for intf in h.intfList():
            if intf.name != "lo":
                out = h.cmd(f"ip link set dev {intf.name} mtu {mtu}; echo rc=$?")
                if not out.strip().endswith("rc=0"):
                    raise BuildError(f"mtu {mtu} on {h.name}'s {intf.name}: {out.strip()[-200:]}")


LINUX_TCP = {"newreno": "reno"}  # ns-3's names to Linux's


def set_congestion_control(hosts, name: str | None) -> str | None:
    """Every host's TCP congestion control ``name`` (ns-3's names: newreno is Linux's reno); None leaves
    the machine's default. A host's namespace may only take an algorithm in the machine's
    ``tcp_allowed_congestion_control`` (Linux refuses others with EPERM): ``name`` is added to it. Returns what the hosts run, read back; raises BuildError naming the host and
    what this kernel offers when one refuses."""
    want = LINUX_TCP.get(name, name) if name else None
    if want and not re.fullmatch(r"[a-z0-9_]+", want):
        raise BuildError(f"tcp: {name!r} is not a congestion control's name")
    if want:
        subprocess.run(["modprobe", "-q", f"tcp_{want}"], capture_output=True)  # built in, or a module
        # a namespace other than the machine's may only take an algorithm the machine allows
        allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        have = allowed.read_text().split()
        if want not in have:
            subprocess.run(["sysctl", "-q", "-w", f"net.ipv4.tcp_allowed_congestion_control={' '.join(have + [want])}"],
                           capture_output=True)
    ran = None
    for h in hosts:
        out = h.cmd((f"sysctl -q -w net.ipv4.tcp_congestion_control={want} >/dev/null 2>&1; " if want else "")
                    + "cat /proc/sys/net/ipv4/tcp_congestion_control").strip().splitlines()
        ran = out[-1].strip() if out else ""
        if want and ran != want:
            have = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
            raise BuildError(f"tcp: {h.name} runs {ran!r}, not {want!r} (this kernel offers {', '.join(have)})")
    return {v: k for k, v in LINUX_TCP.items()}.get(ran, ran)


def programmed_switches(names) -> int:
    """How many of these bridges hold flows (the controller has programmed them).

    OVSDB's Controller.is_connected is refreshed only every few seconds, so the
    flow table is the faster and more meaningful signal.
    """
    n = 0
    for name in names:
        out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-aggregate", name], capture_output=True,
                             text=True).stdout
        m = re.search(r"flow_count=(\d+)", out)
        n += bool(m and int(m.group(1)) > 0)
    return n


def fabric_switch_class():
    """Mininet's OVSSwitch for a fabric spread over several Open vSwitch processes (``ovsproc``): each
    switch's ovs-vsctl goes to its own process's database, and the batched start-up runs one
    transaction per process, renaming each datapath's tap before the next process makes its own."""
    from mininet.node import OVSSwitch
    from mininet.util import errRun

    from topology.ovsproc import rename_datapath_tap

    def in_db(run, db, wait=True):
        """``run`` with ovs-vsctl pointed at process ``db``'s database. Never waiting forever for that
        process (it may have died); on the way out not waiting for it at all (it is stopped next)."""
        opts = f"--db={db} --timeout=60" + ("" if wait else " --no-wait")
        return lambda cmd, *a, **kw: run(cmd.replace("ovs-vsctl", f"ovs-vsctl {opts}", 1) if db else cmd, *a, **kw)

    def by_db(switches):
        groups: dict = {}
        for sw in switches:
            groups.setdefault(sw.db, []).append(sw)
        return sorted(groups.items(), key=lambda kv: kv[0] or "")  # the system's process (None) first

    class FabricSwitch(OVSSwitch):
        def __init__(self, name, db=None, **params):
            self.db = db
            super().__init__(name, **params)

        def vsctl(self, *args, **kwargs):
            if self.batch or not self.db:
                return super().vsctl(*args, **kwargs)
            return self.cmd("ovs-vsctl", f"--db={self.db}", *args, **kwargs)

        def stop(self, deleteIntfs=True):
            self.cmd("ovs-vsctl", *db_args(self.db), *(["--no-wait"] if self.db else []), "--if-exists", "del-br", self)
            if self.datapath == "user":
                self.cmd("ip link del", self)
            super(OVSSwitch, self).stop(deleteIntfs)

        @classmethod
        def batchStartup(cls, switches, run=errRun):
            for i, (db, group) in enumerate(by_db(switches)):
                if i:
                    rename_datapath_tap()
                super().batchStartup(group, run=in_db(run, db))
            return switches

        @classmethod
        def batchShutdown(cls, switches, run=errRun):
            for db, group in by_db(switches):
                super().batchShutdown(group, run=in_db(run, db, wait=False))
            return switches

    return FabricSwitch


def _delete_links(net) -> None:
    """Every link whose one end is in the root namespace (a switch's), deleted by one ``ip -batch``: a veth
    pair goes with either end. Mininet deletes each end by a command in its node's shell, two round trips
    a link (1.2 s of a k=4 fabric's 2.7 s to stop); the links deleted here are taken off its list."""
    done, lines = [], []
    for link in net.links:
        end = next((i for i in (link.intf1, link.intf2) if i is not None and not i.node.inNamespace), None)
        if end is not None:
            done.append(link)
            lines.append(f"link del {end.name}\n")
    if not done:
        return
    subprocess.run(["ip", "-force", "-batch", "-"], input="".join(lines), text=True, capture_output=True, timeout=60)
    for link in done:
        for intf in (link.intf1, link.intf2):
            intf.node.delIntf(intf)
        link.intf1 = link.intf2 = None
    gone = set(map(id, done))
    net.links = [ln for ln in net.links if id(ln) not in gone]


class FabricNet:
    """A running fabric: ``with FabricNet(fabric, ("127.0.0.1", 6653)) as fn: fn.net.hosts ...``"""

    def __init__(self, fabric: Fabric, controller: tuple[str, int] | list[tuple[str, int]] = ("127.0.0.1", 6653),
                 shape: bool = True, controller_wait: float = 10.0, sflow: SFlowAgentConfig | None = None,
                 isolation=None, mtu: int = 1500, processes=None, tls: dict | None = None, tcp: str | None = "cubic"):
        """``processes``: a started ``ovsproc.SwitchProcesses`` to spread the switches over (default: all
        in the system's Open vSwitch). ``tls``: ``{"key", "cert", "ca"}`` of the Open vSwitch processes
        (``pki.fabric_pki``'s ``ovs`` and ``ca``): every switch then connects to its controllers over
        TLS (``ssl:`` targets, ``ovs-vsctl set-ssl``). ``tcp``: every host's congestion control (``cubic``,
        ``newreno``, ``bbr``, ...), set in each host's namespace so that a result does not depend on this
        machine's default (a namespace starts with it: Debian's is cubic, some machines run bbr); None
        leaves the machine's. ``self.tcp`` is what the hosts run."""
        from topology.ovsproc import assign
        from topology.queues import SettingError, check_mtu

        try:
            self.mtu = check_mtu(mtu)
        except SettingError as e:
            raise BuildError(str(e)) from None
        self.fabric = fabric
        self.dbs: list[str | None] = processes.dbs if processes is not None else [None]
        where = assign(list(fabric.switches), len(self.dbs))
        self.db_of: dict[str, str | None] = {sw: self.dbs[i] for sw, i in where.items()}
        # one controller, or several (a cluster: every switch connects to every member)
        self.controllers = [controller] if isinstance(controller[0], str) else list(controller)
        self.controller = self.controllers[0]
        self.shape = shape
        self.controller_wait = controller_wait
        self.sflow = sflow
        self.isolation = isolation
        self.tls = tls
        self.tcp = tcp
        self.net = None
        self.timings: dict[str, float] = {}

    def start(self, connect_timeout: float = 60.0) -> FabricNet:
        check_environment()
        for ctl in self.controllers:
            check_controller(*ctl, wait=self.controller_wait)
        from mininet.link import Link
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController

        from topology.topos import FabricTopo, FreewayHost

        class _Remote(RemoteController):
            def checkListening(self):
                """Checked already (``check_controller``). Mininet's own probe (telnet) decodes the
                controller's OpenFlow HELLO as UTF-8 and raises when its random xid is not valid UTF-8."""

        setLogLevel("warning")
        raise_neighbour_limits(len(self.fabric.hosts))
        t0 = time.monotonic()
        net = Mininet(topo=FabricTopo(self.fabric, self.db_of if len(self.dbs) > 1 else None),
                      switch=fabric_switch_class() if len(self.dbs) > 1 else OVSSwitch, host=FreewayHost, link=Link,
                      controller=None, autoSetMacs=False, build=False, waitConnected=False)
        for i, (ip, port) in enumerate(self.controllers):
            net.addController(_Remote(f"ctl{i}" if i else "ctl", ip=ip, port=port,
                                      protocol="ssl" if self.tls else "tcp"))
        self.net = net
        try:
            if self.tls:  # one TLS identity per Open vSwitch process, set before any bridge connects
                for db in self.dbs:
                    vsctl(*db_args(db), "set-ssl", self.tls["key"], self.tls["cert"], self.tls["ca"])
            net.build()
            quiet_switch_interfaces(net)
            if self.mtu != 1500:
                set_mtu(net, self.mtu)
            self.tcp = set_congestion_control(net.hosts, self.tcp)
            net.start()
            self.timings["build_s"] = time.monotonic() - t0
            if self.shape:
                shape_ports(self.fabric, self.isolation, self.mtu, self.db_of)
            if self.sflow is not None:
                self._agent_aliases(True)
                for db in self.dbs:
                    bridges = [sw for sw in self.fabric.switches if self.db_of[sw] == db]
                    if bridges:  # a small fabric may leave a process without a switch
                        vsctl(*db_args(db), *self.sflow.vsctl_args(bridges))
            self.timings["shaped_s"] = time.monotonic() - t0
            self.wait_programmed(connect_timeout)
            self.timings["programmed_s"] = time.monotonic() - t0
            if self.shape and self.isolation is not None:
                self.wait_queues(connect_timeout)
                isolation_tc(self.fabric, self.isolation, self.mtu)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_programmed(self, timeout: float) -> None:
        """Wait until every switch holds the controller's flows."""
        want = len(self.fabric.switches)
        deadline = time.monotonic() + timeout
        while (got := programmed_switches(self.fabric.switches)) < want:
            if time.monotonic() > deadline:
                raise BuildError(f"only {got} of {want} switches were programmed by the controller "
                                 f"within {timeout:.0f} s")
            time.sleep(0.1)

    def wait_queues(self, timeout: float) -> None:
        """With isolation: wait until the controller has given every switch port its two queues."""
        deadline = time.monotonic() + timeout
        while (got := queues_set(self.fabric, self.dbs))[0] < got[1]:
            if time.monotonic() > deadline:
                raise BuildError(f"the controller set the isolation queues on only {got[0]} of {got[1]} switch "
                                 f"ports within {timeout:.0f} s (is it running with --isolation on?)")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.net is not None:
            for h in self.net.hosts:  # a host still running a command cannot be torn down
                if h.waiting:
                    h.sendInt()
                    try:
                        h.waitOutput()
                    except Exception:  # noqa: BLE001 - best effort on the way out
                        h.waiting = False
            try:
                try:
                    _delete_links(self.net)
                except Exception:  # noqa: BLE001 - Mininet's own link by link, below, deletes what is left
                    pass
                self.net.stop()
            finally:
                self.net = None
                remove_qos()  # the extra switch processes' databases go with their processes
                self._agent_aliases(False)
                if self.tls:
                    vsctl("del-ssl")

    def _agent_aliases(self, add: bool) -> None:
        """Per-bridge sFlow agent addresses in 127/8 are given to the loopback (Open vSwitch sends from them):
        an emulation of switches on many hosts, each exporting under its own address."""
        if self.sflow is None:
            return
        for ip in self.sflow.agent_addresses(list(self.fabric.switches)).values():
            if ip.startswith("127."):
                subprocess.run(["ip", "addr", "add" if add else "del", f"{ip}/32", "dev", "lo"], capture_output=True)

    def __enter__(self) -> FabricNet:
        return self.start() if self.net is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----- checks run on the hosts --------------------------------------
    def host(self, name: str):
        return self.net.get(name)

    def ping_matrix(self, pairs: list[tuple[str, str]] | None = None, wait_s: float = 2) -> list[tuple[str, str]]:
        """Ping every pair once (all sources in parallel); return the pairs that failed."""
        hosts = {h.name: h for h in self.fabric.hosts}
        if pairs is None:
            pairs = [(a, b) for a in hosts for b in hosts if a != b]
        by_src: dict[str, list[str]] = {}
        for a, b in pairs:
            by_src.setdefault(a, []).append(hosts[b].ip)
        for src, ips in by_src.items():
            script = ("for ip in %s; do ping -n -c1 -W%g -q $ip >/dev/null 2>&1 || echo FAIL $ip; done; echo DONE"
                      % (" ".join(ips), wait_s))
            self.host(src).sendCmd(script)
        by_ip = {h.ip: h.name for h in self.fabric.hosts}
        failed = []
        for src in by_src:
            out = self.host(src).waitOutput()
            failed += [(src, by_ip[w.split()[1]]) for w in out.splitlines() if w.startswith("FAIL ")]
        return failed

    def static_neighbours(self) -> None:
        """Give every host every other host's MAC as a permanent neighbour entry: no ARP at all from
        then on (a diagnosis aid: it takes the controller's proxy ARP out of the path)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="freeway-neigh-") as d:
            for h in self.fabric.hosts:
                node = self.host(h.name)
                f = Path(d) / h.name
                f.write_text("".join(f"neigh replace {o.ip} lladdr {o.mac} dev {node.defaultIntf()} nud permanent\n"
                                     for o in self.fabric.hosts if o.name != h.name))
                out = node.cmd(f"ip -batch {f}; echo rc=$?")
                if not out.strip().endswith("rc=0"):
                    raise BuildError(f"{h.name}: static neighbours not set: {out.strip()[-200:]}")

    def wait_reachable(self, timeout: float = 60.0) -> tuple[float, list[tuple[str, str]]]:
        """Retry the failing pairs until every host reaches every host; (seconds, still failing)."""
        t0 = time.monotonic()
        failed = self.ping_matrix()
        while failed and time.monotonic() - t0 < timeout:
            time.sleep(0.5)
            failed = self.ping_matrix(failed)
        return time.monotonic() - t0, failed

    def iperf_server(self, host: str, port: int, timeout: float = 10.0) -> None:
        """An iperf3 server on ``host`` for one client (``-1``), started in the background, once it listens:
        ``iperf3 -D`` returns before its daemon has bound the port, and a client started at once on a busy
        machine was refused, sent nothing, and its announced elephant expired under a test's eyes."""
        h = self.host(host)
        h.cmd(f"iperf3 -s -1 -p {port} -D >/dev/null 2>&1")
        t0 = time.monotonic()
        while f":{port} " not in h.cmd(f"ss -Htln 'sport = :{port}'") + " ":
            if time.monotonic() - t0 > timeout:
                raise BuildError(f"iperf3 on {host} does not listen on port {port} after {timeout:.0f} s")
            time.sleep(0.05)

    def iperf(self, src: str, dst: str, seconds: float = 5, cport: int | None = None,
              port: int = 5201) -> float:
        """TCP goodput in Mbit/s from ``src`` to ``dst`` measured by iperf3 at the receiver."""
        s, d = self.host(src), self.host(dst)
        self.iperf_server(dst, port)
        extra = f" --cport {cport}" if cport else ""
        out = s.cmd(f"iperf3 -c {d.IP()} -p {port} -t {seconds} -J{extra}")
        try:
            return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
        except (ValueError, KeyError) as e:
            raise BuildError(f"iperf3 {src}->{dst} gave no result: {out.strip()[-200:]}") from e


def port_tx_bytes(switch: str, port: int | None = None) -> dict[int, int]:
    """Bytes each OpenFlow port of ``switch`` has transmitted (``ovs-ofctl dump-ports``)."""
    out = ofctl("dump-ports", switch, *([str(port)] if port is not None else []))
    return {int(m.group(1)): int(m.group(2)) for m in
            re.finditer(r"port\s+(\d+): rx pkts=\d+, bytes=\d+.*?\n\s+tx pkts=\d+, bytes=(\d+)", out, re.S)}


def ofctl(*args: str) -> str:
    """``ovs-ofctl -O OpenFlow13 ...`` output (what a switch holds)."""
    return subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True, text=True,
                          check=True).stdout
