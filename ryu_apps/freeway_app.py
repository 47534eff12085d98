"""The Freeway os-ken app: thin handlers over the pure modules.

Each handler finds the switch in the fabric description, calls a pure function
and sends the messages it returns.
"""

from __future__ import annotations

import logging
from collections import Counter

from topology.fabric import Fabric

from . import arp, config, forwarding, ofmsg
from .framework import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, app_manager, ofp_event, ofproto, set_ev_cls

LOG = logging.getLogger("freeway")


class FreewayApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.fabric = Fabric.load(self.cfg.fabric)
        self.datapaths: dict[int, object] = {}
        self.counters: Counter[str] = Counter()
        LOG.info("freeway: mode %s, fabric %s (%d switches, %d hosts)", self.cfg.mode, self.fabric.topo,
                 len(self.fabric.switches), len(self.fabric.hosts))

    def send(self, dp, msgs) -> None:
        for m in ofmsg.bind(msgs, dp):
            dp.send_msg(m)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_switch_features(self, ev):
        dp = ev.msg.datapath
        sw = self.fabric.switch_by_dpid(dp.id)
        if sw is None:
            self.counters["unknown-datapath"] += 1
            LOG.warning("datapath %016x is not in the fabric description: ignored", dp.id)
            return
        groups, flows = forwarding.base_program(self.fabric, sw.name)
        self.send(dp, ofmsg.program(groups, flows))
        self.datapaths[dp.id] = dp
        LOG.info("switch %s (%016x) connected: programmed %d flows, %d groups", sw.name, dp.id, len(flows),
                 len(groups))

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def on_switch_gone(self, ev):
        dp = ev.datapath
        if dp.id is not None and self.datapaths.pop(dp.id, None) is not None:
            sw = self.fabric.switch_by_dpid(dp.id)
            LOG.warning("switch %s (%016x) disconnected", sw.name if sw else "?", dp.id)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        sw = self.fabric.switch_by_dpid(msg.datapath.id)
        fields = arp.decode(msg.data)
        if sw is None or fields is None:
            self.counters["packet-in-dropped"] += 1
            return
        reply, reason = arp.answer(self.fabric, sw.name, msg.match["in_port"], *fields)
        self.counters[f"arp-{reason}"] += 1
        if reply is None:
            LOG.debug("arp from %s port %s refused: %s", sw.name, msg.match["in_port"], reason)
            return
        data = ofmsg.arp_reply_packet(reply.requester_mac, reply.requester_ip, reply.target_mac, reply.target_ip)
        self.send(msg.datapath, [ofmsg.packet_out(reply.out_port, data)])

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev):
        msg = ev.msg
        self.counters["switch-errors"] += 1
        LOG.error("switch %016x reported error type=%d code=%d", msg.datapath.id, msg.type, msg.code)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev):
        msg = ev.msg
        sw = self.fabric.switch_by_dpid(msg.datapath.id)
        LOG.info("port status on %s: port %d reason %d state %d", sw.name if sw else msg.datapath.id,
                 msg.desc.port_no, msg.reason, msg.desc.state)
