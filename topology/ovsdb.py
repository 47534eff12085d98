"""Reading Open vSwitch's database through ``ovs-vsctl --format=json`` (the local one, ``ssl:HOST:6640``
with the controller's PKI, or ``tcp:HOST:6640`` where the operator allows clear text), and the JSON shapes
it answers in. Used by monitoring's port map and by the queues the controller keeps.

OVSDB is a way into every switch (``set-controller`` points it at anyone): a remote one is spoken to over
TLS with the controller's key and certificate and the switches' CA (``use_tls``), as OpenFlow is
(issue 60); ``check_endpoints`` refuses a clear-text remote one unless the operator says so.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess

_TLS: dict[str, str] = {}  # key, cert, ca for ssl: endpoints (the controller's own PKI)


class EndpointError(ValueError):
    pass


def use_tls(key: str, cert: str, ca: str) -> None:
    """The key, certificate and CA ``ssl:`` endpoints are spoken to with ('' for all: none)."""
    _TLS.clear()
    if key:
        _TLS.update(key=key, cert=cert, ca=ca)


def _host(db: str) -> str:
    rest = db.split(":", 1)[1]
    host = rest.rsplit(":", 1)[0] if rest.count(":") >= 1 else rest
    return host.strip("[]")


def check_endpoints(dbs: list[str | None], tls: bool, plain_ok: bool) -> None:
    """Each ``ovsdb`` endpoint can be used as configured: ``ssl:`` needs the controller's PKI (``tls``);
    ``tcp:`` to anything but a loopback address needs ``plain_ok`` (clear text anyone on the path can
    read, and anyone who reaches the port can write)."""
    for db in dbs:
        if db is None or db.startswith(("unix:", "punix:")):
            continue
        kind = db.split(":", 1)[0]
        if kind == "ssl" and not tls:
            raise EndpointError(f"ovsdb: {db}: an ssl: endpoint needs the controller's PKI (ctl_privkey, ctl_cert "
                                "and ca_certs)")
        if kind == "tcp":
            try:
                loop = ipaddress.ip_address(_host(db)).is_loopback
            except ValueError:
                loop = _host(db) == "localhost"
            if not loop and not plain_ok:
                raise EndpointError(f"ovsdb: {db}: OVSDB in clear text on a network: anyone who reaches it can "
                                    "point the switches at another controller (set-controller). Use "
                                    "ssl:HOST:6640 with the controller's PKI, or set ovsdb_plain on to accept it")
        elif kind not in ("ssl",):
            raise EndpointError(f"ovsdb: {db}: unknown endpoint (tcp:HOST:PORT, ssl:HOST:PORT, unix:PATH)")


def base_args(db: str | None, timeout: float, *extra: str) -> list[str]:
    """``ovs-vsctl`` with the endpoint (and, for ``ssl:``, the key, certificate and CA)."""
    args = ["ovs-vsctl", f"--timeout={int(timeout)}", *extra]
    if db:
        args.append(f"--db={db}")
        if db.startswith("ssl:"):
            if not _TLS:
                raise RuntimeError(f"{db}: no key, certificate and CA to speak TLS with (ovsdb.use_tls)")
            args += [f"--private-key={_TLS['key']}", f"--certificate={_TLS['cert']}", f"--ca-cert={_TLS['ca']}"]
    return args


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
    base = base_args(db, timeout, "--format=json")
    out = {}
    for table, cols in tables:
        r = subprocess.run([*base, f"--columns={cols}", "list", table], capture_output=True, text=True,
                           timeout=timeout + 5)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-vsctl list {table}: {r.stderr.strip()}")
        out[table] = json.loads(r.stdout)
    return out
