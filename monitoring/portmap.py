"""Which sFlow (agent, ifIndex) is which (switch, port): read from each switch host's Open vSwitch database.

An ifIndex is only unique within one agent: switches on different hosts (or
different boxes) reuse the same numbers. So a sample is identified by its
agent address and its ifIndex. OVSDB's Interface table has the ifindex with
the OpenFlow port, Bridge/Port tie it to the datapath id, and the bridge's
sFlow record names its agent: an IP address is taken as is; an interface
name (Open vSwitch then reports that interface's address) stands for the
OVSDB endpoint's host when it is remote (``tcp:HOST:6640``), and for "any
agent" on the local one (the emulator: every bridge reports the same
address, and the Linux ifIndex is unique on the host).
"""

from __future__ import annotations

import ipaddress

from topology import ovsdb
from topology.fabric import Fabric

TABLES = (("bridge", "name,datapath_id,ports,sflow"), ("port", "_uuid,name,interfaces"),
          ("interface", "_uuid,name,ifindex,ofport"), ("sflow", "_uuid,agent"))

Key = tuple[str | None, int]  # (agent address or None for any agent, ifIndex)


_rows, _uuids = ovsdb.rows, ovsdb.uuids


def _int(value) -> int | None:
    return value if isinstance(value, int) else None  # empty sets come as ["set", []]


def ports(tables: dict[str, dict]):
    """(datapath id, ifIndex, OpenFlow port) of every interface of every bridge in the tables."""
    ifaces = {r["_uuid"][1]: r for r in _rows(tables["interface"])}
    port_rows = {r["_uuid"][1]: r for r in _rows(tables["port"])}
    for br in _rows(tables["bridge"]):
        dpid_hex = br["datapath_id"]
        if not isinstance(dpid_hex, str):
            continue
        dpid = int(dpid_hex, 16)
        for pu in _uuids(br["ports"]):
            for iu in _uuids(port_rows.get(pu, {}).get("interfaces", ["set", []])):
                it = ifaces.get(iu)
                if it is None:
                    continue
                ifindex, ofport = _int(it["ifindex"]), _int(it["ofport"])
                if ifindex and ofport and ofport > 0:  # includes the bridge's LOCAL port (65534)
                    yield dpid, ifindex, ofport


def parse_ovsdb(tables: dict[str, dict]) -> dict[int, tuple[int, int]]:
    """ifIndex -> (datapath id, OpenFlow port) from ``ovs-vsctl --format=json list`` output (one host)."""
    return {ifindex: (dpid, ofport) for dpid, ifindex, ofport in ports(tables)}


def bridge_agents(tables: dict[str, dict], default: str | None = None) -> dict[int, str | None]:
    """Each bridge's sFlow agent address (datapath id -> address; ``default`` where the record names an
    interface or the bridge has none)."""
    agents = {}
    if "sflow" in tables:
        for r in _rows(tables["sflow"]):
            agent = r["agent"] if isinstance(r["agent"], str) else ""
            try:
                agents[r["_uuid"][1]] = str(ipaddress.ip_address(agent))
            except ValueError:
                agents[r["_uuid"][1]] = default
    out = {}
    for br in _rows(tables["bridge"]):
        if isinstance(br["datapath_id"], str):
            ids = _uuids(br.get("sflow", ["set", []]))
            out[int(br["datapath_id"], 16)] = agents.get(ids[0], default) if ids else default
    return out


def endpoint_host(db: str | None) -> str | None:
    """The host of a remote OVSDB endpoint (tcp:HOST:PORT, ssl:HOST:PORT); None for the local one."""
    if not db or not db.startswith(("tcp:", "ssl:")):
        return None
    host = db.split(":", 1)[1].rpartition(":")[0].strip("[]")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    import socket

    try:  # a name: the address it resolves to (the agent reports an address, never a name)
        return socket.gethostbyname(host)
    except OSError:
        return None


def to_switch_ports(fabric: Fabric, by_dpid: dict[int, tuple[int, int]]) -> dict[int, tuple[str, int]]:
    """Keep the ifIndexes of the fabric's switches, as (switch name, port)."""
    out = {}
    for ifindex, (dpid, port) in by_dpid.items():
        sw = fabric.switch_by_dpid(dpid)
        if sw is not None:
            out[ifindex] = (sw.name, port)
    return out


def read_ovsdb(db: str | None = None, timeout: float = 10) -> dict[str, dict]:
    """The tables of the map from OVSDB (local socket, or ``db`` such as tcp:HOST:6640)."""
    return ovsdb.read(db, TABLES, timeout)


def agent_map(fabric: Fabric, tables: dict[str, dict], db: str | None = None) -> dict[Key, tuple[str, int]]:
    """(agent, ifIndex) -> (switch, port) for the fabric's switches in one OVSDB's tables."""
    agents = bridge_agents(tables, endpoint_host(db))
    out = {}
    for dpid, ifindex, port in ports(tables):
        sw = fabric.switch_by_dpid(dpid)
        if sw is not None:
            out[(agents.get(dpid), ifindex)] = (sw.name, port)
    return out


def parse_endpoints(value: str) -> list[str | None]:
    """The ``ovsdb`` setting: comma-separated endpoints, one per switch host ('' = the local one)."""
    return [e.strip() for e in value.split(",") if e.strip()] or [None]


def load(fabric: Fabric, dbs: str | list | None = None) -> dict[Key, tuple[str, int]]:
    """The map from every endpoint (a comma-separated ``ovsdb`` setting, or a list)."""
    import logging

    out: dict = {}
    for db in parse_endpoints(dbs or "") if not isinstance(dbs, list) else dbs:
        for key, where in agent_map(fabric, read_ovsdb(db), db).items():
            if key in out and out[key] != where:
                logging.getLogger("freeway.monitor").warning(
                    "ifIndex %d of agent %s is both %s:%d and %s:%d (two hosts with the same agent address?): "
                    "the latter kept", key[1], key[0] or "(any)", *out[key], *where)
            out[key] = where
    return out
