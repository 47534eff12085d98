"""A 2-spine, 4-leaf fabric under the real controller: full reachability and ECMP groups."""

from topology.builder import ofctl


def test_leafspine_all_hosts_reach_all_hosts(leafspine_net):
    fn, _ = leafspine_net
    secs, failed = fn.wait_reachable(timeout=30)
    assert failed == []
    assert "type=select" in ofctl("dump-groups", "l0")


def test_leafspine_tcp(leafspine_net):
    fn, _ = leafspine_net
    fn.wait_reachable(timeout=30)
    assert fn.iperf("h0_0", "h3_1", seconds=3) >= 8.0


def test_every_host_runs_the_congestion_control_it_was_given(leafspine_net):
    """The hosts run cubic (FabricNet's default), whatever this machine's default is (bbr on these), so
    that the emulator's results and ns-3's (cubic) do not depend on the machine."""
    fn, _ = leafspine_net
    assert fn.tcp == "cubic"
    assert {h.cmd("cat /proc/sys/net/ipv4/tcp_congestion_control").strip() for h in fn.net.hosts} == {"cubic"}
