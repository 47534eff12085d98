"""ECMP forwarding on a real k=4 fat-tree of userspace Open vSwitch under the real controller."""

import json
import re
import subprocess
import time
import urllib.request

from topology.builder import black_hole, ofctl, port_tx_bytes


def test_all_hosts_reach_all_hosts(k4):
    fn, _ = k4
    secs, failed = fn.wait_reachable(timeout=30)
    assert failed == []


def test_link_rate_is_ovs_qos_on_every_switch_port(k4):
    fn, _ = k4
    out = subprocess.run(["ovs-vsctl", "--bare", "--columns=name,qos", "list", "port"], capture_output=True,
                         text=True, check=True).stdout
    rows = [r.split() for r in out.strip().split("\n\n")]
    switch_ports = [r for r in rows if re.match(r"^[ace]\d+(_\d+)?-eth\d+$", r[0])]
    assert len(switch_ports) == 20 * 4
    assert all(len(r) == 2 for r in switch_ports), "a switch port without a QoS record"
    qos = subprocess.run(["ovs-vsctl", "--bare", "--columns=type,other_config", "find", "qos",
                          "external-ids:freeway=1"], capture_output=True, text=True, check=True).stdout
    assert qos.count("linux-htb") == 80 and qos.count("max-rate=10000000") == 80
    limits = {r[0]: subprocess.run(["tc", "qdisc", "show", "dev", r[0]], capture_output=True, text=True).stdout
              for r in switch_ports}
    assert all("pfifo 10: parent 1:1 limit 100p" in v for v in limits.values()), limits


def test_ovs_can_queue_more_than_the_linux_default_send_buffer():
    """One packet socket sends for every port; at Linux's default 208 KB it would cap the whole fabric's
    queues at about 90 packets and drop the rest uncounted (see topology/builder.py)."""
    from topology.builder import SEND_BUFFER_MIN, send_buffer_bytes

    assert send_buffer_bytes() >= SEND_BUFFER_MIN


def test_tcp_across_pods_reaches_80_percent_and_no_more_than_the_link(k4):
    fn, _ = k4
    fn.wait_reachable(timeout=30)
    mbps = fn.iperf("h0_0_0", "h3_1_1", seconds=5)
    assert 8.0 <= mbps <= 10.5, mbps


def _uplink_tx(fn, switch: str) -> dict[int, int]:
    tx = port_tx_bytes(switch)
    return {p: tx[p] for p in (fn.fabric.port_to(switch, n) for n in fn.fabric.up_neighbors(switch))}


def test_ecmp_spreads_eight_flows_over_uplinks(k4):
    fn, _ = k4
    fn.wait_reachable(timeout=30)
    dst = fn.host("h2_0_0")
    # 8 parallel TCP streams from h0_0_0 (distinct source ports) to another pod. A fair hash puts all 8
    # on one of 2 uplinks with probability 2/2^8 (seen once in about ten runs of the suite). Twice in a
    # row, 4 s apart, was seen once (2026-11-25; 25 sets in a row spread on a fresh fabric; cause not
    # found: Open vSwitch's default select method hashes each 5-tuple), so a third set waits until the
    # datapath flows of the first two have expired (idle 10 s), in case state there held the choice, and
    # a failure shows the datapath's entries for the streams and the group.
    tried = []
    for attempt in range(3):
        if attempt == 2:
            time.sleep(11.0)
        fn.iperf_server(dst.name, 5301 + attempt)
        before = _uplink_tx(fn, "e0_0")
        fn.host("h0_0_0").cmd(f"iperf3 -c {dst.IP()} -p {5301 + attempt} -P 8 -t 3 >/dev/null 2>&1")
        after = _uplink_tx(fn, "e0_0")
        sent = {p: after[p] - before[p] for p in after}
        total = sum(sent.values())
        assert total > 1_000_000, sent
        tried.append(sent)
        if sum(1 for b in sent.values() if b > 0.1 * total) >= 2:
            break
    groups = ofctl("dump-groups", "e0_0")
    dp = subprocess.run(["ovs-appctl", "dpctl/dump-flows"], capture_output=True, text=True).stdout
    assert sum(1 for b in sent.values() if b > 0.1 * total) >= 2, (
        f"all flows on one uplink, {len(tried)} times: {tried}", groups,
        [ln for ln in dp.splitlines() if dst.IP() in ln or "dp_hash" in ln][:20])
    assert "type=select" in groups and groups.count("bucket=") == 2


