"""A workload as a list of flows, the same for every engine: generated, or read from a CSV (pure).

A flow: when it starts (seconds from the run's start), its source and destination hosts, its bytes, how
it is sent and whether it announces itself. ``kind`` ``rr`` is a request/response mouse as
``experiments/hosts/rr.py`` runs it (the source asks the destination for ``bytes``; its completion time is
measured at the source); ``bulk`` sends ``bytes`` from the source to the destination (``bytes`` 0: until
``stop``), its completion time measured when the destination has them all. ``announced`` flows send the
Freeway handshake first (in the Freeway mode; other modes take none).

The CSV (``--flows FILE``): a header line, then one flow per line, columns ``start_s,src,dst,bytes`` and
optionally ``announced`` (0/1, yes/no), ``kind`` (rr/bulk; by default ``rr`` below the mice boundary and
``bulk`` from it), ``stop_s``, ``sport``, ``dport`` and ``rate_mbps`` (a bulk flow paced by its sender). Hosts are the description's names. A bad line is refused with its
number and what is wrong; nothing runs.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

KINDS = ("rr", "bulk")
RR_PORT = 7100  # the request/response servers' port, on both engines
SINK_PORT = 6000  # bulk flows without a port of their own go to SINK_PORT + their index modulo 1000
MICE_BOUNDARY = 100_000  # bytes: a flow below this is a mouse in the results (the mixed scenario's boundary)


class FlowListError(ValueError):
    pass


@dataclass(frozen=True)
class Flow:
    start: float
    src: str
    dst: str
    bytes: int
    kind: str = "rr"
    announced: bool = False
    stop: float | None = None  # a bulk flow of 0 bytes sends until then
    sport: int = 0  # its source port (0: the host picks one; an announced flow's is picked to announce it)
    dscp: int = 0  # the DSCP the host marks it with itself (a DCB host's priority; 0: none)
    dport: int = 0  # a bulk flow's destination port (0: one of the engine's sink ports)
    rate_mbps: float = 0.0  # a bulk flow paced by its sender, as iperf3 -b (0: as fast as TCP goes)


def dport_of(n: int, f: Flow) -> int:
    """The destination port of flow ``n`` of a list: the servers' for a mouse, its own or a sink's for a
    bulk flow."""
    return RR_PORT if f.kind == "rr" else (f.dport or SINK_PORT + n % 1000)


def check(flows: list[Flow], hosts: set[str], label=lambda n: f"flow {n}") -> None:
    """Every flow's hosts exist and differ, sizes and times make sense (``label(n)`` names flow n)."""
    for n, f in enumerate(flows, 1):
        where = label(n)
        if f.src not in hosts or f.dst not in hosts:
            bad = f.src if f.src not in hosts else f.dst
            raise FlowListError(f"{where}: {bad!r} is not a host of the fabric")
        if f.src == f.dst:
            raise FlowListError(f"{where}: source and destination are both {f.src}")
        if f.start < 0 or f.bytes < 0:
            raise FlowListError(f"{where}: start and bytes must not be negative")
        if f.kind not in KINDS:
            raise FlowListError(f"{where}: kind must be one of {', '.join(KINDS)}, got {f.kind!r}")
        if f.kind == "rr" and f.bytes == 0:
            raise FlowListError(f"{where}: a request/response flow needs a size")
        if f.bytes == 0 and f.stop is None:
            raise FlowListError(f"{where}: a bulk flow without a size needs a stop time")
        if f.stop is not None and f.stop <= f.start:
            raise FlowListError(f"{where}: stop_s must be after start_s")
        if not (0 <= f.sport <= 65535 and 0 <= f.dport <= 65535) or f.rate_mbps < 0:
            raise FlowListError(f"{where}: ports must be 0..65535 and rate_mbps not negative")
        if f.kind == "rr" and (f.dport or f.rate_mbps):
            raise FlowListError(f"{where}: dport and rate_mbps are for bulk flows")


def _bool(text: str, where: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "yes", "true", "y"):
        return True
    if t in ("", "0", "no", "false", "n"):
        return False
    raise FlowListError(f"{where}: announced must be 0/1 or yes/no, got {text!r}")


