"""The switch side of mice/elephant isolation: two priority queues on every port.

Under each port's link-rate HTB, queue 0 for mice (HTB priority 0: served
first and first to borrow) and queue 1 for elephants (priority 1), each
allowed the whole link. Elephants may keep a minimum share
(``elephant_min_share``, 0 by default: strict priority for mice). Each queue
gets its own FIFO, and the buffer goes to mice first (``mice_queue_len``
packets), the rest (``elephant_queue_len``) to elephants, so a standing
elephant queue can never take the mice's buffer. With the userspace datapath
OpenFlow's ``set_queue`` does not steer packets, so tc u32 filters map the
DSCP marks to the two classes (an emulator-only step of the fabric builder);
with the kernel datapath ``set_queue`` works. The controller creates and
keeps the queues themselves through each switch's OVSDB (``ryu_apps.control.queue_keeper``);
its OpenFlow side is ``ryu_apps.programs.isolation``.
"""

from __future__ import annotations

from dataclasses import dataclass

from topology import ovsdb
from topology.fabric import Fabric
from topology.settings import SettingError, setting, validate

MICE_Q, ELEPHANT_Q = 0, 1


IsolationConfigError = SettingError


@dataclass(frozen=True)
class IsolationConfig:
    mice_dscp: int = setting(46, "DSCP marking mice (EF); the switches' filters map it to the mice queue")
    elephant_dscp: int = setting(8, "DSCP marking elephants (CS1)")
    mice_queue_len: int = setting(60, "FIFO length of the mice queue: the buffer goes to mice first ...",
                                  "packets", min=1)
    elephant_queue_len: int = setting(40, "... and the rest to elephants", "packets", min=1)
    elephant_min_share: float = setting(0.0, "fraction of each link kept for elephants even when mice want it "
                                        "all (0: strict priority for mice)")
    meter_burst_ms: int = setting(300, "per-elephant meter burst, in time at the allocated rate: at least a "
                                  "round trip through full queues, or TCP loses each window's excess", "ms")
    meter_headroom: float = setting(1.05, "meter each elephant at its allocated rate times this (TCP overhead); "
                                    "rate-less elephants share the room divided by it, so that above their floors "
                                    "the meters on a link add up to its capacity", min=1)
    meters: str = setting("explicit", "which placed elephants a meter holds to their allocation at their ingress: "
                          "all, explicit (only those announced with a rate: a rate-less or adopted elephant is TCP "
                          "in the elephant band, below the mice already, and a meter at its share dropped what "
                          "the fabric could carry), or off", choices=("all", "explicit", "off"))
    host_demotion: bool = setting(False, "keep a host's own elephant DSCP at its ToR: a host may put its flows in "
                                  "the elephant queue (never in the mice's), as PIAS's hosts demote a connection "
                                  "once it has sent a threshold of bytes (a Linux host's rule: "
                                  "freeway host-demote --after BYTES)")
    mice_meter_mbps: float = setting(0.0, "optional cap on all mice from one host port (0: off)", "Mbit/s")
    ecn_k_frames: int = setting(20, "disciplines with +ecn: mark CE on a packet entering the elephant band (the "
                                "only band under fifo) above this many standard frames (DCTCP's K)", "frames",
                                min=1)
    pfc_xoff_bytes: int = setting(48_000, "disciplines with +pfc: pause the mice band upstream when the mice "
                                  "an ingress port brought in hold more than this (the isolation paper's "
                                  "Section 4.1 threshold)", "bytes", min=1)
    pfc_xon_bytes: int = setting(24_470, "... and resume it at or below this (the paper's K of Section 5)",
                                 "bytes", min=0)
    cq_short_bytes: int = setting(100_000, "cq: an unmarked flow is short while it has sent fewer bytes than "
                                  "this through a port", "bytes", min=1)
    cq_decay_ms: float = setting(1.0, "cq: the short flows' headroom fades with this time constant once they "
                                 "stop", "ms", min=0.001)
    cq_backoff_frames: int = setting(100, "cq: the back-off queue: long packets a short one evicts wait there "
                                     "(outside the shared buffer) and leave when no short packet waits; when "
                                     "it is full an evicted packet is dropped (0: every evicted packet is)",
                                     "frames", min=0)

    def __post_init__(self) -> None:
        validate(self)
        for key in ("mice_dscp", "elephant_dscp"):
            if not 0 <= getattr(self, key) <= 63:
                raise SettingError(f"{key}: a DSCP is 0..63")
        if self.mice_dscp == self.elephant_dscp:
            raise SettingError("elephant_dscp: must differ from mice_dscp")
        if self.elephant_min_share >= 1:
            raise SettingError("elephant_min_share: must be below 1")
        if self.pfc_xon_bytes >= self.pfc_xoff_bytes:
            raise SettingError("pfc_xon_bytes: must be below pfc_xoff_bytes")


