"""``freeway bench emulator``: what one packet costs Open vSwitch's forwarding thread, by ports on its datapath.

Two network namespaces ping each other at a fixed rate through one userspace-datapath bridge, while
idle ports (veth pairs on bridges of their own, with no flows: nothing moves on them) are added to
the same ovs-vswitchd, or to a second one (``topology.ovsproc``). Measured each time: the forwarding
(main) thread's CPU and its wait for a CPU, the pings answered and their round-trip time. No
Mininet and no controller: only Open vSwitch and the kernel.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from experiments.harness.procs import SwitchCpu
from topology.builder import db_args, vsctl
from topology.ovsproc import SwitchProcesses

NS = ("fwe-a", "fwe-b")
IPS = ("10.250.0.1", "10.250.0.2")
PER_BRIDGE = 50  # idle ports per bridge


def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


def _cleanup(dbs) -> None:
    for db in dbs:
        out = _sh("ovs-vsctl", *db_args(db), "list-br").stdout.split()
        gone = [b for b in out if b.startswith("fwe")]
        if gone:
            args: list[str] = []
            for b in gone:
                args += ["--", "--if-exists", "del-br", b]
            _sh("ovs-vsctl", *db_args(db), *args[1:])
    links = _sh("ip", "-o", "link", "show").stdout
    for name in re.findall(r"^\d+: (fwe[xp]\d+)[@:]", links, re.M):
        _sh("ip", "link", "del", name)
    for ns in NS:
        _sh("ip", "netns", "del", ns)


def _ping_pair(db) -> None:
    vsctl(*db_args(db), "add-br", "fwe0", "--", "set", "bridge", "fwe0", "datapath_type=netdev",
          "fail_mode=secure")
    for i, (ns, ip) in enumerate(zip(NS, IPS, strict=True)):
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", f"fwep{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        _sh("ip", "link", "set", f"fwep{i}", "up")
        for c in (["ip", "addr", "add", f"{ip}/24", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"]):
            _sh("ip", "netns", "exec", ns, *c)
        vsctl(*db_args(db), "add-port", "fwe0", f"fwep{i}", "--", "set", "interface", f"fwep{i}",
              f"ofport_request={i + 1}")
    _sh("ovs-ofctl", "add-flow", "fwe0", "in_port=1,actions=output:2")
    _sh("ovs-ofctl", "add-flow", "fwe0", "in_port=2,actions=output:1")


def _idle_ports(n: int, db) -> None:
    """``n`` idle ports (n/2 veth pairs, both ends on a flowless bridge) in the process of ``db``."""
    names = []
    for k in range(n // 2):
        a, b = f"fwex{2 * k}", f"fwex{2 * k + 1}"
        names += [a, b]
        _sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
    keys = [f"net.ipv6.conf.{x}.disable_ipv6=1" for x in names]
    for i in range(0, len(keys), 200):
        _sh("sysctl", "-q", "-w", *keys[i:i + 200])
    batch = "".join(f"link set {x} up\n" for x in names)
    subprocess.run(["ip", "-batch", "-"], input=batch, capture_output=True, text=True)
    args: list[str] = []
    for j in range(0, len(names), PER_BRIDGE):
        br = f"fwe{'b' if db else 'a'}{j // PER_BRIDGE + 1}"
        args += ["--", "--may-exist", "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev",
                 "fail_mode=secure"]
        for x in names[j:j + PER_BRIDGE]:
            args += ["--", "add-port", br, x]
    if args:
        vsctl(*db_args(db), *args[1:], timeout=300)


def _measure(pid: int, pps: int, seconds: float) -> dict:
    _sh("ip", "netns", "exec", NS[0], "ping", "-c", "3", "-q", IPS[1])  # warm: the datapath's flows in place
    cpu = SwitchCpu(pid)
    out = _sh("ip", "netns", "exec", NS[0], "ping", "-q", "-i", f"{1 / pps:.4f}", "-w", f"{seconds:g}",
              IPS[1]).stdout
    busy = cpu.busy()
    sent = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    rtt = re.search(r"= [\d.]+/([\d.]+)/([\d.]+)/", out)
    return {"busy": busy, "waiting": cpu.last_waiting, "sent": int(sent.group(1)) if sent else 0,
            "answered": int(sent.group(2)) if sent else 0,
            "rtt_avg_ms": float(rtt.group(1)) if rtt else None, "rtt_max_ms": float(rtt.group(2)) if rtt else None}


def emulator(ports: list[int], pps: int, seconds: float, out: Path) -> dict:
    """For each count of idle ports: all in the ping's own process, then (the largest count) the same
    ports split off into a second process."""
    from experiments.benches.controller import machine

    runs = []
    with SwitchProcesses(2) as sp:
        pids = sp.vswitchd_pids()
        try:
            for n in ports:
                _cleanup(sp.dbs)
                _ping_pair(None)
                _idle_ports(n, None)
                time.sleep(2)
                r = {"idle_ports_same_process": n, "idle_ports_other_process": 0, **_measure(pids[0], pps, seconds)}
                print(f"[emulator] {n:4d} idle ports in the same process: forwarding thread {r['busy']:.0%} busy, "
                      f"{r['waiting'] or 0:.0%} waiting; {r['answered']}/{r['sent']} pings answered", flush=True)
                runs.append(r)
            n = max(ports)
            _cleanup(sp.dbs)
            _ping_pair(None)
            _idle_ports(n, sp.dbs[1])
            time.sleep(2)
            r = {"idle_ports_same_process": 0, "idle_ports_other_process": n, **_measure(pids[0], pps, seconds)}
            print(f"[emulator] {n:4d} idle ports in another process: forwarding thread {r['busy']:.0%} busy, "
                  f"{r['waiting'] or 0:.0%} waiting; {r['answered']}/{r['sent']} pings answered", flush=True)
            runs.append(r)
        finally:
            _cleanup(sp.dbs)
    result = {"bench": "emulator", "machine": machine(), "pps": pps, "seconds": seconds, "runs": runs}
    out.mkdir(parents=True, exist_ok=True)
    from experiments.analysis import stats

    stats.write_json(out / "emulator.json", result)
    return result
