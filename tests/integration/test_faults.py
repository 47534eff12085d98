"""Failures on a real 10 Mbit/s k=4 fat-tree under the real controller, in every mode: links and a
whole switch cut while pings run, and the controller killed with SIGKILL and started again."""

import json
import re
import subprocess
import sys
import time

import pytest

from experiments.harness.procs import PortRate, busiest_link, ping_bg, start_elephant
from tests.integration.conftest import start_fabric
from topology.builder import ofctl
from topology.fabric import fattree

PY = sys.executable
MODES = [("ecmp", ()), ("hedera", ()), ("efm-biggest", ()), ("freeway", ("--isolation", "on"))]  # (hashable:
# a test that runs in some modes only names them, and pytest then shares their fabrics with the others)


def modes(*names):
    """A test run only in ``names``, on the module's fabrics of those modes: what it checks is the same
    program in the others (it says which)."""
    chosen = [m for m in MODES if m[0] in names]
    assert len(chosen) == len(names), names
    return pytest.mark.parametrize("fabric", chosen, indirect=True, ids=[m for m, _ in chosen])

CUTS = {"agg-core": [("a0_0", "c1")], "edge-agg": [("e0_0", "a0_0")],
        "aggregation switch": [("a1_0", n) for n in ("e1_0", "e1_1", "c1", "c2")],
        "core switch": [("c3", a) for a in ("a0_1", "a1_1", "a2_1", "a3_1")]}


@pytest.fixture(scope="module", params=MODES, ids=[m for m, _ in MODES])
def fabric(request, tmp_path_factory):
    mode, extra = request.param
    fn, ctl = start_fabric(tmp_path_factory, f"fo-{mode}", fattree(4, 10), mode=mode, extra=list(extra))
    try:
        fn.wait_reachable(30)
        yield fn, ctl, mode
    finally:
        fn.stop()
        ctl.stop()


def _cross_pairs(fn):
    hosts = fn.fabric.hosts
    return [(a.name, b.name) for a in hosts for b in hosts if a.switch.split("_")[0] != b.switch.split("_")[0]]


def _ping(fn, src, dst, seconds):
    return ping_bg(fn, src, dst, int(seconds * 50))


def _up_lines(links):
    return [f"link {min(a, b)}-{max(a, b)} is up again" for a, b in links]


@pytest.mark.parametrize("cut", list(CUTS))
@modes("ecmp", "freeway")  # Hedera and EFM forward what is not an elephant (pings) with ECMP's program
def test_every_pair_reachable_within_a_second_of_a_cut_and_the_link_used_again(fabric, cut):
    fn, ctl, mode = fabric
    links = CUTS[cut]
    pings = [_ping(fn, "h0_0_0", "h1_1_0", 4.5), _ping(fn, "h1_0_1", "h3_1_1", 4.5)]
    time.sleep(1.0)
    for a, b in links:
        fn.net.configLinkStatus(a, b, "down")
    time.sleep(1.0)
    failed = fn.ping_matrix(_cross_pairs(fn), wait_s=1)
    assert not failed, (mode, cut, failed[:5], ctl.log_tail())
    for res in pings:  # at most 200 ms without an answer on pairs that crossed the cut
        sent, received = res()
        assert sent - received <= 10, (mode, cut, sent, received)
    dead = {(a, b) for a, b in links}
    before = {w: ctl.log_text().count(w) for w in _up_lines(links)}
    t = time.monotonic()
    for a, b in links:
        fn.net.configLinkStatus(a, b, "up")
    while time.monotonic() - t < 8 and any(ctl.log_text().count(w) <= n for w, n in before.items()):
        time.sleep(0.1)  # each link back after the 2 s hold-down (this fabric's earlier cuts logged theirs)
    assert all(ctl.log_text().count(w) > n for w, n in before.items()), (mode, cut, ctl.log_tail())
    assert time.monotonic() - t >= 1.9  # not before the hold-down
    a, b = sorted(dead)[0]  # after the hold-down the link is in the switches' groups again
    want = (f"output:{fn.fabric.port_to(a, b)}", f"output:{fn.fabric.port_to(b, a)}")
    groups = ""
    for _ in range(20):
        groups = ofctl("dump-groups", a) + ofctl("dump-groups", b)
        if want[0] in groups or want[1] in groups:
            break
        time.sleep(0.1)
    assert want[0] in groups or want[1] in groups, (mode, cut, groups[:2000])
    # every pair reaches every pair once the link is back in the groups (a ping sent while the groups
    # were being rewritten was lost once in each of two full suites on 2026-11-25)
    assert not fn.ping_matrix(_cross_pairs(fn), wait_s=1)


