"""A user's own os-ken app, with a bug to catch: it sends every new flow to a group it never created.

On connect: a table-miss entry to the controller. On a packet-in: an entry for the packet's destination
that outputs to group 7 (never added: a real switch refuses the entry with OFPET_BAD_ACTION /
OFPBAC_BAD_OUT_GROUP), then the packet out of every port. The error comes back to the app, which logs it.
"""

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3


class BuggyHub(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def features(self, ev):
        dp = ev.msg.datapath
        p, o = dp.ofproto_parser, dp.ofproto
        to_ctl = [p.OFPInstructionActions(o.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(o.OFPP_CONTROLLER, o.OFPCML_NO_BUFFER)])]
        dp.send_msg(p.OFPFlowMod(datapath=dp, priority=0, match=p.OFPMatch(), instructions=to_ctl))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        p, o = dp.ofproto_parser, dp.ofproto
        group = [p.OFPInstructionActions(o.OFPIT_APPLY_ACTIONS, [p.OFPActionGroup(7)])]  # the bug: no group 7
        dp.send_msg(p.OFPFlowMod(datapath=dp, priority=10, match=p.OFPMatch(in_port=msg.match["in_port"]),
                                 instructions=group))
        dp.send_msg(p.OFPPacketOut(datapath=dp, buffer_id=o.OFP_NO_BUFFER, in_port=msg.match["in_port"],
                                   actions=[p.OFPActionOutput(o.OFPP_FLOOD)], data=msg.data))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev):
        self.logger.warning("switch %016x refused a message: error type %d code %d", ev.msg.datapath.id,
                            ev.msg.type, ev.msg.code)
