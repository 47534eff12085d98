"""The pytest plugin: fixtures that test any OpenFlow 1.3 controller on a fabric (docs/testing-your-controller.md).

Installed with the package (entry point ``pytest11``): a test file needs no import.

- ``fabric``: the fabric description, from ``@pytest.mark.fabric("fattree", k=4)`` (or ``"leafspine",
  spines=.., leaves=.., hosts_per_leaf=..``; ``rate_mbps=``); a k=4 fat-tree when unmarked.
- ``controller``: starts a controller as a user does and stops it after the test: ``controller.freeway(mode=
  "freeway")`` (``freeway controller``), ``controller.osken("my_app.py")`` (any os-ken app, a module or a
  file, under ``osken-manager``: its handlers, ``set_ev_cls`` and hub as in production),
  ``controller.osken_sample("simple_switch_13")`` (os-ken's own sample, ``make samples``).
- ``sim_fabric``: ``sim_fabric(controller.address)`` connects every switch of ``fabric`` to it, each a
  message-level simulated switch on its own OpenFlow connection (``SimNet``): send packets, cut links,
  read tables, see the errors the switches answered.
- ``ns3_fabric``: ``ns3_fabric(mode, flows)`` runs the flows on ns-3 under a mode (built-in or plug-in):
  completion times, drops, decisions.
- ``ovs_fabric``: ``ovs_fabric(controller.address)`` builds ``fabric`` on Open vSwitch under Mininet; the test
  is skipped (with why) when not root or Open vSwitch is missing.

Every process and namespace a fixture starts is stopped at teardown, whether the test passed, failed or was
interrupted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.harness.procs import free_port, wait_listening

MUTATE = os.environ.get("FREEWAY_SIM_MUTATE", "")  # "drop-flow-mod": the simulated switches lose every flow mod


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "fabric(topo, **params): the fabric the freeway fixtures build "
                                       "(fattree k=4 unmarked; leafspine spines, leaves, hosts_per_leaf)")


@pytest.fixture
def fabric(request):
    from topology.fabric import fattree, leafspine

    m = request.node.get_closest_marker("fabric")
    topo = (m.args[0] if m and m.args else "fattree")
    params = dict(m.kwargs) if m else {}
    rate = params.pop("rate_mbps", 10.0)
    if topo == "fattree":
        return fattree(params.pop("k", 4), rate, params.pop("hosts_per_edge", None))
    if topo == "leafspine":
        return leafspine(params.pop("spines", 2), params.pop("leaves", 2), params.pop("hosts_per_leaf", 2), rate)
    raise pytest.UsageError(f"@pytest.mark.fabric: unknown topology {topo!r} (fattree, leafspine)")


class Controllers:
    """The controllers a test started (stopped at its end)."""

    def __init__(self, fabric, tmp: Path):
        self.fabric, self.tmp = fabric, tmp
        self.procs: list = []

    def freeway(self, mode: str = "freeway", *args: str, isolation: bool = False):
        """Freeway's controller process, as ``freeway controller`` starts it."""
        from experiments.harness.procs import ControllerProcess

        d = self.tmp / f"freeway-{len(self.procs)}"
        d.mkdir(parents=True, exist_ok=True)
        self.fabric.save(d / "fabric.json")
        extra = [*args, *(["--isolation", "on"] if isolation else []), "--lldp-interval", "0"]
        ctl = ControllerProcess(d / "fabric.json", mode=mode, extra=extra).start()
        self.procs.append(ctl)
        return ctl

    def osken(self, *apps: str, args: tuple[str, ...] = ()) -> OsKenApp:
        """os-ken apps (module names or files) under ``osken-manager``, listening on a free port of 127.0.0.1."""
        app = OsKenApp(apps, self.tmp / f"osken-{len(self.procs)}.log", args).start()
        self.procs.append(app)
        return app

    def osken_sample(self, name: str, args: tuple[str, ...] = ()) -> OsKenApp:
        """One of os-ken's own sample applications (``simple_switch_13``), unmodified: ``make samples`` puts
        them beside the venv (os-ken 3 ships none); skipped, with how to get them, when absent."""
        path = Path(sys.prefix) / "share" / "freeway" / "os_ken_samples" / f"{name}.py"
        if not path.exists():
            pytest.skip(f"os-ken's sample {name} is not in {path.parent} (make samples puts it there)")
        return self.osken(str(path), args=args)

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001  (teardown goes on)
                pass


class OsKenApp:
    """An os-ken application process (``osken-manager``), as an operator runs one."""

    def __init__(self, apps, log: Path, args=()):
        self.apps, self.log_path, self.args = apps, log, args
        self.port = free_port()
        self.address = ("127.0.0.1", self.port)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> OsKenApp:
        exe = shutil.which("osken-manager", path=str(Path(sys.executable).parent)) or shutil.which("osken-manager")
        if exe is None:
            pytest.skip("osken-manager is not installed (os-ken < 4 ships it)")
        self.proc = subprocess.Popen([exe, "--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(self.port),
                                      *self.args, *self.apps], stdout=open(self.log_path, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        if wait_listening(self.proc, self.address, timeout):
            return self
        if self.proc.poll() is not None:
            raise RuntimeError(f"osken-manager exited ({self.proc.returncode}): {self.log()[-2000:]}")
        raise TimeoutError(f"osken-manager did not listen within {timeout:.0f} s: {self.log()[-2000:]}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def stop(self) -> None:
        from experiments.harness.procs import stop_process

        stop_process(self.proc, group=True)


@pytest.fixture
def controller(fabric, tmp_path):
    ctl = Controllers(fabric, tmp_path)
    yield ctl
    ctl.stop()


@pytest.fixture
def sim_fabric(fabric):
    from experiments.testing.simnet import SimNet

    nets = []

    def connect(address, quiet_s: float = 0.3, timeout: float = 30.0):
        net = SimNet(fabric, tuple(address), quiet_s, MUTATE)
        nets.append(net)
        return net.start(timeout)

    yield connect
    for net in nets:
        net.close()


@pytest.fixture
def ns3_fabric(fabric, tmp_path):
    """``ns3_fabric(mode, flows, isolation=False, **settings)``: the engine's results for the flows
    (``experiments.workloads.flowlist.Flow``) on ``fabric`` under ``mode``, each run its own process."""

    def run(mode: str, flows, isolation: bool = False, **settings):
        from experiments.engines.ns3.engine import Settings, run_one, spec_of

        label = f"{mode}-{len(list(tmp_path.iterdir()))}"
        st = Settings(**{"queues": "strict" if isolation else "fifo", "grace_s": 5.0, **settings})
        return run_one(tmp_path, spec_of(label, mode, fabric, mode, isolation, list(flows), st), timeout_s=1800)

    return run


@pytest.fixture
def ovs_fabric(fabric):
    if os.geteuid() != 0:
        pytest.skip("ovs_fabric needs root (Mininet builds network namespaces)")
    if shutil.which("ovs-vsctl") is None or subprocess.run(["ovs-vsctl", "--timeout=3", "show"],
                                                           capture_output=True).returncode != 0:
        pytest.skip("ovs_fabric needs a running Open vSwitch (make install starts one)")
    from topology.builder import FabricNet

    nets = []

    def build(address, **kw):
        fn = FabricNet(fabric, tuple(address), **kw)
        nets.append(fn)
        return fn.__enter__()

    yield build
    for fn in nets:
        try:
            fn.__exit__(None, None, None)
        except Exception:  # noqa: BLE001
            subprocess.run(["mn", "-c"], capture_output=True)
