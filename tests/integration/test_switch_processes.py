"""A fabric spread over two Open vSwitch processes (``--switch-processes 2``, issue 16 item 2): the same
fabric, reachable end to end, shaped, with the controller keeping the isolation queues in both
processes' databases; and nothing left behind when it stops."""

import json
import subprocess
import sys
import time
from pathlib import Path

from experiments.harness.procs import ControllerProcess
from ryu_apps.programs.isolation import IsolationConfig
from tests.integration.conftest import operator_fattree
from topology.builder import FabricNet, queues_set
from topology.ovsproc import DP_TAP, Proc, SwitchProcesses
from topology.sflow_agent import SFlowAgentConfig

PY = sys.executable


def _bridges(db):
    return set(subprocess.run(["ovs-vsctl", *([f"--db={db}"] if db else []), "list-br"], capture_output=True,
                              text=True, check=True).stdout.split())


def _gone(pid):
    """Exited (a zombie counts: a detached daemon's parent here may be an init that does not reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _disconnected(log):
    """Switches the controller logged as disconnected ('switch NAME (DPID) disconnected')."""
    return {ln.split("switch ", 1)[1].split(" ", 1)[0] for ln in log.splitlines()
            if ln.endswith(" disconnected") and "switch " in ln}


def _path_switches(fabric, ack):
    by_dpid = {f"{sw.dpid:016x}": name for name, sw in fabric.switches.items()}
    return [by_dpid[d] for p in ack["paths"] for d in p["dpids"]]


def test_a_fabric_over_two_switch_processes_works_as_one(tmp_path):
    fabric = operator_fattree()
    fabric.save(tmp_path / "f.json")
    with SwitchProcesses(2) as sp:
        pid1 = sp.vswitchd_pids()[1]
        assert pid1 and all(sp.vswitchd_pids())
        with ControllerProcess(tmp_path / "f.json", mode="freeway",
                               extra=["--isolation", "on", "--ovsdb", sp.ovsdb_setting]) as ctl, \
                FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target),
                          isolation=IsolationConfig(), processes=sp) as fn:
            taps = sorted(x.name for x in Path("/sys/class/net").iterdir() if x.name.startswith(f"{DP_TAP}-f"))
            assert len(taps) == 1, taps  # the first process's datapath tap, renamed for the second's
            mine = {sw for sw, db in fn.db_of.items() if db == sp.dbs[1]}
            assert len(mine) == len(fabric.switches) // 2
            assert _bridges(sp.dbs[1]) == mine and not (_bridges(None) & mine)
            ports = subprocess.run(["ovs-appctl", "-t", str(Proc(1).ctl("vswitchd")), "dpif/show"],
                                   capture_output=True, text=True, check=True).stdout
            assert ports.count("(system)") == sum(4 for _ in mine), ports  # k=4: four ports a switch
            secs, failed = fn.wait_reachable(30)
            assert not failed, failed
            assert queues_set(fabric, sp.dbs) == (80, 80)  # the controller made them, in both databases
            # an announced elephant is placed and installed across switches of both processes, and gets its
            # link's rate and no more (the shaping holds)
            dst = fn.host(fabric.hosts[-1].name)
            fn.iperf_server(dst.name, 5805)
            out = fn.host(fabric.hosts[0].name).cmd(
                f"{PY} -m ryu_apps.cli send --to {dst.IP()} --port 5805 --size 1G --json -- "
                "iperf3 -c {to} -p {port} --cport {cport} -t 4 -J")
            ack = json.loads(out.splitlines()[0])
            assert ack["answer"] == "ack", out[-500:]
            assert {fn.db_of[sw] for sw in _path_switches(fabric, ack)} == set(sp.dbs), ack  # it crosses both
            mbps = json.loads("\n".join(out.splitlines()[1:]))["end"]["sum_received"]["bits_per_second"] / 1e6
            assert 8.5 <= mbps <= 10.3, mbps
        assert not (_bridges(sp.dbs[1]) | _bridges(None)) & set(fabric.switches)
    assert Proc(1).pid() is None and _gone(pid1)  # stopped with the fabric
    assert not Path(f"/sys/class/net/{taps[0]}").exists()  # the renamed datapath tap went with its process


def test_a_process_left_without_a_switch_is_harmless(tmp_path):
    """The mixed experiment's ceiling has three switches: with four processes, one of them holds nothing."""
    from experiments.engines.runner import non_blocking
    from topology.fabric import fattree

    nb, _ = non_blocking(fattree(4, 10))
    nb.save(tmp_path / "nb.json")
    with SwitchProcesses(4) as sp, \
            ControllerProcess(tmp_path / "nb.json", extra=["--ovsdb", sp.ovsdb_setting]) as ctl, \
            FabricNet(nb, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target),
                      processes=sp) as fn:
        assert len(set(fn.db_of.values())) == 3 and _bridges(sp.dbs[3]) == set()
        secs, failed = fn.wait_reachable(20)
        assert not failed, failed


def test_a_switch_process_that_dies_takes_only_its_switches(tmp_path):
    """Kill one of two switch processes hard: the controller sees exactly its switches go, hosts whose
    paths avoid them still reach each other, and the fabric and the processes stop cleanly (no wait for
    the dead process)."""
    import os
    import signal

    fabric = operator_fattree()
    fabric.save(tmp_path / "f.json")
    with SwitchProcesses(2) as sp:
        with ControllerProcess(tmp_path / "f.json", extra=["--ovsdb", sp.ovsdb_setting]) as ctl, \
                FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target),
                          processes=sp) as fn:
            assert not fn.wait_reachable(30)[1]
            gone = {sw for sw, db in fn.db_of.items() if db == sp.dbs[1]}
            os.kill(sp.vswitchd_pids()[1], signal.SIGKILL)
            deadline = time.monotonic() + 20
            while (lost := _disconnected(ctl.log_text())) != gone:
                assert time.monotonic() < deadline and lost < gone, (lost, gone)
                time.sleep(0.5)
            # two hosts on one ToR that the live process holds still reach each other
            tor = next(sw for sw in fabric.tors() if sw not in gone)
            a, b = fabric.hosts_on(tor)[:2]
            assert " 0% packet loss" in fn.host(a.name).cmd(f"ping -c 3 -W 2 {b.ip}")
            t0 = time.monotonic()
        assert time.monotonic() - t0 < 30  # the fabric's teardown did not wait on the dead process
    assert Proc(1).pid() is None and not _bridges(None) & set(fabric.switches)
