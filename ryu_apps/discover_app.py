"""``freeway discover``: learn a fabric the controller did not build and write its description.

The switches connect to this app as they would to the controller. Each one
punts LLDP, ARP and IPv4 to it (through one meter, entries under the
``discover`` cookie); the app probes every port each ``interval`` with the
controller's LLDP probes, records which port hears which, and takes each
host from the frames it sends on a port that no probe arrives at. When the
time is up the graph's Clos roles are inferred (``topology.discover``), the
description is written, and the app's entries and meter are removed from
every switch. A fabric that is not a Clos is refused with the reason and
nothing is written.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import struct
import sys
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3 as ofproto

from ryu_apps.control import linkwatch as lldp
from ryu_apps.openflow import ofmsg, pipeline
from ryu_apps.openflow.intents import DeleteFlows, DeleteMeter, Flow, Meter, ToController, match
from topology.discover import DiscoverError, Observed, differences, infer

LOG = logging.getLogger("freeway.discover")
SETTINGS: dict = {}  # out, duration_s, interval_s, rate_mbps, expect: set by ``cmd_discover`` before the start
METER = pipeline.LLDP_METER.id(0)  # the probes' own meter: hosts cannot starve them
HOST_METER = pipeline.HOST_PUNT_METERS.id(0)  # the hosts' ARP and IPv4
COOKIE = pipeline.cookie(pipeline.DISCOVER, 0)
PUNT_PPS = 500
ETH_ARP, ETH_IPV4 = 0x0806, 0x0800


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


class DiscoverApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.obs = Observed()
        self.secret = os.urandom(16)
        self.dps: dict[int, object] = {}
        self.first: float | None = None
        self.last: float = 0.0  # when the latest switch connected
        self.counts = {"probes": 0, "heard": 0, "frames": 0, "ignored": 0}

    def start(self):
        super().start()
        self.threads.append(hub.spawn(self._run))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state(self, ev):
        dp = ev.datapath
        if ev.state != MAIN_DISPATCHER:
            self.dps.pop(dp.id, None)
            return
        self.dps[dp.id] = dp
        self.obs.switches[dp.id] = {p.port_no: p.curr_speed / 1000 for p in dp.ports.values()
                                    if p.port_no <= ofproto.OFPP_MAX}
        self.obs.ports_up |= {(dp.id, p.port_no) for p in dp.ports.values()
                              if p.port_no <= ofproto.OFPP_MAX and not p.state & ofproto.OFPPS_LINK_DOWN}
        for m in ofmsg.bind(ofmsg.messages([DeleteFlows(COOKIE), *punts()]), dp):
            dp.send_msg(m)
        self.first = self.first or time.monotonic()
        self.last = time.monotonic()
        LOG.info("switch %016x connected (%d ports)", dp.id, len(self.obs.switches[dp.id]))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port(self, ev):
        p = ev.msg.desc
        if ev.msg.datapath.id in self.obs.switches and p.port_no <= ofproto.OFPP_MAX:
            self.obs.switches[ev.msg.datapath.id][p.port_no] = p.curr_speed / 1000
            ref = (ev.msg.datapath.id, p.port_no)
            if p.state & ofproto.OFPPS_LINK_DOWN or ev.msg.reason == ofproto.OFPPR_DELETE:
                self.obs.ports_up.discard(ref)
            else:
                self.obs.ports_up.add(ref)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg, dpid = ev.msg, ev.msg.datapath.id
        port = msg.match["in_port"]
        self.counts["frames"] += 1
        try:
            if lldp.is_lldp(msg.data):
                self.obs.heard.add((lldp.read(self.secret, msg.data), (dpid, port)))
                self.counts["heard"] += 1
                return
            seen = sender(msg.data)
        except (ValueError, struct.error):  # another agent's LLDP, a malformed frame: not evidence
            seen = None
        if seen is None:
            self.counts["ignored"] += 1
            return
        self.obs.host_seen(seen[0], seen[1], dpid, port, arp=seen[2])

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        pass  # os-ken asks for the port description itself

    def _run(self):
        interval, duration = SETTINGS.get("interval_s", 1.0), SETTINGS.get("duration_s", 10.0)
        # the whole duration after the first switch, and two rounds after the latest one connected
        while self.first is None or time.monotonic() - max(self.first + duration, self.last + 2 * interval) < 0:
            for dpid, dp in list(self.dps.items()):
                for port in sorted(self.obs.switches.get(dpid, ())):
                    dp.send_msg(ofmsg.bind([ofmsg.packet_out(port, lldp.probe(self.secret, dpid, port))], dp)[0])
                    self.counts["probes"] += 1
            hub.sleep(interval)
        hub.sleep(interval)  # the last probes' answers
        rc = self.finish()
        for dp in list(self.dps.values()):
            for m in ofmsg.bind(ofmsg.messages([DeleteFlows(COOKIE), DeleteMeter(METER)]) + [ofmsg.barrier()], dp):
                dp.send_msg(m)
        hub.sleep(1.0)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(rc)

    def finish(self) -> int:
        obs = self.obs
        print(f"discover: {len(obs.switches)} switches, {len(obs.heard)} probes heard, {len(obs.hosts)} hosts seen "
              f"({self.counts['probes']} probes sent, {self.counts['ignored']} frames ignored)", flush=True)
        try:
            fabric = infer(obs, SETTINGS.get("rate_mbps"))
        except DiscoverError as e:
            print(f"freeway discover: {e}; nothing written", file=sys.stderr, flush=True)
            return 1
        fabric.save(SETTINGS["out"])
        silent = obs.silent_ports()
        if silent:
            print(f"discover: warning: {len(silent)} ports are up but nothing was heard on them (not in the "
                  f"description): " + ", ".join(f"{d:016x}:{p}" for d, p in silent[:8]), flush=True)
        kinds = {}
        for sw in fabric.switches.values():
            kinds[sw.role] = kinds.get(sw.role, 0) + 1
        print(f"discover: a {fabric.topo} {fabric.params}: " + ", ".join(f"{n} {r}" for r, n in sorted(kinds.items()))
              + f", {len(fabric.links)} links, {len(fabric.hosts)} hosts; written to {SETTINGS['out']}", flush=True)
        expect = SETTINGS.get("expect")
        if expect is not None:
            diff = differences(expect, fabric)
            for d in diff:
                print(f"discover: differs from {SETTINGS['expect_file']}: {d}", flush=True)
            if diff:
                return 2
            print(f"discover: the same fabric as {SETTINGS['expect_file']}", flush=True)
        return 0
