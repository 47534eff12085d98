"""The EFM paper's four collision tests on a 10 Mbit/s k=4 fat-tree, reproducible under any mode.

ECMP's hash decides where flows go; to reproduce an unlucky hash every time,
the scenario pins the flows' initial paths with entries at priority 450 (what
the hash would have done). Every scheme's own exact-match entries (priority
500) override them, so EFM, Hedera and Freeway can still move the flows.

Tests 1 and 2: upstream collisions (three flows from pod 0 on the a0_0 -> c1
uplink; test 2 adds background flow F4 on a0_0 -> c2). Tests 3 and 4:
downstream collisions (three flows from three pods meeting on the c1 -> a2_0
downlink; test 4 adds F4 on c2 -> a2_0).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from ryu_apps.openflow import pipeline
from topology.builder import ofctl
from topology.fabric import Fabric
from topology.paths import path_ports

PRIO_STEER = pipeline.prio("elephant-mark")  # below the reroutes' entries, in the same table (at a ToR: ingress,
# after the guard)


@dataclass(frozen=True)
class CFlow:
    name: str
    src: str
    dst: str
    path: tuple[str, ...]  # the switches the unlucky hash picked
    rate_mbps: float | None = None  # None: as fast as TCP goes
    port: int = 0


UP = {
    "F1": CFlow("F1", "h0_0_0", "h2_0_0", ("e0_0", "a0_0", "c1", "a2_0", "e2_0")),
    "F2": CFlow("F2", "h0_1_0", "h3_0_0", ("e0_1", "a0_0", "c1", "a3_0", "e3_0")),
    "F3": CFlow("F3", "h0_1_1", "h1_1_0", ("e0_1", "a0_0", "c1", "a1_0", "e1_1")),
}
DOWN = {
    "F1": CFlow("F1", "h0_0_0", "h2_0_0", ("e0_0", "a0_0", "c1", "a2_0", "e2_0")),
    "F2": CFlow("F2", "h1_0_0", "h2_1_0", ("e1_0", "a1_0", "c1", "a2_0", "e2_1")),
    "F3": CFlow("F3", "h3_0_0", "h2_0_1", ("e3_0", "a3_0", "c1", "a2_0", "e2_0")),
}
TESTS = {
    1: ("upstream", [UP["F1"], UP["F2"], UP["F3"]]),
    2: ("upstream", [UP["F1"], UP["F2"], UP["F3"],
                     CFlow("F4", "h0_0_1", "h1_0_1", ("e0_0", "a0_0", "c2", "a1_0", "e1_0"), rate_mbps=4)]),
    3: ("downstream", [DOWN["F1"], DOWN["F2"], DOWN["F3"]]),
    4: ("downstream", [DOWN["F1"], DOWN["F2"], DOWN["F3"],
                       CFlow("F4", "h3_1_0", "h2_1_1", ("e3_1", "a3_0", "c2", "a2_0", "e2_1"), rate_mbps=4)]),
}


@dataclass(frozen=True)
class Pin:
    """One pinning entry: at ``switch``, TCP ``src_ip:sport -> dst_ip:dport`` leaves by ``out_port``."""

    switch: str
    table: int
    priority: int
    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    out_port: int


def pins(fabric: Fabric, flows: list[CFlow], base_port: int = 5300) -> tuple[list[CFlow], list[Pin]]:
    """Each flow's initial path as entries (below the reroutes' entries, exact 5-tuple: the client's port is
    ``port + 1000``, so the entry at the ingress ToR is also the per-flow counter Hedera polls), and the
    flows with their ports set. Both engines put the same entries in (``steer``; the ns-3 engine's
    ``pins``)."""
    out, entries = [], []
    for i, f in enumerate(flows):
        port = base_port + i
        src, dst = fabric.host_by_ip(_ip(fabric, f.src)), fabric.host_by_ip(_ip(fabric, f.dst))
        hops = path_ports(fabric, f.path)
        hops.append((dst.switch, dst.port))
        for sw, p in hops:
            entries.append(Pin(sw, pipeline.table_for(PRIO_STEER, fabric.switches[sw].is_tor), PRIO_STEER,
                               src.ip, dst.ip, port + 1000, port, p))
        out.append(CFlow(f.name, f.src, f.dst, f.path, f.rate_mbps, port))
    return out, entries


def steer(fabric: Fabric, flows: list[CFlow], base_port: int = 5300) -> list[CFlow]:
    """Pin each flow's initial path on the emulator's switches (``pins``); returns the flows with their
    ports set."""
    out, entries = pins(fabric, flows, base_port)
    for e in entries:
        ofctl("add-flow", e.switch, f"table={e.table},priority={e.priority},tcp,nw_src={e.src_ip},"
                                    f"nw_dst={e.dst_ip},tp_src={e.sport},tp_dst={e.dport},actions=output:{e.out_port}")
    return out


def unsteer(fabric: Fabric) -> None:
    """Remove the pinning entries."""
    for sw in fabric.switches:
        for line in ofctl("dump-flows", sw).splitlines():
            if f"priority={PRIO_STEER}," in line and "cookie=0x0," in line:  # not the controller's marks
                match = line.split(f"priority={PRIO_STEER},", 1)[1].split(" actions=")[0]
                ofctl("--strict", "del-flows", sw, f"priority={PRIO_STEER},{match}")


def _ip(fabric: Fabric, host: str) -> str:
    return next(h.ip for h in fabric.hosts if h.name == host)


def run(fn, flows: list[CFlow], size_bytes: int, timeout: float = 120) -> dict[str, dict]:
    """Start every flow at once (iperf3 sending ``size_bytes``); per flow: goodput and completion time."""
    for f in flows:
        fn.host(f.dst).cmd(f"iperf3 -s -1 -p {f.port} -D >/dev/null 2>&1")
    time.sleep(0.5)
    t0 = time.time()
    for f in flows:
        rate = f" -b {f.rate_mbps}M" if f.rate_mbps else ""
        n = f" -n {size_bytes}" if f.rate_mbps is None else f" -t {background_seconds(size_bytes)}"
        fn.host(f.src).sendCmd(f"iperf3 -c {_ip(fn.fabric, f.dst)} -p {f.port} --cport {f.port + 1000}{n}{rate} -J")
    out = {}
    for f in flows:
        raw = fn.host(f.src).waitOutput()
        try:
            end = json.loads(raw)["end"]
            out[f.name] = {"goodput_mbps": end["sum_received"]["bits_per_second"] / 1e6,
                           "bytes": end["sum_received"]["bytes"],
                           "fct_s": end["sum_received"]["seconds"], "background": f.rate_mbps is not None}
        except (ValueError, KeyError):
            out[f.name] = {"goodput_mbps": 0.0, "bytes": 0, "fct_s": None, "error": raw.strip()[-200:],
                           "background": f.rate_mbps is not None}
    out["_start_wall"] = t0
    return out


def background_seconds(size_bytes: int) -> int:
    """How long a paced background flow (F4) runs: as long as the colliding flows take at 4 Mbit/s, at
    least 5 s."""
    return max(5, int(size_bytes * 8 / 4e6))


def describe(flows: dict[str, dict]) -> str:
    """The flows of one test run on one line: each one's goodput and completion time; a background flow
    (paced, it runs for the whole test) has none, and one that did not finish says so."""
    def one(k: str, v: dict) -> str:
        fct = ("background" if v.get("background") else "not finished") if v["fct_s"] is None else f"{v['fct_s']:.1f} s"
        return f"{k} {v['goodput_mbps']:.2f} Mbit/s / {fct}"
    return ", ".join(one(k, v) for k, v in flows.items())


def aggregate_mbps(res: dict[str, dict]) -> float:
    """What the colliding flows moved together: their bytes over the longest of their completion times
    (each iperf3 receiver's own duration, so start-up is left out: with short flows this reads high).

    Summing per-flow average rates would overstate it: a flow that finishes early hands its share to
    the others, so three flows through one 10 Mbit/s link can "sum" to more than 10 Mbit/s.
    """
    main = [v for k, v in res.items() if k.startswith("F") and not v["background"]]
    if not main or any(v["fct_s"] is None for v in main):
        return 0.0
    return sum(v["bytes"] for v in main) * 8 / max(v["fct_s"] for v in main) / 1e6