def _elephant(fn, mode, src, dst, port, seconds):
    """Freeway announces it with 4 Mbit/s; the other modes run iperf3."""
    proc, ack = start_elephant(fn, mode == "freeway", src, dst, port, seconds, 4.0)
    assert ack is None or ack["answer"] == "ack", ack
    return proc, ack


def _forwards_onto(switch, port):
    """Entries of ``switch`` that send traffic out of ``port``: flows (other than the destination prefix
    routes down, the only way there) and the buckets of groups some flow points to."""
    flows = ofctl("dump-flows", switch).splitlines()
    bad = [ln for ln in flows if re.search(rf"output:{port}\b", ln) and "priority=200" not in ln]
    used = {int(g) for ln in flows for g in re.findall(r"group:(\d+)", ln)}
    for ln in ofctl("dump-groups", switch).splitlines():
        m = re.search(r"group_id=(\d+)", ln)
        if m and int(m.group(1)) in used and re.search(rf"output:{port}\b", ln):
            bad.append(ln)
    return bad


ELEPHANT_CUTS = {"agg-core": [(a, c) for a in ("a0_0", "a0_1") for c in ("c1", "c2", "c3", "c4")],
                 "edge-agg": [("e0_0", "a0_0"), ("e0_0", "a0_1")]}


@pytest.mark.parametrize("cut", list(ELEPHANT_CUTS))
def test_an_elephant_on_a_cut_link_is_on_a_live_path_within_a_second_with_its_goodput(fabric, cut):
    fn, ctl, mode = fabric
    src, dst = "h0_0_0", "h3_1_0"
    host = next(h for h in fn.fabric.hosts if h.name == dst)
    meter = PortRate(host.switch, host.port)
    candidates = [(a, b) for a, b in ELEPHANT_CUTS[cut] if b in fn.fabric.neighbors(a)]
    proc, _ = _elephant(fn, mode, src, dst, 5400 + list(ELEPHANT_CUTS).index(cut), 16)
    up_again = {}
    try:
        time.sleep(6.0 if mode == "hedera" else 3.0)  # Hedera places large flows after a 5 s poll
        a, b = busiest_link(fn, candidates)
        up_again = {w: ctl.log_text().count(w) for w in _up_lines([(a, b)])}
        t = time.monotonic()
        before = meter.mbps(t - 2.0, t)
        fn.net.configLinkStatus(a, b, "down")
        t_cut = time.monotonic()
        time.sleep(3.2)
        after = meter.mbps(t_cut + 1.0, t_cut + 3.0)
        log = ctl.log_text()
        onto = _forwards_onto(a, fn.fabric.port_to(a, b)) + _forwards_onto(b, fn.fabric.port_to(b, a))
        fn.net.configLinkStatus(a, b, "up")
        assert after >= 0.8 * before and before > 2.0, (mode, cut, (a, b), before, after, meter.seconds(t - 2, t_cut + 3))
        assert not onto, (mode, (a, b), onto[:3])
        if mode == "freeway":
            assert "moved around a failure" in log, log[-3000:]
    finally:
        proc.kill()
        proc.wait()
        meter.stop()
        t = time.monotonic()  # the next test starts with every link up: the cut one after its 2 s hold-down
        while time.monotonic() - t < 6 and any(ctl.log_text().count(w) <= n for w, n in up_again.items()):
            time.sleep(0.1)


def _pinned(switch, dport):
    """Cookies of the exact-match entries (priority 500) of the flows to ``dport`` on a switch."""
    return sorted(re.search(r"cookie=(0x[0-9a-f]+)", ln).group(1) for ln in ofctl("dump-flows", switch).splitlines()
                  if "priority=500" in ln and re.search(rf"tp_dst={dport}\b", ln))


