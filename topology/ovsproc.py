"""More than one Open vSwitch process for one emulated fabric (``--switch-processes N``).

On the userspace datapath every bridge of an ovs-vswitchd shares one
datapath, and its main thread forwards the packets of every system (veth)
port. Each turn of that thread's loop reads every port's packet socket, and
each read sets up a batch of 32 packet buffers whether or not anything is
waiting (Open vSwitch 3.1, ``lib/dpif-netdev.c: dpif_netdev_run`` and
``lib/netdev-linux.c: netdev_linux_batch_rxq_recv_sock``). So a packet costs
in proportion to the number of ports on the datapath: ``freeway bench
emulator`` (2026-11-23) found the same 500 pings/s taking 12% of the thread
with no idle port, 82% with 200 and 98% with 700 (a k=8 fat-tree has 720),
and 10% with the 700 in a second process. Splitting the fabric's switches
between N ovs-vswitchd processes, each with its own database, cuts the ports
each turn reads by N and lets the turns run on both cores. Nothing
emulated changes: the same bridges, links, shaping and queues, each switch
with its own OpenFlow connection and its database in its process's OVSDB (a
real fabric has one per switch; the controller is given every one of them,
``--ovsdb``).

Process 0 is the system's Open vSwitch (``ovs-ctl start``); processes
1..N-1 are started here, each with an ovsdb-server and an ovs-vswitchd
sharing the run directory (so ``ovs-ofctl BRIDGE`` reaches every bridge) but
with their own database, pid files and control sockets.

One wrinkle: each userspace datapath opens a tap device named ``ovs-netdev``
and a second process cannot open one of the same name (``Device or resource
busy``). The name is only a label once the datapath holds the device open,
so before each process creates its datapath the one already there is
renamed (``ovs-netdev-f<N>``, a free name); each process still closes its own
when it stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

RUNDIR = Path("/var/run/openvswitch")
STATE = Path("/var/lib/freeway/ovs")
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
DP_TAP = "ovs-netdev"
MAX_PROCESSES = 8


class ProcessError(RuntimeError):
    """An extra Open vSwitch process could not be started; the message says why."""


def check_count(n) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PROCESSES:
        raise ProcessError(f"switch-processes: must be a whole number from 1 to {MAX_PROCESSES}, got {n!r}")
    return n


def assign(switches: list[str], n: int) -> dict[str, int]:
    """Switch -> process: in the fabric's order, dealt round-robin, so that every process gets about
    the same number of switches (and ports: the cost follows the ports)."""
    check_count(n)
    return {sw: i % n for i, sw in enumerate(switches)}


@dataclass(frozen=True)
class Proc:
    """Paths of extra process ``n`` (n >= 1); process 0 is the system's own."""

    n: int

    @property
    def db_sock(self) -> Path:
        return RUNDIR / f"freeway-db-{self.n}.sock"

    @property
    def db(self) -> str:
        """The OVSDB endpoint, as ovs-vsctl --db and the controller's --ovsdb take it."""
        return f"unix:{self.db_sock}"

    @property
    def db_file(self) -> Path:
        return STATE / f"conf-{self.n}.db"

    def pidfile(self, daemon: str) -> Path:
        return RUNDIR / f"freeway-{daemon}-{self.n}.pid"

    def ctl(self, daemon: str) -> Path:
        return RUNDIR / f"freeway-{daemon}-{self.n}.ctl"

    def pid(self, daemon: str = "vswitchd") -> int | None:
        try:
            pid = int(self.pidfile(daemon).read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None


SYSTEM_DB = f"unix:{RUNDIR / 'db.sock'}"


def _run(cmd: list[str], what: str, timeout: float = 30) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise ProcessError(f"{what}: {(r.stderr or r.stdout).strip()[-300:]}")
    return r.stdout


def rename_datapath_tap() -> str | None:
    """Give the userspace datapath's tap device (held open by the process that made it) a free name,
    so that the next process can make its own; the new name, if there was one. Nothing is deleted:
    a device of that name may belong to a live process."""
    if not Path(f"/sys/class/net/{DP_TAP}").exists():
        return None
    new = next(n for i in range(1000) if not Path(f"/sys/class/net/{(n := f'{DP_TAP}-f{i}')}").exists())
    _run(["ip", "link", "set", DP_TAP, "name", new], f"renaming the datapath's tap {DP_TAP} to {new}")
    return new


class SwitchProcesses:
    """``with SwitchProcesses(3) as sp: sp.dbs`` - the system's Open vSwitch and two more, stopped (with
    every bridge in them) on the way out."""

    def __init__(self, n: int = 1):
        self.n = check_count(n)
        self.extra = [Proc(i) for i in range(1, n)]

    @property
    def dbs(self) -> list[str | None]:
        """Process i's database (None: the system's default one)."""
        return [None] + [p.db for p in self.extra]

    @property
    def ovsdb_setting(self) -> str:
        """The controller's ``--ovsdb`` for these processes ('' with one: the local default)."""
        return "" if self.n == 1 else ",".join([SYSTEM_DB] + [p.db for p in self.extra])

    def vswitchd_pids(self) -> list[int | None]:
        """Every process's ovs-vswitchd (None where it is not running)."""
        try:
            system = int((RUNDIR / "ovs-vswitchd.pid").read_text().strip())
        except (OSError, ValueError):
            system = None
        return [system] + [p.pid() for p in self.extra]

    def start(self) -> SwitchProcesses:
        if not self.extra:
            return self
        STATE.mkdir(parents=True, exist_ok=True)
        stop_leftovers()  # left over by a run that was killed (one fabric at a time on a machine)
        try:
            for p in self.extra:
                p.db_file.unlink(missing_ok=True)  # a fresh database: no bridge from an earlier run
                _run(["ovsdb-tool", "create", str(p.db_file), str(SCHEMA)], f"switch process {p.n}: ovsdb-tool")
                _run(["ovsdb-server", str(p.db_file), f"--remote=punix:{p.db_sock}", f"--pidfile={p.pidfile('ovsdb')}",
                      f"--unixctl={p.ctl('ovsdb')}", "--detach", "--no-chdir",
                      f"--log-file={STATE / f'ovsdb-server-{p.n}.log'}"], f"switch process {p.n}: ovsdb-server")
                _run(["ovs-vsctl", f"--db={p.db}", "--no-wait", "init"], f"switch process {p.n}: ovs-vsctl init")
                _run(["ovs-vswitchd", p.db, f"--pidfile={p.pidfile('vswitchd')}", f"--unixctl={p.ctl('vswitchd')}",
                      "--detach", "--no-chdir", f"--log-file={STATE / f'ovs-vswitchd-{p.n}.log'}"],
                     f"switch process {p.n}: ovs-vswitchd")
                deadline = time.monotonic() + 10
                while not p.ctl("vswitchd").exists():
                    if time.monotonic() > deadline:
                        raise ProcessError(f"switch process {p.n}: ovs-vswitchd gave no control socket in 10 s")
                    time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _stop_one(p: Proc) -> None:
        for daemon in ("vswitchd", "ovsdb"):
            pid = p.pid(daemon)
            if pid is None:
                continue
            args = ["exit", "--cleanup"] if daemon == "vswitchd" else ["exit"]
            r = subprocess.run(["ovs-appctl", "-t", str(p.ctl(daemon)), *args], capture_output=True, timeout=30)
            deadline = time.monotonic() + 5
            while r.returncode == 0 and p.pid(daemon) is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            if p.pid(daemon) is not None:
                os.kill(pid, signal.SIGKILL)
            p.pidfile(daemon).unlink(missing_ok=True)

    def stop(self) -> None:
        for p in self.extra:
            self._stop_one(p)
            p.db_file.unlink(missing_ok=True)

    def __enter__(self) -> SwitchProcesses:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_leftovers() -> int:
    """Stop extra processes left by a run that was killed (their pid files say which); how many."""
    n = 0
    for i in range(1, MAX_PROCESSES):
        p = Proc(i)
        if p.pid("vswitchd") or p.pid("ovsdb"):
            SwitchProcesses._stop_one(p)
            n += 1
    return n
