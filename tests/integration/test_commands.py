"""Bad input to the real commands: one clear error line, non-zero exit, nothing left running."""

import json
import subprocess

from experiments.harness.procs import free_port, freeway_command
from topology.fabric import fattree


def run(*args, timeout=60):
    return subprocess.run([*freeway_command(), *args], capture_output=True, text=True, timeout=timeout)


def _bridges():
    return subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()


def test_unreachable_controller_builds_nothing(tmp_path):
    port = free_port()
    before = _bridges()
    r = run("fabric", "--k", "4", "--controller", f"127.0.0.1:{port}", "--controller-wait", "1", "--test", "pingall")
    assert r.returncode == 2
    assert f"no controller reachable at 127.0.0.1:{port}" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert _bridges() == before


def test_odd_k_and_unknown_option():
    r = run("fabric", "--k", "5", "--describe-only")
    assert r.returncode == 2 and "k: a fat-tree needs an even k >= 4, got 5" in r.stderr
    r = run("fabric", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
    r = run("controller", "--fabric", "x.json", "--mode", "magic")
    assert r.returncode == 2 and "invalid choice: 'magic'" in r.stderr


def test_controller_rejects_bad_description_and_bad_listen(tmp_path):
    bad = tmp_path / "bad.json"
    d = fattree(4).to_dict()
    d["links"][0]["b"] = "c99"
    bad.write_text(json.dumps(d))
    r = run("controller", "--fabric", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip() == "freeway controller: error: link e0_0:3-c99:1: switch 'c99' is not in the description"
    good = tmp_path / "good.json"
    fattree(4).save(good)
    r = run("controller", "--fabric", str(good), "--listen", "192.0.2.1:6653")  # plain TCP off loopback (issue 60)
    assert r.returncode == 2 and "OpenFlow in plain TCP on 192.0.2.1" in r.stderr and "openflow_plain" in r.stderr
    r = run("controller", "--fabric", str(good), "--listen", "192.0.2.1:6653", "--openflow-plain", "on")
    assert r.returncode == 2 and "cannot listen on 192.0.2.1:6653" in r.stderr
    r = run("controller", "--fabric", str(good), "--listen", "localhost")
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr
    r = run("controller", "--fabric", str(tmp_path / "none.json"))
    assert r.returncode == 2 and "cannot read fabric description" in r.stderr


def test_app_loads_under_osken_manager_and_programs_a_switch(tmp_path):
    """The same app under os-ken 3.x's own launcher, configured by environment."""
    import os
    import sys
    import time
    from pathlib import Path

    from topology.builder import ofctl

    desc = tmp_path / "k4.json"
    fattree(4).save(desc)
    port = free_port()
    manager = Path(sys.executable).with_name("osken-manager")
    log = open(tmp_path / "om.log", "wb")
    proc = subprocess.Popen([str(manager), "--ofp-tcp-listen-port", str(port), "ryu_apps.controller_app"],
                            env={**os.environ, "FREEWAY_FABRIC": str(desc)}, stdout=log, stderr=subprocess.STDOUT)
    try:
        # a bridge that claims to be core c1 of the description
        subprocess.run(["ovs-vsctl", "add-br", "fwc1", "--", "set", "bridge", "fwc1", "datapath_type=netdev",
                        "protocols=OpenFlow13", "other-config:datapath-id=0001000000000001", "fail-mode=secure",
                        "--", "set-controller", "fwc1", f"tcp:127.0.0.1:{port}"], check=True)
        deadline = time.monotonic() + 20
        while "nw_dst=10.3.0.0/16" not in (flows := ofctl("dump-flows", "fwc1")):
            assert time.monotonic() < deadline, (tmp_path / "om.log").read_text()[-2000:]
            time.sleep(0.2)
        assert "actions=output:4" in flows
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "fwc1"])
        proc.terminate()
        proc.wait(10)
        log.close()


