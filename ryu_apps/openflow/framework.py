"""The one place that imports the controller framework.

os-ken (OpenStack's maintained Ryu fork) is what Freeway installs and tests;
where only Ryu is installed the same apps load under ``ryu-manager``.
"""

try:  # pragma: no cover - exercised by whichever framework is installed
    from os_ken.base import app_manager
    from os_ken.controller import event as base_event
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib import hub
    from os_ken.lib.packet import arp as pkt_arp
    from os_ken.lib.packet import ethernet as pkt_ethernet
    from os_ken.lib.packet import ipv4 as pkt_ipv4
    from os_ken.lib.packet import packet as pkt_packet
    from os_ken.lib.packet import udp as pkt_udp
    from os_ken.ofproto import ofproto_v1_3 as ofproto
    from os_ken.ofproto import ofproto_v1_3_parser as parser

    FRAMEWORK = "os_ken"
except ImportError:  # pragma: no cover
    from ryu.base import app_manager  # type: ignore[no-redef]
    from ryu.controller import event as base_event  # type: ignore[no-redef]
    from ryu.controller import ofp_event  # type: ignore[no-redef]
    from ryu.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls  # type: ignore
    from ryu.lib import hub  # type: ignore[no-redef]
    from ryu.lib.packet import arp as pkt_arp  # type: ignore[no-redef]
    from ryu.lib.packet import ethernet as pkt_ethernet  # type: ignore[no-redef]
    from ryu.lib.packet import ipv4 as pkt_ipv4  # type: ignore[no-redef]
    from ryu.lib.packet import packet as pkt_packet  # type: ignore[no-redef]
    from ryu.lib.packet import udp as pkt_udp  # type: ignore[no-redef]
    from ryu.ofproto import ofproto_v1_3 as ofproto  # type: ignore[no-redef]
    from ryu.ofproto import ofproto_v1_3_parser as parser  # type: ignore[no-redef]

    FRAMEWORK = "ryu"

# Green UDP socket and a thread pool for blocking calls. Monkey patching cannot
# be relied on (os-ken's hub.patch() leaves the socket module unpatched once
# its hub is running), so the apps use these explicitly.
from eventlet import tpool as _tpool  # noqa: E402
from eventlet.green import socket as green_socket  # noqa: E402

run_blocking = _tpool.execute

__all__ = ["green_socket", "run_blocking",
    "FRAMEWORK", "app_manager", "base_event", "ofp_event", "set_ev_cls", "CONFIG_DISPATCHER", "MAIN_DISPATCHER",
    "DEAD_DISPATCHER", "hub", "ofproto", "parser", "pkt_packet", "pkt_ethernet", "pkt_arp", "pkt_ipv4", "pkt_udp",
]
