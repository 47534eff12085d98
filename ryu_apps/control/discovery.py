"""What ``freeway discover`` learns, and from what (pure): the punts a switch is given, the probes sent each
round, each frame a switch punts (one of our LLDP probes: an adjacency; a host's ARP or IPv4: the host
on that port; anything else, or a forgery: ignored, counted), port changes, and the report at the end.

``Learner`` holds ``topology.discover.Observed``; the os-ken app (``ryu_apps.discover_app``) only feeds
it switches, ports and frames and sends what it says. The graph's Clos roles are inferred by
``topology.discover.infer``.
"""

from __future__ import annotations

import ipaddress
import struct

from ryu_apps.control import linkwatch as lldp
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import Flow, Meter, ToController, match
from topology.discover import DiscoverError, Observed, differences, infer

METER = pipeline.LLDP_METER.id(0)  # the probes' own meter: hosts cannot starve them
HOST_METER = pipeline.HOST_PUNT_METERS.id(0)  # the hosts' ARP and IPv4
COOKIE = pipeline.cookie(pipeline.DISCOVER, 0)
PUNT_PPS = 500
ETH_ARP, ETH_IPV4 = 0x0806, 0x0800
OFPP_MAX = 0xFFFFFF00
LINK_DOWN = 1  # OFPPS_LINK_DOWN


def punts() -> list:
    prio = pipeline.prio("discover")
    return [Meter(METER, PUNT_PPS, PUNT_PPS, pktps=True), Meter(HOST_METER, PUNT_PPS, PUNT_PPS, pktps=True),
            Flow(prio, match(eth_type=lldp.ETH_LLDP), (ToController(),), cookie=COOKIE, meter_id=METER)] + [
        Flow(prio, match(eth_type=t), (ToController(max_len=128),), cookie=COOKIE, meter_id=HOST_METER)
        for t in (ETH_ARP, ETH_IPV4)]


def sender(data: bytes) -> tuple[str, str, bool] | None:
    """(MAC, IPv4, from ARP) of a host's ARP or IPv4 frame; None for anything else or anything too short."""
    if len(data) < 34:
        return None
    (eth,) = struct.unpack_from("!H", data, 12)
    if eth == ETH_ARP and len(data) >= 42:
        mac, ip = data[22:28], data[28:32]
    elif eth == ETH_IPV4:
        mac, ip = data[6:12], data[26:30]
    else:
        return None
    return ":".join(f"{b:02x}" for b in mac), str(ipaddress.IPv4Address(ip)), eth == ETH_ARP


class Learner:
    """What the switches showed so far, and the probes to send (``secret``: this run's LLDP proof)."""

    def __init__(self, secret: bytes):
        self.obs = Observed()
        self.secret = secret
        self.counts = {"probes": 0, "heard": 0, "frames": 0, "ignored": 0}

    def connected(self, dpid: int, ports) -> None:
        """A switch connected with its port description (``ports``: os-ken-like port records)."""
        self.obs.switches[dpid] = {p.port_no: p.curr_speed / 1000 for p in ports if p.port_no <= OFPP_MAX}
        self.obs.ports_up |= {(dpid, p.port_no) for p in ports if p.port_no <= OFPP_MAX and not p.state & LINK_DOWN}

    def port(self, dpid: int, port_no: int, speed_kbps: float, up: bool) -> None:
        """A port changed (or went away: ``up`` False)."""
        if dpid in self.obs.switches and port_no <= OFPP_MAX:
            self.obs.switches[dpid][port_no] = speed_kbps / 1000
            (self.obs.ports_up.add if up else self.obs.ports_up.discard)((dpid, port_no))

    def frame(self, dpid: int, port: int, data: bytes) -> None:
        """A frame a switch punted: our probe (an adjacency), a host's ARP or IPv4, or ignored."""
        self.counts["frames"] += 1
        try:
            if lldp.is_lldp(data):
                self.obs.heard.add((lldp.read(self.secret, data), (dpid, port)))
                self.counts["heard"] += 1
                return
            seen = sender(data)
        except (ValueError, struct.error):  # another agent's LLDP, a malformed frame: not evidence
            seen = None
        if seen is None:
            self.counts["ignored"] += 1
            return
        self.obs.host_seen(seen[0], seen[1], dpid, port, arp=seen[2])

    def probes(self, dpid: int) -> list[tuple[int, bytes]]:
        """(port, frame) of every probe a connected switch sends this round."""
        out = [(port, lldp.probe(self.secret, dpid, port)) for port in sorted(self.obs.switches.get(dpid, ()))]
        self.counts["probes"] += len(out)
        return out

    def finish(self, rate_mbps, out: str, expect=None, expect_file: str = "") -> tuple[int, list[str], object]:
        """(exit code, report lines, the description or None): what was learned, inferred and compared."""
        obs, c = self.obs, self.counts
        lines = [f"discover: {len(obs.switches)} switches, {len(obs.heard)} probes heard, {len(obs.hosts)} hosts seen "
                 f"({c['probes']} probes sent, {c['ignored']} frames ignored)"]
        try:
            fabric = infer(obs, rate_mbps)
        except DiscoverError as e:
            return 1, lines + [f"freeway discover: {e}; nothing written"], None
        silent = obs.silent_ports()
        if silent:
            lines.append(f"discover: warning: {len(silent)} ports are up but nothing was heard on them (not in the "
                         f"description): " + ", ".join(f"{d:016x}:{p}" for d, p in silent[:8]))
        kinds: dict[str, int] = {}
        for sw in fabric.switches.values():
            kinds[sw.role] = kinds.get(sw.role, 0) + 1
        lines.append(f"discover: a {fabric.topo} {fabric.params}: " + ", ".join(f"{n} {r}" for r, n in sorted(kinds.items()))
                     + f", {len(fabric.links)} links, {len(fabric.hosts)} hosts; written to {out}")
        if expect is None:
            return 0, lines, fabric
        diff = differences(expect, fabric)
        lines += [f"discover: differs from {expect_file}: {d}" for d in diff]
        if not diff:
            lines.append(f"discover: the same fabric as {expect_file}")
        return (2 if diff else 0), lines, fabric
