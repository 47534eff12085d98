"""Isolation on a real 10 Mbit/s k=4 fat-tree: queues on every port, mice vs a saturating elephant with
isolation on and off (same test run), tc class counters, a metered elephant."""

import json
import re
import statistics
import subprocess
import sys
import time

from experiments.harness.procs import ControllerProcess
from ryu_apps.programs.isolation import IsolationConfig
from tests.integration.conftest import operator_fattree
from topology.builder import FabricNet
from topology.sflow_agent import SFlowAgentConfig

PY = sys.executable


def _mice(fn, n=20, size=10_000):
    srv, cli = fn.host("h3_0_0"), fn.host("h2_0_0")
    out = cli.cmd(f"{PY} -m experiments.hosts.rr client --to {srv.IP()} --port 7010 --sizes {','.join([str(size)] * n)}")
    fcts = [json.loads(x)["fct_s"] for x in out.splitlines() if x.startswith("{") and '"ok": true' in x]
    assert len(fcts) == n, out[-500:]
    return statistics.median(fcts)


def _tc_sent(dev):
    out = subprocess.run(["tc", "-s", "class", "show", "dev", dev], capture_output=True, text=True).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"class htb (1:\w+) .*?\n Sent (\d+) bytes", out)}


def _measure(tmp_path, isolation: bool, mtu: int = 1500, check=None):
    name = ("on" if isolation else "off") + str(mtu)
    fabric = operator_fattree()
    fabric.save(tmp_path / f"{name}.json")
    extra = ["--isolation", "on"] if isolation else []
    with ControllerProcess(tmp_path / f"{name}.json", extra=extra) as ctl, \
            FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, mtu, target=ctl.sflow_target),
                      isolation=IsolationConfig() if isolation else None, mtu=mtu) as fn:
        fn.wait_reachable(30)
        if check is not None:
            check(fn)
        queues = subprocess.run(["ovs-vsctl", "--bare", "--columns=_uuid", "find", "queue", "external-ids:freeway=1"],
                                capture_output=True, text=True).stdout.split()
        fn.host("h3_0_0").cmd(f"{PY} -m experiments.hosts.rr server --port 7010 >/dev/null 2>&1 &")
        time.sleep(0.5)
        unloaded = _mice(fn)
        before = _tc_sent(f"e2_0-eth{next(h.port for h in fabric.hosts if h.name == 'h2_0_0')}")
        # an elephant into h2_0_0 from its neighbour on the same ToR: it saturates e2_0's port 1
        fn.iperf_server("h2_0_0", 5801)
        fn.host("h2_0_1").sendCmd(f"iperf3 -c {fn.host('h2_0_0').IP()} -p 5801 -t 12 -J")
        time.sleep(3.0)  # established, and detected (marked) in the isolated run
        loaded = _mice(fn)
        ele = json.loads(fn.host("h2_0_1").waitOutput())["end"]["sum_received"]["bytes"]
        after = _tc_sent(f"e2_0-eth{next(h.port for h in fabric.hosts if h.name == 'h2_0_0')}")
        fn.host("h3_0_0").cmd("kill %1")
        sent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        return {"unloaded": unloaded, "loaded": loaded, "queues": len(queues), "elephant_bytes": ele, "tc": sent}


def test_mice_keep_their_latency_next_to_an_elephant_only_with_isolation(tmp_path):
    on = _measure(tmp_path, True)
    off = _measure(tmp_path, False)
    assert on["queues"] == 2 * 80 and off["queues"] == 80, (on, off)  # two queues on every switch port
    assert on["loaded"] <= 2 * on["unloaded"], (on, off)
    # "much worse" without isolation: at least 2x (measured 2.9x to 12x: how deep one TCP flow fills the
    # FIFO in its first seconds varies)
    assert off["loaded"] > 2 * off["unloaded"], (on, off)
    # against isolation's own loaded mice: 1.5x (a full suite on 2026-11-23 measured 1.78x: 53 ms against
    # 30 ms, the isolated run's mice slower than usual, 1.64x its unloaded; the same test passed alone)
    assert off["loaded"] > 1.5 * on["loaded"], (on, off)
    # tc counters over the elephant's life: its bytes in the elephant class once monitoring marked it (it
    # rides with the mice until detected: up to 30% of its 12 s allowed for that), the mice in the mice class
    assert on["elephant_bytes"] > 5_000_000 and on["tc"]["1:2"] >= 0.7 * on["elephant_bytes"], (on, off)
    assert on["tc"]["1:1"] >= 20 * 10_000, (on, off)


def _jumbo_fabric(fn):
    """Every interface at 9000 bytes, a full jumbo frame crosses pods unfragmented, the port buffers hold
    the same bytes as at 1500, and the links are still shaped to their rate."""
    rows = subprocess.run(["ovs-vsctl", "--bare", "--columns=name,mtu", "list", "interface"], capture_output=True,
                          text=True, check=True).stdout.split("\n\n")
    mtus = {r.split()[0]: r.split()[1] for r in rows if "-eth" in r}  # the fabric's ports (not bridges' own)
    assert len(mtus) == 80 and set(mtus.values()) == {"9000"}, mtus
    a, b = fn.host("h0_0_0"), fn.host("h3_1_1")
    assert a.cmd("cat /sys/class/net/h0_0_0-eth0/mtu").strip() == "9000"
    out = a.cmd(f"ping -c 3 -W 2 -M do -s {9000 - 28} {b.IP()}")
    assert " 0% packet loss" in out, out
    up = fn.fabric.links[0]
    qd = subprocess.run(["tc", "qdisc", "show", "dev", f"{up.a}-eth{up.a_port}"], capture_output=True,
                        text=True).stdout
    assert "bfifo 10: parent 1:1 limit 90840b" in qd and "bfifo 11: parent 1:2 limit 60560b" in qd, qd
    mbps = fn.iperf("h0_0_0", "h3_1_1", 4, port=5803)
    assert 8.5 <= mbps <= 10.3, mbps  # the HTB still holds the 10 Mbit/s link with 9000-byte frames