def test_a_killed_controller_restarts_without_losing_a_packet_or_an_elephant(fabric):
    fn, ctl, mode = fabric
    dst = next(h for h in fn.fabric.hosts if h.name == "h3_1_1")
    deadline = time.monotonic() + 15
    while mode == "freeway" and _view(ctl).get("allocated"):  # earlier tests' elephants expire (idle 10 s)
        assert time.monotonic() < deadline, _view(ctl)["allocated"]
        time.sleep(0.5)
    meter = PortRate(dst.switch, dst.port)
    proc, ack = _elephant(fn, mode, "h0_0_1", dst.name, 5009, 30)
    try:
        time.sleep(3.0)
        deadline = time.monotonic() + 15  # Hedera places a large flow at its second 5 s poll
        while mode in ("freeway", "hedera") and not any(_pinned(sw, 5009) for sw in fn.fabric.switches):
            assert time.monotonic() < deadline, (mode, ctl.log_tail())
            time.sleep(0.5)
        time.sleep(0.5)
        before = {sw: _pinned(sw, 5009) for sw in fn.fabric.switches}
        # the pings leave by other edge switches than the elephant's: a Cubic elephant (loss-based) keeps its
        # first uplink's drop-tail queue full, and a ping hashed into that queue can be lost to it whatever
        # the controller does (2 of 400 in Hedera mode on 2026-11-26, once the hosts ran Cubic, not BBR)
        pings = [_ping(fn, "h0_1_0", "h3_1_0", 8), _ping(fn, "h2_0_0", "h1_1_1", 8)]
        time.sleep(1.0)
        view = _view(ctl)
        mark, t_kill = len(ctl.log_text()), time.monotonic()
        ctl.kill()
        time.sleep(1.0)
        ctl.start()
        ctl.wait_programmed(20, timeout=20)
        for res in pings:
            sent, received = res()
            assert sent == received, (mode, sent, received)
        t_end = time.monotonic()
        # the elephant's goodput from before the kill until the restart is over, in every 2 s window
        # (one starting each 0.5 s: a gap of more than about 0.5 s anywhere fails it at the 4.2 Mbit/s the
        # meter lets through). Not single seconds: a TCP loss under the meter put one second at 3.17
        # Mbit/s, 2 s before the kill, and the next ones at 3.44 and 5.21
        per_2s = meter.windows(t_kill - 2.0, t_end, 2.0, 0.5)
        floor = 0.8 * (4.0 if mode == "freeway" else meter.mbps(t_kill - 3.0, t_kill))
        assert per_2s and min(per_2s) >= floor, (mode, floor, per_2s, meter.seconds(t_kill - 2.0, t_end))
        log = ctl.log_text()[mark:]
        flows_sent = [int(x) for x in re.findall(r"(\d+) (?:Delete)?Flow\b", log)]
        assert sum(flows_sent) == 0, (mode, [ln for ln in log.splitlines() if "changes sent" in ln][:5])
        after = {sw: _pinned(sw, 5009) for sw in fn.fabric.switches}
        # (a release is an event, not a log line: a restarted Hedera once released this elephant as "no
        # longer large" when its edge entry expired between two polls; fixed in HederaScheduler.rates)
        assert after == before, (mode, after, ctl.events(("released",))[-3:],
                                 [ln for ln in log.splitlines() if "hedera" in ln or "link" in ln][-15:])
        if mode in ("freeway", "hedera"):
            assert "recovered from the switches" in log, log[-2000:]
        if mode == "freeway":
            time.sleep(1.5)  # a snapshot of the restarted controller
            assert view["allocated"] and _view(ctl)["allocated"] == view["allocated"], (view, _view(ctl))
            assert abs(sum(view["allocated"].values()) - 4e6) < 0.05e6, view["allocated"]
    finally:
        proc.kill()
        proc.wait()
        meter.stop()


def _view(ctl):
    """The controller's latest per-second snapshot (the events file)."""
    return ctl.events(("links",))[-1]


