"""What Open vSwitch's ``datapath_drop_userspace_action_error`` counts on the userspace datapath.

Issue 16 item 1: in the k=8 mixed runs the counter rose to thousands per second, and its name reads
like forwarded packets being dropped. In OVS 3.1's ``lib/dpif-netdev.c``, ``dp_execute_userspace_action``
counts it when a packet's *last* action is ``userspace()`` and the upcall returns an error; and
``ofproto-dpif-upcall.c``'s ``process_upcall`` returns EAGAIN after it has handled a packet-in or an
sFlow sample. So it counts, once each: every packet sent to the controller, and every sFlow sample
of a packet that an OpenFlow entry then drops (the sample is its last action). A forwarded packet,
sampled or not, and a packet a meter drops are not counted.

Checked here on a real bridge of the userspace datapath (its own bridge and two network namespaces,
no controller, no other fabric up), with known packet counts.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

BR = "fwcnt0"
N = 150
NOISE = 3  # the counter is global to ovs-vswitchd: a stray packet elsewhere (a bridge going away) may count


def sh(cmd: str, check: bool = True) -> str:
    return subprocess.run(cmd, shell=True, check=check, capture_output=True, text=True).stdout


def counter() -> int:
    m = re.search(r"^datapath_drop_userspace_action_error\s.*total: (\d+)$", sh("ovs-appctl coverage/show"), re.M)
    return int(m.group(1)) if m else 0  # not listed until it first counts


def counted(got: tuple[int, int], each: bool, replies: int | None = None) -> bool:
    """The counter's increase is N (``each``) or 0, up to a stray packet; and the replies as given."""
    n, r = got
    return (N <= n <= N + NOISE if each else n <= NOISE) and (replies is None or r == replies)


def pings(dst: str, n: int = N) -> tuple[int, int]:
    """(the counter's increase, replies received) for ``n`` pings from namespace a to ``dst``."""
    before = counter()
    out = sh(f"ip netns exec fwcnt-a ping -q -c {n} -i 0.005 -W 0.1 {dst}", check=False)
    sent, got = map(int, re.search(r"(\d+) packets transmitted, (\d+) received", out).groups())
    assert sent == n
    time.sleep(1.2)  # the counters are gathered from the threads about once a second
    return counter() - before, got


@pytest.fixture
def bridge():
    sh(f"ovs-vsctl --if-exists del-br {BR}")
    sh(f"ovs-vsctl add-br {BR} -- set bridge {BR} datapath_type=netdev fail_mode=secure protocols=OpenFlow13")
    for i, side in enumerate("ab"):
        ns, veth = f"fwcnt-{side}", f"fwcnt-{side}0"
        sh(f"ip netns del {ns}", check=False)
        sh(f"ip netns add {ns} && ip link add {veth} type veth peer name {veth}p netns {ns}")
        sh(f"ip link set {veth} up && ovs-vsctl add-port {BR} {veth}")
        sh(f"ip netns exec {ns} ip addr add 10.9.0.{i + 1}/24 dev {veth}p && ip netns exec {ns} ip link set {veth}p up")
    sh(f"ovs-ofctl -O OpenFlow13 add-meter {BR} meter=1,pktps,burst,band=type=drop,rate=20,burst_size=2")
    for flow in ("priority=0,actions=NORMAL",
                 "priority=10,icmp,nw_dst=10.9.0.2,icmp_type=8,actions=meter:1,NORMAL",  # a meter drops most
                 "priority=10,ip,nw_dst=10.9.0.98,actions=CONTROLLER:128",  # to the (absent) controller
                 "priority=10,ip,nw_dst=10.9.0.99,actions=drop"):  # an explicit drop entry
        sh(f"ovs-ofctl -O OpenFlow13 add-flow {BR} '{flow}'")
    for ip in ("98", "99"):  # no one answers ARP for these
        sh(f"ip netns exec fwcnt-a ip neigh replace 10.9.0.{ip} lladdr 02:00:00:00:00:{ip} dev fwcnt-a0p")
    quiet, last = time.monotonic() + 10, counter()  # what an earlier test left (a fabric going away) settles first
    while time.monotonic() < quiet:
        time.sleep(1.2)
        now = counter()
        if now == last:
            break
        last = now
    try:
        yield
    finally:
        sh(f"ovs-vsctl --if-exists del-br {BR}", check=False)
        for side in "ab":
            sh(f"ip netns del fwcnt-{side}", check=False)


def test_it_counts_packet_ins_and_samples_of_dropped_packets_not_forwarded_packets(bridge):
    sh(f"ovs-ofctl -O OpenFlow13 --strict mod-flows {BR} 'priority=10,icmp,nw_dst=10.9.0.2,icmp_type=8,actions=NORMAL'")
    time.sleep(0.3)
    assert counted(r := pings("10.9.0.2"), False, N), r  # forwarded: not counted
    assert counted(r := pings("10.9.0.98"), True, 0), r  # to the controller: each one
    assert counted(r := pings("10.9.0.99"), False, 0), r  # dropped by an entry, not sampled: not counted
    sh(f"ovs-ofctl -O OpenFlow13 --strict mod-flows {BR} 'priority=10,icmp,nw_dst=10.9.0.2,icmp_type=8,actions=meter:1,NORMAL'")
    time.sleep(0.3)
    n, got = pings("10.9.0.2")
    assert n <= NOISE and got < N / 2, (n, got)  # a meter dropped most: not counted

    sh(f"ovs-vsctl -- --id=@s create sflow agent=lo target='\"127.0.0.1:9\"' sampling=1 polling=0 "
       f"-- set bridge {BR} sflow=@s")  # every packet sampled
    time.sleep(1.0)
    n, got = pings("10.9.0.2")
    assert n <= NOISE and got < N / 2, (n, got)  # sampled, then metered: not counted
    sh(f"ovs-ofctl -O OpenFlow13 --strict mod-flows {BR} 'priority=10,icmp,nw_dst=10.9.0.2,icmp_type=8,actions=NORMAL'")
    time.sleep(0.3)
    assert counted(r := pings("10.9.0.2"), False, N), r  # sampled, then forwarded: not counted
    assert counted(r := pings("10.9.0.99"), True, 0), r  # sampled, then dropped by the entry: each sample
    assert counted(r := pings("10.9.0.98"), True, 0), r  # sampled, then to the controller: once each, not twice
