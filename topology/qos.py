"""The isolation queues of every switch port, as the controller keeps them through each switch's OVSDB.

With isolation on, every port of every switch must hold an Open vSwitch QoS
record of type ``linux-htb`` whose max-rate is the port's link speed (from
the description), with queue 0 for mice (priority 0) and queue 1 for
elephants (priority 1) as ``queues.queue_specs`` gives them. ``plan`` reads
what the switches' databases hold (``ovs-vsctl --format=json list``) and
says, port by port, what is missing or different; ``repair_args`` is the
one ovs-vsctl transaction that puts it right (a new QoS record with its
two queues, the port pointed at it, the records it replaces destroyed).
Ports are found by datapath id and OpenFlow port number, never by name.
Everything but ``read``/``apply`` is pure.

The DSCP ``tc`` filters that make queues work on the userspace datapath
(where ``set_queue`` does not steer) cannot be set through OVSDB: they stay
an emulator-only step of the fabric builder.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from . import ovsdb
from .fabric import Fabric
from .queues import ELEPHANT_Q, MICE_Q, IsolationConfig

TAG = "external-ids:freeway=1"
TABLES = (("bridge", "datapath_id,ports"), ("port", "_uuid,name,interfaces,qos"),
          ("interface", "_uuid,ofport"), ("qos", "_uuid,type,other_config,queues,external_ids"),
          ("queue", "_uuid,other_config"))


@dataclass(frozen=True)
class QueueSpec:
    min_rate: int
    max_rate: int
    priority: int


@dataclass(frozen=True)
class PortQos:
    max_rate: int
    queues: tuple[tuple[int, QueueSpec], ...]


def queue_specs(rate_bps: int, cfg: IsolationConfig) -> dict[int, QueueSpec]:
    """Mice first (priority 0, assured all the link but the elephants' share), elephants second."""
    emin = int(rate_bps * cfg.elephant_min_share)
    return {MICE_Q: QueueSpec(max(12_000, rate_bps - emin), rate_bps, 0),  # HTB needs a non-zero assured rate
            ELEPHANT_Q: QueueSpec(max(12_000, emin), rate_bps, 1)}


def desired(fabric: Fabric, cfg: IsolationConfig) -> dict[tuple[str, int], PortQos]:
    """(switch, port) -> what its QoS must be, for every switch port of the description."""
    out = {}
    ports = [(ln.a, ln.a_port, ln.capacity_mbps) for ln in fabric.links]
    ports += [(ln.b, ln.b_port, ln.capacity_mbps) for ln in fabric.links]
    ports += [(h.switch, h.port, fabric.capacity_bps((h.name, h.switch)) / 1e6) for h in fabric.hosts]
    for sw, port, mbps in ports:
        bps = int(mbps * 1_000_000)
        out[(sw, port)] = PortQos(bps, tuple(sorted(queue_specs(bps, cfg).items())))
    return out


# ----- what the database holds ---------------------------------------------------------------
_rows, _uuids = ovsdb.rows, ovsdb.uuids


def _map(v) -> dict:
    return {k: val for k, val in v[1]} if isinstance(v, list) and v and v[0] == "map" else {}


def _int(s) -> int | None:
    try:
        return int(s)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Held:
    port_uuid: str
    port_name: str
    qos_uuid: str | None
    qos: PortQos | None  # None: no QoS record, or not a linux-htb one
    owned: tuple[str, ...]  # the QoS and Queue records of ours it points at (destroyed when replaced)


def held(fabric: Fabric, tables: dict[str, dict]) -> dict[tuple[str, int], Held]:
    """(switch, port) -> what the port holds, for the fabric's switches found in these tables."""
    ifaces = {r["_uuid"][1]: r for r in _rows(tables["interface"])}
    qos = {r["_uuid"][1]: r for r in _rows(tables["qos"])}
    queues = {r["_uuid"][1]: r for r in _rows(tables["queue"])}
    ports = {r["_uuid"][1]: r for r in _rows(tables["port"])}
    users: dict[str, int] = {}  # QoS record -> ports pointing at it (one shared record is not ours to destroy)
    for r in ports.values():
        for u in _uuids(r["qos"]):
            users[u] = users.get(u, 0) + 1
    out = {}
    for br in _rows(tables["bridge"]):
        if not isinstance(br["datapath_id"], str):
            continue
        sw = fabric.switch_by_dpid(int(br["datapath_id"], 16))
        if sw is None:
            continue
        for pu in _uuids(br["ports"]):
            p = ports.get(pu)
            if p is None:
                continue
            ofport = next((_int(ifaces[i]["ofport"]) for i in _uuids(p["interfaces"]) if i in ifaces), None)
            if not ofport or ofport < 1:
                continue
            qu = _uuids(p["qos"])
            q = qos.get(qu[0]) if qu else None
            spec, owned = None, ()
            if q is not None:
                qmap = {int(k): v[1] for k, v in _map(q["queues"]).items()}
                if "freeway" in _map(q["external_ids"]) and users.get(qu[0]) == 1:
                    owned = (qu[0], *qmap.values())
                if q["type"] == "linux-htb":
                    specs = []
                    for n, u in sorted(qmap.items()):
                        oc = _map(queues[u]["other_config"]) if u in queues else {}
                        specs.append((n, QueueSpec(_int(oc.get("min-rate")) or 0, _int(oc.get("max-rate")) or 0,
                                                   _int(oc.get("priority")) or 0)))
                    spec = PortQos(_int(_map(q["other_config"]).get("max-rate")) or 0, tuple(specs))
            out[(sw.name, ofport)] = Held(pu, p["name"], qu[0] if qu else None, spec, owned)
    return out


def plan(want: dict[tuple[str, int], PortQos], have: dict[tuple[str, int], Held]) -> list[tuple[tuple[str, int], str]]:
    """The ports to repair, each with what is wrong (a port the database does not have is not judged:
    a switch on another host, or a missing port, which the link check reports)."""
    out = []
    for key, w in sorted(want.items()):
        h = have.get(key)
        if h is None:
            continue
        if h.qos_uuid is None:
            out.append((key, "no QoS record"))
        elif h.qos is None:
            out.append((key, "a QoS record that is not linux-htb"))
        elif h.qos != w:
            out.append((key, _difference(w, h.qos)))
    return out


def _difference(w: PortQos, h: PortQos) -> str:
    if h.max_rate != w.max_rate:
        return f"max-rate {h.max_rate}, want {w.max_rate}"
    hq, wq = dict(h.queues), dict(w.queues)
    for n, spec in wq.items():
        if n not in hq:
            return f"queue {n} missing"
        if hq[n] != spec:
            return f"queue {n} is {hq[n]}, want {spec}"
    return f"extra queues {sorted(set(hq) - set(wq))}"


def repair_args(want: dict[tuple[str, int], PortQos], have: dict[tuple[str, int], Held],
                ports: list[tuple[str, int]]) -> list[str]:
    """One ovs-vsctl transaction: for each port, a new QoS with its queues, and our old records gone."""
    args: list[str] = []
    for n, key in enumerate(ports):
        h, w = have.get(key), want[key]
        if h is None:
            continue
        args += ["--", "set", "port", h.port_uuid, f"qos=@q{n}",
                 "--", f"--id=@q{n}", "create", "qos", "type=linux-htb", f"other-config:max-rate={w.max_rate}", TAG,
                 *[f"queues:{i}=@q{n}_{i}" for i, _ in w.queues]]
        for i, spec in w.queues:
            args += ["--", f"--id=@q{n}_{i}", "create", "queue", f"other-config:min-rate={spec.min_rate}",
                     f"other-config:max-rate={spec.max_rate}", f"other-config:priority={spec.priority}", TAG]
        for u in h.owned:
            args += ["--", "--if-exists", "destroy", "qos" if u == h.qos_uuid else "queue", u]
    return args[1:]


# ----- talking to a database (the only impure part) -------------------------------------------
def read(db: str | None, timeout: float = 10) -> dict[str, dict]:
    return ovsdb.read(db, TABLES, timeout)


def keep(fabric: Fabric, cfg: IsolationConfig, dbs: list[str | None], timeout: float = 10,
         only: set[str] | None = None) -> tuple[list[tuple[tuple[str, int], str]], list[str], set]:
    """Check the queues of every switch (of ``only``, if given: those connected) in every database and
    repair what is wrong. Returns (each port set right, with a line such as 'e0_0 port 3 (e0_0-eth3):
    queue 1 missing'; what could not be done: a database away, a repair refused, switches no database
    holds; and every port found). One database's failure does not stop the others; a refused
    transaction is retried port by port."""
    want = {key: w for key, w in desired(fabric, cfg).items() if only is None or key[0] in only}
    done, errors, seen = [], [], set()
    for db in dbs:
        where = db or "the local OVSDB"
        try:
            have = held(fabric, read(db, timeout))
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            errors.append(f"{where}: {e}")
            continue
        seen |= set(have) & set(want)
        wrong = plan(want, have)
        base = ["ovs-vsctl", f"--timeout={int(timeout)}"] + ([f"--db={db}"] if db else [])
        batches = [wrong] if wrong else []
        while batches:
            batch = batches.pop()
            r = subprocess.run([*base, *repair_args(want, have, [key for key, _ in batch])], capture_output=True,
                               text=True, timeout=timeout + 30)
            if r.returncode == 0:
                done += [((sw, port), f"{sw} port {port} ({have[(sw, port)].port_name}): {why}")
                         for (sw, port), why in batch]
            elif len(batch) > 1:
                batches += [[item] for item in batch]
            else:
                errors.append(f"{where}: repairing {batch[0][0][0]} port {batch[0][0][1]}: {r.stderr.strip()}")
    lost = sorted({sw for sw, _ in want} - {sw for sw, _ in seen})
    if lost and not errors:
        errors.append(f"no OVSDB holds switch{'es' if len(lost) > 1 else ''} {', '.join(lost[:5])}"
                      + (f" and {len(lost) - 5} more" if len(lost) > 5 else "") + " (give every switch host in --ovsdb)")
    return done, errors, seen
