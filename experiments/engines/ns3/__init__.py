"""ns3/: the packet-level engine: ns-3 switches that carry out the controller's OpenFlow program.

Rule: the same policies (``ryu_apps.modes``) decide, the same message builder (``ofmsg``) says it, the
message-level simulated switch (``ryu_apps.simswitch``) parses it, and ``compile`` hands each change to
the C++ switch (``fwsim.cc``), so that no mode is implemented twice and no Python runs per packet.
``net`` builds a fabric description as an ns-3 network, ``control`` is the controller on simulated time,
``engine`` one run in its own process, ``native`` loads ns-3 (only when a run needs it).
"""