def test_a_switch_that_reconnects_is_sent_only_what_it_lost(fabric):
    fn, ctl, mode = fabric
    sw = "a2_1"
    target = subprocess.run(["ovs-vsctl", "get-controller", sw], capture_output=True, text=True,
                            check=True).stdout.split()
    lost = next(ln for ln in ofctl("dump-flows", sw).splitlines() if "priority=200" in ln)
    lost_match = re.search(r"priority=200,(\S+)", lost).group(1)
    pings = [_ping(fn, "h2_1_0", "h0_0_0", 6), _ping(fn, "h1_0_0", "h2_1_1", 6)]
    for attempt in ("untouched", "one flow lost"):
        mark = len(ctl.log_text())
        # pointed at a port nobody listens on (removing every controller would make OVS flush its tables)
        subprocess.run(["ovs-vsctl", "set-controller", sw, "tcp:127.0.0.1:9"], check=True)
        deadline = time.monotonic() + 10
        while not re.search(r"switch a2_1 \(\w+\) disconnected", ctl.log_text()[mark:]):
            assert time.monotonic() < deadline, ctl.log_tail()
            time.sleep(0.1)
        if attempt == "one flow lost":
            ofctl("--strict", "del-flows", sw, f"priority=200,{lost_match}")
        subprocess.run(["ovs-vsctl", "set-controller", sw, *target], check=True)
        deadline = time.monotonic() + 15
        while not re.search(r"switch a2_1 \(\w+\) connected: .*", ctl.log_text()[mark:]):
            assert time.monotonic() < deadline, ctl.log_tail()
            time.sleep(0.1)
        line = re.search(r"switch a2_1 \(\w+\) connected: (.*)", ctl.log_text()[mark:]).group(1)
        if attempt == "untouched":
            assert "0 changes sent" in line, line
        else:
            assert "1 changes sent (1 Flow)" in line, line
    for res in pings:  # the fabric kept forwarding while the switch was away (fail mode secure)
        sent, received = res()
        assert sent - received <= 10, (mode, sent, received)


LONE_ELEPHANT = {}  # mode -> goodput (Mbit/s) of one unannounced iperf3 elephant alone in the fabric


def test_a_lone_unannounced_elephant_fills_its_path_in_every_mode(fabric):
    """Issue 13 item 1: in freeway mode with isolation an adopted elephant's meter follows its measured
    rate, so alone in the fabric it gets at least 80% of what ECMP gives it (it was held at 5.3 of 9.5). Over
    8 s a meter held so from its adoption (about 2 s in) would average 6.4 Mbit/s, under the 7.6 asked."""
    fn, ctl, mode = fabric
    mbps = fn.iperf("h1_0_0", "h2_1_0", seconds=8)
    LONE_ELEPHANT[mode] = mbps
    print(f"lone unannounced elephant, {mode}: {mbps:.2f} Mbit/s")
    ecmp = LONE_ELEPHANT.get("ecmp", 9.5)  # 9.5: what ECMP gave when this module ran whole
    assert mbps >= 0.8 * ecmp, (mode, mbps, LONE_ELEPHANT, ctl.log_tail())
    if mode == "freeway":
        assert "adopted onto" in ctl.log_text(), ctl.log_tail()


