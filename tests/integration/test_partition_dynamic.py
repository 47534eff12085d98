"""Induced mice load adds a low-latency path and its end removes it (leaf-spine, 4 spines: 2 dynamic paths).
The paper's mice (``mice_paths: lol``): their groups follow the low-latency paths, so the test can see them."""

import re
import sys
import time

import pytest

from ryu_apps.modes.freeway_mice import mice_fields
from ryu_apps.openflow import pipeline
from tests.integration.conftest import start_fabric
from topology.builder import ofctl
from topology.fabric import leafspine

PY = sys.executable


@pytest.fixture(scope="module")
def ls4(tmp_path_factory):
    fn, ctl = start_fabric(tmp_path_factory, "ls4", leafspine(4, 3, 2, 10), mode="freeway",
                          extra=["--freeway-set", "mice_paths=lol"])
    try:
        yield fn, ctl
    finally:
        fn.stop()
        ctl.stop()


def _lol(ctl, key):
    snaps = ctl.events(("links",))
    return snaps[-1].get("lol_paths", {}).get(key, 1) if snaps else 1


def _buckets(switch, dst_index):
    """The buckets of the mice group that ``switch``'s entries toward the ToR ``dst_index`` point at
    (groups are shared by destinations with the same next hops: the entries say which)."""
    gids = set()
    for ln in ofctl("dump-flows", switch).splitlines():
        m, g = re.search(r"cookie=(0x[0-9a-f]+)", ln), re.search(r"group:(\d+)", ln)
        if m and g and pipeline.owner_of(int(m.group(1), 16)) is pipeline.FREEWAY_MICE \
                and mice_fields(int(m.group(1), 16))[0] == dst_index:
            gids.add(g.group(1))
    assert len(gids) <= 1, gids  # every entry toward one ToR points at the same group
    if not gids:
        return 0
    gid = gids.pop()
    for ln in ofctl("dump-groups", switch).splitlines():
        if f"group_id={gid}," in ln:
            return ln.count("bucket=")
    return 0


def test_mice_load_adds_a_path_and_its_end_removes_it(ls4):
    fn, ctl = ls4
    fn.wait_reachable(30)
    srv, cli = fn.host("h2_0"), fn.host("h0_0")  # responses flow l2 -> l0
    srv.cmd(f"{PY} -m experiments.hosts.rr server --port 7003 >/dev/null 2>&1 &")
    time.sleep(0.5)
    assert _buckets("l2", 0) == 1  # toward l0: only the fixed low-latency path (spine s1)
    cli.sendCmd(f"{PY} -m experiments.hosts.rr client --to {srv.IP()} --port 7003 --sizes {','.join(['40000'] * 400)}")
    t0 = time.monotonic()
    peak = 1
    while time.monotonic() - t0 < 25 and cli.waiting:
        peak = max(peak, _lol(ctl, "l2>l0"))
        if peak >= 2 and _buckets("l2", 0) >= 2:
            break
        time.sleep(0.5)
    added_after = time.monotonic() - t0
    buckets_loaded = _buckets("l2", 0)
    cli.sendInt()
    cli.waitOutput()
    srv.cmd("kill %1")
    assert peak >= 2, ctl.log_tail(20)
    assert buckets_loaded >= 2  # the mice group of l2 toward l0 now spreads over the added spine too
    assert "partition: l2 -> l0 now has 2 low-latency paths (added)" in ctl.log_text()
    # load gone: idle low-latency paths are removed again, down to the fixed one
    t1 = time.monotonic()
    while _lol(ctl, "l2>l0") > 1 or _buckets("l2", 0) > 1:
        assert time.monotonic() - t1 < 20, ctl.log_tail(20)
        time.sleep(0.5)
    assert "partition: l2 -> l0 now has 1 low-latency paths (removed)" in ctl.log_text()
    assert added_after < 20