def test_controller_restart_reprograms_switches(k4, tmp_path):
    fn, ctl = k4
    ctl.stop()
    for sw in fn.fabric.switches:
        ofctl("del-flows", sw)
    assert fn.ping_matrix([("h0_0_0", "h3_1_1")], wait_s=1) != [], "forwarding should be gone"
    ctl.start()
    t0 = time.monotonic()
    fn.wait_programmed(30)
    secs, failed = fn.wait_reachable(timeout=30)
    assert failed == []
    # the switches lost their flows but kept their groups: only the flows are sent back
    assert re.search(r"connected: \d+ entries read back, [1-9]\d* changes sent \(\d+ Flow\)", ctl.log_tail(40))
    assert time.monotonic() - t0 < 40


def test_unknown_datapath_is_logged_and_ignored(k4):
    fn, ctl = k4
    subprocess.run(["ovs-vsctl", "add-br", "fwx0", "--", "set", "bridge", "fwx0", "datapath_type=netdev",
                    "protocols=OpenFlow13", "other-config:datapath-id=00000000000000ee", "fail-mode=secure",
                    "--", "set-controller", "fwx0", f"tcp:127.0.0.1:{ctl.port}"], check=True)
    try:
        deadline = time.monotonic() + 15
        while "00000000000000ee is not in the fabric description" not in ctl.log_text():
            assert time.monotonic() < deadline, ctl.log_tail()
            time.sleep(0.2)
        assert "priority" not in ofctl("dump-flows", "fwx0")
        assert ctl.proc.poll() is None
        assert fn.ping_matrix([("h0_0_0", "h1_0_0")]) == []
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "fwx0"])


def test_unanswered_handshake_goes_on_as_an_unannounced_flow(k4):
    """In ecmp mode nobody answers the handshake: the agent times out and sends anyway."""
    import json
    import sys

    fn, _ = k4
    dst = fn.host("h1_1_0")
    dst.cmd(f"{sys.executable} -m experiments.hosts.rr sink --port 5601 >/dev/null 2>&1 &")
    time.sleep(0.5)
    out = fn.host("h0_0_0").cmd(f"{sys.executable} -m ryu_apps.cli send --to {dst.IP()} --port 5601 "
                                "--size 1M --timeout 0.3 --retries 1 --json")
    dst.cmd("kill %1")
    rep, sent = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert rep["answer"] == "none" and rep["tries"] == 2
    assert sent["sent"] == 1_000_000


# ----- LLDP: the links as wired, checked against the description (issue 15) -------------------------
def _api(ctl):
    return ctl.extra[ctl.extra.index("--api") + 1]


def _checks(ctl):
    doc = json.load(urllib.request.urlopen(f"http://{_api(ctl)}/api/v1/fabric", timeout=5))
    return ({f"{ln['src']}-{ln['dst']}": ln["lldp"] for ln in doc["links"] if ln["lldp"] and ln["src"] < ln["dst"]},
            doc["unexpected"])


def _until(what, timeout, why):
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why()
        time.sleep(0.2)
    return time.monotonic()


def test_lldp_verifies_every_link_and_takes_a_silently_dead_one_down(k4):
    """A link whose port stays up but carries nothing one way (here c1 drops all it sends to a0_0) is
    only found by LLDP: it goes down within the timeout, forwarding avoids it, and it comes back."""
    fn, ctl = k4
    _until(lambda: set(_checks(ctl)[0].values()) == {"verified"} and len(_checks(ctl)[0]) == 32, 20,
           lambda: _checks(ctl))
    dev, agg_port = f"c1-eth{fn.fabric.port_to('c1', 'a0_0')}", fn.fabric.port_to("a0_0", "c1")
    assert f"output:{agg_port}" in ofctl("dump-groups", "a0_0")
    black_hole(dev)
    try:
        t0 = time.monotonic()
        t1 = _until(lambda: _checks(ctl)[0]["a0_0-c1"] == "missing", 10, lambda: _checks(ctl))
        assert t1 - t0 < 3.5 + 1.5, t1 - t0  # the timeout, plus a probe interval
        assert "link a0_0-c1: LLDP: missing" in ctl.log_text()
        _until(lambda: f"output:{agg_port}" not in ofctl("dump-groups", "a0_0"), 5, lambda: ofctl("dump-groups", "a0_0"))
        assert sum(s == "verified" for s in _checks(ctl)[0].values()) == 31
        secs, failed = fn.wait_reachable(timeout=20)
        assert failed == []
    finally:
        black_hole(dev, False)
    _until(lambda: _checks(ctl)[0]["a0_0-c1"] == "verified", 10, lambda: _checks(ctl))
    _until(lambda: f"output:{agg_port}" in ofctl("dump-groups", "a0_0"), 10, lambda: ofctl("dump-groups", "a0_0"))


