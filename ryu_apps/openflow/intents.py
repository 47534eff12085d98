"""Plain-value OpenFlow intents returned by the pure policy modules.

Policy code returns these; ``ryu_apps.openflow.ofmsg`` is the one place that turns them
into os-ken messages. Keeping them plain makes policy testable without a
datapath and reusable by offline benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Output:
    port: int


@dataclass(frozen=True)
class ToController:
    max_len: int = 0xFFFF  # whole packet (OFPCML_NO_BUFFER)


@dataclass(frozen=True)
class ToGroup:
    group_id: int


@dataclass(frozen=True)
class SetField:
    field: str  # os-ken OFPActionSetField keyword, e.g. "ip_dscp"
    value: int


@dataclass(frozen=True)
class SetQueue:
    queue_id: int


Action = Output | ToController | ToGroup | SetField | SetQueue


def match(**fields) -> tuple[tuple[str, object], ...]:
    """A hashable OpenFlow match in os-ken OFPMatch keyword form.

    Masked fields are given as (value, mask) tuples, e.g. ipv4_dst=("10.1.0.0", "255.255.0.0").
    """
    return tuple(sorted(fields.items()))


SEND_FLOW_REM = 1  # OFPFF_SEND_FLOW_REM


@dataclass(frozen=True)
class Flow:
    priority: int
    match: tuple[tuple[str, object], ...]
    actions: tuple[Action, ...] = ()
    table_id: int = 0
    cookie: int = 0
    idle_timeout: int = 0
    hard_timeout: int = 0
    flags: int = 0
    meter_id: int = 0  # 0: no meter
    goto: int | None = None  # continue in this table after the actions


@dataclass(frozen=True)
class DeleteFlows:
    """Delete every flow whose cookie matches (under the mask)."""

    cookie: int
    cookie_mask: int = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True)
class DeleteFlow:
    """Delete exactly one flow (strict: same table, priority and match)."""

    table_id: int
    priority: int
    match: tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class DeleteMeter:
    meter_id: int


@dataclass(frozen=True)
class Meter:
    meter_id: int
    rate: int  # kbit/s, or packets/s when pktps
    burst: int
    pktps: bool = False


@dataclass(frozen=True)
class MeterModify:
    meter: Meter


@dataclass(frozen=True)
class Bucket:
    actions: tuple[Action, ...]
    weight: int = 1


@dataclass(frozen=True)
class Group:
    group_id: int
    buckets: tuple[Bucket, ...]
    type: str = "select"  # select | all | indirect | ff


@dataclass(frozen=True)
class GroupModify:
    group: Group


@dataclass(frozen=True)
class DeleteGroup:
    group_id: int


@dataclass(frozen=True)
class PacketOut:
    """Send ``data`` (a whole frame) out of ``port``."""

    port: int
    data: bytes


@dataclass(frozen=True)
class ArpReplyOut:
    """An ARP reply built by the controller, sent out of ``port``."""

    port: int
    requester_mac: str
    requester_ip: str
    target_mac: str
    target_ip: str


@dataclass(frozen=True)
class UdpOut:
    """A UDP datagram built by the controller (the handshake's answer), sent out of ``port``."""

    port: int
    src_mac: str
    dst_mac: str
    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    payload: bytes


@dataclass(frozen=True)
class PacketThrough:
    """Send ``data`` through ``actions`` (e.g. a group) as if it had come in on ``in_port``."""

    actions: tuple[Action, ...]
    data: bytes
    in_port: int | None = None


@dataclass(frozen=True)
class FlowStatsRequest:
    cookie: int = 0
    cookie_mask: int = 0


Intent = (Flow | DeleteFlows | DeleteFlow | Meter | MeterModify | DeleteMeter | Group | GroupModify | DeleteGroup | PacketOut | ArpReplyOut
          | UdpOut | PacketThrough | FlowStatsRequest)
