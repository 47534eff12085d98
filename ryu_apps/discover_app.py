"""``freeway discover``: learn a fabric the controller did not build and write its description.

The switches connect to this app as they would to the controller. Each one
punts LLDP, ARP and IPv4 to it (through one meter, entries under the
``discover`` cookie); the app probes every port each ``interval`` with the
controller's LLDP probes, records which port hears which, and takes each
host from the frames it sends on a port that no probe arrives at. When the
time is up the graph's Clos roles are inferred (``topology.discover``), the
description is written, and the app's entries and meter are removed from
every switch. A fabric that is not a Clos is refused with the reason and
nothing is written. What is learned from what is ``control.discovery.Learner``'s.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from ryu_apps.control.discovery import COOKIE, METER, Learner, punts
from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    app_manager,
    hub,
    ofp_event,
    ofproto,
    set_ev_cls,
)
from ryu_apps.openflow.intents import DeleteFlows, DeleteMeter

LOG = logging.getLogger("freeway.discover")
SETTINGS: dict = {}  # out, duration_s, interval_s, rate_mbps, expect: set by ``cmd_discover`` before the start


class DiscoverApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.learner = Learner(os.urandom(16))
        self.dps: dict[int, object] = {}
        self.first: float | None = None
        self.last: float = 0.0  # when the latest switch connected

    def start(self):
        super().start()
        self.threads.append(hub.spawn(self._run))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state(self, ev):
        dp = ev.datapath
        if ev.state != MAIN_DISPATCHER:
            if self.dps.get(dp.id) is dp:  # not a refused second connection of a connected switch
                del self.dps[dp.id]
            return
        self.dps[dp.id] = dp
        self.learner.connected(dp.id, dp.ports.values())
        for m in ofmsg.bind(ofmsg.messages([DeleteFlows(COOKIE), *punts()]), dp):
            dp.send_msg(m)
        self.first = self.first or time.monotonic()
        self.last = time.monotonic()
        LOG.info("switch %016x connected (%d ports)", dp.id, len(self.learner.obs.switches[dp.id]))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port(self, ev):
        p, gone = ev.msg.desc, ev.msg.reason == ofproto.OFPPR_DELETE
        self.learner.port(ev.msg.datapath.id, p.port_no, p.curr_speed, not (gone or p.state & ofproto.OFPPS_LINK_DOWN))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        self.learner.frame(ev.msg.datapath.id, ev.msg.match["in_port"], ev.msg.data)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        pass  # os-ken asks for the port description itself

    def _run(self):
        interval, duration = SETTINGS.get("interval_s", 1.0), SETTINGS.get("duration_s", 10.0)
        # the whole duration after the first switch, and two rounds after the latest one connected
        while self.first is None or time.monotonic() - max(self.first + duration, self.last + 2 * interval) < 0:
            for dpid, dp in list(self.dps.items()):
                for port, frame in self.learner.probes(dpid):
                    dp.send_msg(ofmsg.bind([ofmsg.packet_out(port, frame)], dp)[0])
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
        rc, lines, fabric = self.learner.finish(SETTINGS.get("rate_mbps"), SETTINGS["out"], SETTINGS.get("expect"),
                                                SETTINGS.get("expect_file", ""))
        if fabric is not None:
            fabric.save(SETTINGS["out"])
        for line in lines:
            print(line, file=sys.stderr if rc == 1 and line.startswith("freeway discover:") else sys.stdout, flush=True)
        return rc
