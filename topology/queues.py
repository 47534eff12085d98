"""The switch side of mice/elephant isolation: two priority queues on every port.

Under each port's link-rate HTB, queue 0 for mice (HTB priority 0: served
first and first to borrow) and queue 1 for elephants (priority 1), each
allowed the whole link. Elephants may keep a minimum share
(``elephant_min_share``, 0 by default: strict priority for mice). Each queue
gets its own FIFO, and the buffer goes to mice first (``mice_queue_len``
packets), the rest (``elephant_queue_len``) to elephants, so a standing
elephant queue can never take the mice's buffer. With the userspace datapath
OpenFlow's ``set_queue`` does not steer packets, so tc u32 filters map the
DSCP marks to the two classes (an emulator-only step of the fabric builder);
with the kernel datapath ``set_queue`` works. The controller creates and
keeps the queues themselves through each switch's OVSDB (``topology.qos``);
its OpenFlow side is ``ryu_apps.isolation``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .settings import SettingError, setting, validate

MICE_Q, ELEPHANT_Q = 0, 1


IsolationConfigError = SettingError


@dataclass(frozen=True)
class IsolationConfig:
    mice_dscp: int = setting(46, "DSCP marking mice (EF); the switches' filters map it to the mice queue")
    elephant_dscp: int = setting(8, "DSCP marking elephants (CS1)")
    mice_queue_len: int = setting(60, "FIFO length of the mice queue: the buffer goes to mice first ...",
                                  "packets", min=1)
    elephant_queue_len: int = setting(40, "... and the rest to elephants", "packets", min=1)
    elephant_min_share: float = setting(0.0, "fraction of each link kept for elephants even when mice want it "
                                        "all (0: strict priority for mice)")
    meter_burst_ms: int = setting(300, "per-elephant meter burst, in time at the allocated rate: at least a "
                                  "round trip through full queues, or TCP loses each window's excess", "ms")
    meter_headroom: float = setting(1.05, "meter each elephant at its allocated rate times this (TCP overhead); "
                                    "rate-less elephants share the room divided by it, so that above their floors "
                                    "the meters on a link add up to its capacity", min=1)
    mice_meter_mbps: float = setting(0.0, "optional cap on all mice from one host port (0: off)", "Mbit/s")

    def __post_init__(self) -> None:
        validate(self)
        for key in ("mice_dscp", "elephant_dscp"):
            if not 0 <= getattr(self, key) <= 63:
                raise SettingError(f"{key}: a DSCP is 0..63")
        if self.mice_dscp == self.elephant_dscp:
            raise SettingError("elephant_dscp: must differ from mice_dscp")
        if self.elephant_min_share >= 1:
            raise SettingError("elephant_min_share: must be below 1")


# ----- switch side ---------------------------------------------------------------
STANDARD_MTU = 1500
JUMBO_MTU = 9000
FRAME_BYTES = STANDARD_MTU + 14  # a full-size standard frame, Ethernet header included


def check_mtu(mtu: int) -> int:
    """An MTU the emulated fabric can run: the standard 1500 bytes up to 9000 (jumbo frames)."""
    if not isinstance(mtu, int) or isinstance(mtu, bool) or not STANDARD_MTU <= mtu <= JUMBO_MTU:
        raise SettingError(f"mtu: must be a whole number of bytes from {STANDARD_MTU} to {JUMBO_MTU}, got {mtu!r}")
    return mtu


def fifo(packets: int, mtu: int = STANDARD_MTU) -> list[str]:
    """A port queue's FIFO, sized as ``packets`` full-size standard frames. At the standard MTU that is a
    packet count; with larger frames the same buffer in bytes (a switch's buffer is memory: jumbo frames
    must not make it several times deeper)."""
    if check_mtu(mtu) == STANDARD_MTU:
        return ["pfifo", "limit", str(packets)]
    return ["bfifo", "limit", str(packets * FRAME_BYTES)]


def tc_commands(dev: str, cfg: IsolationConfig, mtu: int = STANDARD_MTU) -> list[list[str]]:
    """tc commands for one port: DSCP filters to the HTB classes, and the two FIFOs' lengths (``fifo``).

    Open vSwitch's linux-htb puts queue n in class 1:(n+1)."""
    out = []
    for dscp, q, limit in ((cfg.mice_dscp, MICE_Q, cfg.mice_queue_len),
                           (cfg.elephant_dscp, ELEPHANT_Q, cfg.elephant_queue_len)):
        out.append(["tc", "filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip", "prio", str(q + 1),
                    "u32", "match", "ip", "dsfield", hex(dscp << 2), "0xfc", "flowid", f"1:{q + 1}"])
        out.append(["tc", "qdisc", "replace", "dev", dev, "parent", f"1:{q + 1}", "handle", f"{q + 10}:",
                    *fifo(limit, mtu)])
    return out