def test_jumbo_frames_keep_the_shaping_the_buffers_and_the_isolation(tmp_path):
    """``--mtu 9000`` (issue 16, item 2): the fabric carries jumbo frames, its links stay shaped, and mice
    next to a saturating elephant keep their latency."""
    on = _measure(tmp_path, True, mtu=9000, check=_jumbo_fabric)
    assert on["loaded"] <= 2 * on["unloaded"], on
    assert on["elephant_bytes"] > 5_000_000 and on["tc"]["1:2"] >= 0.7 * on["elephant_bytes"], on


def _queues_are_kept(fn, ctl):
    """Issue 15: the controller made every port's queues (the builder made none) and keeps them: a port
    whose elephant queue was changed and one whose QoS was taken away are repaired, and said so."""
    from ryu_apps.control import queue_keeper as qos
    from topology import queues

    want = queues.desired(fn.fabric, IsolationConfig())
    assert qos.plan(want, queues.held(fn.fabric, queues.read(None))) == []
    up, host = fn.fabric.port_to("e0_0", "a0_1"), fn.fabric.host_by_ip("10.1.0.2")
    queue = subprocess.run(["ovs-vsctl", "get", "qos", subprocess.run(
        ["ovs-vsctl", "get", "port", f"e0_0-eth{up}", "qos"], capture_output=True, text=True, check=True).stdout.strip(),
        "queues:1"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["ovs-vsctl", "set", "queue", queue, "other-config:max-rate=1000000", "--", "clear", "port",
                    f"{host.switch}-eth{host.port}", "qos"], check=True)
    said = [f"queues: repaired e0_0 port {up} (e0_0-eth{up}): queue 1 is",
            f"queues: repaired {host.switch} port {host.port} ({host.switch}-eth{host.port}): no QoS record"]
    # Checked every 10 s; the repair is logged once every port of the check is fixed, so the switch can be
    # right a moment before the log says so: wait for both.
    deadline = time.monotonic() + 20
    while qos.plan(want, queues.held(fn.fabric, queues.read(None))) or not all(s in ctl.log_text() for s in said):
        assert time.monotonic() < deadline, (qos.plan(want, queues.held(fn.fabric, queues.read(None))),
                                             ctl.log_text()[-2000:])
        time.sleep(0.5)


def test_a_metered_elephant_is_held_to_its_allocation(tmp_path):
    fabric = operator_fattree()
    fabric.save(tmp_path / "m.json")
    with ControllerProcess(tmp_path / "m.json", mode="freeway", extra=["--isolation", "on"]) as ctl, \
            FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target),
                      isolation=IsolationConfig()) as fn:
        fn.wait_reachable(30)
        dst = fn.host("h3_1_1")
        fn.iperf_server(dst.name, 5802)
        out = fn.host("h0_0_0").cmd(f"{PY} -m ryu_apps.cli send --to {dst.IP()} --port 5802 --size 1M --rate 4 "
                                    "--json -- iperf3 -c {to} -p {port} --cport {cport} -t 8 -J")
        ack = json.loads(out.splitlines()[0])
        got = json.loads("\n".join(out.splitlines()[1:]))["end"]["sum_received"]["bits_per_second"]
        meters = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "meter-stats", "e0_0"], capture_output=True,
                                text=True).stdout
        _queues_are_kept(fn, ctl)
    assert ack["answer"] == "ack" and ack["rate_mbps"] == 4.0
    assert abs(got - 4e6) / 4e6 <= 0.15, got  # sent unthrottled, held by the meter
    assert re.search(r"meter:1001 .*?0: packet_count:([1-9]\d*)", meters, re.S), meters  # the meter dropped some


def test_a_controller_with_isolation_gives_a_fabric_built_without_it_its_dscp_filters(tmp_path):
    """Issue 61: the README's recipe started the controller with isolation on and built the fabric without;
    the builder then set no DSCP filters and, on the userspace datapath, isolation silently did nothing.
    The controller's queue keeper now sets each port's queues and, on its own host, the filters too."""
    fabric = operator_fattree()
    fabric.save(tmp_path / "f.json")
    iso = IsolationConfig()
    devs = [f"{ln.a}-eth{ln.a_port}" for ln in fabric.links] + [f"{h.switch}-eth{h.port}" for h in fabric.hosts]

    def filtered(dev):
        out = subprocess.run(["tc", "filter", "show", "dev", dev, "parent", "1:"], capture_output=True, text=True).stdout
        return all(f"{d << 2:02x}0000/00fc0000" in out for d in (iso.mice_dscp, iso.elephant_dscp))

    with ControllerProcess(tmp_path / "f.json", extra=["--isolation", "on"]) as ctl, \
            FabricNet(fabric, ctl.address) as fn:  # built without isolation: no filters, no queues
        fn.wait_reachable(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(filtered(d) for d in devs):
            time.sleep(1)
        missing = [d for d in devs if not filtered(d)]
        assert not missing, missing[:5]
        assert "DSCP filters added" in ctl.log_text()
