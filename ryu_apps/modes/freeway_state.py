"""Freeway mode as pure logic: partition, mice groups, handshake placement, elephant entries.

The app feeds it switch connections, handshake datagrams, flow-removed
messages, link loads and ``now``; it returns intents per switch (and, for a
handshake, the answer to send once the switches have confirmed the entries).
Nothing here touches a datapath, a socket or the clock.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, fields
from itertools import repeat

from ryu_apps.algorithms.binpack import Allocations, NoRoom, Placement, bin_pack, links, split
from ryu_apps.algorithms.maxmin import max_min
from ryu_apps.algorithms.partition import Partition, PartitionConfig, SparseLoads, StepResult
from ryu_apps.host import handshake as hs
from ryu_apps.modes.placed import PlacedRates
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import (
    Bucket,
    DeleteFlows,
    Flow,
    Group,
    Meter,
    MeterModify,
    Output,
    ToController,
    ToGroup,
    match,
)
from ryu_apps.programs.forwarding import ETH_IPV4, base_program, pod_prefixes, punt_meters, tor_prefixes
from ryu_apps.programs.mice_table import DST_BITS, Key, MiceTable, Pods, buckets_moved
from ryu_apps.programs.pins import PRIO_ELEPHANT, HeldPins, path_entries
from topology.fabric import Fabric, Host
from topology.paths import Path, tors_below
from topology.settings import SettingError, setting

PRIO_MICE = pipeline.prio("mice")  # above ECMP, below downward prefixes
PRIO_MICE_POD = pipeline.prio("mice-pod")  # a pod's prefix, below its ToRs' own mice entries
PRIO_SERVICE_DROP = pipeline.prio("service-drop")
PRIO_HANDSHAKE = pipeline.prio("handshake")
Link = tuple[str, str]
__all__ = ["PRIO_ELEPHANT", "FreewayState", "FreewayConfig", "FreewayConfigError", "HandshakeOutcome", "active_pairs"]


FreewayConfigError = SettingError  # an invalid Freeway setting; the message names the key
LEND_MODES = ("idle", "off")
MICE_PREFIX_MODES = ("pod", "tor")


@dataclass(frozen=True)
class FreewayConfig(PartitionConfig):
    """The partition's settings and Freeway's own."""

    punt_pps: int = setting(200, "packets per second one host may send to the controller (handshakes and ARP, "
                            "through its port's punt meter)", "packets/s", min=1)
    punt_burst: int = setting(50, "burst of each host port's punt meter", "packets", min=1)
    elephant_idle_s: int = setting(2, "an elephant's entries expire after this long without packets, and its "
                                   "allocation is released (a finished 1 MB flow held its share 10 s, when this "
                                   "was 10: new elephants were placed around phantoms)", "s", min=1, live=True)
    headroom: float = setting(1.0, "a path has room while its maximum utilisation with the flow stays at or "
                              "below this", positive=True, live=True)
    active_s: float = setting(3.0, "a ToR pair is active (evaluated each period) this long after its last mice "
                              "sample", "s", live=True)
    mice_weight_step: int = setting(3, "rewrite a mice group when a bucket's weight (1..10) moved by this much "
                                    "(1: always)", min=1, max=10, live=True)
    host_elephants: int = setting(64, "announced elephants one host may have placed at once (more: NACK; a SWIM "
                                  "shuffle has a server send to up to 16 reducers for each of 4 map tasks)",
                                  min=1, live=True)
    host_share: float = setting(1.0, "total allocation of one host's announced elephants, as a fraction of its "
                                "link (more: NACK; a rate-less announce gets at most what is left)", positive=True, live=True)

    host_changes_per_s: float = setting(20.0, "announces one host may make a second that place or replace an "
                                        "elephant (a burst of as many; more: NACK): each reinstalls a path, a "
                                        "meter and a barrier, and in a cluster writes to etcd", "announces/s",
                                        positive=True, live=True)
    decay_after_s: float = setting(5.0, "an elephant announced with a rate that sends less than half of it for this "
                                   "long (or is not sampled at all) is held to what it sends plus a quarter, never "
                                   "under the elephant threshold, and grows back up to what it asked when it sends "
                                   "at that: a host cannot squat capacity it does not use (0: never)", "s",
                                   live=True)
    when_full: str = setting("overbook", "a rate-less announce that finds no high-throughput path with its floor "
                             "free, or its host's budget (host_share) spent: overbook (placed all the same on the "
                             "best high-throughput path, its floor what the budget has left: it shares by TCP in "
                             "the elephant band) or nack (refused: the host sends it unannounced, with the mice)",
                             choices=("overbook", "nack"), live=True)
    lend: str = setting("idle", "elephants may use low-latency links that mice leave idle: idle (lend a LOL link "
                        "while its mice load is below lend_below, take it back above reclaim_above) or off (the "
                        "paper: elephants only on high-throughput paths)", choices=LEND_MODES, live=True)
    lend_below: float = setting(0.05, "a low-latency link is lent to elephants while its mice load is below this "
                                "(half the partition's idle level, lol_low)", max=1, live=True)
    reclaim_above: float = setting(0.1, "... and taken back (its elephants moved to high-throughput paths, "
                                   "confirmed) once its mice load is above this (the idle level)", positive=True,
                                   max=1, live=True)
    lend_isolated: float = setting(0.5, "with isolation (mice in a queue of their own, served first, with a buffer "
                                   "of their own), a low-latency link is lent while its mice load is below this "
                                   "instead of lend_below, and taken back above it plus (reclaim_above - "
                                   "lend_below): mice lose no priority to a lent elephant, only idle capacity is "
                                   "taken (0: lend_below and reclaim_above, as without isolation)", max=0.9,
                                   live=True)
    mice_prefixes: str = setting("pod", "mice entries at a switch: pod (one entry for a pod's prefix where most "
                                 "destination ToRs of the pod the switch sends mice to share a group and path "
                                 "count, one per ToR that differs: a k=48 ToR holds 48 instead of 1,151 "
                                 "while its pairs keep the fixed path count) or tor (one per destination ToR, always)", choices=MICE_PREFIX_MODES)
    lend_hold_s: float = setting(10.0, "a link taken back from elephants is not lent again for this long", "s",
                                 live=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.lend_below < self.reclaim_above:
            raise SettingError(f"lend_below: must be below reclaim_above ({self.reclaim_above:g}) so that a link "
                               f"lent is not taken back at once, got {self.lend_below:g}")

    def partition_config(self) -> PartitionConfig:
        return PartitionConfig(**{f.name: getattr(self, f.name) for f in fields(PartitionConfig)})


@dataclass
class Elephant:
    eid: int
    gen: int
    src: Host
    dst: Host
    nonce: int
    size: int
    rate_bps: float
    subflows: tuple[hs.Subflow, ...]
    placements: list[Placement]
    since: float
    adopted: bool = False  # found by monitoring, never announced: its allocation follows its measured rate
    rateless: bool = False  # announced without a rate: a max-min fair share of what explicit rates leave
    moved_at: float = -1e9  # when it was last moved off a hot link
    floor_bps: float = -1.0  # a rate-less subflow's floor (-1: 10% of its host's link; less when overbooked)
    asked_bps: float = 0.0  # what an explicit announce asked (its reservation decays below it: ``follow_demand``)
    low_since: float | None = None  # since when it has sent less than half its reservation

    @property
    def cookie(self) -> int:
        return cookie_of(self.eid, self.gen | (ADOPTED_BIT if self.adopted else 0)
                         | (RATELESS_BIT if self.rateless else 0))


class Elephants(dict):
    """The placed elephants by id, also indexed by source host and kept apart when rate-less, so that
    an announce looks only at its own host's elephants and the rate-less ones, not at every elephant
    placed (an elephant's source and kind never change once it is in)."""

    def __init__(self, charge=lambda el: el.rate_bps):
        super().__init__()
        self._by_host: dict[str, dict[int, Elephant]] = {}
        self._rateless: dict[int, Elephant] = {}
        self._charge = charge  # what an announced elephant counts against its host's budget
        self._charged: dict[int, float] = {}  # ... as counted when it came in
        self._host_use: dict[str, list] = {}  # host -> [announced elephants, their charges summed]

    def __setitem__(self, eid: int, el: Elephant) -> None:
        self._forget(eid)
        super().__setitem__(eid, el)
        self._by_host.setdefault(el.src.name, {})[eid] = el
        if el.rateless:
            self._rateless[eid] = el
        if not el.adopted:
            c = self._charged[eid] = self._charge(el)
            use = self._host_use.setdefault(el.src.name, [0, 0.0])
            use[0] += 1
            use[1] += c

    def __delitem__(self, eid: int) -> None:
        self._forget(eid)
        super().__delitem__(eid)

    def pop(self, eid: int, *default):
        self._forget(eid)
        return super().pop(eid, *default)

    def _forget(self, eid: int) -> None:
        old = self.get(eid)
        if old is not None:
            mine = self._by_host.get(old.src.name, {})
            mine.pop(eid, None)
            if not mine:
                self._by_host.pop(old.src.name, None)
            self._rateless.pop(eid, None)
            c = self._charged.pop(eid, None)
            if c is not None:
                use = self._host_use[old.src.name]
                use[0] -= 1
                use[1] = use[1] - c if use[0] else 0.0  # (no rounding residue once a host has none)

    def of_host(self, host: str):
        """The elephants whose source is ``host``."""
        return self._by_host.get(host, {}).values()

    def rateless(self):
        """The rate-less elephants."""
        return self._rateless.values()

    def host_use(self, host: str) -> tuple[int, float]:
        """(how many announced elephants ``host`` has placed, what they count against its budget). An
        announced elephant's charge does not change while it is placed: an explicit rate stays, a
        rate-less one counts at its floor (adopted ones are not counted)."""
        n, total = self._host_use.get(host, (0, 0.0))
        return n, total  # (a copy: the kept pair is mutable)

    # the index would go stale through these: not used on the table
    def update(self, *a, **kw):
        raise TypeError("Elephants: set items one by one")

    setdefault = popitem = clear = update




FRESH_S = 2.0  # a flow reading older than this is not a measurement of now
LEND_MARGIN = 0.1  # lending needs the HOL paths fuller than capacity, and the lent path better, by this much
GROW_AT = 0.8  # an adopted elephant measured at this fraction of its allocation or more grows
SHRINK_AT = 0.5  # ... below this fraction it shrinks
MOVE_WAIT_S = 10.0  # the longest the mice groups wait for elephant moves to report back
RECOVER_S = 10.0  # after a restart, the longest the partition waits for the ToRs to be read back
ENTRY_MEMO_MAX = 200_000  # mice entries kept built (cleared beyond)


def mice_cookie(tor_index: int, n_lol: int = 0) -> int:
    """Mice entries toward one destination ToR; at a source ToR they also carry the pair's number of
    low-latency paths (so that a restarted controller reads the partition back from the switches)."""
    return pipeline.cookie(pipeline.FREEWAY_MICE, (n_lol & 0xFFFF) << 32 | tor_index)


MICE_COOKIE_MASK = pipeline.cookie(pipeline.FREEWAY_MICE, 0xFFFFFFFF) | (0xFF << pipeline.OWNER_SHIFT)


def mice_fields(cookie: int) -> tuple[int, int]:
    """(destination ToR index, low-latency path count) of a mice entry's cookie (a pod's entry:
    ``POD_BIT`` | the pod's number)."""
    return cookie & 0xFFFFFFFF, (cookie >> 32) & 0xFFFF


POD_BIT = 1 << 31  # in a mice cookie's destination field: the entry is a pod's


def mice_pod_cookie(pod: int, n_lol: int = 0) -> int:
    """A pod's mice entry (``mice_cookie`` with ``POD_BIT`` and the pod's number for the ToR's index)."""
    return mice_cookie(POD_BIT | pod, n_lol)


ADOPTED_BIT = 0x8000  # in an elephant cookie's generation field: adopted (so a restart reads it back as such)
RATELESS_BIT = 0x4000  # ... announced without a rate
GEN_MASK = 0x3FFF


def cookie_of(eid: int, gen: int) -> int:
    return pipeline.cookie(pipeline.FREEWAY_ELEPHANT, (eid << 16) | (gen & 0xFFFF))


def eid_of(cookie: int) -> int | None:
    return (cookie >> 16) & 0xFFFFFFFFFF if pipeline.owner_of(cookie) is pipeline.FREEWAY_ELEPHANT else None


@dataclass
class HandshakeOutcome:
    """What to do with one handshake: install ``ops`` (egress side first), wait for the switches
    to confirm, then send ``reply`` (None: drop silently)."""

    reply: bytes | None = None
    ops: list[tuple[str, list]] = field(default_factory=list)
    verdict: str = ""  # ack | nack: reason | dropped: reason
    elephant: Elephant | None = None
    replaced: list[tuple[str, list]] = field(default_factory=list)  # sent after the install is confirmed (or
    # rolled back), before the reply: removes the elephants this one replaced, and modifies the meters of the
    # rate-less elephants whose share changed
    cause: str = ""  # for a nack or a drop, one word (``decisions.CAUSES``)


class FreewayState:
    def __init__(self, fabric: Fabric, cfg: FreewayConfig | None = None, iso=None):
        self.fabric = fabric
        self.cfg = cfg or FreewayConfig()
        self.iso = iso  # IsolationConfig: mark elephant entries, meter each elephant at its ingress
        self.no_meters: set[str] = set()  # switches that refused a meter: forward without
        self.partition = Partition(fabric, self.cfg.partition_config())
        self.alloc = Allocations()
        self.elephants = Elephants(lambda el: self._min_rate(el) * len(el.subflows) if el.rateless
                                   else el.rate_bps)
        self.pending: set[int] = set()  # announced elephants whose install is not confirmed yet
        self._changes: dict[str, tuple[float, float]] = {}  # host -> (tokens, when): its announces' bucket
        self.records: dict[int, dict] = {}  # what a cluster store kept of each announced elephant (``record``)
        self.by_subflow: dict[hs.Subflow, int] = {}
        self.link_util: dict[Link, float] = {}
        self.flows = {}  # the period's flow readings (five-tuple -> rate, links, elephant?, last seen): ``measure``
        self._mice_of: tuple | None = None  # (link_util, flows) the mice loads were computed from, and they
        self._placed = PlacedRates()  # the placed elephants' allocated rates per link, kept up to date
        self._elephant_extra: tuple[dict, dict] = ({}, {})  # what the latest ``_mice_loads`` found beyond them
        self.reclaimed: dict[Link, float] = {}  # LOL links taken back from elephants (or turned LOL), and when
        self.now = 0.0
        self.stale: frozenset[Link] = frozenset()  # links whose measurement is too old to place on
        self._held = HeldPins(fabric, lambda c: eid_of(c) is not None)  # after a restart: entries read back
        self._recover_until: float | None = None  # reading the partition back from the ToRs ends then at the latest
        self._recovery_open = False
        self._tors_read: set[str] = set()
        self.moves: list = []  # elephant moves off links that turned LOL, not yet handed out
        self.move_why: dict[int, str] = {}  # why each of those moves (elephant id -> reason)
        self.moving = 0  # of those, how many are not confirmed or rolled back yet
        self._moving_since = 0.0
        self._held_meters: dict[tuple[str, int], Meter] = {}
        self.mice: dict[str, MiceTable] = {}  # what each switch holds of the mice groups and entries
        self._up_port_peer: dict[str, dict[int, str]] = {}  # per switch, its up ports' neighbours
        self.counters: Counter[str] = Counter()
        self._next_eid = 1
        self._tors = fabric.tors()
        self._tor_index = {t: i for i, t in enumerate(self._tors)}
        self._hosts = {h.name: h for h in fabric.hosts}
        self._tor_match = tor_prefixes(fabric)
        self._group_of_j = [self.partition._group[t] for t in self._tors]  # per ToR index: its pod (leaf-spine: itself)
        self._pod_match = pod_prefixes(fabric) if self.cfg.mice_prefixes == "pod" else {}
        self._pod_js: dict[int, list[int]] = {}  # pod -> its ToRs' indices (pods with a prefix)
        for j, t in enumerate(self._tors):
            if fabric.switches[t].pod in self._pod_match:
                self._pod_js.setdefault(fabric.switches[t].pod, []).append(j)
        self._pods_at: dict[str, Pods | None] = {}  # per switch, the pods its mice entries may cover
        self._below = tors_below(fabric) if self._pod_js else {}
        self._entry_memo: dict[tuple, tuple[Flow, ...]] = {}  # (table, ToR index, gid, cookie) -> mice entries
        self._routes = None  # the mice next hops, kept up to date by ``mice_updates`` (None: compute afresh)
        self._up_links = [(s, n) for s in fabric.switches for n in fabric.up_neighbors(s)]
        self._wref: dict[Link, int] = {}  # per up link, the weight its switch's groups last followed (not 10)
        self._wref_arr = None  # the same, per up link in ``_up_links``' order (an array, built when first needed)
        self._up_pos = {ln: i for i, ln in enumerate(self._up_links)}
        self._up_in_loads = None  # each up link's position in the partition's loads array
        self._weights_seen: dict | None = None  # the measurements the weights were last checked against
        self._step_seen = 0  # the mice_weight_step the references were taken with
        self._recheck: set[str] = set()  # switches whose groups were written or read outside ``mice_updates``

    # ----- loads ----------------------------------------------------------------
    def load_bps(self, link: Link) -> float:
        measured = self.link_util.get(link, 0.0) * self.capacity_bps(link)
        return max(measured, self.alloc.link.get(link, 0.0))

    def capacity_bps(self, link: Link) -> float:
        return self.fabric.capacity_bps(link)

    def measure(self, now: float, link_util, flows=None) -> None:
        """The period's measurements: each link's load (fraction of capacity) and the flows sampled
        (``monitoring.view.FlowReading`` by five-tuple), from which the mice load of each link follows."""
        self.now, self.link_util, self.flows = now, link_util, flows if flows is not None else {}

    @property
    def mice_util(self) -> dict[Link, float]:
        """Per link, the mice load the partition steps on: with lending, ``mice_seen`` (a lent link's
        elephant is not mice asking for more paths); lending off, the measured load itself, as the paper
        has it (low-latency links carry no elephant)."""
        return self.link_util if self.cfg.lend == "off" else self._mice_loads()

    @property
    def mice_seen(self) -> dict[Link, float]:
        """Per link, the mice load lending (and, when lending, the partition) decides on: the lower of
        the measured load less the elephants' and the rates of the flows sampled on it that are not
        elephants (``_mice_loads``)."""
        return self._mice_loads()

    def _mice_loads(self) -> SparseLoads:
        """Each link's mice load, the lower of two estimates. (1) The measured load less the elephants'
        (``less_elephants``). (2) The rates of the flows not flagged elephants, summed over the links they
        were sampled on: only what mice send, but an elephant's first fraction of a second (before it is
        flagged) too. Lending takes the lower of the two: a link is lent only when both say its mice are
        idle, and taken back only when both say they came back. Only the links a mouse was sampled on are
        worked out (another has none seen), and the placed elephants' sums are kept from period to period
        (``PlacedRates``): the period's cost follows the flows sampled, not the elephants placed."""
        key = (self.link_util, self.flows)
        if self._mice_of is not None and self._mice_of[0][0] is key[0] and self._mice_of[0][1] is key[1]:
            return self._mice_of[1]
        placed = self._placed
        placed.sync(self.elephants)
        now, by_flow = self.now, placed.by_flow
        moved: dict[Link, float] = {}  # per link: what the placed subflows sampled lately send beyond their allocation
        other: dict[Link, float] = {}  # ... what flows flagged elephants that Freeway did not place send
        mice_bps: dict[Link, float] = {}
        for ft, r in self.flows.items():
            if now - r.last_seen >= FRESH_S:
                continue
            on = by_flow.get(ft)
            if on is not None:
                for lns, rate in on:
                    d = r.rate_bps - rate
                    for ln in lns:
                        moved[ln] = moved.get(ln, 0.0) + d
                continue
            into = other if r.elephant else mice_bps
            for ln in r.links:
                into[ln] = into.get(ln, 0.0) + r.rate_bps
        self._elephant_extra = (moved, other)
        cap, util, seen = self.capacity_bps, self.link_util, SparseLoads()  # (0 where no mouse was sampled)
        for ln, bps in mice_bps.items():
            u = self._less(ln) if ln in placed.bps or ln in other else util.get(ln)
            if u is not None:
                seen[ln] = max(0.0, min(u, bps / cap(ln)))
        self._mice_of = (key, seen)
        return seen

    def less_elephants(self, link: Link) -> float | None:
        """Estimate (1) of a link's mice load, of the latest measurement: its measured load less the
        elephants' (None when it has no measurement). An elephant Freeway placed counts on its placement's
        links at its measured rate (its allocation when not sampled lately), another flow flagged an
        elephant on the links it was sampled on. After an elephant moves, the smoothed load of the link it
        left still holds it for a few periods."""
        self._mice_loads()  # (the sums of the latest measurement: worked out once per measurement)
        return self._less(link)

    def _less(self, link: Link) -> float | None:
        u = self.link_util.get(link)
        if u is None:
            return None
        moved, other = self._elephant_extra
        bps = self._placed.bps.get(link, 0.0) + moved.get(link, 0.0) + other.get(link, 0.0)
        return max(0.0, u - bps / self.capacity_bps(link))

    def lending(self) -> bool:
        return self.cfg.lend != "off"

    def lendable(self, link: Link) -> bool:
        """A low-latency link an elephant may use now: mice leave it idle (their load below ``lend_below``)
        and it was not taken back from elephants within ``lend_hold_s``."""
        part = self.partition
        if not self.lending() or link in part.dead or not part.is_lol(link):
            return False
        if self.now - self.reclaimed.get(link, -1e18) < self.cfg.lend_hold_s:
            return False
        return self.mice_seen.get(link, 0.0) < self.lend_below()

    def lend_below(self) -> float:
        """Below this mice load a low-latency link may be lent (``lend_isolated`` with isolation)."""
        return self.cfg.lend_isolated if self.iso is not None and self.cfg.lend_isolated else self.cfg.lend_below

    def reclaim_above(self) -> float:
        """Above this mice load a lent link is taken back."""
        if self.iso is not None and self.cfg.lend_isolated:
            return min(1.0, self.cfg.lend_isolated + self.cfg.reclaim_above - self.cfg.lend_below)
        return self.cfg.reclaim_above

    def lent_links(self) -> list[Link]:
        """Low-latency links that carry elephant allocations now, sorted."""
        part = self.partition
        return sorted(ln for ln, bps in self.alloc.link.items() if bps > 0 and part.is_lol(ln))

    def open_link(self, link: Link) -> bool:
        """A link an elephant may be placed on: high-throughput, or low-latency and lendable."""
        return self.partition.is_hol(link) or self.lendable(link)

    def per_meter(self) -> float:
        """What an elephant's meter lets through per bit/s of its allocation (1 without isolation)."""
        return self.iso.meter_headroom if self.iso is not None else 1.0

    # ----- switch programs ----------------------------------------------------------
    def fresh_mice(self, switch: str, dsts=None) -> dict[str, tuple[Bucket, ...]]:
        """Per destination ToR (all, or ``dsts``), computed afresh: the buckets of the select group its
        mice follow, over this switch's LOL next hops in port order, weighted toward the less loaded
        links (weights 1..10, so small load changes change nothing)."""
        buckets_of = self._buckets_of(switch)
        return {dst: buckets_of(key) for dst, key in self._fresh_keys(switch, dsts).items()}

    def _fresh_keys(self, switch: str, dsts=None) -> dict[str, Key]:
        """Per destination ToR with a LOL next hop from ``switch``: its group's key (the ports, sorted)."""
        out, keys = {}, {}
        for dst in self._tors if dsts is None else dsts:
            hops = tuple(self.partition.mice_next_hops(switch, dst))
            if hops:
                key = keys.get(hops)
                if key is None:
                    key = keys[hops] = tuple(sorted(self.fabric.port_to(switch, n) for n in hops))
                out[dst] = key
        return out

    def _buckets_of(self, switch: str):
        """key -> a group's buckets now, at ``switch`` (each key's once per call of this)."""
        peers = self._up_port_peer.get(switch)
        if peers is None:
            peers = self._up_port_peer[switch] = {self.fabric.port_to(switch, n): n
                                                  for n in self.fabric.up_neighbors(switch)}
        weight, memo = self._weight, {}

        def buckets_of(key: Key) -> tuple[Bucket, ...]:
            got = memo.get(key)
            if got is None:  # (a port that is no up link, read back from a switch: its group is not wanted)
                got = memo[key] = tuple(Bucket((Output(p),), weight((switch, peers[p])) if p in peers else 1)
                                        for p in key)
            return got
        return buckets_of

    def _table(self, switch: str) -> MiceTable:
        t = self.mice.get(switch)
        if t is None:
            t = self.mice[switch] = MiceTable(pipeline.MICE_GROUPS.first, pipeline.MICE_GROUPS.last,
                                              pods=self._pods(switch))
        return t

    def _pods(self, switch: str) -> Pods | None:
        """The pods whose mice entries ``switch`` may hold as one (``mice_prefixes`` pod; a fat-tree):
        each pod's ToRs but those below the switch, which mice reach by the prefix routes."""
        if not self._pod_js:
            return None
        got = self._pods_at.get(switch)
        if got is None:
            below, tors = self._below[switch], self._tors
            got = self._pods_at[switch] = Pods({p: [j for j in js if tors[j] not in below]
                                                for p, js in self._pod_js.items()})
        return got

    def mice_dsts(self, switch: str, cookie: int) -> tuple[int, ...]:
        """The destination ToRs (indices) a mice entry of ``switch`` covers: its own, or a pod's that
        the switch may cover as one (an entry of a ToR of its own pod wins over the pod's)."""
        idx = mice_fields(cookie)[0]
        if not idx & POD_BIT:
            return (idx,)
        pods = self._pods(switch)
        return pods.members.get(idx & ~POD_BIT, ()) if pods is not None else ()

    def _pod_ops(self, switch: str):
        """(pod, gid, a member's cookie) -> the pod's entries; pod -> the op that removes them."""
        table = pipeline.table_for(PRIO_MICE_POD, self.fabric.switches[switch].is_tor)
        matches, memo = self._pod_match, self._entry_memo

        def entries(p: int, gid: int, cookie: int) -> tuple[Flow, ...]:
            cookie = (cookie & ~DST_BITS) | POD_BIT | p
            key = (table, -1 - p, gid, cookie)
            got = memo.get(key)
            if got is None:
                got = memo[key] = tuple(Flow(PRIO_MICE_POD, m, (ToGroup(gid),), table_id=table, cookie=cookie)
                                        for m in matches[p])
            return got

        def delete(p: int) -> DeleteFlows:
            return DeleteFlows(mice_pod_cookie(p), MICE_COOKIE_MASK)
        return entries, delete

    def _mice_entries(self, switch: str):
        """(destination index, gid, cookie) -> the entries sending mice for that ToR to the group, in the
        mice band's table."""
        table = pipeline.table_for(PRIO_MICE, self.fabric.switches[switch].is_tor)
        tors, matches, memo = self._tors, self._tor_match, self._entry_memo
        if len(memo) > ENTRY_MEMO_MAX:
            memo.clear()

        def entries(j: int, gid: int, cookie: int) -> tuple[Flow, ...]:
            # (the same entries recur at every switch: group ids are given out in the same order, and most
            # pairs have the same path count; a restart at k=48 builds 1.3 million of them)
            key = (table, j, gid, cookie)
            got = memo.get(key)
            if got is None:
                got = memo[key] = tuple(Flow(PRIO_MICE, m, (ToGroup(gid),), table_id=table, cookie=cookie)
                                        for m in matches[tors[j]])
            return got
        return entries

    @staticmethod
    def _mice_delete(j: int) -> DeleteFlows:
        return DeleteFlows(mice_cookie(j), MICE_COOKIE_MASK)

    def _weight(self, link: Link) -> int:
        """A mice bucket's weight on an up link: 10 idle, down to 1 at 90% busy or more."""
        return max(1, round(10 * (1 - min(0.9, self.link_util.get(link, 0.0)))))

    def switch_program(self, switch: str) -> tuple[list[Group], list[Flow], list]:
        """Freeway's part of what a switch holds, with no link down, in one table (for tests of the core
        alone: the policy places a ToR's entries in its tables, ``forwarding.tor_tables``)."""
        groups, flows = base_program(self.fabric, switch)
        dyn = self.dynamic_program(switch)
        groups += [i for i in dyn if isinstance(i, Group)]
        flows += [i for i in dyn if isinstance(i, Flow)]
        fixed = self.fixed_entries(switch)
        flows += [i for i in fixed if isinstance(i, Flow)]
        extra = punt_meters(self.fabric, switch, self.cfg.punt_pps, self.cfg.punt_burst) + [
            i for i in fixed + dyn if not isinstance(i, (Group, Flow))]
        return groups, flows, extra

    def fixed_entries(self, switch: str) -> list:
        """What Freeway adds to base forwarding whatever the traffic: at a ToR, each host's handshakes
        punted through its port's punt meter (``forwarding.punt_meters``), and a drop for anything else
        sent to the service address."""
        if not self.fabric.switches[switch].is_tor:
            return []
        return [Flow(PRIO_HANDSHAKE, match(eth_type=ETH_IPV4, ip_proto=17, ipv4_dst=hs.SERVICE_IP,
                                           udp_dst=hs.SERVICE_PORT, in_port=h.port), (ToController(),),
                     meter_id=pipeline.host_punt_meter(self.fabric.host_slot(h))) for h in self.fabric.hosts_on(switch)] + [
            Flow(PRIO_SERVICE_DROP, match(eth_type=ETH_IPV4, ipv4_dst=hs.SERVICE_IP))]

    def dynamic_program(self, switch: str) -> list:
        """What the traffic put on a switch: its mice groups and entries, and the placed elephants'
        meters and entries. The switch is (re)programmed with these: they are what it holds now."""
        out: list = []
        self._recheck.add(switch)  # its groups are written here: the next update looks at all of them
        held = self.mice.pop(switch, None)  # what it holds: a group is kept where one has the same next hops
        t = self.mice[switch] = MiceTable(pipeline.MICE_GROUPS.first, pipeline.MICE_GROUPS.last,
                                          avoid=held.groups if held is not None else (), pods=self._pods(switch))
        buckets_of, entries = self._buckets_of(switch), self._mice_entries(switch)
        for dst, key in self._fresh_keys(switch).items():
            j = self._tor_index[dst]
            gid = t.by_key.get(key)
            hid = held.gid_of.get(j) if self._recovery_open and held is not None else None
            if hid is not None and hid in held.groups:
                # the partition read back so far lacks the ToRs not read back yet: the destination keeps
                # the group it points at, whatever its next hops (the first full look moves it)
                gid = hid
                if gid not in t.groups:
                    t.hold(held.groups[gid])
                    out.append(held.groups[gid])
            elif gid is None:
                same = held.by_key.get(key) if held is not None else None  # a held group with these next hops
                g = held.groups[same] if same is not None else None
                if g is None:
                    g = Group(t.alloc(), buckets_of(key))
                elif not self._recovery_open and buckets_moved(g.buckets, buckets_of(key), self.cfg.mice_weight_step):
                    g = Group(same, buckets_of(key))  # (what it holds is kept if close enough, or while the
                t.hold(g)  # partition is still being read back)
                out.append(g)
                gid = g.group_id
            t.point(j, gid, self._mice_cookie(switch, dst))
        if self._recovery_open and held is not None:  # what the partition read back so far does not want
            for j, gid in sorted(held.gid_of.items()):  # yet: kept as held
                if j in t.gid_of or gid not in held.groups:
                    continue
                if gid not in t.groups:
                    t.hold(held.groups[gid])
                    out.append(held.groups[gid])
                t.point(j, gid, held.cookie[j])
        out += t.render_all(entries, self._pod_ops(switch)[0])
        for el in self.elephants.values():
            meter = self.meter_of(el)
            if meter is not None and el.src.switch == switch:
                out.append(meter)
            for pl, sub in zip(el.placements, el.subflows, strict=True):
                for sw, intent in self._entries(el, pl.path, sub):
                    if sw == switch:
                        out.append(intent)
        return out

    def _mice_cookie(self, switch: str, dst: str) -> int:
        pair = (switch, dst)
        n = self.partition.n_lol(pair) if self.fabric.switches[switch].is_tor and self.partition.is_partitioned(
            pair) else 0
        return mice_cookie(self._tor_index[dst], n)

    def mice_updates(self) -> dict[str, list]:
        """What the switches need for their mice groups to match the partition (``MiceTable.update``:
        one group per distinct set of low-latency next hops at each switch, modified in place when all
        its destinations move together, and each destination ToR's entries pointing at the group of its
        set; the entries go where a switch lost its last next hop toward a ToR).

        Only what may have changed is looked at: the (switch, ToR) whose next hops may differ since the
        last call (``MiceRoutes.changed``), the pairs whose path count changed, and the groups using an
        up link whose weight moved by ``mice_weight_step`` since that switch's groups last followed it,
        and every group of a switch programmed or read back outside these updates (once no read-back
        is open). The first call, and the first after the step changed, look at everything."""
        touched, pairs = self.partition.take_changes()
        recheck: dict[str, set[int]] = {}
        routed: dict[str, int] = {}  # switch -> ToRs (bits) whose next hops differ
        if self._routes is None or self._step_seen != self.cfg.mice_weight_step:
            self._routes = self.partition.mice_routes()
            self._step_seen = self.cfg.mice_weight_step
            dirty: dict = dict.fromkeys(self.fabric.switches)
            for ln in self._up_links:
                self._follow_weight(ln)
        else:
            routed = self._routes.changed(touched)
            dirty = {}
            for s, d in pairs:
                dirty.setdefault(s, set()).add(d)
            recheck = self._weight_moves()
            for sw in recheck:
                dirty.setdefault(sw, set())
            if not self._recovery_open:  # (while switches are read back, they are kept as held)
                for sw in self._recheck & set(self.fabric.switches):
                    dirty[sw] = None
                    for n in self._routes.up[sw]:
                        self._follow_weight((sw, n))
                self._recheck.clear()
        out: dict[str, list] = {}
        for sw in self.fabric.switches:  # in the fabric's order, each switch's ToRs in theirs
            if sw in dirty or sw in routed:
                ops = self._mice_ops(sw, dirty.get(sw, set()), recheck.get(sw, ()), routed.get(sw, 0))
                if ops:
                    out[sw] = ops
        return out

    def _follow_weight(self, link: Link) -> None:
        """The link's groups now follow its current weight (the reference a later move is measured from)."""
        w = self._weight(link)
        if w == 10:
            self._wref.pop(link, None)
        else:
            self._wref[link] = w
        if self._wref_arr is not None and link in self._up_pos:
            self._wref_arr[self._up_pos[link]] = w

    def _weights_moved(self, step: int) -> list[Link]:
        """The up links whose ``_weight`` is ``step`` or more away from the one their groups follow: every
        up link each period (55,296 at k=48), so in arrays, with ``_weight``'s arithmetic (the same float
        operations, round half to even)."""
        import numpy as np

        up, n = self._up_links, len(self._up_links)
        loads = self.partition.loads_array(self.link_util)  # read once this period, shared with the step
        if loads is not None:
            if self._up_in_loads is None:
                self._up_in_loads = np.array([loads[1][ln] for ln in up], dtype=np.int64)
            u = loads[0][self._up_in_loads]
        else:
            u = np.fromiter(map(self.link_util.get, up, repeat(0.0)), dtype=np.float64, count=n)
        if self._wref_arr is None:
            self._wref_arr = np.fromiter(map(self._wref.get, up, repeat(10)), dtype=np.float64, count=n)
        w = np.maximum(np.rint(10 * (1 - np.where(u < 0.9, u, 0.9))), 1)
        return [up[i] for i in np.flatnonzero(np.abs(w - self._wref_arr) >= step).tolist()]

    def _weight_moves(self) -> dict[str, set[int]]:
        """Switch -> its mice groups that use an up link whose weight moved by the step."""
        moved: dict[str, set[int]] = {}
        if self.link_util is not self._weights_seen:  # (the same measurements as last time: nothing moved)
            for ln in self._weights_moved(self.cfg.mice_weight_step):
                self._follow_weight(ln)
                moved.setdefault(ln[0], set()).add(self.fabric.port_to(*ln))
            self._weights_seen = self.link_util
        out: dict[str, set[int]] = {}
        for sw, ports in moved.items():
            t = self.mice.get(sw)
            gids = {gid for gid, key in t.keys.items() if not ports.isdisjoint(key)} if t is not None else ()
            if gids:
                out[sw] = gids
        return out

    def _mice_ops(self, sw: str, dsts, recheck=(), routed: int = 0) -> list:
        """The mice ops of one switch toward ``dsts`` (None: every ToR, and every group's weights) and the
        ToRs of ``routed`` (bits: their next hops changed, their path counts did not), and for the groups
        in ``recheck``. ``dsts`` are looked at one by one (a busy k=48 period: some 30,000 (switch, ToR),
        so the keys and cookies are built inline); ``routed`` by the sets of ToRs that share their next
        hops (a link cut at k=48: every ToR's 1,151 destinations gain a next hop, one group each)."""
        index = self._tor_index  # (the positions in ``fabric.tors()``, as the routes number them)
        routes, port_to = self._routes, self.fabric.port_to
        if dsts is None:
            js, routed = list(range(len(self._tors))), 0
        else:
            js = sorted(index[d] for d in dsts)
            if routed and js:
                routed &= ~routes.bits(js)
        memo: dict[tuple, Key] = {}  # next hops -> key (many destinations share their next hops)
        keys = [(memo[h] if h in memo else memo.setdefault(h, tuple(sorted(port_to(sw, n) for n in h))))
                if h else None for h in routes.next_hops_many(sw, js)]
        cookie_of = self._cookies_of(sw)
        wants = zip(js, keys, cookie_of(js), strict=True)
        bulk = []
        if routed:
            for hops, bits in routes.classes(sw, routed):
                bulk.append((tuple(sorted(port_to(sw, n) for n in hops)) if hops else None,
                             set(routes.indices(bits))))
        t = self._table(sw)
        return t.update(wants, self._buckets_of(sw), self._mice_entries(sw), self._mice_delete,
                        self.cfg.mice_weight_step, None if dsts is None else recheck,
                        self._pod_ops(sw) if t.pods is not None else None, bulk, cookie_of)

    def _cookies_of(self, sw: str):
        """A function giving the mice cookies of ``sw``'s entries toward ToR positions ``js`` (a ToR's
        carry the pair's path count: n_min but for a few)."""
        base = mice_cookie(0)
        if not self.fabric.switches[sw].is_tor:
            return lambda js: [base | j for j in js]
        part, grp, index = self.partition, self._group_of_j, self._tor_index
        mine, gs, n_min = part.n_from.get(sw), grp[index[sw]], (part.n_min & 0xFFFF) << 32

        def cookies(js) -> list[int]:
            out = [base | j if grp[j] == gs else base | j | n_min for j in js]
            if mine:
                at = {j: i for i, j in enumerate(js)}
                for d, n in mine.items():
                    i = at.get(index[d])
                    if i is not None and part.is_partitioned((sw, d)):
                        out[i] = base | index[d] | (n & 0xFFFF) << 32
            return out
        return cookies

    # ----- elephants ------------------------------------------------------------------
    def meter_of(self, el: Elephant):
        """The meter holding an elephant to its allocation at its ingress ToR (None without isolation)."""
        if self.iso is None or el.src.switch in self.no_meters or self.iso.meters == "off":
            return None
        if self.iso.meters == "explicit" and (el.rateless or el.adopted):
            return None
        from ryu_apps.programs.isolation import elephant_meter

        return elephant_meter(el.eid, el.rate_bps, self.iso)

    def _entries(self, el: Elephant, path: Path, sub: hs.Subflow) -> list[tuple[str, Flow]]:
        meter = self.meter_of(el)
        return path_entries(self.fabric, path, sub, el.cookie, self.cfg.elephant_idle_s, self.iso,
                            meter.meter_id if meter else 0)

    def refuse_meters(self, switch: str) -> bool:
        """A switch refused a meter: forward its elephants without. False if that was known already."""
        if switch in self.no_meters:
            return False
        self.no_meters.add(switch)
        return True

    def elephant_of(self, flow) -> Elephant | None:
        eid = self.by_subflow.get(hs.Subflow(flow.src, flow.dst, flow.proto, flow.sport, flow.dport))
        return self.elephants.get(eid) if eid is not None else None

    def placed_links(self, flow) -> set[Link] | None:
        """The links a placed (announced or adopted) elephant's entries send it over, None if not placed."""
        el = self.elephant_of(flow)
        return {ln for pl in el.placements for ln in links(pl.path)} if el is not None else None

    def install_ops(self, el: Elephant) -> list[tuple[str, list]]:
        """An elephant's meter and entries, egress side first."""
        return self._install(el)

    def release(self, eid: int) -> Elephant | None:
        """Forget an elephant and its allocation (its entries are the caller's to remove)."""
        return self._release(eid)

    def _install(self, el: Elephant, new_meter: bool = True) -> list[tuple[str, list]]:
        ops: list[tuple[str, list]] = []
        meter = self.meter_of(el)
        if meter is not None and new_meter:
            ops.append((el.src.switch, [meter]))
        for pl, sub in zip(el.placements, el.subflows, strict=True):
            for sw, f in self._entries(el, pl.path, sub):
                ops.append((sw, [f]))
        return ops

    def release_ops(self, el: Elephant) -> list[tuple[str, list]]:
        """Remove an elephant's entries and meter."""
        from ryu_apps.openflow.intents import DeleteMeter

        ops = [(sw, [DeleteFlows(el.cookie)]) for sw in sorted({sw for pl in el.placements for sw in pl.path})]
        meter = self.meter_of(el)
        if meter is not None:
            ops.append((el.src.switch, [DeleteMeter(meter.meter_id)]))
        return ops

    def handshake(self, now: float, switch: str, in_port: int, ip_src: str, payload: bytes,
                  mac: str | None = None, refuse: str = "") -> HandshakeOutcome:
        """Check, place and install an announced elephant; say what to answer. The sender must be the
        host on ``in_port``: its IP and (the app always passes the frame's source ``mac``) its MAC."""
        try:
            msg = hs.decode(payload)
        except hs.HandshakeError as e:
            self.counters["handshake-malformed"] += 1
            return HandshakeOutcome(verdict=f"dropped: malformed ({e})", cause="malformed")
        if not isinstance(msg, hs.Announce):
            self.counters["handshake-unexpected"] += 1
            return HandshakeOutcome(verdict="dropped: not an announce", cause="unexpected")
        peer = self.fabric.peer(switch, in_port)
        host = self.fabric.host_by_ip(ip_src)
        if peer is None or host is None or host.name != peer[0]:
            self.counters["handshake-spoofed"] += 1
            return HandshakeOutcome(verdict=f"dropped: spoofed ({ip_src} is not the host on {switch} port {in_port})",
                                    cause="spoofed")
        if mac is not None and mac.lower() != host.mac.lower():
            self.counters["handshake-spoofed"] += 1
            return HandshakeOutcome(verdict=f"dropped: spoofed (source MAC {mac} is not {host.name}'s {host.mac})",
                                    cause="spoofed")

        def nack(reason: str, cause: str = "invalid") -> HandshakeOutcome:
            self.counters["handshake-nack"] += 1
            return HandshakeOutcome(hs.encode(hs.Nack(msg.nonce, msg.size, reason)), verdict=f"nack: {reason}",
                                    cause=cause)

        access_kbps = self.capacity_bps((host.name, host.switch)) / 1000
        if refuse:  # nothing new is placed (what is placed stays): the answer says why, the host retries later
            return nack(refuse, "store-unreachable")
        why = hs.check(msg, ip_src, access_kbps, lambda ip: self.fabric.host_by_ip(ip) is not None)
        if why:
            return nack(why)
        dsts = {s.dst for s in msg.subflows}
        if len(dsts) != 1:
            return nack("all subflows must go to one destination host")
        dst = self.fabric.host_by_ip(dsts.pop())
        known = {self.by_subflow.get(s) for s in msg.subflows}
        if len(known) == 1 and None not in known:  # a retransmitted announce: answer the same again
            el = self.elephants[known.pop()]
            if el.eid in self.pending:  # ... once it is installed: the first one's answer is on its way
                self.counters["handshake-pending"] += 1
                return HandshakeOutcome(verdict="dropped: pending (the same flows are being installed; the "
                                                "answer follows)", cause="pending")
            self.counters["handshake-repeat"] += 1
            return HandshakeOutcome(self._ack(el), verdict="ack (repeat)", elephant=el)
        if not self._take_change(now, host.name):
            self.counters["handshake-host-rate"] += 1
            return nack(f"host rate: {host.ip} placed or replaced elephants more than {self.cfg.host_changes_per_s:g} "
                        "times a second (host_changes_per_s)", "host-rate")
        replaced = []  # an announce that shares a subflow with a placed elephant replaces it
        for eid in dict.fromkeys(self.by_subflow[s] for s in msg.subflows if s in self.by_subflow):
            old = self._release(eid)
            replaced += self.release_ops(old)
            self.counters["elephant-replaced"] += 1
        pair = (host.switch, dst.switch)
        n = len(msg.subflows)
        threshold = 0.1 * access_kbps * 1000
        want = msg.rate_kbps * 1000 if msg.rate_kbps else threshold * n
        n_mine, used = self.elephants.host_use(host.name)  # rate-less ones count at their floor
        budget = self.cfg.host_share * access_kbps * 1000 - used
        if n_mine >= self.cfg.host_elephants:
            self.counters["handshake-host-cap"] += 1
            out = nack(f"host cap: {host.ip} already has {n_mine} elephants placed (host_elephants="
                       f"{self.cfg.host_elephants})", "host-cap")
            out.replaced = replaced
            return out
        overbook = not msg.rate_kbps and self.cfg.when_full == "overbook"
        floor = -1.0
        if want > budget + 1e-6 and overbook:  # rate-less: in all the same, its floor what is left
            floor = max(0.0, budget) / n // 1000 * 1000
            want = floor * n
            self.counters["handshake-floor-shrunk"] += 1
        elif want > budget + 1e-6:
            self.counters["handshake-host-cap"] += 1
            out = nack(f"host cap: {host.ip} has {max(0.0, budget) / 1e6:.2f} Mbit/s left of its "
                       f"{self.cfg.host_share:g} x {access_kbps / 1000:.0f} Mbit/s (host_share), asked "
                       f"{want / 1e6:.2f}", "host-cap")
            out.replaced = replaced
            return out
        held, comp = self._rateless_held()  # rate-less elephants give up what they hold above their minimum
        extra = self.per_meter() - 1.0  # ... and their meters let through this much more than they hold

        def load_after(ln: Link) -> float:
            measured = self.link_util.get(ln, 0.0) * self.capacity_bps(ln) - extra * held[ln]
            return max(0.0, max(measured, self.alloc.link.get(ln, 0.0)) - comp[ln])

        # a rate-less elephant may grow to its host's link (the placement is chosen for that; it is
        # allocated its floor, then its share)
        demand = want if msg.rate_kbps else max(want, access_kbps * 1000)
        try:
            placements = self.place(pair, want, n, load_after, demand_bps=demand)
        except NoRoom as e:
            if not overbook:
                out = nack(str(e), "no-room")
                out.replaced = replaced
                return out
            try:  # the best high-throughput path all the same, as an adopted elephant is placed
                placements = self.place(pair, want, n, load_after, headroom=float("inf"), demand_bps=demand)
            except NoRoom as e2:  # no live path at all
                out = nack(str(e2), "no-room")
                out.replaced = replaced
                return out
            self.counters["handshake-overbooked"] += 1
        el = Elephant(self._next_eid, 0, host, dst, msg.nonce, msg.size, sum(p.rate_bps for p in placements),
                      msg.subflows, placements, now, rateless=not msg.rate_kbps, floor_bps=floor,
                      asked_bps=msg.rate_kbps * 1000.0)
        self._next_eid += 1
        self.elephants[el.eid] = el
        self.pending.add(el.eid)  # until the switches confirmed (``confirmed``) or it is released
        for s in msg.subflows:
            self.by_subflow[s] = el.eid
        self.alloc.add(el.eid, placements)
        replaced += self.reshare(skip=el.eid)  # the rate-less ones (this one too) share what is left
        self.counters["handshake-ack"] += 1
        return HandshakeOutcome(self._ack(el), self._install(el), "ack", el, replaced)

    # ----- rate-less elephants: max-min fair shares ----------------------------------------
    def _min_rate(self, el: Elephant) -> float:
        """A rate-less subflow's floor: the elephant threshold, 10% of its host's link (what its host's budget
        had left, when that was less: ``when_full``)."""
        return 0.1 * self.capacity_bps((el.src.name, el.src.switch)) if el.floor_bps < 0 else el.floor_bps

    def _rateless_held(self) -> tuple[Counter, Counter]:
        """Per link, what rate-less elephants hold, and what of it is above their floor (an announce may
        take that)."""
        held: Counter = Counter()
        above: Counter = Counter()
        for el in self.elephants.rateless():
            for pl in el.placements:
                for ln in links(pl.path):
                    held[ln] += pl.rate_bps
                    above[ln] += max(0.0, pl.rate_bps - self._min_rate(el))
        return held, above

    def reshare(self, skip: int | None = None) -> list[tuple[str, list]]:
        """Give every rate-less elephant's subflows their max-min fair share of what the elephants with
        explicit rates (and adopted ones) leave on the links they cross, and of their host's budget
        (``host_share`` of its link); never below the floor, in whole kbit/s. With isolation every elephant's
        meter lets through its allocation times ``meter_headroom``, so the shares are of the room left by
        the other elephants' meters, divided by it: above their floors, the meters on a link then add up
        to its capacity and no more. At the full room four shares of 2.5 Mbit/s on a 10 Mbit/s uplink were
        metered at 10.5 in all, and the TCP flow that lost the contention got only what the other three
        meters left (1.75-1.97 Mbit/s). Returns the meter modifications of the elephants whose allocation
        changed by more than 5% (none for ``skip``: not installed yet)."""
        rl = list(self.elephants.rateless())
        if not rl:
            return []
        k = self.per_meter()
        held, _ = self._rateless_held()
        flows = {(el.eid, i): [*links(pl.path), ("host", el.src.name)]
                 for el in rl for i, pl in enumerate(el.placements)}
        room = {}
        for ln in {ln for ls in flows.values() for ln in ls}:
            if ln[0] == "host":
                h = self._hosts[ln[1]]
                explicit = sum(e.rate_bps for e in self.elephants.of_host(h.name)
                               if not e.rateless and not e.adopted)
                room[ln] = self.cfg.host_share * self.capacity_bps((h.name, h.switch)) / k - explicit
            else:
                room[ln] = self.capacity_bps(ln) * self.cfg.headroom / k - (self.alloc.link.get(ln, 0.0) - held[ln])
        shares = max_min(flows, room)
        ops: list[tuple[str, list]] = []
        for el in rl:
            # whole kbit/s, as announced rates are: a restarted controller reads the same rate back
            # from the meter (``_rate_of_meter``)
            new = [max(self._min_rate(el), shares[(el.eid, i)] // 1000 * 1000) for i in range(len(el.placements))]
            if abs(sum(new) - el.rate_bps) <= 0.05 * el.rate_bps and el.eid != skip:
                continue
            self.alloc.release(el.eid)
            el.placements = [Placement(pl.path, r, pl.max_util) for pl, r in zip(el.placements, new, strict=True)]
            el.rate_bps = sum(new)
            self.alloc.add(el.eid, el.placements)
            self.counters["rateless-reshared"] += 1
            meter = self.meter_of(el)
            if meter is not None and el.eid != skip:
                ops.append((el.src.switch, [MeterModify(meter)]))
        return ops

    def adopt(self, now: float, flow, rate_bps: float) -> list[tuple[str, list]]:
        """An elephant that never announced itself (found by monitoring): Bin-Pack it onto a HOL path
        like an announced one. Returns the install plan (egress first), or [] when it cannot be placed."""
        sub = hs.Subflow(flow.src, flow.dst, flow.proto, flow.sport, flow.dport)
        src, dst = self.fabric.host_by_ip(flow.src), self.fabric.host_by_ip(flow.dst)
        if sub in self.by_subflow or src is None or dst is None or flow.proto not in (6, 17):
            return []
        # The path is chosen for what it may grow to, its host's link (as Hedera estimates a flow's
        # demand): its measured rate is a snapshot of TCP still speeding up. Its allocation and meter
        # start at the measured rate and follow it (``follow_demand``).
        demand = max(rate_bps, self.capacity_bps((src.name, src.switch)))
        try:
            (pl,) = self.place((src.switch, dst.switch), rate_bps, headroom=float("inf"), demand_bps=demand)
        except NoRoom:
            return []
        if self.lending():  # placed for its demand: allocated the room its path has (as ``follow_demand``
            # would grow it at the next period), so that its meter does not hold TCP at the rate of its
            # first fraction of a second (it then shrank before TCP could speed up)
            rate_bps = min(demand, rate_bps + max(0.0, self._free(pl.path)))
            pl = Placement(pl.path, rate_bps, pl.max_util)
        el = Elephant(self._next_eid, 0, src, dst, 0, 0, rate_bps, (sub,), [pl], now, adopted=True)
        self._next_eid += 1
        self.elephants[el.eid] = el
        self.by_subflow[sub] = el.eid
        self.alloc.add(el.eid, [pl])
        self.counters["elephant-adopted"] += 1
        return self._install(el)

    def is_announced(self, flow) -> bool:
        return hs.Subflow(flow.src, flow.dst, flow.proto, flow.sport, flow.dport) in self.by_subflow

    def _free(self, path: Path) -> float:
        """Capacity left on a path's tightest link (a same-ToR path: the destination's access link)."""
        lk = links(path) or [(path[0], "")]
        return min(self.capacity_bps(ln) * self.cfg.headroom - self.load_bps(ln) for ln in lk)

    def _ack(self, el: Elephant) -> bytes:
        allocs = tuple((sub, round(pl.rate_bps / 1000), tuple(self.fabric.switches[s].dpid for s in pl.path))
                       for sub, pl in zip(el.subflows, el.placements, strict=True))
        return hs.encode(hs.Ack(el.nonce, el.size, round(el.rate_bps / 1000), allocs))

    def record(self, el: Elephant) -> dict:
        """What the switches cannot tell of an announced elephant, for a cluster's store (written before
        its ACK; a controller that takes over reads it back with the switches)."""
        return {"eid": el.eid, "src": el.src.name, "subflows": [[s.src, s.dst, s.proto, s.sport, s.dport]
                                                                for s in el.subflows],
                "rate_bps": el.rate_bps, "rateless": el.rateless, "size": el.size, "nonce": el.nonce,
                "adopted": el.adopted, "subflow_rates_bps": [pl.rate_bps for pl in el.placements],
                "asked_bps": el.asked_bps}

    def records_now(self) -> dict[int, dict]:
        """The record of every placed elephant (announced or adopted), as the store should hold them."""
        return {el.eid: self.record(el) for el in self.elephants.values()}

    def confirmed(self, eid: int) -> None:
        """An announced elephant's entries are confirmed by every switch (its ACK goes out now)."""
        self.pending.discard(eid)

    def _release(self, eid: int) -> Elephant | None:
        self.pending.discard(eid)
        el = self.elephants.pop(eid, None)
        if el is None:
            return None
        self.alloc.release(eid)
        for s in el.subflows:
            if self.by_subflow.get(s) == eid:
                del self.by_subflow[s]
        return el

    def flow_removed(self, switch: str, cookie: int) -> dict[str, list]:
        """An ingress entry expired: release the elephant and clear its other entries."""
        eid = eid_of(cookie)
        el = self.elephants.get(eid) if eid is not None else None
        if el is None or el.cookie != cookie:
            return {}
        self._release(eid)
        self.counters["elephant-expired"] += 1
        out: dict[str, list] = {}
        for sw, intents in self.release_ops(el):
            out.setdefault(sw, []).extend(intents)
        return out

    def reroute_plan(self, el: Elephant, avoid: set[Link], overbook_lol: bool = False):
        """(install, after) to move an elephant off ``avoid`` onto HOL paths, overbooked when none has
        room (onto any live path if ``overbook_lol``); None when there is nowhere to go (the caller
        releases it: it then travels with the mice)."""
        n = len(el.subflows)
        pair = (el.src.switch, el.dst.switch)
        avoid = frozenset(avoid)
        if self.lending():  # this measurement's mice loads count the elephant where it is now, whichever
            self._mice_loads()  # path check below asks first (they are worked out once per measurement)
        open_ = self.open_link if self.lending() else self.partition.is_hol
        live = [p for p in self.partition.live_paths(pair) if not set(links(p)) & avoid] if overbook_lol else []
        if not live and next(self._open_paths(pair, open_, avoid), None) is None:  # (the first will do: at
            return None  # k=48 every path of a pair, 576, checked link by link for each move was half its cost)
        self.alloc.release(el.eid)
        try:
            placements = self.place(pair, el.rate_bps, n, self.load_bps, self.cfg.headroom, avoid)
        except NoRoom:  # overbooked: the HOL paths first, found as a placement finds them (at k=48 Bin-Pack
            self.counters["reroute-overbooked"] += 1  # over all 576 was 5 ms a move), then the open, the live
            try:
                placements = self._place_on(pair, el.rate_bps, n, self.load_bps, float("inf"),
                                            self.partition.is_hol, avoid)
            except NoRoom:
                placements = split(self._paths(pair, open_, avoid) or live, el.rate_bps, n, self.load_bps,
                                   self.capacity_bps, float("inf"))
        old_cookie, old_paths = el.cookie, [pl.path for pl in el.placements]
        el.gen = (el.gen + 1) & GEN_MASK
        el.placements = placements
        self.alloc.add(el.eid, placements)
        install = self._install(el, new_meter=False)
        after = [(sw, [DeleteFlows(old_cookie)]) for sw in sorted({sw for p in old_paths for sw in p})]
        self.counters["elephant-rerouted"] += 1
        return install, after

    # ----- adopted elephants ------------------------------------------------------------
    def follow_demand(self, now: float, rates) -> list[tuple[str, list]]:
        """Adopted elephants' allocations follow their measured rate (``rates``: subflow -> bit/s, None
        when not measured). One held near its allocation (at least ``GROW_AT`` of it: its meter or its
        path limits it) grows by the room its path has, up to its access link; one sending less than
        ``SHRINK_AT`` of it shrinks to its rate plus a quarter (never below the elephant threshold).
        Bin-Pack, EFM and the partition see the new allocation; the meter follows (a modification)."""
        ops: list[tuple[str, list]] = []
        for el in list(self.elephants.values()):
            if not el.adopted:
                ops += self._decay(now, el, rates)
                continue
            rate = rates(el.subflows[0])
            if rate is None:
                continue
            new = el.rate_bps
            if rate >= GROW_AT * el.rate_bps:
                room = min(self._free(pl.path) for pl in el.placements)
                new = min(self.capacity_bps((el.src.name, el.src.switch)), el.rate_bps + max(0.0, room))
            elif rate < SHRINK_AT * el.rate_bps:
                new = max(self._min_rate(el), 1.25 * rate)
            if abs(new - el.rate_bps) < 0.05 * el.rate_bps:
                continue  # within 5%: no meter churn
            self.counters["adopted-grown" if new > el.rate_bps else "adopted-shrunk"] += 1
            self.alloc.release(el.eid)
            el.rate_bps = new
            el.placements = [Placement(pl.path, new, pl.max_util) for pl in el.placements]
            self.alloc.add(el.eid, el.placements)
            meter = self.meter_of(el)
            if meter is not None:
                ops.append((el.src.switch, [MeterModify(meter)]))
        return ops

    def _decay(self, now: float, el: Elephant, rates) -> list[tuple[str, list]]:
        """An explicit announce's reservation follows what it sends once it has sent less than ``SHRINK_AT``
        of it for ``decay_after_s`` (unsampled counts as nothing), down to the elephant threshold; it grows
        back by the room its path has, up to what was asked, when it sends at ``GROW_AT`` of it."""
        if el.rateless or not self.cfg.decay_after_s or not el.asked_bps:
            return []
        measured = [rates(sub) for sub in el.subflows]
        rate = sum(r for r in measured if r is not None)
        new = el.rate_bps
        if rate < SHRINK_AT * el.rate_bps:
            el.low_since = now if el.low_since is None else el.low_since
            if now - el.low_since >= self.cfg.decay_after_s:
                new = max(self._min_rate(el) * len(el.subflows), 1.25 * rate)
        else:
            el.low_since = None
            if rate >= GROW_AT * el.rate_bps and el.rate_bps < el.asked_bps:
                room = min(self._free(pl.path) for pl in el.placements)
                new = min(el.asked_bps, el.rate_bps + max(0.0, room))
        if abs(new - el.rate_bps) < 0.05 * el.rate_bps:
            return []
        self.counters["reservation-decayed" if new < el.rate_bps else "reservation-regrown"] += 1
        self.alloc.release(el.eid)
        share = new / el.rate_bps
        el.rate_bps = new
        el.placements = [Placement(pl.path, pl.rate_bps * share, pl.max_util) for pl in el.placements]
        self.alloc.add(el.eid, el.placements)
        meter = self.meter_of(el)
        return [(el.src.switch, [MeterModify(meter)])] if meter is not None else []

    def _take_change(self, now: float, host: str) -> bool:
        """A token of the host's bucket of changes (``host_changes_per_s`` a second, as many at once)."""
        rate = self.cfg.host_changes_per_s
        tokens, at = self._changes.get(host, (rate, now))
        tokens = min(rate, tokens + (now - at) * rate)
        if tokens < 1.0:
            self._changes[host] = (tokens, now)
            return False
        self._changes[host] = (tokens - 1.0, now)
        return True

    def hot_adopted(self, now: float, util, threshold: float, hold_down_s: float):
        """EFM for adopted elephants: on each link above ``threshold`` (measured), the biggest adopted
        elephant not moved within ``hold_down_s`` goes to a HOL path on which every link it would join
        stays at or under the threshold with it (EFM's rule), placed by Bin-Pack; an elephant that would
        make any such path hot stays (moving it would only move the hot spot). Returns [(elephant,
        install, after)]."""
        moves = []
        over = util.above(threshold) if hasattr(util, "above") else [ln for ln, u in util.items() if u > threshold]
        for link in sorted(over, key=lambda ln: -util[ln]):
            cands = sorted((self.elephants[e] for e in self.alloc.crossing(link) if e in self.elephants
                            and self.elephants[e].adopted and now - self.elephants[e].moved_at >= hold_down_s),
                           key=lambda el: -el.rate_bps)
            for el in cands:
                mine = {ln for pl in el.placements for ln in links(pl.path)}
                paths = self.elephant_paths((el.src.switch, el.dst.switch))
                too_hot = {ln for p in paths for ln in links(p)
                           if ln not in mine and (self.load_bps(ln) + el.rate_bps) > threshold * self.capacity_bps(ln)}
                avoid = {link} | too_hot
                if not any(not set(links(p)) & avoid for p in paths):
                    continue
                plan = self.reroute_plan(el, avoid)
                if plan is not None:
                    el.moved_at = now
                    self.counters["adopted-moved-hot"] += 1
                    moves.append((el, *plan))
                    break
        return moves

    def place(self, pair, rate_bps: float, n: int = 1, load=None, headroom: float | None = None,
              avoid=frozenset(), demand_bps: float | None = None) -> list[Placement]:
        """``n`` subflows carrying ``rate_bps`` together on the pair's open HOL paths (``hol_paths``), by
        the load ``load`` (default ``load_bps``): Bin-Pack for one subflow, found without building every
        path (``Partition.best_hol_path``); split as Eq. 1 splits it for several (``binpack.split``).
        Links in ``avoid`` are not used.

        Lending (``lend`` idle): when the best HOL placement would load a link beyond its capacity by
        more than ``LEND_MARGIN`` (with the elephant at ``demand_bps``, what it may grow to, and every
        allocation, rate-less shares included, and measurement), the paths through lendable LOL links
        are looked at too, and one of them is taken if it leaves the busiest link less busy by more than
        the margin. So an elephant takes idle low-latency capacity only when the high-throughput paths
        are full, and a few per cent of measurement noise decides nothing."""
        load = load or self.load_bps
        scale = (demand_bps or rate_bps) / rate_bps if rate_bps > 0 else 1.0
        headroom = self.cfg.headroom if headroom is None else headroom
        try:
            hol = self._place_on(pair, rate_bps, n, load, headroom, self.partition.is_hol, avoid)
        except NoRoom as e:
            if not self.lending():
                raise
            hol, why = None, e
        if not self.lending():
            return hol
        u_hol = self._full_util(hol, scale) if hol is not None else float("inf")
        if u_hol <= 1.0 + LEND_MARGIN:
            return hol
        try:
            lent = self._place_on(pair, rate_bps, n, load, headroom, self.open_link, avoid)
        except NoRoom:
            lent = None
        if lent is not None and self._full_util(lent, scale) < u_hol - LEND_MARGIN:
            self.counters["placed-on-lent"] += any(not self.partition.is_hol(ln) for pl in lent
                                                   for ln in links(pl.path))
            return lent
        if hol is None:
            raise why
        return hol

    def _place_on(self, pair, rate_bps, n, load, headroom, open_, avoid) -> list[Placement]:
        if n > 1 or not self.partition.is_partitioned(pair):
            return split(self._paths(pair, open_, avoid), rate_bps, n, load, self.capacity_bps, headroom)
        stale = self.stale
        usable = ((lambda ln: ln not in stale and ln not in avoid) if stale or avoid else (lambda ln: True))
        found = self.partition.best_hol_path(pair, lambda ln: (load(ln) + rate_bps) / self.capacity_bps(ln),
                                             usable, open_)
        # the same checks and refusal as Bin-Pack over every path
        return [bin_pack([found[1]] if found else [], rate_bps, load, self.capacity_bps, headroom)]

    def _full_util(self, placements: list[Placement], scale: float = 1.0) -> float:
        """The busiest link's utilisation with ``placements`` (their rates times ``scale``) added to
        everything allocated and measured."""
        extra: Counter = Counter()
        for pl in placements:
            for ln in links(pl.path):
                extra[ln] += pl.rate_bps * scale
        return max(((self.load_bps(ln) + r) / self.capacity_bps(ln) for ln, r in extra.items()), default=0.0)

    def _paths(self, pair, open_, avoid=frozenset()) -> list[Path]:
        """The pair's live paths whose links are all ``open_``, freshly measured and not in ``avoid``."""
        return list(self._open_paths(pair, open_, avoid))

    def _open_paths(self, pair, open_, avoid=frozenset()):
        """``_paths``' paths one at a time, in order (for a caller that needs only the first)."""
        stale = self.stale
        for p in self.partition.live_paths(pair):
            ls = links(p)
            if all(open_(ln) for ln in ls) and not ((stale or avoid) and any(ln in stale or ln in avoid for ln in ls)):
                yield p

    def hol_paths(self, pair) -> list[Path]:
        """The HOL paths open to elephants now: live (the partition) and freshly measured (not stale)."""
        return self._paths(pair, self.partition.is_hol)

    def elephant_paths(self, pair) -> list[Path]:
        """The paths an elephant may take now: the HOL paths and, when lending, those through lendable
        low-latency links (``lendable``); live and freshly measured."""
        return self._paths(pair, self.open_link if self.lending() else self.partition.is_hol)

    # ----- after a controller restart ----------------------------------------------------
    def recover(self, now: float, switch: str, flows, meters, groups=()) -> list[Elephant]:
        """Rebuild what Freeway placed from what the switches hold, after a restart.

        - Elephants: entries whose cookie is an elephant's (owner, id and generation), followed hop by
          hop from the source ToR to the destination host; the allocation is the ingress meter's rate
          without its headroom (no meter: the handshake's default for a rate-less announce). Entries of
          an elephant whose path is not complete yet wait for the other switches.
        - The partition: a source ToR's mice entries carry its pairs' low-latency path counts.
        - Mice groups whose weights are within the step stay as they are.
        Returns the elephants completed by this switch's entries."""
        if self._recover_until is None:
            self._recover_until, self._recovery_open = now + RECOVER_S, True
        self._recheck.add(switch)  # what it holds was read back: the next update looks at all of its groups
        t = self.mice[switch] = MiceTable(pipeline.MICE_GROUPS.first, pipeline.MICE_GROUPS.last,
                                          pods=self._pods(switch))
        for g in groups:
            if pipeline.MICE_GROUPS.first <= g.group_id <= pipeline.MICE_GROUPS.last:
                t.hold(g)
        for m in meters:
            if m.meter_id >= pipeline.ELEPHANT_METERS.first:
                self._held_meters[(switch, m.meter_id)] = m
        for f in _held_mice(flows):  # which group each destination's entries point at (pods' entries first: a ToR's own win)
            if f.actions and isinstance(f.actions[0], ToGroup) and f.actions[0].group_id in t.groups:
                idx = mice_fields(f.cookie)[0]
                if f.priority == PRIO_MICE_POD:
                    if idx & POD_BIT and t.pods is not None and idx & ~POD_BIT in t.pods.members:
                        t.hold_pod(idx & ~POD_BIT, f.actions[0].group_id, f.cookie)
                elif idx < len(self._tors):  # (an index past the fabric's ToRs: not wanted, deleted)
                    t.hold_own(idx, f.actions[0].group_id, f.cookie)
        for f in flows:  # a new elephant never takes the id of one whose path is not read back yet
            if eid_of(f.cookie) is not None:
                self._next_eid = max(self._next_eid, eid_of(f.cookie) + 1)
        for m in meters:
            if m.meter_id >= pipeline.ELEPHANT_METERS.first:
                self._next_eid = max(self._next_eid, m.meter_id - pipeline.ELEPHANT_METERS.first + 1)
        self._recover_partition(now, switch, flows)
        done = []
        known = {el.cookie for el in self.elephants.values()}
        for cookie, (paths, _) in self._held.add(switch, flows,
                                                 lambda c: c in known or eid_of(c) in self.elephants).items():
            done.append(self._rebuild(now, cookie, paths))
        return done

    def recovering(self, now: float) -> bool:
        """Whether the partition is still being read back: from the first switch's read-back until every
        ToR's is in, or ``RECOVER_S`` at the latest. Until then mice groups are left as the switches
        hold them and the partition does not step (a switch read back before the ToRs would otherwise
        be sent the default partition's groups, then the recovered one's)."""
        if self._recovery_open and (now >= self._recover_until or self._tors_read >= set(self.fabric.tors())):
            self._recovery_open = False
        return self._recovery_open

    def _recover_partition(self, now: float, switch: str, flows) -> None:
        if not self.fabric.switches[switch].is_tor:
            return
        self._tors_read.add(switch)
        tors = self._tors
        counts = {}
        pods = self._pods(switch)
        for f in _held_mice(flows):  # (a pod's entry: each of its ToRs; a ToR's own entry, after, wins)
            idx, n = mice_fields(f.cookie)
            if not n:
                continue
            if f.priority == PRIO_MICE_POD and idx & POD_BIT:
                for j in pods.members.get(idx & ~POD_BIT, ()) if pods is not None else ():
                    counts[(switch, tors[j])] = n
            elif f.priority == PRIO_MICE and idx < len(tors):
                counts[(switch, tors[idx])] = n
        res = self.partition.restore(now, counts)
        self.counters["partition-pairs-recovered"] += len(counts)
        return res

    def _rate_of_meter(self, kbps: int) -> float:
        """The allocation behind an elephant meter: a rate the meter recomputes to the same ``kbps``
        from, a whole kbit/s when one fits (announced rates are whole kbit/s)."""
        from ryu_apps.programs.isolation import elephant_meter

        mid = (kbps + 0.5) * 1000 / self.iso.meter_headroom
        for whole in (math.floor(mid / 1000) * 1000, math.ceil(mid / 1000) * 1000):  # (headroom 1: mid is k+0.5)
            if elephant_meter(1, whole, self.iso).rate == kbps:
                return float(whole)
        return mid

    def _rebuild(self, now: float, cookie: int, paths: dict) -> Elephant:
        subs = sorted((hs.Subflow(*ft) for ft in paths), key=str)
        src, dst = self.fabric.host_by_ip(subs[0].src), self.fabric.host_by_ip(subs[0].dst)
        eid, gen, adopted = eid_of(cookie), cookie & GEN_MASK, bool(cookie & ADOPTED_BIT)
        meter = self._held_meters.get((src.switch, pipeline.ELEPHANT_METERS.id(eid)))
        rec = self.records.get(eid)
        if rec is not None and sorted(map(tuple, rec.get("subflows", []))) != sorted(
                (s.src, s.dst, s.proto, s.sport, s.dport) for s in subs):
            rec = None  # a record of another elephant that had this id: the switches win
        if rec is not None:  # what the cluster store kept of it: exactly what it was given
            rate = float(rec["rate_bps"])
        elif meter is not None and self.iso is not None:
            rate = self._rate_of_meter(meter.rate)
        else:
            rate = 0.1 * self.capacity_bps((src.name, src.switch)) * len(subs)
        shares = {tuple(ft): float(r) for ft, r in zip(rec["subflows"], rec.get("subflow_rates_bps") or [],
                                                        strict=False)} if rec else {}
        if len(shares) != len(subs) or abs(sum(shares.values()) - rate) > 1e-6 * max(1.0, rate):
            shares = {}  # the switches hold only the total: equal shares of it (a split is not known)
        placements = [Placement(paths[key], shares.get(key, rate / len(subs)), 0.0)
                      for key in ((s.src, s.dst, s.proto, s.sport, s.dport) for s in subs)]
        rateless = bool(cookie & RATELESS_BIT)
        asked = float(rec.get("asked_bps", rate)) if rec else (0.0 if rateless or adopted else rate)
        el = Elephant(eid, gen, src, dst, int(rec["nonce"]) if rec else 0, int(rec["size"]) if rec else 0, rate,
                      tuple(subs), placements, now, adopted, rateless=rateless, asked_bps=asked)
        self.elephants[eid] = el
        for sub in el.subflows:
            self.by_subflow[sub] = eid
        self.alloc.add(eid, placements)
        self._next_eid = max(self._next_eid, eid + 1)
        self.counters["elephant-recovered"] += 1
        return el

    # ----- failures --------------------------------------------------------------------
    def set_dead(self, now: float, dead):
        """Links went down or came back: the partition takes them out (or back), elephants that cross a
        dead link or a link that became LOL move (make-before-break), those with no live path left are
        released; mice groups follow. Returns (partition result, mice ops, moves as (elephant, install,
        after), released elephants with the ops that remove them)."""
        dead = frozenset(dead)
        res = self.partition.set_dead(now, dead)
        moves, released = [], []
        for eid in sorted(self.elephants):
            el = self.elephants[eid]
            crossed = {ln for pl in el.placements for ln in links(pl.path)}
            if not crossed & (dead | res.became_lol):
                continue
            plan = self.reroute_plan(el, set(dead))
            if plan is None:
                self._release(eid)
                self.counters["elephant-unroutable"] += 1
                released.append((el, self.release_ops(el)))
            else:
                moves.append((el, *plan))
        mice = list(self.mice_updates().items())
        return res, mice, moves, released

    # ----- the period ------------------------------------------------------------------
    def period(self, now: float, active_pairs) -> tuple[StepResult, list[tuple[str, list]]]:
        """Partition step, then: elephants off links that turned LOL, and mice groups brought up to date."""
        if self.recovering(now):  # the partition is still being read back from the ToRs: change nothing
            return StepResult(), []
        if self.moving and now - self._moving_since < MOVE_WAIT_S:  # elephants are still leaving links that
            return StepResult(), []  # turned LOL: the mice wait for them
        if self.moving:  # a move that never reported back must not freeze the partition
            self.counters["moves-never-finished"] += self.moving
            self.moving = 0
        self.now = now
        res = self.partition.step(now, active_pairs, self.mice_util)
        ops: list[tuple[str, list]] = []
        moved = set()
        for ln in res.became_lol:  # the mice asked for it: not lent before lend_hold_s
            self.reclaimed[ln] = now
        for ln in sorted(res.became_lol):
            for eid in self.alloc.crossing(ln):
                if eid not in moved and eid in self.elephants:
                    moved.add(eid)
                    plan = self.reroute_plan(self.elephants[eid], set(), overbook_lol=True)
                    if plan is not None:
                        self.moves.append((self.elephants[eid], *plan))
                        self.move_why[eid] = "its links turned low-latency"
        self._reclaim(now, moved)
        if self.moves:  # the mice groups change once every move is confirmed (``move_finished``)
            self.moving, self._moving_since = len(self.moves), now
            return res, ops
        for sw, intents in self.mice_updates().items():
            ops.append((sw, intents))
        return res, ops

    def _reclaim(self, now: float, moved: set) -> None:
        """Lent links whose mice came back (mice load above ``reclaim_above``) are taken back: every
        elephant on one moves to the HOL paths (overbooked if they are full), or to other lendable
        links when those leave it less busy; the link is not lent again for ``lend_hold_s``."""
        if not self.lending():
            return
        mice, part = self.mice_seen, self.partition
        back = sorted(ln for ln, m in mice.items() if m > self.reclaim_above() and ln in self.alloc.link
                      and ln not in part.dead and part.is_lol(ln))  # (reclaim_above > 0: only links mice were seen on)
        for ln in back:
            self.reclaimed[ln] = now
        for ln in back:
            for eid in self.alloc.crossing(ln):
                if eid not in moved and eid in self.elephants:
                    moved.add(eid)
                    plan = self.reroute_plan(self.elephants[eid], set(back))
                    if plan is not None:
                        self.counters["elephant-reclaimed"] += 1
                        self.moves.append((self.elephants[eid], *plan))
                        self.move_why[eid] = "mice came back to a lent link"

    def abandon(self, el: Elephant, after: list[tuple[str, list]]) -> list[tuple[str, list]]:
        """A move was rolled back: the state already says the new path, and the rollback deleted the new
        entries where they had replaced the old ones, so neither is whole. The elephant is released
        (it travels with the mice until monitoring adopts it): its old entries (``after``), any new
        ones left, and its meter go."""
        if self.elephants.get(el.eid) is not el:
            return []
        self._release(el.eid)
        self.counters["elephant-move-abandoned"] += 1
        return after + self.release_ops(el)

    def take_moves(self) -> list:
        """Elephant moves off links that turned LOL, to install as confirmed transactions: [(elephant,
        install, after)]. Each must be reported with ``move_finished`` (confirmed or rolled back)."""
        moves, self.moves = self.moves, []
        return moves

    def why_moved(self, eid: int) -> str:
        """Why the elephant's latest move off low-latency links was made (``take_moves``)."""
        return self.move_why.pop(eid, "its links turned low-latency")

    def move_finished(self) -> list[tuple[str, list]]:
        """One move is confirmed or rolled back; after the last, the mice groups follow the partition."""
        self.moving = max(0, self.moving - 1)
        return [] if self.moving else list(self.mice_updates().items())


def active_pairs(fabric: Fabric, flows) -> set[tuple[str, str]]:
    """ToR pairs of the given (src IP, dst IP) flows, across ToRs."""
    out = set()
    for src, dst in flows:
        a, b = fabric.host_by_ip(src), fabric.host_by_ip(dst)
        if a and b and a.switch != b.switch:
            out.add((a.switch, b.switch))
    return out


def _held_mice(flows) -> list[Flow]:
    """A switch's mice entries as read back, pods' first."""
    return sorted((f for f in flows if f.priority in (PRIO_MICE_POD, PRIO_MICE)
                   and pipeline.owner_of(f.cookie) is pipeline.FREEWAY_MICE), key=lambda f: f.priority)
