"""A real Prometheus server (Debian's ``prometheus``) on loopback, scraping one target every second."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from experiments.harness.procs import free_port


class Prometheus:
    def __init__(self, target: str, workdir: Path, interval_s: float = 1.0):
        self.target, self.dir, self.interval_s = target, Path(workdir), interval_s
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Prometheus:
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "prometheus.yml"
        every = f"{round(self.interval_s * 1000)}ms"
        cfg.write_text(f"global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n"
                       f"scrape_configs:\n  - job_name: freeway\n    static_configs:\n"
                       f"      - targets: ['{self.target}']\n")
        self.log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={self.dir / 'data'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.dir / "prometheus.log").read_text()[-2000:]
            try:
                urllib.request.urlopen(self.url + "/-/ready", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready")

    def stop(self) -> None:
        from experiments.harness.procs import stop_process

        stop_process(self.proc)
        self.proc = None
        self.log.close()

    def query(self, expr: str) -> list[dict]:
        """An instant query: [{"metric": {labels}, "value": float}, ...]."""
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        doc = json.load(urllib.request.urlopen(url, timeout=5))
        assert doc["status"] == "success", doc
        return [{"metric": r["metric"], "value": float(r["value"][1])} for r in doc["data"]["result"]]

    def value(self, expr: str) -> float | None:
        res = self.query(expr)
        return res[0]["value"] if res else None

    def targets_up(self) -> bool:
        doc = json.load(urllib.request.urlopen(self.url + "/api/v1/targets", timeout=5))
        return any(t["health"] == "up" for t in doc["data"]["activeTargets"])
