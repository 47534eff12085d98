// Freeway's packet-level engine on ns-3: the switches carry out the controller's OpenFlow program.
//
// Compiled at run time by cppyy (experiments/engines/ns3/native.py). Python parses every OpenFlow message a
// policy sends with the message-level simulated switch (ryu_apps/simswitch) and hands each change of a
// switch's tables to this code as one line of text (experiments/engines/ns3/compile.py); no Python runs per
// packet. What lives here:
//
//   Switch        one OpenFlow switch as an ns-3 Ipv4RoutingProtocol: flow tables (priority order,
//                 goto-table), select/all/indirect/ff groups (a live bucket: its watch port up; a
//                 select group hashes the 5-tuple with the switch's salt, FNV-1a, as the simulated
//                 switch does), drop meters (token buckets), set_field ip_dscp, set_queue, output,
//                 packets to the controller (held until Python answers), per-entry counters and idle
//                 timeouts, per-port counters, sFlow-like 1-in-N samples; per-packet load balancing to
//                 the least-loaded bucket (PerPktLB) as an engine option for select groups.
//   DscpFilter    the two strict-priority bands of a port, classified by DSCP as the emulator's tc
//                 filters classify (mice DSCP: band 0, elephant DSCP: band 1, anything else: band 0).
//   Host          a host's flows: request/response mice (8-byte size request, the answer, timed at the
//                 client as experiments/hosts/rr.py times them), bulk elephants counted at the receiver,
//                 the Freeway handshake over UDP before a flow that announces itself.
//
// Units: times in seconds (double), rates in bit/s, sizes in bytes.
//
// The parts, each included by the next: fwsim/types.h, fwsim/port-queue.h, fwsim/switch.h, fwsim/host.h,
// fwsim/fabric.h.

#include "fwsim/fabric.h"
