"""Hedera's edge entries: a new TCP flow's first packet to the controller, then its own counted entry
at its ingress ToR (pure: decisions in, intents out)."""

from __future__ import annotations

from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import Flow, ToController, ToGroup, match
from ryu_apps.programs.forwarding import ETH_IPV4, UPLINK_GROUP
from ryu_apps.programs.pins import KIND_EDGE, cookie, flow_match
from topology.fabric import Fabric

PRIO_HEDERA_PUNT = pipeline.prio("hedera-punt")  # new TCP flows leaving a ToR: first packet to the controller
PRIO_HEDERA_EDGE = pipeline.prio("hedera-edge")  # one entry per flow at its ingress ToR, by ECMP, counting bytes
ALL_FLOWS = (0, 0)  # Hedera reads every per-flow entry at the edge, whoever installed it


def hedera_edge_flows(fabric: Fabric, switch: str) -> list[Flow]:
    """The punt rules a Hedera-mode ToR needs, one per host port through that host's punt meter (other
    switches need nothing extra)."""
    if not fabric.switches[switch].is_tor:
        return []
    return [Flow(PRIO_HEDERA_PUNT, match(eth_type=ETH_IPV4, ip_proto=6, in_port=h.port), (ToController(128),),
                 meter_id=pipeline.host_punt_meter(fabric.host_slot(h))) for h in fabric.hosts_on(switch)]


def hedera_edge_entry(flow, ident: int, idle_s: int, group: int = UPLINK_GROUP) -> Flow:
    """Per-flow entry at the ingress ToR: ECMP as before (through ``group``: the uplink group, or the
    destination's group after a failure), but with its own byte counter (in the forward table, after the
    guard and, with isolation, the classification)."""
    return Flow(PRIO_HEDERA_EDGE, flow_match(flow.src, flow.dst, flow.proto, flow.sport, flow.dport),
                (ToGroup(group),), table_id=pipeline.table_for(PRIO_HEDERA_EDGE, True),
                cookie=cookie(pipeline.HEDERA, KIND_EDGE, ident), idle_timeout=idle_s)