def test_a_cable_the_description_does_not_have_is_reported_and_never_used(k4):
    fn, ctl = k4
    subprocess.run(["ip", "link", "add", "fwl0", "type", "veth", "peer", "name", "fwl1"], check=True)
    try:
        for dev in ("fwl0", "fwl1"):
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        subprocess.run(["ovs-vsctl", "add-port", "e0_0", "fwl0", "--", "set", "interface", "fwl0", "ofport_request=200",
                        "--", "add-port", "e1_0", "fwl1", "--", "set", "interface", "fwl1", "ofport_request=201"],
                       check=True)
        want = [{"switch": "e0_0", "port": 200, "described": None, "heard": "e1_0:201"},
                {"switch": "e1_0", "port": 201, "described": None, "heard": "e0_0:200"}]
        _until(lambda: all(u in _checks(ctl)[1] for u in want), 10, lambda: _checks(ctl))
        assert "LLDP: e0_0 port 200 hears e1_0:201, the description has nothing there: not used" in ctl.log_text()
        assert set(_checks(ctl)[0].values()) == {"verified"}
        for sw, port in (("e0_0", 200), ("e1_0", 201)):
            assert f"output:{port}" not in ofctl("dump-flows", sw) + ofctl("dump-groups", sw)
        assert fn.ping_matrix([("h0_0_0", "h1_0_0")]) == []
        _stray_lldp_flood_leaves_the_probes_alone(ctl)
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-port", "e0_0", "fwl0", "--", "--if-exists", "del-port",
                        "e1_0", "fwl1", "--", "--if-exists", "del-port", "e0_0", "fwl2"])
        subprocess.run(["ip", "link", "del", "fwl0"])
        subprocess.run(["ip", "link", "del", "fwl2"], capture_output=True)


def _stray_lldp_flood_leaves_the_probes_alone(ctl):
    """Issue 60 item 6: 2,000 LLDP frames a second for 4 s into an unused port of e0_0 (a veth whose
    other end this test holds): they go through the stray-LLDP meter, which drops most of them, and
    every link's check stays verified (the probes' own meter is not shared with them)."""
    import socket

    from ryu_apps.openflow import pipeline

    subprocess.run(["ip", "link", "add", "fwl2", "type", "veth", "peer", "name", "fwl3"], check=True)
    for dev in ("fwl2", "fwl3"):
        subprocess.run(["ip", "link", "set", dev, "up"], check=True)
    subprocess.run(["ovs-vsctl", "add-port", "e0_0", "fwl2", "--", "set", "interface", "fwl2", "ofport_request=202"],
                   check=True)
    meter = pipeline.STRAY_LLDP_METER.id(0)

    def dropped():
        out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "meter-stats", "e0_0", f"meter={meter}"],
                             capture_output=True, text=True).stdout
        m = re.search(r"0:\s*packet_count:(\d+)", out)
        return int(m.group(1)) if m else 0

    before = dropped()
    frame = bytes.fromhex("0180c200000e" "020000ffee01" "88cc") + b"\x02\x07\x04" + bytes(60)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind(("fwl3", 0))
        t0 = time.monotonic()
        for n in range(400):  # 20 frames every 10 ms
            for _ in range(20):
                s.send(frame)
            time.sleep(max(0.0, t0 + (n + 1) * 0.01 - time.monotonic()))
    time.sleep(1.5)
    assert dropped() - before > 4000, (before, dropped())
    assert set(_checks(ctl)[0].values()) == {"verified"}, _checks(ctl)[0]
