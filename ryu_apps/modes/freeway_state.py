"""Freeway mode as pure logic: partition, mice groups, handshake placement, elephant entries.

The app feeds it switch connections, handshake datagrams, flow-removed
messages, link loads and ``now``; it returns intents per switch (and, for a
handshake, the answer to send once the switches have confirmed the entries).
Nothing here touches a datapath, a socket or the clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields

from ryu_apps.algorithms.binpack import Allocations, NoRoom, Placement, bin_pack, links, split
from ryu_apps.algorithms.maxmin import max_min
from ryu_apps.algorithms.partition import Partition, PartitionConfig, StepResult
from ryu_apps.host import handshake as hs
from ryu_apps.modes.freeway_elephant import GEN_MASK, Elephant, Elephants, HandshakeOutcome, eid_of
from ryu_apps.modes.freeway_loads import Loads
from ryu_apps.modes.freeway_mice import MiceProgram
from ryu_apps.modes.freeway_recovery import Recovery
from ryu_apps.modes.placed import PlacedRates
from ryu_apps.openflow.intents import DeleteFlows, Flow, Meter, MeterModify
from ryu_apps.programs.forwarding import pod_prefixes, tor_prefixes
from ryu_apps.programs.mice_table import MiceTable, Pods
from ryu_apps.programs.pins import PRIO_ELEPHANT, HeldPins, path_entries
from topology.fabric import Fabric
from topology.paths import Path, tors_below
from topology.settings import SettingError, setting

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
    release_on_fin: bool = setting(True, "an elephant's TCP FIN, copied to the controller by one more entry at its "
                                   "ingress ToR, releases its allocation at once (off: only its entries' idle timeout "
                                   "does, elephant_idle_s after its last packet, and new elephants are placed around "
                                   "the finished ones meanwhile)", live=True)
    place_load: str = setting("held", "the load an announced elephant is placed by: held (on each link, what "
                              "is allocated there, a rate-less elephant at its floor, plus the link's mice load as "
                              "monitoring estimates it) or measured (the link's measured load where it is above "
                              "what is allocated: a finished elephant's traffic stays in that 1-s, smoothed "
                              "measurement for seconds after it ends, and new elephants were placed around it)",
                              choices=("held", "measured"), live=True)
    adopt_load: str = setting("measured", "the load an adopted elephant (one monitoring found, never announced) is "
                              "placed by: held (what is allocated on each link plus its mice load, as place_load "
                              "held) or measured (the link's measured load where it is above what is allocated)",
                              choices=("held", "measured"), live=True)
    place_ties: str = setting("first", "which of the high-throughput paths whose busiest link would be as busy an "
                              "elephant with one subflow is placed on: first (the earliest, as Bin-Pack's ties went: "
                              "rate-less elephants, counted at their floor, tie often and pile on the first core "
                              "of each group) or load (the one whose links carry least in total, then the earliest)",
                              choices=("first", "load"), live=True)
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


LEND_MARGIN = 0.1  # lending needs the HOL paths fuller than capacity, and the lent path better, by this much
# ... with ``place_load: held``: half an elephant's floor (a tenth of its host's link), so that a lent path
# emptier by one elephant is taken (the fluid model: 1-2% on large flows, experiments/engines/fluid.py), and
# what is left of measurement noise (the mice load) still decides nothing
LEND_MARGIN_HELD = 0.05
GROW_AT = 0.8  # an adopted elephant measured at this fraction of its allocation or more grows
SHRINK_AT = 0.5  # ... below this fraction it shrinks
SHRINK_TO = 1.5  # ... to its rate times this: inside the band, so that a steady rate stays put (its rate is then
# 0.67 of its allocation; at 1.25 it was exactly GROW_AT's 0.8, and a flow sending a steady rate under its link
# grew back to its path's room the next period and shrank again the one after, a meter change every period)
FINISHED_KEPT = 100_000  # elephants released by their FIN whose entries are remembered until they idle out
MOVE_WAIT_S = 10.0  # the longest the mice groups wait for elephant moves to report back


class FreewayState(Loads, MiceProgram, Recovery):
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
        self._fins: dict[int, set] = {}  # elephant -> its subflows whose FIN was seen (``fin``)
        self._finished: dict[int, Elephant] = {}  # cookie -> an elephant released by its FIN, its entries left
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
                            meter.meter_id if meter else 0, fin=self.cfg.release_on_fin)

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

        by_held = self.cfg.place_load == "held"
        if by_held:  # what is placed on the link now, and its mice
            load_after = self.held_load(comp)
        else:
            def load_after(ln: Link) -> float:
                measured = self.link_util.get(ln, 0.0) * self.capacity_bps(ln) - extra * held[ln]
                return max(0.0, max(measured, self.alloc.link.get(ln, 0.0)) - comp[ln])

        # a rate-less elephant may grow to its host's link (the placement is chosen for that; it is
        # allocated its floor, then its share)
        demand = want if msg.rate_kbps else max(want, access_kbps * 1000)
        try:
            placements = self.place(pair, want, n, load_after, demand_bps=demand, by_held=by_held)
        except NoRoom as e:
            if not overbook:
                out = nack(str(e), "no-room")
                out.replaced = replaced
                return out
            try:  # the best high-throughput path all the same, as an adopted elephant is placed
                placements = self.place(pair, want, n, load_after, headroom=float("inf"), demand_bps=demand,
                                        by_held=by_held)
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

    def held_load(self, given_up=None):
        """Per link, the load held there (``place_load`` / ``adopt_load`` held): what is allocated (less
        ``given_up``, what the rate-less announced elephants hold above their floors, when a placement may take
        that) plus the link's mice load (``mice_seen``)."""
        mice, alloc = self.mice_seen, self.alloc.link
        if given_up is None:
            return lambda ln: alloc.get(ln, 0.0) + mice.get(ln, 0.0) * self.capacity_bps(ln)
        return lambda ln: (max(0.0, alloc.get(ln, 0.0) - given_up[ln]) + mice.get(ln, 0.0) * self.capacity_bps(ln))

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
            by_held = self.cfg.adopt_load == "held"  # (the rate-less announced give up nothing to it)
            (pl,) = self.place((src.switch, dst.switch), rate_bps, load=self.held_load() if by_held else None,
                               headroom=float("inf"), demand_bps=demand, by_held=by_held)
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
        self._fins.pop(eid, None)
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
            el = self._finished.pop(cookie, None)
            if el is None:
                return {}
        else:
            self._release(eid)
            self.counters["elephant-expired"] += 1
        out: dict[str, list] = {}
        for sw, intents in self.release_ops(el):
            out.setdefault(sw, []).extend(intents)
        return out

    def finished(self, cookie: int) -> bool:
        """Whether ``cookie`` is an elephant's released by its FIN whose entries are still on the switches."""
        return cookie in self._finished

    def fin(self, switch: str, in_port: int, src: str, dst: str, sport: int, dport: int
            ) -> tuple[Elephant | None, dict[str, list]]:
        """A placed elephant's FIN, as its ingress ToR copied it (``release_on_fin``): once every subflow of
        the elephant has sent one, release it and clear its entries, as an idle timeout would a few seconds
        later: (the elephant released, the operations). A FIN of no placed elephant, or not from its source
        host's port, changes nothing (counted); nor does one before the elephant's install is confirmed (its
        timeout releases it then)."""
        sub = hs.Subflow(src, dst, 6, sport, dport)
        eid = self.by_subflow.get(sub)
        el = self.elephants.get(eid) if eid is not None else None
        if el is None:
            self.counters["fin-unknown"] += 1
            return None, {}
        if (switch, in_port) != (el.src.switch, el.src.port):
            self.counters["fin-not-from-its-host"] += 1
            return None, {}
        if eid in self.pending:
            self.counters["fin-before-confirmed"] += 1
            return None, {}
        done = self._fins.setdefault(eid, set())
        done.add(sub)
        if len(done) < len(el.subflows):
            return None, {}
        self._release(eid)
        self.counters["elephant-finished"] += 1
        self._finished[el.cookie] = el
        while len(self._finished) > FINISHED_KEPT:  # (a flow-removed that never came: the oldest forgotten)
            del self._finished[next(iter(self._finished))]
        return el, {}

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
                                            self.partition.is_hol, avoid, explain=False)
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
    def follow_demand(self, now: float, rates, elephants=None) -> list[tuple[str, list]]:
        """Adopted elephants' allocations follow their measured rate (``rates``: subflow -> bit/s, None
        when not measured). One held near its allocation (at least ``GROW_AT`` of it: its meter or its
        path limits it) grows by the room its path has, up to its access link; one sending less than
        ``SHRINK_AT`` of it shrinks to ``SHRINK_TO`` times its rate (never below the elephant threshold).
        Bin-Pack, EFM and the partition see the new allocation; the meter follows (a modification).
        ``elephants``: only these (a slice of the period's; one released since is passed over)."""
        ops: list[tuple[str, list]] = []
        for el in list(self.elephants.values()) if elephants is None else elephants:
            if self.elephants.get(el.eid) is not el:
                continue  # (released, or its number reused, since the slice was taken)
            if not el.adopted:
                ops += self._decay(now, el, rates)
                continue
            rate = rates(el.subflows[0])
            if rate is None:
                continue
            new = el.rate_bps
            if rate >= GROW_AT * el.rate_bps:
                cap = self.capacity_bps((el.src.name, el.src.switch))
                if el.rate_bps <= cap < 1.05 * el.rate_bps:
                    continue  # (held near its access link: whatever its path's room, it moves by under 5%)
                room = min(self._free(pl.path) for pl in el.placements)
                new = min(cap, el.rate_bps + max(0.0, room))
            elif rate < SHRINK_AT * el.rate_bps:
                new = max(self._min_rate(el), SHRINK_TO * rate)
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
                new = max(self._min_rate(el) * len(el.subflows), SHRINK_TO * rate)
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
        install, after)].

        Under a dense load (k=16, 2,900 adopted elephants, hundreds of links over the threshold,
        2026-12-05) this was most of every 300-700 ms period, most of it in building each candidate's
        pair's paths: every link of every path asked whether it is open to elephants. Nothing in this
        call changes that, so each link is asked once, each ToR's halves of its paths (up to each top,
        down from it) once, and a pair's paths are put together from them; a link's load is looked up
        once between moves. The outcome is the same (a unit test holds it to the plain walk's)."""
        moves = []
        over = util.above(threshold) if hasattr(util, "above") else [ln for ln, u in util.items() if u > threshold]
        opened: dict = {}  # whether a link, or a path's half, is open to elephants (nothing here changes it)
        open_, stale, part = self._elephant_link_open(), self.stale, self.partition

        def is_open(ln) -> bool:  # (a dead link is not: neither high-throughput nor lendable)
            v = opened.get(ln)
            if v is None:
                v = opened[ln] = open_(ln) and ln not in stale
            return v

        halves: dict = {}  # per (ToR, up or down): each top's half of the paths, or None where it is not open

        def half(tor: str, up: bool) -> list:
            v = halves.get((tor, up))
            if v is None:
                hs = part.halves_up(tor) if up else part.halves_down(tor)
                v = halves[(tor, up)] = [ls if all(is_open(ln) for ln in ls) else None for ls in hs]
            return v

        def pair_paths(pair) -> list[tuple]:  # ``elephant_paths``, as links, from the halves of its paths
            if not part.is_partitioned(pair):
                return [links(p) for p in self._paths(pair, is_open)]
            return [up + down for up, down in zip(half(pair[0], True), half(pair[1], False), strict=True) if up and down]

        paths_of: dict = {}  # a pair's paths as their links
        # until a move changes the loads: per link (its load, threshold x capacity), and per elephant the paths
        # of its pair on which it would make no link hot
        loads: dict = {}
        cool_paths: dict = {}
        for link in sorted(over, key=lambda ln: -util[ln]):
            cands = sorted((self.elephants[e] for e in self.alloc.crossing(link) if e in self.elephants
                            and self.elephants[e].adopted and now - self.elephants[e].moved_at >= hold_down_s),
                           key=lambda el: -el.rate_bps)
            for el in cands:
                mine = {ln for pl in el.placements for ln in links(pl.path)}
                pair = (el.src.switch, el.dst.switch)
                paths = paths_of.get(pair)
                if paths is None:
                    paths = paths_of[pair] = pair_paths(pair)

                def cool(ln, el=el, mine=mine) -> bool:  # (it would not make the link hot)
                    if ln in mine:
                        return True
                    v = loads.get(ln)
                    if v is None:
                        v = loads[ln] = (self.load_bps(ln), threshold * self.capacity_bps(ln))
                    return v[0] + el.rate_bps <= v[1]

                # a path that avoids the hot link and every link it would make hot: looked for first, and the
                # whole set to avoid worked out only then (at k=16, 2,300 adopted elephants and many links
                # over the threshold, the set for every candidate was half of a 300 ms period, 2026-12-02).
                # The paths on which it would make no link hot are the same for each hot link it crosses until
                # a move: found once (asking a pair's 64 paths again for each was a third of a 120-300 ms
                # period at k=16, 2026-12-06)
                ok = cool_paths.get(el.eid)
                if ok is None:
                    ok = cool_paths[el.eid] = [ls for ls in paths if all(cool(ln) for ln in ls)]
                if not any(link not in ls for ls in ok):
                    continue
                avoid = {link} | {ln for ls in paths for ln in ls if not cool(ln)}
                plan = self.reroute_plan(el, avoid)
                if plan is not None:
                    el.moved_at = now
                    self.counters["adopted-moved-hot"] += 1
                    moves.append((el, *plan))
                    loads.clear()
                    cool_paths.clear()
                    break
        return moves

    def place(self, pair, rate_bps: float, n: int = 1, load=None, headroom: float | None = None,
              avoid=frozenset(), demand_bps: float | None = None, by_held: bool | None = None) -> list[Placement]:
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
        if by_held is None:  # ``load`` is the held load (``held_load``): lending is judged by it too
            by_held = self.cfg.place_load == "held"
        full = load if by_held else self.load_bps  # (lending judged by the same load)
        margin = LEND_MARGIN_HELD if self.cfg.place_load == "held" else LEND_MARGIN
        u_hol = self._full_util(hol, scale, full) if hol is not None else float("inf")
        if u_hol <= 1.0 + margin:
            return hol
        try:
            lent = self._place_on(pair, rate_bps, n, load, headroom, self.open_link, avoid, explain=False)
        except NoRoom:
            lent = None
        if lent is not None and self._full_util(lent, scale, full) < u_hol - margin:
            self.counters["placed-on-lent"] += any(not self.partition.is_hol(ln) for pl in lent
                                                   for ln in links(pl.path))
            return lent
        if hol is None:
            raise why
        return hol

    def _place_on(self, pair, rate_bps, n, load, headroom, open_, avoid, explain: bool = True) -> list[Placement]:
        """``explain`` False: a refusal without its reason (``NoRoom()``), for a caller that never shows it (working
        the reason out walks every path of the pair, 552 at k=48)."""
        if n > 1 or not self.partition.is_partitioned(pair):
            paths = self._paths(pair, open_, avoid)
            if not paths:
                raise self._no_path(pair, open_, avoid) if explain else NoRoom()
            return split(paths, rate_bps, n, load, self.capacity_bps, headroom, self.cfg.place_ties)
        stale = self.stale
        usable = ((lambda ln: ln not in stale and ln not in avoid) if stale or avoid else (lambda ln: True))
        found = self.partition.best_hol_path(pair, lambda ln: (load(ln) + rate_bps) / self.capacity_bps(ln),
                                             usable, open_, self.cfg.place_ties)
        if found is None:
            raise self._no_path(pair, open_, avoid) if explain else NoRoom()
        # the same checks and refusal as Bin-Pack over every path
        return [bin_pack([found[1]], rate_bps, load, self.capacity_bps, headroom)]

    def _no_path(self, pair, open_, avoid) -> NoRoom:
        """Why the pair has no path to place on: every live path holds a low-latency (or dead) link, or
        those that do not hold a link measured too long ago (``stale``: no placement on a load it does not
        know), or one the caller avoids. One pass over the paths, each link judged once: a refusal for
        stale links came to 5.3 ms at k=48 (552 paths a pair, walked three times) against 0.2 ms for a
        placement, and while a worker's links are stale every announce is one."""
        judged: dict = {}
        stale_seen: set = set()
        n_open, fresh = 0, False
        for p in self.partition.live_paths(pair):
            ls = links(p)
            for ln in ls:
                ok = judged.get(ln)
                if ok is None:
                    ok = judged[ln] = bool(open_(ln))
                if not ok:
                    break
            else:
                n_open += 1
                old = [ln for ln in ls if ln in self.stale]
                stale_seen.update(old)
                fresh = fresh or not old
        if not n_open:
            return NoRoom("no high-throughput path between these ToRs (all paths hold low-latency links)")
        if stale_seen and not fresh:
            stale = sorted(stale_seen)
            return NoRoom(f"no freshly measured high-throughput path between these ToRs: each of its {n_open} "
                          "crosses a link whose last measurement is too old to place on ("
                          f"{', '.join('%s>%s' % ln for ln in stale[:4])}{' ...' if len(stale) > 4 else ''})")
        return NoRoom(f"no usable high-throughput path between these ToRs: its {n_open} cross links "
                      "being moved off or not measured lately")

    def _full_util(self, placements: list[Placement], scale: float = 1.0, load=None) -> float:
        """The busiest link's utilisation with ``placements`` (their rates times ``scale``) added to
        ``load`` (default ``load_bps``: everything allocated and measured)."""
        load = load or self.load_bps
        extra: Counter = Counter()
        for pl in placements:
            for ln in links(pl.path):
                extra[ln] += pl.rate_bps * scale
        return max(((load(ln) + r) / self.capacity_bps(ln) for ln, r in extra.items()), default=0.0)

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
        return self._paths(pair, self._elephant_link_open())

    def _elephant_link_open(self):
        """Whether a link is open to elephants now: high-throughput, or (when lending) lendable."""
        return self.open_link if self.lending() else self.partition.is_hol

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
        steps = self.period_steps(now, active_pairs)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def period_steps(self, now: float, active_pairs):
        """``period`` in three steps, a generator that returns its result: the mice loads; the partition
        step with the moves it asks for; the mice groups. Its caller may serve others between them (at
        k=48 each took 10-60 ms of the controller's one event loop, 120 ms together, 2026-12-02): a
        handshake answered there places on the partition as it is, a step made or not."""
        if self.recovering(now):  # the partition is still being read back from the ToRs: change nothing
            return StepResult(), []
        if self.moving and now - self._moving_since < MOVE_WAIT_S:  # elephants are still leaving links that
            return StepResult(), []  # turned LOL: the mice wait for them
        if self.moving:  # a move that never reported back must not freeze the partition
            self.counters["moves-never-finished"] += self.moving
            self.moving = 0
        self.now = now
        self.mice_util  # noqa: B018 (worked out once per measurement, kept for the step)
        yield
        if self.recovering(now):  # a switch's read-back began the recovery meanwhile: no step, as above
            return StepResult(), []
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
        yield
        if self.recovering(now):  # ... the step's changes wait for the first mice update after it
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
