"""Failures on a real 10 Mbit/s k=4 fat-tree under the real controller, in every mode: links and a
whole switch cut while pings run, and the controller killed with SIGKILL and started again."""

import re
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import start_fabric
from topology.builder import ofctl
from topology.fabric import fattree

PY = sys.executable
MODES = [("ecmp", []), ("hedera", []), ("efm-biggest", []), ("freeway", ["--isolation", "on"])]
CUTS = {"agg-core": [("a0_0", "c1")], "edge-agg": [("e0_0", "a0_0")],
        "aggregation switch": [("a1_0", n) for n in ("e1_0", "e1_1", "c1", "c2")],
        "core switch": [("c3", a) for a in ("a0_1", "a1_1", "a2_1", "a3_1")]}


@pytest.fixture(scope="module", params=MODES, ids=[m for m, _ in MODES])
def fabric(request, tmp_path_factory):
    mode, extra = request.param
    fn, ctl = start_fabric(tmp_path_factory, f"fo-{mode}", fattree(4, 10), mode=mode, extra=extra)
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
    """A 50 Hz ping in the background; returns a function that waits and gives (sent, received).
    A count, not a deadline: ping then waits for the last answer instead of counting it lost."""
    h = fn.host(src)
    proc = h.popen(["ping", "-n", "-q", "-i", "0.02", "-W", "1", "-c", str(int(seconds * 50)), fn.host(dst).IP()],
                   stdout=subprocess.PIPE, text=True)

    def result():
        out = proc.communicate(timeout=seconds + 10)[0]
        m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
        return int(m.group(1)), int(m.group(2))
    return result


@pytest.mark.parametrize("cut", list(CUTS))
def test_every_pair_reachable_within_a_second_of_a_cut_and_the_link_used_again(fabric, cut):
    fn, ctl, mode = fabric
    links = CUTS[cut]
    pings = [_ping(fn, "h0_0_0", "h1_1_0", 6), _ping(fn, "h1_0_1", "h3_1_1", 6)]
    time.sleep(1.5)
    for a, b in links:
        fn.net.configLinkStatus(a, b, "down")
    time.sleep(1.0)
    failed = fn.ping_matrix(_cross_pairs(fn), wait_s=1)
    assert not failed, (mode, cut, failed[:5], ctl.log_tail())
    for res in pings:  # at most 200 ms without an answer on pairs that crossed the cut
        sent, received = res()
        assert sent - received <= 10, (mode, cut, sent, received)
    dead = {(a, b) for a, b in links}
    for a, b in links:
        fn.net.configLinkStatus(a, b, "up")
    time.sleep(3.0)  # the 2 s hold-down
    assert "is up again" in ctl.log_text()
    assert not fn.ping_matrix(_cross_pairs(fn), wait_s=1)
    a, b = sorted(dead)[0]  # after the hold-down the link is in the switches' groups again
    port = fn.fabric.port_to(a, b)
    groups = ofctl("dump-groups", a) + ofctl("dump-groups", b)
    assert f"output:{port}" in groups or f"output:{fn.fabric.port_to(b, a)}" in groups


def _freeway_entries(switch):
    return sorted(re.search(r"cookie=(0x[0-9a-f]+)", ln).group(1)
                  for ln in ofctl("dump-flows", switch).splitlines() if "priority=500" in ln)


def test_a_killed_controller_restarts_without_losing_a_packet_or_an_elephant(fabric):
    fn, ctl, mode = fabric
    if mode == "freeway":
        out = fn.host("h0_0_1").cmd(f"{PY} -m ryu_apps.cli send --to 10.3.1.3 --port 5009 --size 50M --rate 4 "
                                    "--announce-only --json")
        assert '"answer": "ack"' in out, out
    before = {sw: _freeway_entries(sw) for sw in fn.fabric.switches}
    pings = [_ping(fn, "h0_0_0", "h3_1_0", 8), _ping(fn, "h2_0_0", "h1_1_1", 8)]
    time.sleep(1.0)
    mark = len(ctl.log_text())
    ctl.kill()
    time.sleep(1.0)
    ctl.start()
    ctl.wait_programmed(20, timeout=20)
    for res in pings:
        sent, received = res()
        assert sent == received, (mode, sent, received)
    log = ctl.log_text()[mark:]
    flows_sent = [int(x) for x in re.findall(r"(\d+) (?:Delete)?Flow\b", log)]
    assert sum(flows_sent) == 0, (mode, [ln for ln in log.splitlines() if "changes sent" in ln][:5])
    after = {sw: _freeway_entries(sw) for sw in fn.fabric.switches}
    assert after == before
    if mode == "freeway":
        assert sum(map(len, after.values())) >= 4 and "recovered from the switches" in log, log[-2000:]
