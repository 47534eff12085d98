"""Mice and elephants in separate queues on every port (isolation and cut-in queueing papers).

Switch side (pushed by the fabric builder, see ``port_plan``): under each
port's link-rate HTB, queue 0 for mice (HTB priority 0: served first and
first to borrow) and queue 1 for elephants (priority 1), each allowed the
whole link. Elephants may keep a minimum share (``elephant_min_share``, 0 by
default: strict priority for mice). Each queue gets its own FIFO, and the
buffer goes to mice first (``mice_queue_len`` packets), the rest
(``elephant_queue_len``) to elephants, so a standing elephant queue can never
take the mice's buffer. With the userspace datapath OpenFlow's ``set_queue``
does not steer packets, so tc u32 filters map the DSCP marks to the two
classes; with the kernel datapath ``set_queue`` works, and the controller
sets both.

Controller side (``tor_program``, ``elephant_actions``): at every ToR, table 0
classifies what enters from a host port: the mice DSCP and queue (host DSCP
is never trusted), then forwarding continues in table 1. Elephant entries
(announced, detected or rerouted) sit in table 0 too: at their ingress ToR
they set the elephant DSCP and queue, elsewhere the queue. Each placed
elephant can be held to its allocated rate by a meter at its ingress.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from topology.fabric import Fabric

from .forwarding import ETH_IPV4
from .intents import Flow, Meter, SetField, SetQueue, match

MICE_Q, ELEPHANT_Q = 0, 1
PRIO_CLASSIFY = 100
PRIO_ELEPHANT_MARK = 450  # detected elephants that keep their path: mark only, then forward
ELEPHANT_METER_BASE = 1000
MICE_METER_BASE = 100


class IsolationConfigError(ValueError):
    pass


@dataclass(frozen=True)
class IsolationConfig:
    mice_dscp: int = 46  # EF
    elephant_dscp: int = 8  # CS1
    mice_queue_len: int = 60  # packets: the buffer goes to mice first ...
    elephant_queue_len: int = 40  # ... and the rest to elephants
    elephant_min_share: float = 0.0  # of the link kept for elephants even when mice want it all
    meter_burst_ms: int = 50  # per-elephant meter burst, in milliseconds of the allocated rate
    meter_headroom: float = 1.05  # meter at allocated rate x this (TCP overhead)
    mice_meter_mbps: float = 0.0  # optional cap on all mice from one host port (0: off)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise IsolationConfigError(f"{f.name}: must be a non-negative number, got {v!r}")
        for key in ("mice_dscp", "elephant_dscp"):
            if not 0 <= getattr(self, key) <= 63:
                raise IsolationConfigError(f"{key}: a DSCP is 0..63")
        if self.mice_dscp == self.elephant_dscp:
            raise IsolationConfigError("elephant_dscp: must differ from mice_dscp")
        if self.mice_queue_len < 1 or self.elephant_queue_len < 1:
            raise IsolationConfigError("mice_queue_len and elephant_queue_len: at least 1 packet each")
        if self.elephant_min_share >= 1:
            raise IsolationConfigError("elephant_min_share: must be below 1")
        if self.meter_headroom < 1:
            raise IsolationConfigError("meter_headroom: must be at least 1")


# ----- switch side ---------------------------------------------------------------
def queue_args(n: int, rate_bps: int, cfg: IsolationConfig) -> list[str]:
    """ovs-vsctl arguments creating the two queues of port number ``n`` (ids @m{n}, @e{n})."""
    emin = int(rate_bps * cfg.elephant_min_share)
    mmin = max(12_000, rate_bps - emin)  # HTB needs a non-zero assured rate
    tag = "external-ids:freeway=1"
    return ["--", f"--id=@m{n}", "create", "queue", f"other-config:min-rate={mmin}",
            f"other-config:max-rate={rate_bps}", "other-config:priority=0", tag,
            "--", f"--id=@e{n}", "create", "queue", f"other-config:min-rate={max(12_000, emin)}",
            f"other-config:max-rate={rate_bps}", "other-config:priority=1", tag]


def tc_commands(dev: str, cfg: IsolationConfig) -> list[list[str]]:
    """tc commands for one port: DSCP filters to the HTB classes, and the two FIFOs' lengths.

    Open vSwitch's linux-htb puts queue n in class 1:(n+1)."""
    out = []
    for dscp, q, limit in ((cfg.mice_dscp, MICE_Q, cfg.mice_queue_len),
                           (cfg.elephant_dscp, ELEPHANT_Q, cfg.elephant_queue_len)):
        out.append(["tc", "filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip", "prio", str(q + 1),
                    "u32", "match", "ip", "dsfield", hex(dscp << 2), "0xfc", "flowid", f"1:{q + 1}"])
        out.append(["tc", "qdisc", "replace", "dev", dev, "parent", f"1:{q + 1}", "handle", f"{q + 10}:",
                    "pfifo", "limit", str(limit)])
    return out


# ----- controller side ----------------------------------------------------------------
def tor_program(fabric: Fabric, switch: str, flows: list[Flow], cfg: IsolationConfig) -> tuple[list[Flow], list[Meter]]:
    """A ToR's flows with isolation: forwarding moves to table 1, table 0 classifies host traffic.

    Elephant entries (priority >= 450) stay in table 0; everything else continues in table 1."""
    out: list[Flow] = []
    meters: list[Meter] = []
    for f in flows:
        if f.priority >= PRIO_ELEPHANT_MARK and f.table_id == 0 and _is_exact(f):
            out.append(f)
        else:
            out.append(replace(f, table_id=1))
    out.append(Flow(0, match(), goto=1))  # from uplinks, ARP, anything unclassified: just forward
    for h in fabric.hosts_on(switch):
        meter = 0
        if cfg.mice_meter_mbps > 0:
            meter = MICE_METER_BASE + h.port
            meters.append(Meter(meter, int(cfg.mice_meter_mbps * 1000), int(cfg.mice_meter_mbps * 1000 * 0.05) + 12))
        out.append(Flow(PRIO_CLASSIFY, match(in_port=h.port, eth_type=ETH_IPV4),
                        (SetField("ip_dscp", cfg.mice_dscp), SetQueue(MICE_Q)), goto=1, meter_id=meter))
    return out, meters


def _is_exact(f: Flow) -> bool:
    m = dict(f.match)
    return "ipv4_src" in m and "ipv4_dst" in m and ("tcp_src" in m or "udp_src" in m)


def elephant_actions(actions: tuple, ingress: bool, cfg: IsolationConfig) -> tuple:
    """An elephant entry's actions with its marking: DSCP at the ingress ToR, the queue on every hop."""
    mark = (SetField("ip_dscp", cfg.elephant_dscp),) if ingress else ()
    return mark + (SetQueue(ELEPHANT_Q),) + tuple(actions)


def elephant_meter(eid: int, rate_bps: float, cfg: IsolationConfig) -> Meter:
    kbps = max(1, int(rate_bps * cfg.meter_headroom / 1000))
    return Meter(ELEPHANT_METER_BASE + eid, kbps, max(12, int(kbps * cfg.meter_burst_ms / 1000)))


def mark_detected(flow_match, in_port: int, cfg: IsolationConfig, cookie: int) -> Flow:
    """A detected elephant that keeps its path: mark it at its ingress ToR, then forward as before."""
    m = dict(flow_match)
    m["in_port"] = in_port
    return Flow(PRIO_ELEPHANT_MARK, match(**m), (SetField("ip_dscp", cfg.elephant_dscp), SetQueue(ELEPHANT_Q)),
                cookie=cookie, goto=1)
