"""Which sFlow ifIndex is which (switch, port): read from Open vSwitch's own database.

On the userspace datapath every Mininet bridge reports the same agent address,
and flow samples carry the Linux ifIndex of the input port, which is unique on
the host; OVSDB's Interface table has that ifindex with the OpenFlow port, and
Bridge/Port tie it to the datapath id.
"""

from __future__ import annotations

import json
import subprocess

from topology.fabric import Fabric

TABLES = (("bridge", "name,datapath_id,ports"), ("port", "_uuid,name,interfaces"),
          ("interface", "_uuid,name,ifindex,ofport"))


def _rows(table: dict) -> list[dict]:
    heads = table["headings"]
    return [dict(zip(heads, row, strict=True)) for row in table["data"]]


def _uuids(value) -> list[str]:
    """OVSDB JSON: ["uuid", U] or ["set", [["uuid", U], ...]]."""
    if value[0] == "uuid":
        return [value[1]]
    if value[0] == "set":
        return [v[1] for v in value[1]]
    return []


def _int(value) -> int | None:
    return value if isinstance(value, int) else None  # empty sets come as ["set", []]


def parse_ovsdb(tables: dict[str, dict]) -> dict[int, tuple[int, int]]:
    """ifIndex -> (datapath id, OpenFlow port) from ``ovs-vsctl --format=json list`` output."""
    ifaces = {r["_uuid"][1]: r for r in _rows(tables["interface"])}
    ports = {r["_uuid"][1]: r for r in _rows(tables["port"])}
    out: dict[int, tuple[int, int]] = {}
    for br in _rows(tables["bridge"]):
        dpid_hex = br["datapath_id"]
        if not isinstance(dpid_hex, str):
            continue
        dpid = int(dpid_hex, 16)
        for pu in _uuids(br["ports"]):
            for iu in _uuids(ports.get(pu, {}).get("interfaces", ["set", []])):
                it = ifaces.get(iu)
                if it is None:
                    continue
                ifindex, ofport = _int(it["ifindex"]), _int(it["ofport"])
                if ifindex and ofport and ofport > 0:  # includes the bridge's LOCAL port (65534)
                    out[ifindex] = (dpid, ofport)
    return out


def to_switch_ports(fabric: Fabric, by_dpid: dict[int, tuple[int, int]]) -> dict[int, tuple[str, int]]:
    """Keep the ifIndexes of the fabric's switches, as (switch name, port)."""
    out = {}
    for ifindex, (dpid, port) in by_dpid.items():
        sw = fabric.switch_by_dpid(dpid)
        if sw is not None:
            out[ifindex] = (sw.name, port)
    return out


def read_ovsdb(db: str | None = None, timeout: float = 10) -> dict[str, dict]:
    """The three tables from OVSDB (local socket, or ``db`` such as tcp:HOST:6640)."""
    base = ["ovs-vsctl", f"--timeout={int(timeout)}", "--format=json"] + ([f"--db={db}"] if db else [])
    tables = {}
    for table, cols in TABLES:
        r = subprocess.run([*base, f"--columns={cols}", "list", table], capture_output=True, text=True,
                           timeout=timeout + 5)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-vsctl list {table}: {r.stderr.strip()}")
        tables[table] = json.loads(r.stdout)
    return tables


def load(fabric: Fabric, db: str | None = None) -> dict[int, tuple[str, int]]:
    return to_switch_ports(fabric, parse_ovsdb(read_ovsdb(db)))