def test_plain_mininet_custom_topology(tmp_path):
    """'mn --custom topology/topos.py --topo fattree,4 --controller freeway,...' under the Freeway controller:
    0% dropped (the custom file's controller class checks the port with a TCP connect: Mininet's 'remote'
    decodes the controller's HELLO as UTF-8 and failed once in 708 runs)."""
    from pathlib import Path

    from experiments.harness.procs import ControllerProcess

    desc = tmp_path / "k4.json"
    fattree(4).save(desc)
    topos = Path(__file__).resolve().parents[2] / "topology" / "topos.py"
    with ControllerProcess(desc) as ctl:
        r = subprocess.run(["mn", "--custom", str(topos), "--topo", "fattree,4", "--switch", "ovs,datapath=user",
                            "--controller", f"freeway,ip=127.0.0.1,port={ctl.port}", "--test", "pingall"],
                           capture_output=True, text=True, timeout=180)
    subprocess.run(["mn", "-c"], capture_output=True)
    assert "Results: 0% dropped (240/240 received)" in r.stdout + r.stderr, r.stderr[-1500:]


def test_monitoring_options_are_validated_by_name(tmp_path):
    good = tmp_path / "good.json"
    fattree(4).save(good)
    r = run("controller", "--fabric", str(good), "--monitor-set", "windw_s=3")
    assert r.returncode == 2 and "monitor.windw_s: unknown setting" in r.stderr
    r = run("controller", "--fabric", str(good), "--monitor-set", "window_s=-1")
    assert r.returncode == 2 and "window_s: must be a positive number" in r.stderr
    r = run("controller", "--fabric", str(good), "--elephant-fraction", "1.5")
    assert r.returncode == 2 and "elephant_fraction: must be below 1" in r.stderr
    r = run("controller", "--fabric", str(good), "--monitor", "sflow-rt")
    assert r.returncode == 2 and "sflow_rt_url: the sflow-rt monitor needs an http(s) URL" in r.stderr
    r = run("controller", "--fabric", str(good), "--sflow-listen", "192.0.2.1:6343")
    assert r.returncode == 2 and "cannot receive sFlow on 192.0.2.1:6343" in r.stderr
    r = run("fabric", "--sflow-sampling", "0", "--controller-wait", "0")
    assert r.returncode == 2 and "sflow sampling: must be a positive integer" in r.stderr


def test_controller_runs_from_a_config_file_and_refuses_a_wrong_one(tmp_path):
    """`freeway controller --config FILE` (issue 14): the file's sections reach the switches (mode and the
    punt meter's rate from it, seen on a bridge that claims to be ToR e0_0); a flag overrides the file;
    a wrong key is refused with the nearest name and nothing listens."""
    import socket
    import time

    from topology.builder import ofctl

    desc = tmp_path / "k4.json"
    fattree(4).save(desc)
    port = free_port()
    cfg = tmp_path / "freeway.yaml"
    cfg.write_text(f"controller:\n  fabric: {desc}\n  listen: 127.0.0.1:{port}\n  mode: freeway\n"
                   f"  sflow_listen: 127.0.0.1:{free_port(socket.SOCK_DGRAM)}\n"
                   "freeway:\n  punt_pps: 150\n  punt_burst: 30\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(cfg.read_text() + "  lol_hgh: 0.4\n")
    r = run("controller", "--config", str(bad))
    assert r.returncode == 2 and "freeway.lol_hgh: unknown setting; did you mean lol_high?" in r.stderr, r.stderr
    log = open(tmp_path / "ctl.log", "wb")
    proc = subprocess.Popen([*freeway_command(), "controller", "--config", str(cfg), "--freeway-set", "punt_burst=40"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        subprocess.run(["ovs-vsctl", "add-br", "fwe00", "--", "set", "bridge", "fwe00", "datapath_type=netdev",
                        "protocols=OpenFlow13", "other-config:datapath-id=0003000000000000", "fail-mode=secure",
                        "--", "set-controller", "fwe00", f"tcp:127.0.0.1:{port}"], check=True)
        deadline = time.monotonic() + 20
        while "priority=2000" not in (flows := ofctl("dump-flows", "fwe00")):  # Freeway's handshake entries
            assert time.monotonic() < deadline, (tmp_path / "ctl.log").read_text()[-2000:]
            time.sleep(0.2)
        meters = ofctl("dump-meters", "fwe00")
        assert "meter=3 pktps burst stats bands=\ntype=drop rate=150 burst_size=40" in meters, meters
        assert "table=0" in flows and "table=2" in flows  # the ToR's guard and forward tables
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "fwe00"])
        proc.terminate()
        proc.wait(10)
        log.close()