def read_csv(path: str | Path, hosts: set[str], boundary: int = MICE_BOUNDARY) -> list[Flow]:
    try:
        fh = open(path, newline="")
    except OSError as e:
        raise FlowListError(f"{path}: cannot read: {e.strerror}") from None
    with fh:
        rows = list(csv.DictReader(fh))
    need = {"start_s", "src", "dst", "bytes"}
    if not rows or not need <= set(rows[0]):
        raise FlowListError(f"{path}: the header must name {', '.join(sorted(need))} (and optionally announced, "
                            "kind, stop_s)")
    out = []
    for n, row in enumerate(rows, 2):
        where = f"{path}: line {n}"
        try:
            start, size = float(row["start_s"]), int(float(row["bytes"]))
            stop = float(row["stop_s"]) if (row.get("stop_s") or "").strip() else None
            sport, dport = (int((row.get(c) or "0").strip() or 0) for c in ("sport", "dport"))
            rate = float((row.get("rate_mbps") or "0").strip() or 0)
        except (TypeError, ValueError):
            raise FlowListError(f"{where}: start_s, bytes, stop_s, sport, dport and rate_mbps must be numbers") \
                from None
        kind = (row.get("kind") or "").strip() or ("rr" if 0 < size < boundary else "bulk")
        out.append(Flow(start, (row["src"] or "").strip(), (row["dst"] or "").strip(), size, kind,
                        _bool(row.get("announced") or "", where), stop, sport, 0, dport, rate))
    check(out, hosts, lambda n: f"{path}: line {n + 1}")
    return out


def write_csv(path: str | Path, flows: list[Flow]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["start_s", "src", "dst", "bytes", "kind", "announced", "stop_s", "sport", "dport", "rate_mbps"])
        for f in flows:
            w.writerow([f"{f.start:.6f}", f.src, f.dst, f.bytes, f.kind, int(f.announced),
                        "" if f.stop is None else f"{f.stop:.6f}", f.sport or "", f.dport or "", f.rate_mbps or ""])


# ----- generators ---------------------------------------------------------------------------------
def from_mixed(wl, fabric, announce: bool, mice_offset: float = 2.0) -> list[Flow]:
    """The emulator's ``mixed`` workload (``runner.Workload``) as a flow list: its elephants from 0 for the
    whole duration, announced in the Freeway mode as ``freeway send`` announces them; its mice
    request/response flows ``mice_offset`` seconds after the elephants, as the emulator starts them."""
    by_ip = {h.ip: h.name for h in fabric.hosts}
    out = [Flow(0.0, s, d, 0, "bulk", announce, wl.duration) for s, d in wl.elephants]
    for client, sched in wl.mice.items():
        out += [Flow(mice_offset + off, client, by_ip[server], size, "rr") for off, server, size in sched]
    return sorted(out, key=lambda f: (f.start, f.src))


def group_of(fabric, switch: str):
    """A ToR's group: its pod in a fat-tree, the leaf itself in a leaf-spine."""
    return fabric.switches[switch].pod if fabric.topo == "fattree" else switch


def permutation(fabric, seed: int, duration: float, announce: bool = False) -> list[Flow]:
    """Every host sends one long flow for ``duration`` seconds to a host in another pod (fat-tree) or under
    another leaf (leaf-spine), and every host receives one: a random permutation with no flow inside a
    pod or leaf (seeded)."""
    group = {h.name: group_of(fabric, h.switch) for h in fabric.hosts}
    names = [h.name for h in fabric.hosts]
    if len(set(group.values())) < 2:
        raise FlowListError("a permutation needs at least two pods or leaves")
    rng = random.Random(seed)
    groups: dict = {}
    for n in names:
        groups.setdefault(group[n], []).append(n)
    order = list(groups.values())
    rng.shuffle(order)
    for g in order:
        rng.shuffle(g)
    ring = [n for g in order for n in g]  # hosts of a group side by side, groups and hosts in random order
    widest = max(len(g) for g in order)
    if 2 * widest > len(ring):
        raise FlowListError("no permutation across pods: one pod holds more than half the hosts")
    shift = rng.randint(widest, len(ring) - widest)  # never lands inside the sender's own group
    pairs = [(ring[i], ring[(i + shift) % len(ring)]) for i in range(len(ring))]
    pairs.sort(key=lambda p: names.index(p[0]))
    return [Flow(0.0, s, d, 0, "bulk", announce, duration) for s, d in pairs]


def mix(flows: list[Flow], boundary: int = MICE_BOUNDARY) -> dict:
    """How many flows and bytes are mice (below ``boundary``), as the papers describe a workload."""
    sized = [f for f in flows if f.bytes > 0]
    mice = [f for f in sized if f.bytes < boundary]
    total = sum(f.bytes for f in sized)
    return {"flows": len(flows), "mice": len(mice), "elephants": len(sized) - len(mice),
            "mice_share_of_flows": round(len(mice) / len(sized), 4) if sized else None,
            "mice_share_of_bytes": round(sum(f.bytes for f in mice) / total, 4) if total else None,
            "bytes": total, "boundary_bytes": boundary}
