"""Mice and elephants in separate queues on every port (isolation and cut-in queueing papers).

Switch side: ``topology.queues`` (the two queues per port, built with the fabric).

Controller side (``tor_program``, ``elephant_actions``): at every ToR, the
ingress table classifies what enters from a host port: the mice DSCP and
queue (host DSCP is never trusted), then forwarding continues in the forward
table. Elephant entries (announced, detected or rerouted) sit in ingress too
(``pipeline``): at their ingress ToR they set the elephant DSCP and queue,
elsewhere the queue. Each placed
elephant can be held to its allocated rate by a meter at its ingress.
"""

from __future__ import annotations

from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import Flow, Meter, SetField, SetQueue, match
from ryu_apps.programs.forwarding import ETH_IPV4
from topology.fabric import Fabric
from topology.queues import ELEPHANT_Q, MICE_Q, IsolationConfig, IsolationConfigError, tc_commands

PRIO_CLASSIFY = pipeline.prio("classify")
PRIO_DEMOTED = pipeline.prio("demoted")  # a host's own elephant mark (host_demotion): kept, elephant queue
PRIO_ELEPHANT_MARK = pipeline.prio("elephant-mark")  # detected elephants that keep their path: mark, forward
__all__ = ["ELEPHANT_Q", "MICE_Q", "IsolationConfig", "IsolationConfigError", "tc_commands",
           "tor_program", "elephant_actions", "elephant_meter", "mark_detected"]


def tor_program(fabric: Fabric, switch: str, cfg: IsolationConfig) -> tuple[list[Flow], list[Meter]]:
    """A ToR's classification (table ``ingress``): host traffic is marked mice (DSCP and queue; the
    host's DSCP is never trusted to raise a packet, and the guard has already checked who sent it), then
    forwarded; with a mice cap, through a meter per host port. With ``host_demotion`` a host's own elephant
    DSCP is kept and its queue is the elephants' (a host can only lower its own packets)."""
    out: list[Flow] = []
    meters: list[Meter] = []
    ingress, fwd = pipeline.INGRESS.table_id, pipeline.FORWARD.table_id
    for h in fabric.hosts_on(switch):
        meter = 0
        if cfg.mice_meter_mbps > 0:
            meter = pipeline.MICE_METERS.id(fabric.host_slot(h))
            meters.append(Meter(meter, int(cfg.mice_meter_mbps * 1000), int(cfg.mice_meter_mbps * 1000 * 0.05) + 12))
        out.append(Flow(PRIO_CLASSIFY, match(in_port=h.port, eth_type=ETH_IPV4),
                        (SetField("ip_dscp", cfg.mice_dscp), SetQueue(MICE_Q)), table_id=ingress, goto=fwd,
                        meter_id=meter))
        if cfg.host_demotion:
            out.append(Flow(PRIO_DEMOTED, match(in_port=h.port, eth_type=ETH_IPV4, ip_dscp=cfg.elephant_dscp),
                            (SetQueue(ELEPHANT_Q),), table_id=ingress, goto=fwd))
    return out, meters


def elephant_actions(actions: tuple, ingress: bool, cfg: IsolationConfig) -> tuple:
    """An elephant entry's actions with its marking: DSCP at the ingress ToR, the queue on every hop."""
    mark = (SetField("ip_dscp", cfg.elephant_dscp),) if ingress else ()
    return mark + (SetQueue(ELEPHANT_Q),) + tuple(actions)


METER_MAX_KBPS = 0xFFFFFFFF  # an OpenFlow meter band's rate is 32 bits


def elephant_meter(eid: int, rate_bps: float, cfg: IsolationConfig) -> Meter:
    kbps = min(METER_MAX_KBPS, max(1, int(rate_bps * cfg.meter_headroom / 1000)))
    return Meter(pipeline.ELEPHANT_METERS.id(eid), kbps,
                 min(METER_MAX_KBPS, max(12, int(kbps * cfg.meter_burst_ms / 1000))))


def mark_detected(flow_match, in_port: int, cfg: IsolationConfig, cookie: int) -> Flow:
    """A detected elephant that keeps its path: mark it at its ingress ToR, then forward as before."""
    m = dict(flow_match)
    m["in_port"] = in_port
    return Flow(PRIO_ELEPHANT_MARK, match(**m), (SetField("ip_dscp", cfg.elephant_dscp), SetQueue(ELEPHANT_Q)),
                table_id=pipeline.INGRESS.table_id, cookie=cookie, goto=pipeline.FORWARD.table_id)