# ----- port disciplines --------------------------------------------------------------
DISCIPLINES = ("fifo", "strict", "shared", "cq")  # shared: strict priority over one buffer, mice push elephants out
MODIFIERS = ("ecn", "pfc")
EMULATED = ("fifo", "strict")  # what this kernel's qdiscs (htb, tbf, u32) can carry


def parse_discipline(text: str) -> tuple[str, frozenset[str]]:
    """``fifo``, ``strict``, ``shared`` or ``cq``, with ``+ecn`` and ``+pfc`` modifiers: (discipline,
    modifiers)."""
    base, *mods = text.strip().split("+")
    if base not in DISCIPLINES:
        raise SettingError(f"queues: unknown discipline {base!r} (known: {', '.join(DISCIPLINES)}, "
                           f"with +{', +'.join(MODIFIERS)})")
    bad = [m for m in mods if m not in MODIFIERS]
    if bad or len(set(mods)) != len(mods):
        raise SettingError(f"queues: {text!r}: modifiers are +{' and +'.join(MODIFIERS)}, each once")
    return base, frozenset(mods)


def check_discipline(text: str, engine: str) -> str:
    """The discipline if ``engine`` can carry it, else why not (naming the engine)."""
    base, mods = parse_discipline(text)
    if engine == "emulator" and (base not in EMULATED or mods):
        raise SettingError(f"queues: {text!r} needs the ns-3 engine (--engine ns3): the emulator's kernel has "
                           "htb, tbf and u32 but no prio, red or bpf qdisc, so it can cut in, evict, share one buffer "
                           "between priorities, mark ECN or pause nothing; it carries fifo and strict")
    return text


# ----- switch side ---------------------------------------------------------------
STANDARD_MTU = 1500
JUMBO_MTU = 9000
FRAME_BYTES = STANDARD_MTU + 14  # a full-size standard frame, Ethernet header included


def check_mtu(mtu: int) -> int:
    """An MTU the emulated fabric can run: the standard 1500 bytes up to 9000 (jumbo frames)."""
    if not isinstance(mtu, int) or isinstance(mtu, bool) or not STANDARD_MTU <= mtu <= JUMBO_MTU:
        raise SettingError(f"mtu: must be a whole number of bytes from {STANDARD_MTU} to {JUMBO_MTU}, got {mtu!r}")
    return mtu


def fifo(packets: int, mtu: int = STANDARD_MTU) -> list[str]:
    """A port queue's FIFO, sized as ``packets`` full-size standard frames. At the standard MTU that is a
    packet count; with larger frames the same buffer in bytes (a switch's buffer is memory: jumbo frames
    must not make it several times deeper)."""
    if check_mtu(mtu) == STANDARD_MTU:
        return ["pfifo", "limit", str(packets)]
    return ["bfifo", "limit", str(packets * FRAME_BYTES)]


def tc_commands(dev: str, cfg: IsolationConfig, mtu: int = STANDARD_MTU) -> list[list[str]]:
    """tc commands for one port: DSCP filters to the HTB classes, and the two FIFOs' lengths (``fifo``).

    Open vSwitch's linux-htb puts queue n in class 1:(n+1)."""
    out = []
    for dscp, q, limit in ((cfg.mice_dscp, MICE_Q, cfg.mice_queue_len),
                           (cfg.elephant_dscp, ELEPHANT_Q, cfg.elephant_queue_len)):
        out.append(["tc", "filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip", "prio", str(q + 1),
                    "u32", "match", "ip", "dsfield", hex(dscp << 2), "0xfc", "flowid", f"1:{q + 1}"])
        out.append(["tc", "qdisc", "replace", "dev", dev, "parent", f"1:{q + 1}", "handle", f"{q + 10}:",
                    *fifo(limit, mtu)])
    return out


# ----- the QoS records every port must hold, and what it holds (OVSDB) -----------------------------
TAG = "external-ids:freeway=1"
TABLES = (("bridge", "datapath_id,ports"), ("port", "_uuid,name,interfaces,qos"),
          ("interface", "_uuid,ofport"), ("qos", "_uuid,type,other_config,queues,external_ids"),
          ("queue", "_uuid,other_config"))


