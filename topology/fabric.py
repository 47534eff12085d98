"""Fabric description: switches, links and hosts of a Clos fabric, as plain data.

The description is the one source of truth shared by the Mininet builder (which
creates exactly these switches, ports and addresses) and the controller (which
programs forwarding from it). It is pure: no Mininet, no sockets, no clock.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

FORMAT_VERSION = 1

# Role codes go into the datapath id: 0xRRRR_PPPPPP_IIIIII (role, pod, index).
ROLE_CODES = {"core": 1, "agg": 2, "edge": 3, "spine": 4, "leaf": 5}
# Level in the tree: 0 for ToRs, growing upward. Forwarding goes down by
# prefix and up through the ECMP group.
ROLE_LEVEL = {"edge": 0, "leaf": 0, "agg": 1, "spine": 1, "core": 2}
TOR_ROLES = ("edge", "leaf")
TOPOS = ("fattree", "leafspine")


class FabricError(ValueError):
    """An invalid fabric description or parameter; the message names the problem."""


@dataclass(frozen=True)
class Switch:
    name: str
    role: str
    pod: int
    index: int
    dpid: int

    @property
    def is_tor(self) -> bool:
        return self.role in TOR_ROLES

    @property
    def level(self) -> int:
        return ROLE_LEVEL[self.role]


@dataclass(frozen=True)
class Link:
    """A bidirectional switch-to-switch link, with the port number on each side."""

    a: str
    a_port: int
    b: str
    b_port: int
    capacity_mbps: float


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    switch: str
    port: int
    capacity_mbps: float | None = None  # its access link's speed (None: the fabric's link_rate_mbps)


def make_dpid(role: str, pod: int, index: int) -> int:
    """Deterministic datapath id encoding role, pod and index (readable in hex)."""
    return (ROLE_CODES[role] << 48) | (pod << 24) | index


def host_mac(ip: str) -> str:
    """A locally administered MAC derived from the host's IPv4 address."""
    b = ipaddress.IPv4Address(ip).packed
    return "02:00:%02x:%02x:%02x:%02x" % tuple(b)


