"""One policy object per mode, all with the same interface; the app only turns events into calls.

Every method takes plain values (switch names, ports, frames, ``now``, the
monitoring ``View``) and returns a ``Reaction``: intents to send per switch,
confirmed transactions (``txn.Txn``) and events for the events file. Nothing
here touches a datapath, a socket or the clock.

- ``Policy``: ECMP (prefix routes down, a select group up), proxy ARP, and
  isolation when configured (ToR classification, marks on detected
  elephants). Every mode below builds on it.
- ``HederaPolicy``: per-flow edge entries, polled for Global First Fit.
- ``EFMPolicy``: elephants off links above the threshold (``Rerouter``).
- ``FreewayPolicy``: the partition, mice groups, the handshake and Bin-Pack
  (``FreewayState``); EFM serves the elephants that did not announce.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from monitoring.sflow import FiveTuple
from monitoring.view import View
from ryu_apps.openflow import pipeline, reconcile
from ryu_apps.openflow.intents import ArpReplyOut, DeleteFlows, Flow
from ryu_apps.openflow.txn import Txn
from ryu_apps.programs import arp, forwarding, pins
from ryu_apps.programs.isolation import mark_detected, tor_program
from ryu_apps.programs.pins import flow_match, tuple_of
from topology.fabric import Fabric
from topology.paths import Reachability, path_links, tor_paths, tors_below
from topology.queues import IsolationConfig

LOG = logging.getLogger("freeway")
Ops = list[tuple[str, list]]
STALE_S = 5.0  # a link measured longer ago than this is stale: no placement chooses it
STALE_INTERVALS = 2.5  # ... or than this many of the agents' counter intervals, when they poll less often
MARK_GRACE_S = 10.0  # a mark read back after a restart goes unless monitoring reports its elephant by then
SETTLE_S = 2.0  # a read-back is over when no switch has been read back for this long
PRIO_MARK = pipeline.prio("elephant-mark")


@dataclass
class Reaction:
    """What a policy wants done: ``ops`` sent now in order, ``txns`` installed and confirmed, ``events``
    written to the events file."""

    ops: Ops = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    def __iadd__(self, other: Reaction | None) -> Reaction:
        if other is not None:
            self.ops += other.ops
            self.txns += other.txns
            self.events += other.events
        return self

    def __bool__(self) -> bool:
        return bool(self.ops or self.txns or self.events)


NOTHING = Reaction


@dataclass(frozen=True)
class Placed:
    """An elephant a mode placed, as the operator is shown it (``Policy.placements``): its id, how it was
    placed (announced, adopted, efm, hedera), its 5-tuples, allocation, paths, meter and cookie."""

    id: str
    how: str
    flows: tuple[FiveTuple, ...]
    allocation_bps: float | None
    rateless: bool
    paths: tuple[tuple[str, ...], ...]
    meter: int | None = None
    cookie: int | None = None
    since: float | None = None  # when it was placed (monotonic), if the mode keeps it


class Policy:
    """ECMP forwarding with proxy ARP; isolation composes with it and with every mode below."""

    mode = "ecmp"
    periodic = False  # whether on_period does anything
    owned = (pipeline.DETECTED,)  # cookie spaces this mode places entries in (kept across a restart)
    takes_announces = False  # whether hosts (and the API) may announce elephants to this mode
    refusing = ""  # why new announces are refused now ('' = they are not): a cluster's store is away

    def __init__(self, fabric: Fabric, iso: IsolationConfig | None = None):
        self.fabric = fabric
        self.iso = iso
        self.counters: Counter[str] = Counter()
        self.services: dict[str, str] = {}  # extra addresses proxy ARP answers for
        self.marks: dict[FiveTuple, tuple[str, Flow]] = {}  # detected elephant -> (ingress ToR, its mark)
        self.unconfirmed: dict[FiveTuple, float] = {}  # marks read back, not yet reported by monitoring: since
        self._ids = 1
        self.dead: frozenset = frozenset()  # links down (the liveness model's), both directions
        self.stale: frozenset = frozenset()  # links whose measurement is older than STALE_S
        self.view = View(0.0)  # the latest monitoring view
        self._reach: Reachability | None = None
        self._below = tors_below(fabric)  # fixed by the description: each liveness model's Reachability shares it
        self._prefixes = forwarding.tor_prefixes(fabric)
        self.punt = (forwarding.PUNT_PPS, forwarding.PUNT_BURST)  # each host port's punt meter
        self._recovered_with_dead = False  # placements read back while links were dead: check them
        self._recovered_at = -1e9  # the latest read-back

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def hot_threshold(self) -> float | None:
        """The link occupancy over which this mode wants an early round (``on_hot``); None: no such."""
        return None

    def on_hot(self, now: float, view: View) -> Reaction:
        """An early round: a link went over ``hot_threshold`` since the last period."""
        return NOTHING()

    def reconfigure(self, cfg) -> None:
        """A reloaded configuration: take its live settings (``config.live_settings``); the others do
        not change while the controller runs."""

    # ----- what a switch holds ---------------------------------------------------------
    def program(self, switch: str) -> list:
        """Everything a (re)connecting switch should hold: groups, meters and flows."""
        return self.static_program(switch) + self.dynamic_program(switch)

    def static_program(self, switch: str) -> list:
        """What a switch holds whatever the traffic: base forwarding around dead links, the mode's fixed
        entries, and isolation's classification at a ToR."""
        intents = self.switch_program(switch) + forwarding.lldp_program(self.fabric, switch)
        if not self.fabric.switches[switch].is_tor:
            return intents
        flows = forwarding.tor_tables(self.fabric, switch, [i for i in intents if isinstance(i, Flow)])
        intents = [i for i in intents if not isinstance(i, Flow)]
        if self.iso is not None:
            classify, meters = tor_program(self.fabric, switch, self.iso)
            intents += meters
            flows += classify
        return intents + flows

    def switch_program(self, switch: str) -> list:
        groups, flows = forwarding.base_program(self.fabric, switch, self.dead, self.reach(), self._prefixes)
        return [*forwarding.punt_meters(self.fabric, switch, *self.punt), *groups, *flows]

    def dynamic_program(self, switch: str) -> list:
        """What traffic put on a switch (placed elephants, marks): it stays across a reconnect."""
        return [f for sw, f in self.marks.values() if sw == switch]

    def recover(self, now: float, switch: str, flows, meters, groups=()) -> None:
        """After a restart (or a reconnect): rebuild what the mode placed from what a switch holds
        (cookies say whose). Here: isolation's marks on detected elephants; a mark whose elephant
        monitoring does not report within ``MARK_GRACE_S`` goes (it ended while nobody watched)."""
        self._recovered_with_dead |= bool(self.dead)
        self._recovered_at = now
        for f in flows:
            ft = tuple_of(f.match)
            if (f.priority != PRIO_MARK or pipeline.owner_of(f.cookie) is not pipeline.DETECTED or ft is None
                    or FiveTuple(*ft) in self.marks):
                continue
            self.marks[FiveTuple(*ft)] = (switch, f)
            self.unconfirmed[FiveTuple(*ft)] = now
            self.seen_id(f.cookie & 0xFFFFFFFFFFFF)
            self.counters["marks-recovered"] += 1

    def settled(self, now: float) -> bool:
        """Whether the switches' read-back is over (none for ``SETTLE_S``), so that what it rebuilt can
        be moved: a move before would fail on a switch that has not connected yet."""
        return now - self._recovered_at >= SETTLE_S

    def seen_id(self, ident: int) -> None:
        """An id read back from a switch: new ones are above it."""
        self._ids = max(self._ids, ident)

    def reach(self) -> Reachability:
        if self._reach is None:
            self._reach = Reachability(self.fabric, lambda ln: ln not in self.dead, self._below)
        return self._reach

    def unusable(self) -> frozenset:
        """Links no placement may choose: dead, or measured too long ago."""
        return self.dead | self.stale

    def live_paths(self, src: str, dst: str) -> list:
        """Paths with no dead or stale link (EFM's candidates)."""
        bad = self.unusable()
        return [p for p in tor_paths(self.fabric, src, dst) if not any(ln in bad for ln in path_links(p))]

    def observe(self, view: View) -> Reaction:
        """Every period: keep the view and which links are stale; marks read back after a restart whose
        elephant monitoring has not reported within ``MARK_GRACE_S`` go; placements read back while
        links were dead (a link that died during a restart's read-back) are moved off them."""
        self.view = view
        self.stale = view.stale(max(STALE_S, STALE_INTERVALS * (view.counter_interval_s or 0.0)))
        out = Reaction()
        if self._recovered_with_dead and self.settled(view.now):
            self._recovered_with_dead = False  # a placement read back after its link died moves as if it just died
            out += self.after_links(view.now, self.dead)
        for ft, since in list(self.unconfirmed.items()):
            r = view.flows.get(ft)
            if r is not None and r.elephant:
                del self.unconfirmed[ft]
            elif view.now - since > MARK_GRACE_S:
                del self.unconfirmed[ft]
                sw, mark = self.marks.pop(ft)
                out.ops.append((sw, [DeleteFlows(mark.cookie)]))
        return out

    # ----- failures ---------------------------------------------------------------------
    def on_links(self, now: float, dead) -> Reaction:
        """The liveness model changed: the base program of every switch whose dead uplinks or detours
        moved (``forwarding.dead_key``) is recomputed around the dead links and only the difference is
        sent; then the mode moves what crossed them (``after_links``). A mode whose own fixed entries
        followed the dead links would have to widen that key."""
        dead = frozenset(dead)
        if dead == self.dead:
            return NOTHING()
        reach = Reachability(self.fabric, lambda ln: ln not in dead, self._below)
        moved = [sw for sw in self.fabric.switches if forwarding.dead_key(self.fabric, sw, self.dead, self.reach())
                 != forwarding.dead_key(self.fabric, sw, dead, reach)]
        before = {sw: self.static_program(sw) for sw in moved}
        went_down = dead - self.dead
        self.dead, self._reach = dead, reach
        out = Reaction()
        for sw in moved:
            ops = reconcile.diff(before[sw], self.static_program(sw))
            if ops:
                out.ops.append((sw, ops))
        self.counters["link-changes"] += 1
        out.events.append({"type": "liveness", "dead": sorted("%s>%s" % ln for ln in dead)})
        out += self.after_links(now, went_down)
        return out

    def after_links(self, now: float, went_down: frozenset) -> Reaction:
        return NOTHING()

    # ----- events ---------------------------------------------------------------------
    def on_switch(self, switch: str, up: bool) -> Reaction:
        return NOTHING()

    def on_packet(self, now: float, switch: str, port: int, data: bytes) -> Reaction:
        fields = arp.decode(data)
        if fields is None:
            return self.on_other_packet(now, switch, port, data)
        reply, reason = arp.answer(self.fabric, switch, port, *fields, services=self.services)
        self.counters[f"arp-{reason}"] += 1
        if reply is None:
            return NOTHING()
        return Reaction([(switch, [ArpReplyOut(reply.out_port, reply.requester_mac, reply.requester_ip,
                                               reply.target_mac, reply.target_ip)])])

    def on_other_packet(self, now: float, switch: str, port: int, data: bytes) -> Reaction:
        self.counters["packet-in-dropped"] += 1
        return NOTHING()

    def on_period(self, now: float, view: View) -> Reaction:
        return self.observe(view)

    def period_parts(self, now: float, view: View):
        """The period as Reactions to carry out one after the other, the loop free between them (a mode
        whose period is long splits it); together they are ``on_period``."""
        yield self.on_period(now, view)

    def on_flow_removed(self, now: float, switch: str, cookie: int) -> Reaction:
        return NOTHING()

    def on_flow_stats(self, now: float, switch: str, entries: list, more: bool) -> Reaction:
        self.counters["stats-late-or-unknown"] += 1
        return NOTHING()

    def on_elephant_start(self, now: float, start) -> Reaction:
        """A detected elephant: with isolation, marked at its ingress ToR (it keeps its path)."""
        f = start.flow
        self.unconfirmed.pop(f, None)
        if self.iso is None or f in self.marks or f.proto not in (6, 17) or not start.switch:
            return NOTHING()
        cookie = pins.cookie(pipeline.DETECTED, 1, self.next_id())
        entry = mark_detected(flow_match(f.src, f.dst, f.proto, f.sport, f.dport), start.port, self.iso, cookie)
        self.marks[f] = (start.switch, entry)
        return Reaction([(start.switch, [entry])])

    def on_elephant_end(self, now: float, end) -> Reaction:
        self.unconfirmed.pop(end.flow, None)
        mark = self.marks.pop(end.flow, None)
        return Reaction([(mark[0], [DeleteFlows(mark[1].cookie)])]) if mark is not None else NOTHING()


    # ----- what the operator and the cluster ask of every mode -----------------------------------
    def announce(self, now: float, host: str, payload: bytes, deliver) -> Reaction | None:
        """An announce made on behalf of ``host`` (the operator API). None: this mode takes none."""
        return None

    def withdraw(self, now: float, eid: int) -> Reaction | None:
        """An operator withdrew elephant ``eid``. None: this mode has no such elephant."""
        return None

    def placed_id(self, flow) -> str | None:
        """The id under which the elephant carrying ``flow`` is shown, if this mode placed one."""
        return None

    def placements(self) -> list[Placed]:
        """Every elephant this mode placed, in the order the operator is shown them."""
        return []

    def is_marked(self, flow: FiveTuple) -> bool:
        """Whether a detected elephant carries isolation's mark."""
        return flow in self.marks

    def link_class(self, link) -> str:
        """A live switch link's class in this mode: 'shared' where the mode has no partition."""
        return "shared"

    def link_counter(self, link) -> int | None:
        """Freeway's counter of a link (None: no partition in this mode)."""
        return None

    def partition(self):
        """(the partition, the seconds a pair stays active after its last mice sample), or None."""
        return None

    def take_records(self, records: dict[int, dict]) -> None:
        """What a cluster's store kept for this mode (the leader read it back at a take-over)."""

    def records(self, now: float) -> tuple[dict[int, dict], set[int]] | None:
        """What a cluster's store should hold for this mode now, and the ids whose install is still
        unconfirmed (neither written nor deleted yet); None while a read-back is rebuilding them."""
        return {}, set()

    def snapshot(self) -> dict:
        """The mode's state for the events file (and, later, the operator API); counters are separate."""
        return {}

    def table_sizes(self) -> dict[str, int]:
        """How many entries each of the mode's per-flow tables holds (they must stay at the size of
        what is live: ``freeway bench state``)."""
        return {"marks": len(self.marks), "marks_unconfirmed": len(self.unconfirmed)}


def flow_dict(f) -> dict:
    """A 5-tuple (a ``FiveTuple`` or a handshake ``Subflow``) as the API and the decision records show it."""
    return {"src": f.src, "dst": f.dst, "proto": f.proto, "sport": f.sport, "dport": f.dport}