@dataclass(frozen=True)
class QueueSpec:
    min_rate: int
    max_rate: int
    priority: int


@dataclass(frozen=True)
class PortQos:
    max_rate: int
    queues: tuple[tuple[int, QueueSpec], ...]


def queue_specs(rate_bps: int, cfg: IsolationConfig) -> dict[int, QueueSpec]:
    """Mice first (priority 0, assured all the link but the elephants' share), elephants second."""
    emin = int(rate_bps * cfg.elephant_min_share)
    return {MICE_Q: QueueSpec(max(12_000, rate_bps - emin), rate_bps, 0),  # HTB needs a non-zero assured rate
            ELEPHANT_Q: QueueSpec(max(12_000, emin), rate_bps, 1)}


def desired(fabric: Fabric, cfg: IsolationConfig) -> dict[tuple[str, int], PortQos]:
    """(switch, port) -> what its QoS must be, for every switch port of the description."""
    out = {}
    ports = [(ln.a, ln.a_port, ln.capacity_mbps) for ln in fabric.links]
    ports += [(ln.b, ln.b_port, ln.capacity_mbps) for ln in fabric.links]
    ports += [(h.switch, h.port, fabric.capacity_bps((h.name, h.switch)) / 1e6) for h in fabric.hosts]
    for sw, port, mbps in ports:
        bps = int(mbps * 1_000_000)
        out[(sw, port)] = PortQos(bps, tuple(sorted(queue_specs(bps, cfg).items())))
    return out


# ----- what the database holds ---------------------------------------------------------------
_rows, _uuids = ovsdb.rows, ovsdb.uuids


def _map(v) -> dict:
    return {k: val for k, val in v[1]} if isinstance(v, list) and v and v[0] == "map" else {}


def _int(s) -> int | None:
    try:
        return int(s)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Held:
    port_uuid: str
    port_name: str
    qos_uuid: str | None
    qos: PortQos | None  # None: no QoS record, or not a linux-htb one
    owned: tuple[str, ...]  # the QoS and Queue records of ours it points at (destroyed when replaced)


def held(fabric: Fabric, tables: dict[str, dict]) -> dict[tuple[str, int], Held]:
    """(switch, port) -> what the port holds, for the fabric's switches found in these tables."""
    ifaces = {r["_uuid"][1]: r for r in _rows(tables["interface"])}
    qos = {r["_uuid"][1]: r for r in _rows(tables["qos"])}
    queues = {r["_uuid"][1]: r for r in _rows(tables["queue"])}
    ports = {r["_uuid"][1]: r for r in _rows(tables["port"])}
    users: dict[str, int] = {}  # QoS record -> ports pointing at it (one shared record is not ours to destroy)
    for r in ports.values():
        for u in _uuids(r["qos"]):
            users[u] = users.get(u, 0) + 1
    out = {}
    for br in _rows(tables["bridge"]):
        if not isinstance(br["datapath_id"], str):
            continue
        sw = fabric.switch_by_dpid(int(br["datapath_id"], 16))
        if sw is None:
            continue
        for pu in _uuids(br["ports"]):
            p = ports.get(pu)
            if p is None:
                continue
            ofport = next((_int(ifaces[i]["ofport"]) for i in _uuids(p["interfaces"]) if i in ifaces), None)
            if not ofport or ofport < 1:
                continue
            qu = _uuids(p["qos"])
            q = qos.get(qu[0]) if qu else None
            spec, owned = None, ()
            if q is not None:
                qmap = {int(k): v[1] for k, v in _map(q["queues"]).items()}
                if "freeway" in _map(q["external_ids"]) and users.get(qu[0]) == 1:
                    owned = (qu[0], *qmap.values())
                if q["type"] == "linux-htb":
                    specs = []
                    for n, u in sorted(qmap.items()):
                        oc = _map(queues[u]["other_config"]) if u in queues else {}
                        specs.append((n, QueueSpec(_int(oc.get("min-rate")) or 0, _int(oc.get("max-rate")) or 0,
                                                   _int(oc.get("priority")) or 0)))
                    spec = PortQos(_int(_map(q["other_config"]).get("max-rate")) or 0, tuple(specs))
            out[(sw.name, ofport)] = Held(pu, p["name"], qu[0] if qu else None, spec, owned)
    return out


def read(db: str | None, timeout: float = 10) -> dict[str, dict]:
    return ovsdb.read(db, TABLES, timeout)
