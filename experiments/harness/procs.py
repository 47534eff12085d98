"""Start and stop the real controller process the way a user does (``freeway controller``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def freeway_command() -> list[str]:
    """The installed ``freeway`` console script (next to this interpreter), else the module."""
    exe = Path(sys.executable).with_name("freeway")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("freeway")
    return [found] if found else [sys.executable, "-m", "ryu_apps.cli"]


def stop_process(proc: subprocess.Popen | None, wait_s: float = 10.0, group: bool = False) -> None:
    """SIGTERM a child we started, SIGKILL it if it is still there after ``wait_s``; ``group``: its whole
    process group (a child started with ``start_new_session``, and what it started)."""
    if proc is None or proc.poll() is not None:
        return

    def signal_it(sig: int) -> None:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)

    signal_it(signal.SIGTERM)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        signal_it(signal.SIGKILL)
        proc.wait(5)


_HANDED_OUT: set[int] = set()  # every port ``free_port`` gave this process


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port free on 127.0.0.1 now that this process was never given before. Ports are picked before the
    processes that bind them start, so the kernel may offer one again meanwhile: a cluster test's second
    controller was given its first one's API port, and could not listen (2026-12-04)."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free port on 127.0.0.1 that this process was not given already")


def wait_listening(proc: subprocess.Popen, address: tuple[str, int], timeout: float) -> bool:
    """Whether the process listens on ``address`` within ``timeout`` s (False as soon as it exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(address, timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


class ControllerProcess:
    """``freeway controller`` as a child process, with its log in a file."""

    def __init__(self, fabric_file: str | Path, port: int | None = None, mode: str = "ecmp",
                 log_file: str | Path | None = None, extra: list[str] | None = None,
                 sflow_port: int | None = None, events_file: str | Path | None | bool = None, cpus=None):
        """``events_file``: where the controller appends its events (None: next to the fabric file; False:
        none, as a user starts it without ``--events``); ``cpus``: the CPUs it runs on (None: any)."""
        self.fabric_file = str(fabric_file)
        self.port = port or free_port()
        self.sflow_port = sflow_port or free_port(socket.SOCK_DGRAM)
        self.events_file = (None if events_file is False else Path(events_file) if events_file
                            else Path(self.fabric_file).with_suffix(".events.jsonl"))
        self.mode = mode
        self.log_file = Path(log_file) if log_file else Path(self.fabric_file).with_suffix(".controller.log")
        self.extra = extra or []
        self.cpus = cpus
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def start(self, timeout: float = 30.0) -> ControllerProcess:
        cmd = [*freeway_command(), "controller", "--fabric", self.fabric_file,
               "--listen", f"127.0.0.1:{self.port}", "--mode", self.mode,
               "--sflow-listen", f"127.0.0.1:{self.sflow_port}",
               *(["--events", str(self.events_file)] if self.events_file else []), *self.extra]
        self._log_start = len(self.log_text())
        self._log = open(self.log_file, "ab")
        if self.cpus:  # (taskset: from its first thread on, and what it starts after, its workers too)
            cmd = ["taskset", "-c", ",".join(map(str, sorted(self.cpus))), *cmd]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait_listening(self.proc, self.address, timeout):
            return self
        if self.proc.poll() is not None:
            raise RuntimeError(f"controller exited with {self.proc.returncode}: {self.log_tail()}")
        self.stop()
        raise RuntimeError(f"controller did not listen on port {self.port} within {timeout} s")

    def stop(self) -> None:
        stop_process(self.proc, group=True)
        self._gone()

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: no goodbye to the switches."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self._gone()

    def _gone(self) -> None:
        self.proc = None
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None

    @property
    def sflow_target(self) -> str:
        return f"127.0.0.1:{self.sflow_port}"

    def events(self, types: tuple[str, ...] | None = None) -> list[dict]:
        """The JSON-lines events written so far (optionally only some types)."""
        if self.events_file is None or not self.events_file.exists():
            return []
        out = []
        for line in self.events_file.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line being written
            if types is None or ev.get("type") in types:
                out.append(ev)
        return out

    def tables(self) -> tuple[dict, int]:
        """From the latest per-second snapshot: the size of every per-flow table the controller keeps
        (its ``state`` and monitoring's tracked flows), and how many Hedera edge entries it installed."""
        last = self.events(("links",))[-1]
        return ({**last["state"], "monitor_flows": last["stats"]["flows_tracked"]},
                last["controller"].get("hedera-edges", 0))

    def wait_programmed(self, switches: int, timeout: float = 30.0) -> None:
        """Wait until this controller has programmed ``switches`` switches (counted in its log since start)."""
        deadline = time.monotonic() + timeout
        while self.log_text()[self._log_start:].count(") connected: ") < switches:
            if time.monotonic() > deadline:
                raise RuntimeError(f"controller programmed fewer than {switches} switches in {timeout} s")
            time.sleep(0.2)

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def log_tail(self, n: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def __enter__(self) -> ControllerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SwitchCpu:
    """How busy Open vSwitch's main thread was between two readings.

    On the userspace datapath, packets from system (veth) ports are forwarded by
    ovs-vswitchd's main thread alone, for every bridge of the fabric. When that
    thread is near 100%, packets wait in the emulator itself and every FCT
    includes that wait, whatever the scheme: the run measures the machine, not
    the network. Experiments record this and warn about it.
    """

    def __init__(self, pid: int | None = None):
        self.pid = pid or self._find()
        self.t0 = time.monotonic()
        self.c0 = self._ticks()
        self.w0 = self._waited()
        self.last_waiting: float | None = None  # set by ``busy``: the share of the same interval spent waiting

    @staticmethod
    def _find() -> int | None:
        r = subprocess.run(["pgrep", "-x", "ovs-vswitchd"], capture_output=True, text=True)
        pids = r.stdout.split()
        return int(pids[0]) if pids else None

    def _ticks(self) -> float | None:
        if self.pid is None:
            return None
        try:
            fields = Path(f"/proc/{self.pid}/task/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def _waited(self) -> float | None:
        """Seconds the thread has spent runnable but waiting for a CPU (the scheduler's run-queue
        delay, ``/proc/PID/task/TID/schedstat``)."""
        if self.pid is None:
            return None
        try:
            return int(Path(f"/proc/{self.pid}/task/{self.pid}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return None

    @classmethod
    def of(cls, pids: list[int | None] | None = None) -> SwitchCpu | SwitchesCpu:
        """One tracker for the system's Open vSwitch, or one over several processes (``--switch-processes``)."""
        return cls() if not pids or len(pids) == 1 else SwitchesCpu(pids)

    def busy(self) -> float | None:
        """Fraction of wall time the main thread spent on a CPU since the last call (or creation).
        ``last_waiting`` is then the fraction it spent ready to run but waiting for a CPU, which the
        other processes of the machine held: the two together are what it wanted. A thread 70% busy
        and 25% waiting is saturated."""
        c, w, t = self._ticks(), self._waited(), time.monotonic()
        if c is None or self.c0 is None or t <= self.t0:
            return None
        frac = (c - self.c0) / (t - self.t0)
        self.last_waiting = round((w - self.w0) / (t - self.t0), 3) if w is not None and self.w0 is not None else None
        self.c0, self.w0, self.t0 = c, w, t
        return round(frac, 3)


class SwitchesCpu:
    """``SwitchCpu`` over several ovs-vswitchd processes: the busiest main thread (and its wait) is what
    limits the emulation; ``last_each`` has every process's (busy, waiting)."""

    def __init__(self, pids: list[int | None]):
        self.each = [SwitchCpu(pid) if pid else None for pid in pids]
        self.last_waiting: float | None = None
        self.last_each: list[tuple[float | None, float | None]] = []

    def busy(self) -> float | None:
        self.last_each = [(t.busy(), t.last_waiting) if t is not None else (None, None) for t in self.each]
        have = [bw for bw in self.last_each if bw[0] is not None]
        if not have:
            self.last_waiting = None
            return None
        top = max(have, key=lambda bw: bw[0] + (bw[1] or 0))
        self.last_waiting = top[1]
        return top[0]


class PortRate:
    """Bytes one switch port transmits, read every ``every_s`` in a background thread (an elephant's
    goodput at the port toward its destination host). ``mbps(t0, t1)`` is the mean rate between two
    monotonic instants; ``seconds(t0, t1)`` the rate in every whole second, ``windows`` in sliding ones."""

    def __init__(self, switch: str, port: int, every_s: float = 0.25):
        import threading

        self.switch, self.port, self.every_s = switch, port, every_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from topology.builder import port_tx_bytes

        counter = Path(f"/sys/class/net/{self.switch}-eth{self.port}/statistics/tx_bytes")
        while not self._stop.is_set():
            # the kernel's counter of the switch port's interface: read at once, where asking ovs-vswitchd
            # (dump-ports) can stall for seconds while it is busy (a controller's restart), which once
            # put 3.5 s of bytes into one second and none into another
            if counter.exists():
                self.samples.append((time.monotonic(), int(counter.read_text())))
            else:
                t = time.monotonic()
                b = port_tx_bytes(self.switch, self.port).get(self.port, 0)
                self.samples.append(((t + time.monotonic()) / 2, b))
            self._stop.wait(self.every_s)

    def mbps(self, t0: float, t1: float) -> float:
        inside = [(t, b) for t, b in self.samples if t0 <= t <= t1]
        if len(inside) < 2:
            raise ValueError(f"{self.switch} port {self.port}: no two samples between {t0:.2f} and {t1:.2f}")
        (ta, ba), (tb, bb) = inside[0], inside[-1]
        return (bb - ba) * 8 / (tb - ta) / 1e6

    def seconds(self, t0: float, t1: float) -> list[float]:
        return self.windows(t0, t1, 1.0, 1.0)

    def windows(self, t0: float, t1: float, width: float, step: float) -> list[float]:
        """The mean rate in every ``width`` s window from ``t0`` to ``t1``, one starting each ``step`` s."""
        n = int((t1 - t0 - width) / step + 1e-9) + 1 if t1 - t0 >= width else 0
        return [round(self.mbps(t0 + i * step, t0 + i * step + width), 2) for i in range(n)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def ping_bg(fn, src: str, dst: str, count: int):
    """A 50 Hz ping of ``count`` packets in the background (a count, not a deadline: ping waits for the
    last answer instead of counting it lost); the returned function waits and gives (sent, received)."""
    import re

    proc = fn.host(src).popen(["ping", "-n", "-q", "-i", "0.02", "-W", "1", "-c", str(count), fn.host(dst).IP()],
                              stdout=subprocess.PIPE, text=True)

    def result() -> tuple[int, int]:
        out = proc.communicate(timeout=count / 50 + 15)[0]
        m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
        return (int(m.group(1)), int(m.group(2))) if m else (count, 0)
    return result


def start_elephant(fn, announced: bool, src: str, dst: str, port: int, seconds: float, rate_mbps: float = 4.0):
    """An elephant from ``src`` to ``dst`` for about ``seconds``: announced with ``rate_mbps`` (``freeway
    send`` to a sink) or an iperf3 client. Returns (process, the announce's answer, or None for iperf3)."""
    d = fn.host(dst)
    if announced:
        # the sink ends by itself (a background job of a Mininet host outlives the fabric)
        d.cmd(f"timeout {int(seconds) + 120} {sys.executable} -m experiments.hosts.rr sink --port {port} >/dev/null 2>&1 &")
        time.sleep(0.3)
        proc = fn.host(src).popen([sys.executable, "-m", "ryu_apps.cli", "send", "--to", d.IP(), "--port", str(port),
                                   "--size", str(int(seconds * rate_mbps * 1e6 / 8)), "--rate", f"{rate_mbps:g}",
                                   "--json"], stdout=subprocess.PIPE, text=True)
        return proc, json.loads(proc.stdout.readline() or "{}")
    d.cmd(f"iperf3 -s -1 -p {port} -D >/dev/null 2>&1")
    time.sleep(0.3)
    return fn.host(src).popen(["iperf3", "-c", d.IP(), "-p", str(port), "-t", str(int(seconds))],
                              stdout=subprocess.DEVNULL), None


def busiest_link(fn, links, seconds: float = 1.0):
    """Of the directed links, the one that sent the most over ``seconds`` (where an elephant is)."""
    from topology.builder import port_tx_bytes

    ports = {ln: fn.fabric.port_to(*ln) for ln in links}
    before = {ln: port_tx_bytes(ln[0], p).get(p, 0) for ln, p in ports.items()}
    time.sleep(seconds)
    return max(links, key=lambda ln: port_tx_bytes(ln[0], ports[ln]).get(ports[ln], 0) - before[ln])
