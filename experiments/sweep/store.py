"""The results store: one Parquet file of per-flow rows and one of the run's summary per run, readable
without Freeway (pandas, duckdb, pyarrow).

```
STORE/flows/<hash>.parquet   every flow of the run: its grid point's columns, size, bucket, FCT, slowdown
STORE/links/<hash>.parquet   each switch link's utilisation once a second, and its class (Freeway: lol/hol)
STORE/pairs/<hash>.parquet   Freeway's low-latency paths per ToR pair once a second
STORE/runs/<hash>.parquet    one row: the grid point, the configuration hash, versions, the git commit,
                             wall time, status and the run's summary figures
STORE/logs/<hash>.log        the engine's last lines (kept for a failed run too)
```

A run is stored when its ``runs/`` file is there: both files are written under a temporary name and
renamed when complete (flows first), so a run killed halfway leaves nothing that counts, and two
writers of the same run leave one copy. ``index`` reads every run's row.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

MIN_FREE_BYTES = 200 * 1024 * 1024  # refuse to start a sweep with less free space than this
TABLES = ("flows", "links", "pairs")  # per-run tables besides the run's own row


class StoreError(RuntimeError):
    pass


def config_hash(config: dict) -> str:
    """The hash of a run's whole configuration (its engine spec: fabric, flows, mode, settings)."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


class Store:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    # ----- checks before a sweep ---------------------------------------------------------------------
    def check_writable(self, need_bytes: int = MIN_FREE_BYTES) -> None:
        """Refuse, before the first run, a store that cannot be written or has too little room."""
        try:
            for sub in (*TABLES, "runs", "logs"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=self.root)
            os.write(fd, b"x")
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise StoreError(f"store {self.root}: cannot write there: {e.strerror or e}") from None
        free = shutil.disk_usage(self.root).free
        if free < need_bytes:
            raise StoreError(f"store {self.root}: {free / 2**20:.0f} MiB free, a sweep needs at least "
                             f"{need_bytes / 2**20:.0f} MiB")

    # ----- one run ------------------------------------------------------------------------------------
    def path(self, kind: str, h: str) -> Path:
        return self.root / kind / f"{h}.{'log' if kind == 'logs' else 'parquet'}"

    def has(self, h: str) -> bool:
        """A run stored complete and successful."""
        p = self.path("runs", h)
        if not p.exists():
            return False
        try:
            import pyarrow.parquet as pq

            return pq.read_table(p, columns=["status"]).column("status")[0].as_py() == "ok"
        except Exception:  # noqa: BLE001  (an unreadable file is a missing run)
            return False

    def write_run(self, h: str, tables: dict[str, list[dict]], run: dict) -> None:
        """The run's tables (``flows``, and ``links``/``pairs`` where the run has them), then its row (the
        row makes it count)."""
        import pyarrow as pa

        for kind, rows in tables.items():
            if kind not in TABLES:
                raise StoreError(f"unknown table {kind!r}")
            if rows:
                self._write(self.path(kind, h), pa.Table.from_pylist(rows))
        self._write(self.path("runs", h), pa.Table.from_pylist([run]))

    def write_log(self, h: str, text: str) -> None:
        p = self.path("logs", h)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, p)

    def write_progress(self, h: str, line: str) -> None:
        """A running run's latest progress line (read by the sweep's progress; gone when it ends)."""
        p = self.root / "logs" / f"{h}.progress"
        try:
            p.write_text(line + "\n")
        except OSError:
            pass

    def end_progress(self, h: str) -> None:
        (self.root / "logs" / f"{h}.progress").unlink(missing_ok=True)

    def progress_lines(self, fresh_s: float = 60.0) -> list[str]:
        """The running runs' latest lines (one written in the last ``fresh_s``: a run whose worker was killed
        leaves its file behind)."""
        import time

        out = []
        now = time.time()
        for p in sorted((self.root / "logs").glob("*.progress")):
            try:
                if now - p.stat().st_mtime <= fresh_s:
                    out.append(p.read_text().strip())
            except OSError:
                continue
        return [x for x in out if x]

    def _write(self, p: Path, table) -> None:
        import pyarrow.parquet as pq

        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, p)

    # ----- reading ------------------------------------------------------------------------------------
    def index(self):
        """Every stored run's row (a pandas DataFrame; empty when the store holds none)."""
        import pandas as pd

        files = sorted((self.root / "runs").glob("*.parquet"))
        if not files:
            return pd.DataFrame()
        return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)

    def table(self, kind: str, hashes=None):
        """A per-run table (``flows``, ``links``, ``pairs``) of every stored run (or of ``hashes``), one
        DataFrame."""
        import pandas as pd

        files = sorted((self.root / kind).glob("*.parquet"))
        if hashes is not None:
            want = set(hashes)
            files = [f for f in files if f.stem in want]
        if not files:
            return pd.DataFrame()
        return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