@modes("freeway")  # announcing elephants is Freeway's
def test_rate_less_elephants_from_one_tor_all_get_a_fair_share(fabric):
    """Issue 13 item 2: on k=4 every high-throughput path from a ToR crosses one uplink; two and then four
    rate-less `freeway send` from under one ToR are all ACKed. Issue 37: with the ToR's low-latency uplink
    idle, the second of two is lent it, so each of two gets a whole uplink (at least 80% of it, measured at
    the port toward each destination host from 1.5 s after the start until 6 s); four get together at
    least the one uplink they had without lending (until 10 s), and each at least 80% of its share of it
    over its whole transfer."""
    fn, ctl, mode = fabric
    dsts = [next(h for h in fn.fabric.hosts if h.name == n) for n in ("h3_0_0", "h3_0_1", "h3_1_0", "h3_1_1")]
    for n, size, until in ((2, 5_000_000, 6.0), (4, 4_500_000, 10.0)):
        for i in range(n):
            fn.host(dsts[i].name).cmd(f"{PY} -m experiments.hosts.rr sink --port {5600 + 10 * n + i} >/dev/null 2>&1 &")
        time.sleep(0.5)
        rates = [PortRate(d.switch, d.port) for d in dsts[:n]]
        t0 = time.monotonic()
        running = [fn.host(("h0_0_0", "h0_0_1")[i % 2]).popen(
            [PY, "-m", "ryu_apps.cli", "send", "--to", dsts[i].ip, "--port", str(5600 + 10 * n + i), "--size",
             str(size), "--json"], stdout=subprocess.PIPE, text=True) for i in range(n)]
        reports = [[json.loads(x) for x in p.communicate(timeout=60)[0].splitlines() if x.startswith("{")]
                   for p in running]
        for r in rates:
            r.stop()
        share = {2: 10.0, 4: 2.5}[n]
        while_all = [round(r.mbps(t0 + 1.5, t0 + until), 2) for r in rates]
        print(f"{n} rate-less elephants from e0_0: {while_all} Mbit/s while all ran (fair share {share}); "
              f"over their whole transfer {[r[-1]['goodput_mbps'] for r in reports]}")
        assert all(r[0]["answer"] == "ack" for r in reports), [r[0] for r in reports]
        if n == 2:  # each on an uplink of its own: no TCP contention, each its whole share while both run
            assert min(while_all) >= 0.8 * share, (n, while_all, ctl.log_tail())
        else:  # placed 2+2 or 3+1 (lending is a tie broken by arrival order): together at least the one
            # uplink they had without lending while all ran, and each its share over its whole transfer
            # (how Cubic shares one queue among three over 8.5 s is TCP's business, not the placement's)
            assert sum(while_all) >= 0.8 * 10.0, (n, while_all, ctl.log_tail())
            assert min(r[-1]["goodput_mbps"] for r in reports) >= 0.8 * share, (n, reports, ctl.log_tail())
        if n == 2:  # one on the high-throughput uplink, one lent the low-latency one
            assert len({r[0]["paths"][0]["dpids"][1] for r in reports}) == 2, [r[0] for r in reports]
        if n == 2:
            time.sleep(11)  # their entries expire (idle 2 s) before the next round


@modes("hedera", "efm-biggest", "freeway")  # ECMP's only per-flow table is the monitor's, which they all run
def test_thousands_of_short_flows_leave_the_controllers_tables_as_they_were(fabric):
    """Issue 13 item 7: 3,200 short TCP flows (every host connects 100 times to closed ports across the
    fabric: a SYN and a RST, two 5-tuples each) leave every per-flow table of the controller back at its
    size before, once they have expired (Hedera: an edge entry per flow, idle 10 s, forgotten at the next
    poll; the monitor's sampled flows, idle 3 s). ``freeway bench state`` runs 100,000 and reports RSS."""
    fn, ctl, mode = fabric
    from experiments.hosts import flowgen

    time.sleep(2.0)
    before, installed0 = ctl.tables()
    hosts = fn.fabric.hosts
    gens = [fn.host(h.name).popen([PY, flowgen.__file__, "--to", ",".join(d.ip for d in hosts if d.switch != h.switch),
                                   "--count", "100", "--rate", "25"], stdout=subprocess.PIPE, text=True)
            for h in hosts]
    sent = [json.loads(p.communicate(timeout=30)[0].splitlines()[-1]) for p in gens]
    assert sum(s["sent"] for s in sent) == 100 * len(hosts), sent
    time.sleep(1.5)
    peak, installed = ctl.tables()
    if mode == "hedera":
        assert installed - installed0 >= 2 * 100 * len(hosts) * 0.9, (installed0, installed)
        assert peak["hedera_edges"] >= before["hedera_edges"] + 2000, (before, peak)
    deadline = time.monotonic() + 40
    while True:
        now, _ = ctl.tables()
        grown = {k: (before.get(k, 0), v) for k, v in now.items() if v > before.get(k, 0)}
        if not grown:
            break
        assert time.monotonic() < deadline, (mode, grown, ctl.log_tail())
        time.sleep(1.0)
    print(f"short flows, {mode}: tables before {before}, at the end of the burst {peak}, then back")