@dataclass
class Fabric:
    """A validated fabric description with the look-ups the controller needs."""

    topo: str
    params: dict
    link_rate_mbps: float
    switches: dict[str, Switch]
    links: list[Link]
    hosts: list[Host]
    _port_peer: dict = field(default_factory=dict, repr=False)
    _port_to: dict = field(default_factory=dict, repr=False)
    _by_dpid: dict = field(default_factory=dict, repr=False)
    _by_ip: dict = field(default_factory=dict, repr=False)
    _hosts_on: dict = field(default_factory=dict, repr=False)
    _below: dict = field(default_factory=dict, repr=False)
    _adj: dict = field(default_factory=dict, repr=False)
    _cap: dict = field(default_factory=dict, repr=False)
    _slot: dict = field(default_factory=dict, repr=False)
    _hosts_by_name: dict = field(default_factory=dict, repr=False)
    _cap_bps: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._validate()
        self._index()

    # ----- validation -------------------------------------------------
    def _validate(self) -> None:
        if self.topo not in TOPOS:
            raise FabricError(f"topo: unknown topology {self.topo!r} (expected one of {', '.join(TOPOS)})")
        if not (isinstance(self.link_rate_mbps, (int, float)) and self.link_rate_mbps > 0):
            raise FabricError(f"link_rate_mbps: must be a positive number, got {self.link_rate_mbps!r}")
        if self.topo == "fattree":
            _check_k(self.params.get("k"))
        dpids: dict[int, str] = {}
        for name, sw in self.switches.items():
            if sw.role not in ROLE_CODES:
                raise FabricError(f"switch {name}: unknown role {sw.role!r}")
            if sw.dpid in dpids:
                raise FabricError(f"switch {name}: dpid {sw.dpid:#x} already used by {dpids[sw.dpid]}")
            dpids[sw.dpid] = name
        used_ports: dict[tuple[str, int], str] = {}

        def take(sw: str, port: int, what: str) -> None:
            if sw not in self.switches:
                raise FabricError(f"{what}: switch {sw!r} is not in the description")
            if not isinstance(port, int) or port < 1 or port > 0xFFFFFF00:
                raise FabricError(f"{what}: port {port!r} on {sw} is not a valid OpenFlow port number")
            if (sw, port) in used_ports:
                raise FabricError(f"{what}: port {port} on {sw} already used by {used_ports[(sw, port)]}")
            used_ports[(sw, port)] = what

        for ln in self.links:
            what = f"link {ln.a}:{ln.a_port}-{ln.b}:{ln.b_port}"
            if ln.a == ln.b:
                raise FabricError(f"{what}: a link must join two different switches")
            if not (isinstance(ln.capacity_mbps, (int, float)) and ln.capacity_mbps > 0):
                raise FabricError(f"{what}: capacity_mbps must be positive, got {ln.capacity_mbps!r}")
            take(ln.a, ln.a_port, what)
            take(ln.b, ln.b_port, what)
        names = set(self.switches)
        ips: dict[str, str] = {}
        macs: dict[str, str] = {}
        for h in self.hosts:
            if h.name in names:
                raise FabricError(f"host {h.name}: name already used by a switch or host")
            names.add(h.name)
            try:
                ipaddress.IPv4Address(h.ip)
            except ValueError:
                raise FabricError(f"host {h.name}: ip {h.ip!r} is not an IPv4 address") from None
            if h.ip in ips:
                raise FabricError(f"host {h.name}: duplicate ip {h.ip} (also {ips[h.ip]})")
            ips[h.ip] = h.name
            if h.mac.lower() in macs:
                raise FabricError(f"host {h.name}: duplicate mac {h.mac} (also {macs[h.mac.lower()]})")
            macs[h.mac.lower()] = h.name
            if h.capacity_mbps is not None and not (isinstance(h.capacity_mbps, (int, float)) and h.capacity_mbps > 0):
                raise FabricError(f"host {h.name}: capacity_mbps must be positive, got {h.capacity_mbps!r}")
            take(h.switch, h.port, f"host {h.name}")
            if not self.switches[h.switch].is_tor:
                raise FabricError(f"host {h.name}: attached to {h.switch}, which is not a ToR (edge/leaf)")

    def _index(self) -> None:
        for ln in self.links:
            self._port_peer[(ln.a, ln.a_port)] = (ln.b, ln.b_port)
            self._port_peer[(ln.b, ln.b_port)] = (ln.a, ln.a_port)
            self._port_to[(ln.a, ln.b)] = ln.a_port
            self._port_to[(ln.b, ln.a)] = ln.b_port
            self._adj.setdefault(ln.a, set()).add(ln.b)
            self._adj.setdefault(ln.b, set()).add(ln.a)
            self._cap[(ln.a, ln.b)] = self._cap[(ln.b, ln.a)] = ln.capacity_mbps
        for h in self.hosts:
            self._port_peer[(h.switch, h.port)] = (h.name, 0)
            self._hosts_on.setdefault(h.switch, []).append(h)
            self._by_ip[h.ip] = h
            self._hosts_by_name[h.name] = h
        # every directed link's capacity in bit/s, access links both ways: asked for per link per elephant
        # each period (at k=48 working it out again was about a tenth of a period, 2026-12-04)
        self._cap_bps = {ln: mbps * 1e6 for ln, mbps in self._cap.items()}
        for h in self.hosts:
            bps = (h.capacity_mbps or self.link_rate_mbps) * 1e6
            self._cap_bps[(h.name, h.switch)] = self._cap_bps[(h.switch, h.name)] = bps
        for hosts in self._hosts_on.values():
            for n, h in enumerate(sorted(hosts, key=lambda h: h.port)):
                self._slot[h.name] = n + 1
        self._by_dpid = {sw.dpid: sw for sw in self.switches.values()}
        self._adj = {n: sorted(peers, key=self._order) for n, peers in self._adj.items()}
        # asked for millions of times when a k=48 fabric's programs are computed: kept, copied on the way out
        self._ups = {s: tuple(n for n in self._adj.get(s, ()) if self.switches[n].level > sw.level)
                     for s, sw in self.switches.items()}
        self._downs = {s: tuple(n for n in self._adj.get(s, ()) if self.switches[n].level < sw.level)
                       for s, sw in self.switches.items()}
        self._tors = tuple(sorted((s.name for s in self.switches.values() if s.is_tor), key=self._order))
        for sw in sorted(self.switches.values(), key=lambda s: s.level):
            below = list(self._hosts_on.get(sw.name, []))
            for n in self.down_neighbors(sw.name):
                below.extend(self._below[n])
            self._below[sw.name] = below

    # ----- look-ups ----------------------------------------------------
    def switch_by_dpid(self, dpid: int) -> Switch | None:
        return self._by_dpid.get(dpid)

    def host_by_ip(self, ip: str) -> Host | None:
        return self._by_ip.get(ip)

    def host(self, name: str) -> Host | None:
        return self._hosts_by_name.get(name)

    def hosts_on(self, switch: str) -> list[Host]:
        return list(self._hosts_on.get(switch, []))

    def host_slot(self, h: Host) -> int:
        """The host's place (1, 2, ...) among its switch's hosts, by port: what per-host ids (meters)
        are numbered by, so that they never depend on how the switch numbers its ports."""
        return self._slot[h.name]

    def hosts_below(self, switch: str) -> list[Host]:
        """Hosts reachable from ``switch`` going only downward in the tree."""
        return list(self._below[switch])

    def peer(self, switch: str, port: int) -> tuple[str, int] | None:
        """What is at the other end of (switch, port): (switch or host name, port)."""
        return self._port_peer.get((switch, port))

    def port_to(self, switch: str, neighbor: str) -> int:
        """The port of ``switch`` that faces ``neighbor``."""
        return self._port_to[(switch, neighbor)]

    def neighbors(self, switch: str) -> list[str]:
        return list(self._adj.get(switch, ()))

    def up_neighbors(self, switch: str) -> list[str]:
        return list(self._ups[switch])

    def down_neighbors(self, switch: str) -> list[str]:
        return list(self._downs[switch])

    def tors(self) -> list[str]:
        return list(self._tors)

    def capacity(self, a: str, b: str) -> float:
        """Capacity in Mbit/s of the link between two switches."""
        return self._cap[(a, b)]

    def capacity_bps(self, link: tuple[str, str]) -> float:
        """Capacity in bit/s of a directed link: between switches from the description, a host's
        access link at its own speed if the description gives one, else at the fabric's link rate."""
        bps = self._cap_bps.get(link)
        if bps is None:  # (a pair the fabric does not join: a named host's speed, else the fabric's rate)
            h = self._hosts_by_name.get(link[0]) or self._hosts_by_name.get(link[1])
            bps = (h.capacity_mbps if h is not None and h.capacity_mbps else self.link_rate_mbps) * 1e6
        return bps

    def min_capacity_bps(self) -> float:
        """The slowest link's capacity in bit/s (switch links and access links)."""
        if getattr(self, "_min_cap_bps", None) is None:
            rates = [*self._cap.values(), self.link_rate_mbps, *(h.capacity_mbps for h in self.hosts if h.capacity_mbps)]
            self._min_cap_bps = min(rates) * 1e6
        return self._min_cap_bps

    def host_rate_bps(self, ip: str) -> float:
        """The access link speed of the host with this address (the fabric's link rate if unknown)."""
        h = self._by_ip.get(ip)
        return (h.capacity_mbps if h is not None and h.capacity_mbps else self.link_rate_mbps) * 1e6

    def _order(self, name: str) -> tuple[int, int, int]:
        sw = self.switches[name]
        return (sw.level, sw.pod, sw.index)

    # ----- serialisation ----------------------------------------------
    def to_dict(self) -> dict:
        return {
            "version": FORMAT_VERSION,
            "topo": self.topo,
            "params": self.params,
            "link_rate_mbps": self.link_rate_mbps,
            "switches": [asdict(s) for s in self.switches.values()],
            "links": [asdict(ln) for ln in self.links],
            "hosts": [{k: v for k, v in asdict(h).items() if k != "capacity_mbps" or v is not None}
                      for h in self.hosts],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, d: object) -> Fabric:
        if not isinstance(d, dict):
            raise FabricError("description: top level must be a JSON object")
        for key in ("version", "topo", "params", "link_rate_mbps", "switches", "links", "hosts"):
            if key not in d:
                raise FabricError(f"description: missing key {key!r}")
        if d["version"] != FORMAT_VERSION:
            raise FabricError(f"version: unsupported description version {d['version']!r} (this Freeway reads {FORMAT_VERSION})")
        if not isinstance(d["params"], dict):
            raise FabricError("params: must be an object")
        switches: dict[str, Switch] = {}
        for i, s in enumerate(_list(d, "switches")):
            sw = _record(Switch, s, f"switches[{i}]", {"name": str, "role": str, "pod": int, "index": int, "dpid": int})
            if sw.name in switches:
                raise FabricError(f"switches[{i}]: duplicate switch name {sw.name!r}")
            switches[sw.name] = sw
        links = [
            _record(Link, ln, f"links[{i}]", {"a": str, "a_port": int, "b": str, "b_port": int, "capacity_mbps": (int, float)})
            for i, ln in enumerate(_list(d, "links"))
        ]
        hosts = [
            _record(Host, h, f"hosts[{i}]", {"name": str, "ip": str, "mac": str, "switch": str, "port": int},
                    {"capacity_mbps": (int, float)})
            for i, h in enumerate(_list(d, "hosts"))
        ]
        return cls(d["topo"], d["params"], d["link_rate_mbps"], switches, links, hosts)

    @classmethod
    def load(cls, path: str | Path) -> Fabric:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise FabricError(f"cannot read fabric description {path}: {e.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise FabricError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        return cls.from_dict(data)


def _list(d: dict, key: str) -> list:
    if not isinstance(d[key], list):
        raise FabricError(f"{key}: must be a list")
    return d[key]


def _record(cls, obj: object, where: str, types: dict, optional: dict | None = None):
    if not isinstance(obj, dict):
        raise FabricError(f"{where}: must be an object")
    for key, typ in {**types, **(optional or {})}.items():
        if key not in obj:
            if key in types:
                raise FabricError(f"{where}: missing key {key!r}")
            continue
        val = obj[key]
        if isinstance(val, bool) or not isinstance(val, typ):
            raise FabricError(f"{where}.{key}: wrong type {type(val).__name__}")
    extra = set(obj) - set(types) - set(optional or {})
    if extra:
        raise FabricError(f"{where}: unknown key {sorted(extra)[0]!r}")
    return cls(**obj)


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 4 or k % 2:
        raise FabricError(f"k: a fat-tree needs an even k >= 4, got {k!r}")
    if k > 254:
        raise FabricError(f"k: {k} is too large for 10.pod.edge.host addressing (at most 254)")
    return k


def fattree(k: int, rate_mbps: float = 10.0, hosts_per_edge: int | None = None) -> Fabric:
    """A k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation
    switches, (k/2)^2 cores, k/2 hosts per edge switch at 10.pod.edge.(2..k/2+1)
    (``hosts_per_edge`` other than k/2: an oversubscribed edge, as the Freeway
    paper's k=8 with 10 servers a rack).

    Ports: edge 1..n hosts (n = hosts per edge), n+1..n+k/2 aggregation j;
    aggregation 1..k/2 edge i, k/2+1..k core; core c (1-based) port p+1 to pod p.
    Aggregation j of every pod connects to cores j*k/2+1 .. (j+1)*k/2, so core
    numbers sort paths.
    """
    _check_k(k)
    h = k // 2
    n = h if hosts_per_edge is None else hosts_per_edge
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 250:
        raise FabricError(f"hosts_per_edge: a whole number from 1 to 250, got {hosts_per_edge!r}")
    switches: dict[str, Switch] = {}
    links: list[Link] = []
    hosts: list[Host] = []

    def add(name: str, role: str, pod: int, index: int) -> None:
        switches[name] = Switch(name, role, pod, index, make_dpid(role, pod, index))

    for c in range(1, h * h + 1):
        add(f"c{c}", "core", 0, c)
    for p in range(k):
        for i in range(h):
            add(f"a{p}_{i}", "agg", p, i)
        for i in range(h):
            add(f"e{p}_{i}", "edge", p, i)
        for e in range(h):
            for j in range(h):
                links.append(Link(f"e{p}_{e}", n + 1 + j, f"a{p}_{j}", 1 + e, rate_mbps))
        for j in range(h):
            for m in range(h):
                links.append(Link(f"a{p}_{j}", h + 1 + m, f"c{j * h + m + 1}", p + 1, rate_mbps))
        for e in range(h):
            for x in range(n):
                ip = f"10.{p}.{e}.{x + 2}"
                hosts.append(Host(f"h{p}_{e}_{x}", ip, host_mac(ip), f"e{p}_{e}", 1 + x))
    params = {"k": k} if n == h else {"k": k, "hosts_per_edge": n}
    return Fabric("fattree", params, rate_mbps, switches, links, hosts)


def leafspine(spines: int, leaves: int, hosts_per_leaf: int, rate_mbps: float = 10.0) -> Fabric:
    """A two-tier leaf-spine: every leaf to every spine; hosts at 10.0.leaf.(2..).

    Ports: leaf 1..H hosts, H+s for spine s (1-based); spine port l+1 to leaf l.
    """
    for key, val, lo, hi in (("spines", spines, 1, 254), ("leaves", leaves, 2, 254), ("hosts_per_leaf", hosts_per_leaf, 1, 252)):
        if isinstance(val, bool) or not isinstance(val, int) or not lo <= val <= hi:
            raise FabricError(f"{key}: must be an integer in {lo}..{hi}, got {val!r}")
    switches: dict[str, Switch] = {}
    links: list[Link] = []
    hosts: list[Host] = []
    for s in range(1, spines + 1):
        switches[f"s{s}"] = Switch(f"s{s}", "spine", 0, s, make_dpid("spine", 0, s))
    for leaf in range(leaves):
        switches[f"l{leaf}"] = Switch(f"l{leaf}", "leaf", 0, leaf, make_dpid("leaf", 0, leaf))
        for s in range(1, spines + 1):
            links.append(Link(f"l{leaf}", hosts_per_leaf + s, f"s{s}", leaf + 1, rate_mbps))
        for x in range(hosts_per_leaf):
            ip = f"10.0.{leaf}.{x + 2}"
            hosts.append(Host(f"h{leaf}_{x}", ip, host_mac(ip), f"l{leaf}", 1 + x))
    params = {"spines": spines, "leaves": leaves, "hosts_per_leaf": hosts_per_leaf}
    return Fabric("leafspine", params, rate_mbps, switches, links, hosts)


def scramble(fabric: Fabric, seed: int) -> Fabric:
    """The same fabric as an operator's would be: every switch a random datapath id (nothing encoded in
    it), every switch's ports renumbered at random, random host MACs, and the description's lists in a
    random order. Names, roles, pods and addresses stay, so tests and people can still find things.
    What works on the original must work on this: the controller may rely on the description alone."""
    import random

    rng = random.Random(seed)
    dpids: set[int] = set()
    while len(dpids) < len(fabric.switches):
        dpids.add(rng.randrange(1, 1 << 48))
    new_dpid = dict(zip(sorted(fabric.switches), rng.sample(sorted(dpids), len(dpids)), strict=True))
    renumber: dict[tuple[str, int], int] = {}
    for name in sorted(fabric.switches):
        ports = sorted([ln.a_port for ln in fabric.links if ln.a == name] + [ln.b_port for ln in fabric.links if ln.b == name]
                       + [h.port for h in fabric.hosts if h.switch == name])
        for old, new in zip(ports, rng.sample(range(1, max(64, 4 * len(ports)) + 1), len(ports)), strict=True):
            renumber[(name, old)] = new
    macs: set[str] = set()
    while len(macs) < len(fabric.hosts):
        macs.add("%02x:%02x:%02x:%02x:%02x:%02x" % (rng.randrange(256) & 0xFC | 0x02, *(rng.randrange(256) for _ in range(5))))
    switches = [replace(sw, dpid=new_dpid[sw.name]) for sw in fabric.switches.values()]
    links = [replace(ln, a_port=renumber[(ln.a, ln.a_port)], b_port=renumber[(ln.b, ln.b_port)]) for ln in fabric.links]
    hosts = [replace(h, mac=m, port=renumber[(h.switch, h.port)]) for h, m in zip(fabric.hosts, sorted(macs), strict=True)]
    for lst in (switches, links, hosts):
        rng.shuffle(lst)
    return Fabric(fabric.topo, dict(fabric.params), fabric.link_rate_mbps, {sw.name: sw for sw in switches}, links, hosts)


def build(topo: str, rate_mbps: float = 10.0, **params) -> Fabric:
    """Build a fabric by topology name (``fattree`` with k, ``leafspine`` with sizes)."""
    if topo == "fattree":
        return fattree(params["k"], rate_mbps, params.get("hosts_per_edge"))
    if topo == "leafspine":
        return leafspine(params["spines"], params["leaves"], params["hosts_per_leaf"], rate_mbps)
    raise FabricError(f"topo: unknown topology {topo!r} (expected one of {', '.join(TOPOS)})")
