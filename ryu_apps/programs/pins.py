"""Exact-match 5-tuple entries that pin one flow to one path (Freeway, EFM and Hedera all use them),
and the make-before-break plan that moves a flow onto a path (``pin``)."""

from __future__ import annotations

from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import SEND_FLOW_REM, DeleteFlows, Flow, Output, ToController, match
from ryu_apps.programs.forwarding import ETH_IPV4
from topology.fabric import Fabric
from topology.paths import Path, path_ports

PRIO_ELEPHANT = pipeline.prio("elephant")
PRIO_ELEPHANT_FIN = pipeline.prio("elephant-fin")
TCP_FIN = 0x001  # the FIN bit of OpenFlow's tcp_flags (and of the TCP header's flags byte)
FIN_PUNT_BYTES = 128  # what of a FIN reaches the controller: its Ethernet, IPv4 and TCP headers


KIND_EDGE, KIND_PLACED = 1, 2  # the kind field of an EFM or Hedera cookie


def cookie(space: pipeline.CookieSpace, kind: int, ident: int) -> int:
    """An EFM, Hedera or detected-mark cookie: ``kind << 48 | ident`` in the owner's space."""
    return pipeline.cookie(space, (kind << 48) | (ident & 0xFFFFFFFFFFFF))


def flow_match(src: str, dst: str, proto: int, sport: int, dport: int):
    l4 = {"tcp_src": sport, "tcp_dst": dport} if proto == 6 else {"udp_src": sport, "udp_dst": dport}
    return match(eth_type=ETH_IPV4, ip_proto=proto, ipv4_src=src, ipv4_dst=dst, **l4)


def path_entries(fabric: Fabric, path: Path, flow, cookie: int, idle_timeout: int, iso=None,
                 meter_id: int = 0, fin: bool = False) -> list[tuple[str, Flow]]:
    """(switch, entry) along ``path`` to the flow's destination host, egress side first; the ingress
    entry (installed last) reports its removal. ``flow`` has src, dst, proto, sport, dport. With an
    IsolationConfig ``iso`` the entries mark the flow an elephant; ``meter_id`` meters it at ingress.

    ``fin`` (a TCP flow): one more entry at the ingress ToR, above the elephant's, for its FIN: sent on
    as the elephant's packets are, and its headers to the controller (``fin_of`` reads them), so that
    the flow's end is known when its sender closes, not an idle timeout later. It has no timeout of
    its own (it sees no packet until the end): it goes with the elephant's cookie."""
    from ryu_apps.programs.isolation import elephant_actions

    dst = fabric.host_by_ip(flow.dst)
    m = flow_match(flow.src, flow.dst, flow.proto, flow.sport, flow.dport)
    hops = path_ports(fabric, path) + [(dst.switch, dst.port)]
    out = []
    for i, (sw, port) in reversed(list(enumerate(hops))):
        actions = (Output(port),)
        if iso is not None:
            actions = elephant_actions(actions, i == 0, iso)
        out.append((sw, Flow(PRIO_ELEPHANT, m, actions, table_id=pipeline.table_for(PRIO_ELEPHANT, fabric.switches[sw].is_tor),
                             cookie=cookie, idle_timeout=idle_timeout,
                             flags=SEND_FLOW_REM if i == 0 else 0, meter_id=meter_id if i == 0 else 0)))
        if i == 0 and fin and flow.proto == 6:
            out.append((sw, Flow(PRIO_ELEPHANT_FIN, match(**dict(m), tcp_flags=(TCP_FIN, TCP_FIN)),
                                 actions + (ToController(FIN_PUNT_BYTES),),
                                 table_id=pipeline.table_for(PRIO_ELEPHANT_FIN, fabric.switches[sw].is_tor),
                                 cookie=cookie, meter_id=meter_id)))
    return out


def fin_of(data: bytes) -> tuple[str, str, int, int] | None:
    """(source IP, destination IP, source port, destination port) of an Ethernet/IPv4/TCP frame with
    its FIN bit set (as the FIN entry sends it, truncated or not), else None: anything shorter than
    its headers, not IPv4 or TCP, a fragment past the first, or without FIN."""
    if len(data) < 14 + 20 or data[12:14] != b"\x08\x00":
        return None
    ihl = (data[14] & 0x0F) * 4
    if data[14] >> 4 != 4 or ihl < 20 or data[23] != 6 or (data[20] & 0x1F) | data[21]:
        return None
    tcp = 14 + ihl
    if len(data) < tcp + 14 or not data[tcp + 13] & TCP_FIN:
        return None
    src, dst = ".".join(map(str, data[26:30])), ".".join(map(str, data[30:34]))
    return src, dst, int.from_bytes(data[tcp:tcp + 2], "big"), int.from_bytes(data[tcp + 2:tcp + 4], "big")


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


def tuple_of(m) -> tuple[str, str, int, int, int] | None:
    """(src, dst, proto, sport, dport) of an exact-match entry's match; None if it is not one."""
    d = dict(m)
    proto = d.get("ip_proto")
    l4 = ("tcp_src", "tcp_dst") if proto == 6 else ("udp_src", "udp_dst")
    fields = (d.get("ipv4_src"), d.get("ipv4_dst"), proto, d.get(l4[0]), d.get(l4[1]))
    return None if None in fields else fields


class HeldPins:
    """After a restart: exact-match entries read back from the switches, kept per cookie until every
    flow under it can be followed hop by hop, from its source host's ToR to its destination host.

    Switches connect one by one; ``add`` takes one switch's entries (those whose cookie ``wanted``
    accepts) and returns the cookies completed by them: cookie -> ({5-tuple: path}, [(switch, entry)])."""

    def __init__(self, fabric: Fabric, wanted):
        self.fabric = fabric
        self.wanted = wanted
        self.held: dict[int, dict[tuple[str, object], Flow]] = {}

    def add(self, switch: str, flows, known=lambda cookie: False) -> dict[int, tuple[dict[tuple, Path], list]]:
        for f in flows:
            if f.priority == PRIO_ELEPHANT and self.wanted(f.cookie) and tuple_of(f.match) is not None:
                self.held.setdefault(f.cookie, {})[(switch, f.match)] = f
        done = {}
        for cookie in list(self.held):
            if known(cookie):  # a switch that reconnected: the controller never forgot this one
                del self.held[cookie]
                continue
            paths = self.follow(cookie)
            if paths is not None:
                done[cookie] = (paths, [(sw, f) for (sw, _), f in self.held.pop(cookie).items()])
        return done

    def follow(self, cookie: int) -> dict[tuple, Path] | None:
        entries = self.held[cookie]
        out = {}
        for m in {m for _, m in entries}:
            ft = tuple_of(m)
            src, dst = self.fabric.host_by_ip(ft[0]), self.fabric.host_by_ip(ft[1])
            if src is None or dst is None:
                return None
            path, sw = [], src.switch
            while sw is not None and len(path) <= len(self.fabric.switches):
                f = entries.get((sw, m))
                port = next((a.port for a in f.actions if isinstance(a, Output)), None) if f else None
                peer = self.fabric.peer(sw, port) if port is not None else None
                if peer is None:
                    return None  # a hop has not reported yet (or leads nowhere)
                path.append(sw)
                sw = peer[0] if peer[0] in self.fabric.switches else None
                if sw is None and peer[0] != dst.name:
                    return None
            if sw is not None:
                return None
            out[ft] = tuple(path)
        return out
