"""Integration fixtures: a real fabric on Open vSwitch under the real controller process."""

import pytest

from experiments.harness.procs import ControllerProcess, free_port
from topology.builder import FabricNet
from topology.fabric import fattree, leafspine, scramble
from topology.sflow_agent import SFlowAgentConfig

SCRAMBLE_SEED = 15
AGENTS = "127.0.1.0/24"  # k4's bridges export sFlow each from its own loopback address


def operator_fattree():
    """The k=4 fat-tree as an operator's fabric would be (random datapath ids, port numbers and MACs,
    ``freeway fabric --scramble``): the forwarding, Freeway and isolation tests run on it, so that
    nothing in the controller can lean on the builder's numbering (issue 15)."""
    return scramble(fattree(4, 10), SCRAMBLE_SEED)


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def k4(tmp_path_factory):
    """A 10 Mbit/s k=4 fat-tree (scrambled numbering; each bridge exporting sFlow under its own agent
    address, as switches on many hosts do) under 'freeway controller': (FabricNet, ControllerProcess)."""
    d = tmp_path_factory.mktemp("k4")
    fabric = operator_fattree()
    fabric.save(d / "fabric.json")
    ctl = ControllerProcess(d / "fabric.json", extra=["--api", f"127.0.0.1:{free_port()}"]).start()
    fn = FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target, agents=AGENTS))
    try:
        fn.start()
        yield fn, ctl
    finally:
        fn.stop()
        ctl.stop()


@pytest.fixture(scope="module")
def leafspine_net(tmp_path_factory):
    d = tmp_path_factory.mktemp("ls")
    fabric = leafspine(2, 4, 2, 10)
    fabric.save(d / "fabric.json")
    with ControllerProcess(d / "fabric.json") as ctl, FabricNet(fabric, ctl.address) as fn:
        yield fn, ctl


def start_fabric(tmp_path_factory, name, fabric, mode="ecmp", extra=None):
    """A fabric with sFlow under 'freeway controller --mode MODE' (module fixtures use this)."""
    d = tmp_path_factory.mktemp(name)
    fabric.save(d / "fabric.json")
    ctl = ControllerProcess(d / "fabric.json", mode=mode, extra=extra).start()
    fn = FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(fabric.link_rate_mbps, target=ctl.sflow_target))
    try:
        fn.start()
    except BaseException:
        ctl.stop()
        raise
    return fn, ctl


@pytest.fixture(scope="module")
def k4_freeway(tmp_path_factory):
    # its tests read an announced elephant's entries seconds after it went quiet: they outlive 2 s idle
    fn, ctl = start_fabric(tmp_path_factory, "k4fw", operator_fattree(), mode="freeway",
                           extra=["--freeway-set", "elephant_idle_s=10"])
    try:
        yield fn, ctl
    finally:
        fn.stop()
        ctl.stop()
