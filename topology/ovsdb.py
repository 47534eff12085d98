"""Reading Open vSwitch's database through ``ovs-vsctl --format=json`` (the local one, or ``tcp:HOST:6640``),
and the JSON shapes it answers in. Used by monitoring's port map and by the queues the controller keeps."""

from __future__ import annotations

import json
import subprocess


def rows(table: dict) -> list[dict]:
    """A table's rows as dicts of column -> value."""
    heads = table["headings"]
    return [dict(zip(heads, row, strict=True)) for row in table["data"]]


def uuids(value) -> list[str]:
    """OVSDB JSON: ["uuid", U] or ["set", [["uuid", U], ...]]."""
    if value[0] == "uuid":
        return [value[1]]
    if value[0] == "set":
        return [v[1] for v in value[1]]
    return []


def read(db: str | None, tables, timeout: float = 10) -> dict[str, dict]:
    """The given (table, columns) pairs from OVSDB (local socket if ``db`` is None)."""
    base = ["ovs-vsctl", f"--timeout={int(timeout)}", "--format=json"] + ([f"--db={db}"] if db else [])
    out = {}
    for table, cols in tables:
        r = subprocess.run([*base, f"--columns={cols}", "list", table], capture_output=True, text=True,
                           timeout=timeout + 5)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-vsctl list {table}: {r.stderr.strip()}")
        out[table] = json.loads(r.stdout)
    return out
