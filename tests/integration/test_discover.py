"""'freeway discover' on a real fabric it did not build (issue 15): random datapath ids and port numbers,
the hosts' own traffic, the roles from the graph; then the real controller runs on what it wrote."""

import subprocess

import pytest

from experiments.harness.procs import ControllerProcess, free_port, freeway_command
from topology.builder import FabricNet, ofctl
from topology.discover import differences
from topology.fabric import Fabric, fattree, leafspine, scramble


@pytest.mark.parametrize("truth,modes", [
    (scramble(fattree(4, 10), 21), ("freeway", "ecmp", "hedera")),  # (EFM's switch program is ECMP's)
    (scramble(leafspine(2, 4, 2, 10), 22), ("ecmp",))], ids=["fattree", "leafspine"])
def test_discovery_writes_the_fabric_as_built_and_the_controller_runs_on_it(tmp_path, truth, modes):
    port = free_port()
    truth.save(tmp_path / "truth.json")
    out = tmp_path / "found.json"
    proc = subprocess.Popen([*freeway_command(), "discover", "--listen", f"127.0.0.1:{port}", "--out", str(out),
                             "--duration", "8", "--link-mbps", "10", "--expect", str(tmp_path / "truth.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fn = FabricNet(truth, ("127.0.0.1", port))
    try:
        fn.start()
        for h in fn.net.hosts:  # each host says something: an ARP for an address nobody has
            h.cmd("ping -c 3 -i 0.5 -W 0.5 10.254.254.254 >/dev/null 2>&1 &")
        output, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, output
        assert f"the same fabric as {tmp_path / 'truth.json'}" in output, output
        found = Fabric.load(out)
        assert differences(truth, found) == []
        assert len(found.hosts) == len(truth.hosts) and found.topo == truth.topo
        for sw in truth.switches:  # discovery leaves nothing behind
            assert "priority=3000" not in ofctl("dump-flows", sw)
        for mode in modes:  # every mode forwards on what discovery wrote, from switches it had to program
            for sw in truth.switches:
                ofctl("del-flows", sw)
            with ControllerProcess(out, port=port, mode=mode):
                fn.wait_programmed(40)  # the switches come back to the address (Open vSwitch's backoff: up to 8 s)
                secs, failed = fn.wait_reachable(timeout=40)
                assert failed == [], mode
    finally:
        if proc.poll() is None:
            proc.kill()
        fn.stop()


def test_a_fabric_that_is_not_a_clos_is_refused_with_the_reason(tmp_path):
    """A k=4 fat-tree with one aggregation-core cable missing: discovery says what is wrong, writes nothing."""
    truth = scramble(fattree(4, 10), 23)
    broken = Fabric(truth.topo, truth.params, truth.link_rate_mbps, truth.switches,
                    [ln for ln in truth.links if {ln.a, ln.b} != {"a1_0", "c1"}], truth.hosts)
    port = free_port()
    out = tmp_path / "found.json"
    proc = subprocess.Popen([*freeway_command(), "discover", "--listen", f"127.0.0.1:{port}", "--out", str(out),
                             "--duration", "5", "--link-mbps", "10"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    fn = FabricNet(broken, ("127.0.0.1", port))
    try:
        fn.start()
        for h in fn.net.hosts:
            h.cmd("ping -c 3 -i 0.5 -W 0.5 10.254.254.254 >/dev/null 2>&1 &")
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        fn.stop()
    assert proc.returncode == 1, output
    assert "not a fat-tree of k=4" in output and "nothing written" in output, output
    assert not out.exists()


def test_discovery_works_on_a_fabric_on_tls(tmp_path):
    """Issue 40: the switches connect with ``ssl:`` targets and a certificate naming their datapath ids;
    ``freeway discover`` takes the controller's key, certificate and the CA, and finds the fabric."""
    from topology.pki import fabric_pki

    truth = scramble(leafspine(2, 4, 2, 10), 24)
    truth.save(tmp_path / "truth.json")
    made = fabric_pki(tmp_path / "pki", truth)
    port = free_port()
    out = tmp_path / "found.json"
    proc = subprocess.Popen([*freeway_command(), "discover", "--listen", f"127.0.0.1:{port}", "--out", str(out),
                             "--duration", "8", "--link-mbps", "10", "--expect", str(tmp_path / "truth.json"),
                             "--ctl-privkey", made["controller"]["key"], "--ctl-cert", made["controller"]["cert"],
                             "--ca-certs", made["ca"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fn = FabricNet(truth, ("127.0.0.1", port), tls={**made["ovs"], "ca": made["ca"]})
    try:
        fn.start()
        for h in fn.net.hosts:
            h.cmd("ping -c 3 -i 0.5 -W 0.5 10.254.254.254 >/dev/null 2>&1 &")
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        fn.stop()
    assert proc.returncode == 0, output
    assert f"the same fabric as {tmp_path / 'truth.json'}" in output, output
    assert differences(truth, Fabric.load(out)) == []
