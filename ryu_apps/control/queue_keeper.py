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

``QueueKeeper`` is when the controller looks (soon after a switch connects,
then every ``CHECK_S``; sooner again after an error) and what it says of
what it found: a port set the first time, a repair, an error.

The DSCP ``tc`` filters that make queues work on the userspace datapath
(where ``set_queue`` does not steer) cannot be set through OVSDB: the
fabric builder sets them, and for ports on the controller's own host (the
local OVSDB) the keeper adds those a fabric built without isolation lacks.
What a port must hold, and reading what it holds, is ``topology.queues``
(the builder checks it too).
"""

from __future__ import annotations

import logging
import subprocess
from collections import Counter

from topology import ovsdb
from topology.fabric import Fabric
from topology.queues import TAG, Held, IsolationConfig, PortQos, desired, held, read

LOG = logging.getLogger("freeway")
CHECK_S = 10.0  # how often every switch port's queues are checked (and repaired)
RETRY_S = 5.0  # ... and how soon again after an error (a database away)
FIRST_S = 0.5  # a switch's queues are checked this soon after it connects


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


# ----- the repair (the only impure part) ----------------------------------------------------------
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
        base = ovsdb.base_args(db, timeout)
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
        if db is None:  # the fabric's ports on this very host: their DSCP filters too (userspace datapath)
            done += _dscp_filters(cfg, {key: h for key, h in have.items() if key in want})
    lost = sorted({sw for sw, _ in want} - {sw for sw, _ in seen})
    if lost and not errors:
        errors.append(f"no OVSDB holds switch{'es' if len(lost) > 1 else ''} {', '.join(lost[:5])}"
                      + (f" and {len(lost) - 5} more" if len(lost) > 5 else "") + " (give every switch host in --ovsdb)")
    return done, errors, seen


def _filtered(dev: str, cfg: IsolationConfig) -> bool:
    """Whether ``dev`` has the tc filters that map both DSCPs to their HTB classes."""
    r = subprocess.run(["tc", "filter", "show", "dev", dev, "parent", "1:"], capture_output=True, text=True,
                       timeout=10)
    return all(f"{dscp << 2:02x}0000/00fc0000" in r.stdout for dscp in (cfg.mice_dscp, cfg.elephant_dscp))


def _dscp_filters(cfg: IsolationConfig, have: dict) -> list[tuple[tuple[str, int], str]]:
    """On the userspace datapath ``set_queue`` steers nothing: a port's packets reach their HTB class only
    through tc filters on their DSCP, which OVSDB cannot hold. A fabric built without isolation has none
    (the README's recipe once started the controller with isolation on and the fabric without, and
    isolation did nothing): every port of this host that lacks them gets them, as the builder sets them."""
    import os

    from topology.queues import tc_commands

    out = []
    for key, h in sorted(have.items()):
        dev = h.port_name
        if not dev or not os.path.exists(f"/sys/class/net/{dev}") or _filtered(dev, cfg):
            continue
        try:
            mtu = int(open(f"/sys/class/net/{dev}/mtu").read())
        except (OSError, ValueError):
            mtu = 1500
        for cmd in tc_commands(dev, cfg, max(1500, min(mtu, 9000))):
            subprocess.run(cmd, capture_output=True, timeout=10)
        if _filtered(dev, cfg):
            out.append((key, f"{key[0]} port {key[1]} ({dev}): DSCP filters added (isolation on, the fabric "
                             "built without its filters)"))
    return out


class QueueKeeper:
    """When the queues are checked, and what the checks found (pure: ``now`` in, decision records out).
    ``keep`` does the checking; the app runs it in a thread when ``due``."""

    def __init__(self):
        self._due = float("inf")  # when the queues are next checked (from the first connect)
        self._set: set = set()  # ports whose queues this controller has set (a later fix is a repair)
        self.state: dict = {"checked": None, "repaired": 0, "error": None}
        self.counters: Counter[str] = Counter()

    def connected(self, now: float) -> None:
        """A switch connected: its queues are looked at soon."""
        self._due = min(self._due, now + FIRST_S)

    def due(self, now: float) -> bool:
        """Whether a check starts now (the next one is then ``CHECK_S`` away)."""
        if now < self._due:
            return False
        self._due = now + CHECK_S
        return True

    def checked(self, now: float, wall: float, done: list, errors: list[str] = (), seen: set = frozenset()) -> list[dict]:
        """Ports whose queues were set right: a port that never had any, the first time, counted; any
        other (changed, or missing since it had them), a repair, logged and recorded. What could not be
        checked or repaired: logged, counted, shown in the status (``wall``: when), and looked at again soon."""
        first = [key for key, line in done if key not in self._set and line.endswith("no QoS record")]
        repaired = [line for key, line in done if key not in first]
        self._set.update(seen)
        self.state.update(checked=wall, error="; ".join(errors) or None,
                          repaired=self.state["repaired"] + len(repaired))
        if first:
            LOG.info("queues: set on %d ports (%d in all)", len(first), len(self._set))
        for e in errors:
            self.counters["queue-check-failed"] += 1
            LOG.error("queues: %s", e)
        if errors:
            self._due = now + RETRY_S
        out = []
        for line in repaired:
            LOG.warning("queues: repaired %s", line)
            self.counters["queue-repairs"] += 1
            out.append({"type": "queues", "repaired": line})
        return out
