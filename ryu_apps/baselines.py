"""OpenFlow plans for the EFM and Hedera modes (pure: decisions in, intents out)."""

from __future__ import annotations

from topology.fabric import Fabric
from topology.paths import Path

from . import pipeline
from .elephant_entries import flow_match, path_entries
from .forwarding import ETH_IPV4, UPLINK_GROUP
from .intents import DeleteFlows, Flow, ToController, ToGroup, match

PRIO_HEDERA_PUNT = pipeline.prio("hedera-punt")  # new TCP flows leaving a ToR: first packet to the controller
PRIO_HEDERA_EDGE = pipeline.prio("hedera-edge")  # one entry per flow at its ingress ToR, by ECMP, counting bytes
HEDERA = pipeline.HEDERA
EFM = pipeline.EFM
KIND_EDGE, KIND_PLACED = 1, 2
ALL_FLOWS = (0, 0)  # Hedera reads every per-flow entry at the edge, whoever installed it


def cookie(space: pipeline.CookieSpace, kind: int, ident: int) -> int:
    return pipeline.cookie(space, (kind << 48) | (ident & 0xFFFFFFFFFFFF))


def hedera_edge_flows(fabric: Fabric, switch: str) -> list[Flow]:
    """The punt rules a Hedera-mode ToR needs, one per host port through that host's punt meter (other
    switches need nothing extra)."""
    if not fabric.switches[switch].is_tor:
        return []
    return [Flow(PRIO_HEDERA_PUNT, match(eth_type=ETH_IPV4, ip_proto=6, in_port=h.port), (ToController(128),),
                 meter_id=pipeline.HOST_PUNT_METERS.id(fabric.host_slot(h))) for h in fabric.hosts_on(switch)]


def hedera_edge_entry(flow, ident: int, idle_s: int, group: int = UPLINK_GROUP) -> Flow:
    """Per-flow entry at the ingress ToR: ECMP as before (through ``group``: the uplink group, or the
    destination's group after a failure), but with its own byte counter (in the forward table, after the
    guard and, with isolation, the classification)."""
    return Flow(PRIO_HEDERA_EDGE, flow_match(flow.src, flow.dst, flow.proto, flow.sport, flow.dport),
                (ToGroup(group),), table_id=pipeline.table_for(PRIO_HEDERA_EDGE, True),
                cookie=cookie(HEDERA, KIND_EDGE, ident), idle_timeout=idle_s)


def pin(fabric: Fabric, path: Path, flow, owner: pipeline.CookieSpace, ident: int, gen: int, idle_s: int,
        old_cookie: int | None = None, iso=None) -> tuple[list[tuple[str, list]], list[tuple[str, list]], list[tuple[str, list]], int]:
    """Make-before-break plan to pin ``flow`` to ``path``: (install, after, rollback, new cookie).

    ``install`` puts exact-match entries on every hop, egress side first; ``after`` (sent once every
    switch confirmed) removes the previous pinning; ``rollback`` removes the new entries."""
    new = cookie(owner, KIND_PLACED, (ident << 8) | (gen & 0xFF))
    install = [(sw, [f]) for sw, f in path_entries(fabric, path, flow, new, idle_s, iso)]
    after = [(sw, [DeleteFlows(old_cookie)]) for sw in fabric.switches] if old_cookie is not None else []
    rollback = [(sw, [DeleteFlows(new)]) for sw, _ in install]
    return install, after, rollback, new
