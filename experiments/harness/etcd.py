"""A real etcd cluster (Debian's ``etcd-server``) on loopback ports, one process per member (tests, bench failover --cluster)."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

from experiments.harness.procs import free_port


class EtcdCluster:
    def __init__(self, workdir: Path, members: int = 3, tls: dict | None = None):
        """``tls``: {"ca", "cert", "key"} of the members (a certificate naming 127.0.0.1): clients then
        speak https and must show a certificate from that CA (``--client-cert-auth``); ``client`` ({"cert",
        "key"}) is what this harness shows for its own health checks and etcdctl."""
        self.dir = Path(workdir)
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.names = [f"m{i}" for i in range(members)]
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        """The endpoints as the controller takes them: etcd://127.0.0.1:P1,etcd://127.0.0.1:P2,..."""
        return ",".join(f"etcd://127.0.0.1:{self.client[n]}" for n in self.names)

    def _tls_args(self) -> list[str]:
        if not self.tls:
            return []
        return ["--cert-file", self.tls["cert"], "--key-file", self.tls["key"], "--client-cert-auth",
                "--trusted-ca-file", self.tls["ca"]]

    def start(self, name: str | None = None, timeout: float = 30.0) -> EtcdCluster:
        """Start every member (or one that was stopped: with its data, it rejoins)."""
        initial = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)
        for n in [name] if name else self.names:
            data = self.dir / n
            log = open(self.dir / f"{n}.log", "ab")
            self.procs[n] = subprocess.Popen(
                ["etcd", "--name", n, "--data-dir", str(data),
                 "--listen-client-urls", f"{self.scheme}://127.0.0.1:{self.client[n]}",
                 "--advertise-client-urls", f"{self.scheme}://127.0.0.1:{self.client[n]}", *self._tls_args(),
                 "--listen-peer-urls", f"http://127.0.0.1:{self.peer[n]}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[n]}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--initial-cluster-token", f"freeway-test-{self.peer[self.names[0]]}",
                 "--heartbeat-interval", "100", "--election-timeout", "1000"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        for n in [name] if name else self.names:
            while not self.healthy(n):
                assert self.procs[n].poll() is None, (self.dir / f"{n}.log").read_text()[-2000:]
                assert time.monotonic() < deadline, f"etcd member {n} did not become healthy"
                time.sleep(0.2)
        return self

    def healthy(self, name: str) -> bool:
        ctx = None
        if self.tls:
            import ssl

            ctx = ssl.create_default_context(cafile=self.tls["ca"])
            ctx.load_cert_chain(self.tls["client"]["cert"], self.tls["client"]["key"])
        try:
            body = urllib.request.urlopen(f"{self.scheme}://127.0.0.1:{self.client[name]}/health", timeout=1,
                                          context=ctx).read()
        except OSError:
            return False
        return b'"true"' in body

    def _ctl(self, *args: str, name: str | None = None) -> str:
        ep = f"{self.scheme}://127.0.0.1:{self.client[name or next(iter(self.procs))]}"
        tls = ["--cacert", self.tls["ca"], "--cert", self.tls["client"]["cert"], "--key",
               self.tls["client"]["key"]] if self.tls else []
        return subprocess.run(["etcdctl", "--endpoints", ep, *tls, *args], capture_output=True, text=True, check=True,
                              env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"}).stdout

    def leader(self) -> str:
        """The name of the member that leads etcd's own raft."""
        import json

        members = {m["ID"]: m["name"] for m in json.loads(self._ctl("member", "list", "-w", "json"))["members"]}
        status = json.loads(self._ctl("endpoint", "status", "-w", "json"))[0]["Status"]
        return members[status["leader"]]

    def move_leader(self, away_from: str) -> None:
        """Make another member etcd's raft leader (so that stopping ``away_from`` costs no raft election)."""
        import json

        if self.leader() != away_from:
            return
        members = json.loads(self._ctl("member", "list", "-w", "json"))["members"]
        to = next(m["ID"] for m in members if m["name"] != away_from)
        self._ctl("move-leader", f"{to:x}", name=away_from)
        deadline = time.monotonic() + 10
        while self.leader() == away_from:
            assert time.monotonic() < deadline, "etcd's leadership did not move"
            time.sleep(0.2)

    def stop(self, name: str | None = None) -> None:
        for n in [name] if name else list(self.procs):
            p = self.procs.pop(n, None)
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
