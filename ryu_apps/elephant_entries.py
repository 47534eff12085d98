"""Exact-match 5-tuple entries that pin one flow to one path (Freeway, EFM and Hedera all use them)."""

from __future__ import annotations

from topology.fabric import Fabric
from topology.paths import Path, path_ports

from . import pipeline
from .forwarding import ETH_IPV4
from .intents import SEND_FLOW_REM, Flow, Output, match

PRIO_ELEPHANT = pipeline.prio("elephant")


def flow_match(src: str, dst: str, proto: int, sport: int, dport: int):
    l4 = {"tcp_src": sport, "tcp_dst": dport} if proto == 6 else {"udp_src": sport, "udp_dst": dport}
    return match(eth_type=ETH_IPV4, ip_proto=proto, ipv4_src=src, ipv4_dst=dst, **l4)


def path_entries(fabric: Fabric, path: Path, flow, cookie: int, idle_timeout: int, iso=None,
                 meter_id: int = 0) -> list[tuple[str, Flow]]:
    """(switch, entry) along ``path`` to the flow's destination host, egress side first; the ingress
    entry (installed last) reports its removal. ``flow`` has src, dst, proto, sport, dport. With an
    IsolationConfig ``iso`` the entries mark the flow an elephant; ``meter_id`` meters it at ingress."""
    from .isolation import elephant_actions

    dst = fabric.host_by_ip(flow.dst)
    m = flow_match(flow.src, flow.dst, flow.proto, flow.sport, flow.dport)
    hops = path_ports(fabric, path) + [(dst.switch, dst.port)]
    out = []
    for i, (sw, port) in reversed(list(enumerate(hops))):
        actions = (Output(port),)
        if iso is not None:
            actions = elephant_actions(actions, i == 0, iso)
        out.append((sw, Flow(PRIO_ELEPHANT, m, actions, cookie=cookie, idle_timeout=idle_timeout,
                             flags=SEND_FLOW_REM if i == 0 else 0, meter_id=meter_id if i == 0 else 0)))
    return out
