"""Link occupancy, per-flow rates and elephant detection from sFlow data.

Pure: fed with decoded samples (or, for the sFlow-RT backend, rates that
sFlow-RT already computed) and ``now``; returns events. No sockets, no clock.

- Link occupancy per directed link: deltas of interface octet counters over
  the time between samples, divided by the link capacity from the fabric
  description (the veth ifSpeed OVS reports is meaningless here), smoothed
  by an exponentially weighted moving average.
- Flow rate: each flow sample stands for ``sampling_rate`` packets of its
  frame length. Samples are kept per observation point (the switch and port
  where the packet entered) over a sliding window; a point's rate is its bytes
  over the time it has seen the flow (at least ``min_span_s``, at most the
  window), and the flow's rate is the mean over the points that saw it, which
  averages out sampling noise along the path.
- A flow is an elephant once its rate passes ``elephant_fraction`` of its
  access link rate (with at least ``min_samples`` samples) and it has sent
  ``elephant_min_bytes`` (Hedera's rate test plus DevoFlow's size test: a
  100 KB mouse at line rate passes 10% of the link for the tenth of a second
  it lasts, and must not be taken for an elephant), and stops being
  one after staying under for ``hold_s`` or going unsampled for ``idle_s``.
- Link rate from flow samples: every sample entering a switch port also
  stands for its link's traffic. Over the last ``link_window_s`` a link's
  rate is its sampled bytes over the time they cover (at least half the
  window), and what is kept is the lower confidence bound
  ``rate x (1 - 2 / sqrt(samples))``: a saturated link shows within about
  half a second, where the counters (polled every second) show
  it one or two polls later, and a link well under the threshold does not
  pass it by sampling chance. With fewer than ``LINK_MIN_SAMPLES`` samples in
  the window there is no reading.
- A TCP flow's bytes are read from the sequence numbers in its sampled
  headers: the span from the lowest sampled sequence number to the end of
  the highest sampled segment is a lower bound on what it has sent, exact to
  within the unsampled packets at either end, so a flow smaller than the bar
  can never pass it. A flow without TCP segments (UDP) has only the sampling
  estimate (samples x sampling rate x frame bytes), which scatters, and a
  higher bar, ``elephant_min_bytes_estimated``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from monitoring.events import ElephantEnd, ElephantStart, LinkLoad, PortState
from monitoring.sflow import CounterSample, FiveTuple, FlowSample
from monitoring.view import FlowReading, LinkArray, LinkColumns, LinkReading, Readings, View
from monitoring.view import make as make_view
from topology.fabric import Fabric
from topology.settings import SettingError, setting, validate

UNKNOWN_IF = 0x3FFFFFFF
IF_OPER_UP = 2  # ifStatus: bit 0 admin up, bit 1 operationally up (RFC 2233 ifOperStatus)
UNKNOWN_COUNTER = 2**64 - 1
DOWN_CONFIRM_S = 0.5  # sFlow says a port is down: believed at a second reading at least this much later
AGENTS_SLACK = 64  # agent addresses kept as seen: at most one per switch and this many more
INTERVAL_ALPHA = 0.01  # the running mean of the counters' interval: each delta's weight
EVALUATE_S = 1.0  # a flow no sample came for is worked out again after this long (``Estimator.tick``)
IMPLAUSIBLE_RATE = 1.5  # a counter delta faster than this many times the link's rate is no measurement  # sFlow v5: a counter the agent cannot read is sent as all ones
LINK_MIN_SAMPLES = 20  # fewer flow samples in a link's window: no sampled reading
LINK_BUCKETS = 10  # a link's window is kept in this many buckets
LINK_Z = 2.0  # the sampled reading is the rate's lower bound at this many standard deviations of the estimate


NAN = float("nan")


def _np():
    import numpy

    return numpy


class CounterBatch:
    """Readings of octets gathered from counter samples (``Estimator.gather_counters``): each one's slot (the
    port side it reads), octets and time, in the order they came, until ``Estimator.fold_counters`` folds
    them all at once."""

    __slots__ = ("slots", "octets", "times")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.slots: list[int] = []
        self.octets: list[int] = []
        self.times: list[float] = []


MonitorConfigError = SettingError  # an invalid monitoring setting; the message names the key


@dataclass(frozen=True)
class MonitorConfig:
    elephant_fraction: float = setting(0.10, "a flow above this fraction of its access link rate is an elephant "
                                       "(EFM: 10%)", positive=True, live=True)
    window_s: float = setting(2.0, "sliding window for flow rates", "s", positive=True, live=True)
    min_span_s: float = setting(0.5, "a young flow's rate is its bytes over at least this long", "s", positive=True, live=True)
    min_samples: int = setting(3, "flow samples needed before a flow can be called an elephant", min=1, live=True)
    elephant_min_bytes: float = setting(125_000, "bytes a TCP elephant must also have sent, read from the sampled "
                                        "sequence numbers (0: no such bar)", "bytes", live=True)
    elephant_min_bytes_estimated: float = setting(250_000, "the same bar for a flow without TCP segments (UDP), "
                                                  "whose bytes only the samples estimate (0: no such bar)", "bytes",
                                                  live=True)
    hold_s: float = setting(2.0, "an elephant ends after this long under the threshold", "s", positive=True, live=True)
    idle_s: float = setting(3.0, "... or this long without samples", "s", positive=True, live=True)
    ewma_alpha: float = setting(0.5, "weight of the newest link occupancy measurement", positive=True, max=1, live=True)
    link_window_s: float = setting(0.8, "flow samples over this long also measure their link's rate (a lower "
                                   "bound, used to see a link fill up before its next counter poll; 0: off)", "s",
                                   live=True)

    def __post_init__(self) -> None:
        validate(self)
        if self.elephant_fraction >= 1:
            raise SettingError(f"elephant_fraction: must be below 1, got {self.elephant_fraction}")
        if self.min_span_s > self.window_s:
            raise SettingError("min_span_s: must not exceed window_s")


@dataclass
class _Point:
    first: float
    samples: deque = field(default_factory=deque)  # (time, bytes)
    total: float = 0.0  # bytes estimated since the point first saw the flow
    held: float = 0.0  # the bytes of ``samples``, kept as they come and go (a sum over them at each evaluation
    # was two fifths of the controller's flow work at k=8 under 1-in-10, 2026-12-05; the bytes are whole numbers:
    # the running sum is the sum)


@dataclass
class FlowState:
    flow: FiveTuple
    points: dict[tuple[str, int], _Point] = field(default_factory=dict)
    last_seen: float = 0.0
    elephant_since: float | None = None
    below_since: float | None = None
    rate_bps: float = 0.0
    external_rate: float | None = None  # set by a backend that measures rates itself
    seq_base: int | None = None  # the first sampled TCP sequence number; seq_lo/seq_hi are relative to it
    seq_lo: int = 0
    seq_hi: int = 0
    seq_since: float = 0.0  # when the first segment of the span was sampled
    evaluated: float = -1e18  # when ``tick`` last worked out its rate


class Estimator:
    def __init__(self, fabric: Fabric, config: MonitorConfig | None = None):
        self.fabric = fabric
        self.cfg = config or MonitorConfig()
        self.ifmap: dict[tuple[str | None, int], tuple[str, int]] = {}  # (agent or None: any, ifIndex) -> port
        self.agents: set[str] = set()  # agent addresses seen
        self._own: set[str] = set()
        self._any = False
        self.flows: dict[FiveTuple, FlowState] = {}
        ends = [(ln.a, ln.b) for ln in fabric.links] + [(h.name, h.switch) for h in fabric.hosts]
        # every directed link's latest reading (smoothed occupancy 0..1+, the raw rate, when it was taken, when
        # the traffic it measured began), one array per field, kept as each measurement comes: a period's
        # view copies the arrays (see ``LinkColumns``); ``link_util`` and the rest read them as dictionaries
        self.columns = LinkColumns(sorted({ln for a, b in ends for ln in ((a, b), (b, a))}))
        self.counter_interval_s = 1.0  # how far apart a port's counter samples come (a running mean)
        # when each (link, side)'s octets were last read, and how many: two lists of numbers at the side's slot
        # (``_slot``), resolved once per port map with the rest of a port's route. Not maps keyed by (link,
        # side): a nested tuple's hash is worked out afresh at each lookup, four a sample; and not one list of
        # (when, octets) pairs: a new pair for each of 138,240 ports' samples at k=48 was a young object the
        # cyclic collector had to walk (numbers are not tracked)
        self._slot_of: dict[tuple[tuple[str, str], str], int] = {}
        self._counter_at, self._counter_octets = _np().full(64, NAN), _np().zeros(64, dtype=_np().uint64)  # (NaN: never)
        self._slot_col = _np().full(64, -1, dtype=_np().intp)  # each slot's link: its position in the columns (-1: aside)
        self._slot_cap = _np().ones(64)  # ... its capacity
        self._slot_link: list[tuple[str, str]] = []  # ... the link itself
        self._nslots = 0
        # the links over the hot threshold by their counters (``_over["counters"]``) as an array by column: read
        # for a whole batch of readings at once; rebuilt from the set when the set is not the one it was made of
        self._over_col = _np().zeros(len(self.columns.links) + 1, dtype=bool)
        self._over_src: set | None = None
        self._link_samples: dict[tuple[str, str], deque] = {}  # link -> [bucket start, bytes, samples, Σ bytes²]
        # link -> its buckets' [bytes, samples, Σ bytes²] (those of the window and older), kept as buckets come and go:
        # a link under the threshold is held to it at each sample, and summing its buckets each time was a third of
        # the controller's flow work at k=8 under 1-in-10 (2026-12-05)
        self._link_sum: dict[tuple[str, str], list] = {}
        self._checked_at: dict[tuple[str, str], float] = {}  # when a link's samples were last held to the threshold
        self._over: dict[str, set[tuple[str, str]]] = {"counters": set(), "samples": set()}  # over it by each
        self._link_of: dict[tuple[str, int], tuple[str, str] | None] = {}  # (switch, port) -> link into it
        self.hot_threshold: float | None = None  # set by a policy that wants to hear of links over it at once
        self.hot: set[tuple[str, str]] = set()  # links newly over hot_threshold since the last take_hot()
        self.port_up: dict[tuple[str, int], bool] = {}  # fabric port -> operational status as sFlow reports it
        # (a port never reported is up: only those reported down, and up again since, are in it)
        self.stats = {"flow_samples": 0, "counter_samples": 0, "unmapped_ifindex": 0, "packets_without_ip": 0,
                      "unknown_counter": 0, "discarded_samples": 0, "samples_not_from_a_port": 0,
                      "implausible_tcp_span": 0, "implausible_rate": 0, "port_down_unconfirmed": 0}
        self._down_since: dict[tuple[str, int], float] = {}  # fabric port -> first reading of "down" unconfirmed
        self._watched: set[tuple[str, int]] = set()  # fabric ports down, or said to be: an "up" reading is news
        # flows sampled since the last tick, in the order first sampled (a dict: a set's order follows string
        # hashes, random per process, and so did the order of the elephants a tick found)
        self._sampled: dict[FiveTuple, None] = {}
        # each flow's reading as of its last evaluation (``tick``), and its ToR pair: a period's view copies
        # them rather than building 10,000 readings at once (the event loop is held meanwhile)
        self.flow_readings: dict[FiveTuple, FlowReading] = {}
        self._pair_of: dict[FiveTuple, tuple[str, str] | None] = {}
        self._due: deque = deque()  # (when evaluated, flow), oldest first: flows no sample came for wait their turn
        # (agent, ifIndex) -> what its counter samples measure (``_route``), resolved once per port map
        self._routes: dict[tuple[str | None, int], tuple] = {}
        self._ready: dict[tuple[str, int], tuple] = {}  # (switch, port) -> its route, resolved ahead (``prepare_routes``)
        self._to_prepare: list | None = None  # the map's ports not resolved ahead yet (None: not listed yet)
        # a worker of the collector hands its sampled packets, located, to this (``monitoring.shard``): the controller
        # folds them (``fold_packets``); and notes here the links whose samples it folded (for the controller's view)
        self.flow_sink = None
        self.links_touched: set | None = None
        # links whose collector worker died, until measured again (``monitoring.shard.Merge``): stale at any age
        self.stale_links: frozenset = frozenset()

    # ----- mapping -----------------------------------------------------
    def set_ifmap(self, ifmap: dict) -> None:
        """(agent, ifIndex) -> (switch, port); a bare ifIndex key holds for any agent."""
        self.ifmap = {(k if isinstance(k, tuple) else (None, k)): v for k, v in ifmap.items()}
        self._own = {agent for agent, _ in self.ifmap if agent is not None}  # agents with a map of their own
        self._any = any(agent is None for agent, _ in self.ifmap)  # some entries hold for any agent
        self._routes.clear()
        self._to_prepare = None

    def knows_agent(self, agent: str | None) -> bool:
        """Is ``agent`` one of the fabric's? Known only when every map entry names its agent (each switch
        exports under its own address); with a map that holds for any agent (one host), every agent is."""
        if not self._own or self._any:
            return True
        return agent in self._own

    def locate(self, agent: str | None, if_index: int) -> tuple[str, int] | None:
        """The (switch, port) an agent's ifIndex stands for: from that agent's own map if it has one
        (and nowhere else), else from the map that holds for any agent (one host, unique ifIndexes);
        None if neither knows it."""
        if agent is not None and agent in self._own:  # its own map is the whole truth about its ifIndexes
            where = self.ifmap.get((agent, if_index))
        else:
            where = self.ifmap.get((None, if_index))
        if where is not None and agent is not None and len(self.agents) < len(self.fabric.switches) + AGENTS_SLACK:
            self.agents.add(agent)  # (bounded: with a map for any agent, any source address gets this far)
        return where

    def access_rate_bps(self, flow: FiveTuple) -> float:
        return self.fabric.host_rate_bps(flow.src)

    # ----- counters -> link occupancy ------------------------------------
    def on_counters(self, now: float, sample: CounterSample, agent: str | None = None,
                    loads: bool = True) -> list[LinkLoad | PortState]:
        """Link loads from the octet counters (``loads``: as events; else only kept); a fabric port's
        operational status when it changes (the first report only when it is down: a port starts out
        as up)."""
        return self.on_counter_samples(now, (sample,), agent, loads)

    def on_counter_samples(self, now: float, samples, agent: str | None = None,
                           loads: bool = True) -> list[LinkLoad | PortState]:
        """``on_counters`` for a datagram's samples, in their order (one call, not one a sample: a k=48
        fabric sends 138,240 a second). The port changes they bring come first, then the link loads."""
        batch = CounterBatch()
        events = self.gather_counters(now, samples, agent, batch)
        return events + self.fold_counters(batch, loads)

    def gather_counters(self, now: float, samples, agent: str | None, batch: CounterBatch) -> list[PortState]:
        """Half of ``on_counter_samples``: the samples' readings of octets kept in ``batch`` (folded by
        ``fold_counters``, which may take those of many datagrams at once), their ports' status changes
        worked out now and returned."""
        events: list = []
        routes, watched = self._routes, self._watched
        slots, octets, times = batch.slots, batch.octets, batch.times
        n = 0
        try:
            for sample in samples:
                for ifc in sample.interfaces:
                    r = routes.get((agent, ifc.if_index))
                    if r is None:
                        r = self._route(agent, ifc.if_index)
                        if r is None:
                            self.stats["unmapped_ifindex"] += 1
                            continue
                    n += 1
                    port, measures = r
                    if port is not None:  # a fabric port: its status is news if it is down, or was
                        up = ifc.if_status & IF_OPER_UP
                        if not up or port in watched:
                            ev = self._port_status(now, port, bool(up))
                            if ev is not None:
                                events.append(ev)
                    for slot, out in measures:
                        value = ifc.out_octets if out else ifc.in_octets
                        if value >= UNKNOWN_COUNTER:  # sFlow's "unknown" (all ones): neither a measurement
                            self.stats["unknown_counter"] += 1  # nor a new baseline
                            continue
                        slots.append(slot)
                        octets.append(value)
                        times.append(now)
        finally:
            self.stats["counter_samples"] += n
        return events

    def fold_counters(self, batch: CounterBatch, loads: bool = True) -> list[LinkLoad]:
        """The octets gathered in ``batch`` (``gather_counters``), each against its port's last reading, in
        the order they came: the links' rates folded into their occupancy (as LinkLoad events, in that order,
        if ``loads``), or nothing for a first reading, a clock step, a counter reset, or a rate faster than
        the link. Worked out an array at a time: 165,888 readings a second at k=48 were a Python call each.
        A port read twice in one batch is taken in rounds, each with every port at most once, so every
        reading meets the one before it; the counters' interval is a running mean over the deltas in the
        order they came, as one at a time would have it (the same arithmetic, the same numbers)."""
        np = _np()
        nb = len(batch.slots)
        if not nb:
            return []
        s = np.array(batch.slots, dtype=np.intp)
        o = np.array(batch.octets, dtype=np.uint64)
        tm = np.array(batch.times, dtype=np.float64)
        batch.clear()
        order = np.argsort(s, kind="stable")
        ss = s[order]
        first = np.empty(nb, dtype=bool)
        first[0] = True
        np.not_equal(ss[1:], ss[:-1], out=first[1:])
        if first.all():
            rounds = [None]  # (every port once: one round of all)
        else:  # each reading's rank among its port's in this batch: round r takes the r-th of each
            rank = np.empty(nb, dtype=np.intp)
            rank[order] = np.arange(nb) - np.maximum.accumulate(np.where(first, np.arange(nb), 0))
            rounds = [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1)]
        at, seen, cols = self._counter_at, self._counter_octets, self.columns
        alpha, hot = self.cfg.ewma_alpha, self.hot_threshold
        if hot is not None and (self._over["counters"] is not self._over_src
                                or len(self._over["counters"]) != int(self._over_col.sum())):
            self._sync_over()
        done: list = []  # per round: (positions in the batch, their deltas, rates, occupancies, slots)
        for idx in rounds:
            sl, tr, orr = (s, tm, o) if idx is None else (s[idx], tm[idx], o[idx])
            t0, o0 = at[sl], seen[sl]
            at[sl], seen[sl] = tr, orr
            with np.errstate(invalid="ignore"):
                v = np.flatnonzero((tr > t0) & (orr >= o0))  # (NaN: a first reading)
            if not len(v):
                continue
            slv, t0v, trv = sl[v], t0[v], tr[v]
            dt = trv - t0v
            bps = (orr[v] - o0[v]).astype(np.float64) * 8 / dt
            cap = self._slot_cap[slv]
            ok = bps <= IMPLAUSIBLE_RATE * cap  # faster than the link: not a measurement
            self.stats["implausible_rate"] += int(len(ok) - ok.sum())
            pos_in_batch = v if idx is None else idx[v]
            if not ok.all():
                kept = np.flatnonzero(ok)
                done.append((pos_in_batch, dt, None, None, None))  # (their deltas still count for the interval)
                pos_in_batch, dt, bps, cap, slv, t0v, trv = (pos_in_batch[kept], None, bps[kept], cap[kept],
                                                            slv[kept], t0v[kept], trv[kept])
            np.minimum(bps, cap, out=bps)  # (a little faster: counters read a moment apart; never more than the link)
            col = self._slot_col[slv]
            inside = col >= 0
            if hot is not None:  # links going over the threshold, or under it: news either way, most are not
                over = bps > hot * cap
                was = self._over_col[col]
                if not inside.all():
                    for j in np.flatnonzero(~inside).tolist():
                        was[j] = self._slot_link[int(slv[j])] in self._over["counters"]
                changed = np.flatnonzero(over != was)
                for j in changed.tolist():
                    c = int(col[j])
                    if c >= 0:
                        self._over_col[c] = over[j]
                    self._note_over(self._slot_link[int(slv[j])], "counters", bool(over[j]))
                self._over_src = self._over["counters"]
            util = bps / cap
            if not inside.all():  # links kept aside (none the estimator is built with): one at a time
                for j in np.flatnonzero(~inside).tolist():
                    util[j] = cols.fold(None, self._slot_link[int(slv[j])], alpha, float(util[j]), float(bps[j]),
                                        float(trv[j]), float(t0v[j]))
                keep = np.flatnonzero(inside)
                c, ui, bi, ti, fi = col[keep], util[keep], bps[keep], trv[keep], t0v[keep]
            else:
                c, ui, bi, ti, fi = col, util, bps, trv, t0v
            if len(c):
                old_t = cols.time[c]
                folded = np.where(old_t == old_t, alpha * ui + (1 - alpha) * cols.util[c], ui)  # (NaN: never measured)
                cols.util[c], cols.bps[c], cols.time[c], cols.fresh[c], cols.since[c] = folded, bi, ti, fi, fi
                cols._measured = None
                if inside.all():
                    util = folded
                else:
                    util[keep] = folded
            done.append((pos_in_batch, dt, bps, util, slv))
        # the counters' interval: a running mean over the deltas in the order they came
        deltas = [(p, d) for p, d, *_ in done if d is not None]
        if deltas:
            p = np.concatenate([p for p, _ in deltas])
            d = np.concatenate([d for _, d in deltas])
            ci = self.counter_interval_s
            for x in (d if len(deltas) == 1 else d[np.argsort(p, kind="stable")]).tolist():
                ci += INTERVAL_ALPHA * (x - ci)
            self.counter_interval_s = ci
        if not loads:
            return []
        parts = [r for r in done if r[2] is not None]
        if not parts:
            return []
        p = np.concatenate([r[0] for r in parts])
        rows = zip(np.concatenate([r[4] for r in parts]).tolist(), np.concatenate([r[2] for r in parts]).tolist(),
                   np.concatenate([r[3] for r in parts]).tolist(), tm[p].tolist(), p.tolist(), strict=True)
        links = self._slot_link
        return [LinkLoad(t, links[sl], b, u) for sl, b, u, t, _ in sorted(rows, key=lambda r: r[4])]

    def _sync_over(self) -> None:
        """``_over_col`` made again from the set of links over the hot threshold by their counters."""
        pos = self.columns.pos
        self._over_col[:] = False
        for link in self._over["counters"]:
            i = pos.get(link)
            if i is not None:
                self._over_col[i] = True
        self._over_src = self._over["counters"]

    def _route(self, agent: str | None, if_index: int) -> tuple | None:
        """What a counter sample of ``agent``'s ``if_index`` measures: (the (switch, port) if the port faces
        a switch, else None; ((side's slot, its out side?), ...)): the link out of the port, and for a host's
        port the host's link in too (the host has no agent: the switch's rx side); None when the port map
        does not know the port. Resolved once per port map, not for each of 138,240 ports' samples (the map
        lookups, the peer, the capacity three times were a third of a sample's cost at k=48). Unknown ports
        are not kept (any ifIndex can come in a datagram), and the whole is dropped if it ever holds more
        than the map could explain."""
        where = self.locate(agent, if_index)
        if where is None:
            return None
        r = self._ready.get(where)
        if r is None:
            r = self._resolve(where)
        if len(self._routes) > 2 * len(self.ifmap) + 1024:
            self._routes.clear()
        self._routes[(agent, if_index)] = r
        return r

    def _resolve(self, where: tuple[str, int]) -> tuple:
        """``_route``'s answer for a switch port (the fabric's alone: the same under any port map)."""
        sw, port = where
        peer = self.fabric.peer(sw, port)
        if peer is None:
            return (None, ())
        other = peer[0]
        fabric_port = other in self.fabric.switches
        ends = [((sw, other), "out", True)] + ([] if fabric_port else [((other, sw), "in", False)])
        pos = self.columns.pos
        return ((sw, port) if fabric_port else None,
                tuple((self._slot((link, side), pos.get(link), self.fabric.capacity_bps(link)), out)
                      for link, side, out in ends))

    def prepare_routes(self, limit: int | None = None) -> int:
        """Resolve what the map's ports measure before their first samples come, up to ``limit`` of them a
        call (None: all); how many are left. A collector's worker does it when it has nothing else to do: at
        k=48 the first second of counters resolved 138,240 ports as they came, took the worker about a
        second more than it had, and its socket overflowed (done all at once when the map comes, it held a
        worker restarted under load 1.4 s before it read anything). The samples' agents are still noted as
        they come."""
        if self._to_prepare is None:
            if len(self._ready) > 2 * len(self.ifmap) + 1024:
                self._ready.clear()
            self._to_prepare = [w for w in set(self.ifmap.values()) if w not in self._ready]
        todo, ready = self._to_prepare, self._ready
        for _ in range(len(todo) if limit is None else min(limit, len(todo))):
            where = todo.pop()
            if where not in ready:
                ready[where] = self._resolve(where)
        return len(todo)

    def _slot(self, key: tuple[tuple[str, str], str], col: int | None, cap: float) -> int:
        """A (link, side)'s slot in the counters' last readings (a new one, never read, the first time), with
        its link's position in the columns (``col``, None: kept aside) and capacity."""
        slot = self._slot_of.get(key)
        if slot is None:
            np = _np()
            slot = self._slot_of[key] = self._nslots
            if slot == len(self._counter_at):  # (full: twice the room)
                n = 2 * slot
                self._counter_at = np.concatenate([self._counter_at, np.full(n - slot, NAN)])
                self._counter_octets = np.concatenate([self._counter_octets, np.zeros(n - slot, dtype=np.uint64)])
                self._slot_col = np.concatenate([self._slot_col, np.full(n - slot, -1, dtype=np.intp)])
                self._slot_cap = np.concatenate([self._slot_cap, np.ones(n - slot)])
            self._nslots += 1
            self._slot_link.append(key[0])
        self._slot_col[slot] = -1 if col is None else col
        self._slot_cap[slot] = cap
        return slot

    def _port_status(self, now: float, key: tuple[str, int], up: bool) -> PortState | None:
        """A fabric port's status as the liveness model should hear it. Down is believed only when two
        readings at least ``DOWN_CONFIRM_S`` apart both say so with no "up" between (a switch's agent polls
        every second, so a real fault is confirmed at its second reading): one datagram, which anyone who can
        reach the collector can forge with a switch's address, never takes a link down (issue 40)."""
        was = self.port_up.get(key, True)
        if up:
            self._down_since.pop(key, None)
            self._watched.discard(key)
            if was:
                return None
            self.port_up[key] = True
            return PortState(now, key[0], key[1], True)
        self._watched.add(key)
        if not was:
            return None
        first = self._down_since.setdefault(key, now)
        if now - first < DOWN_CONFIRM_S:
            self.stats["port_down_unconfirmed"] += 1
            return None
        self.port_up[key] = False
        return PortState(now, key[0], key[1], False)

    def _note_over(self, link: tuple[str, str], by: str, over: bool) -> None:
        """A link going over the hot threshold by one kind of reading (under it before, by that kind) is
        noted for ``take_hot``; staying over is not news (the periodic round sees it)."""
        seen = self._over[by]
        if not over:
            seen.discard(link)
        elif link not in seen:
            seen.add(link)
            self.hot.add(link)

    def observe_link(self, now: float, link: tuple[str, str], bps: float, since: float | None = None) -> LinkLoad:
        """Fold a measured rate into the link's smoothed occupancy; ``since``: when the traffic it measured
        began (a counter delta's start), ``now`` if not known."""
        cap = self.fabric.capacity_bps(link)
        cols = self.columns
        return LinkLoad(now, link, bps, cols.fold(cols.pos.get(link), link, self.cfg.ewma_alpha, bps / cap, bps,
                                                  now, since))

    # ----- flow samples -> flow rates -------------------------------------
    def on_flow_sample(self, now: float, sample: FlowSample, agent: str | None = None) -> None:
        if sample.output_if >> 30 == 1:  # sFlow's "discarded" format: the switch dropped it (e.g. the
            self.stats["discarded_samples"] += 1  # ToR's anti-spoofing guard); it carries no flow's rate
            return
        if sample.input_if == 0 or sample.input_if >= 0x3FFFFFFF:  # 0: unknown; 0x3FFFFFFF: internal
            self.stats["samples_not_from_a_port"] += 1  # e.g. a packet the controller sent (LLDP probes)
            return
        where = self.locate(agent, sample.input_if)
        if where is None:
            self.stats["unmapped_ifindex"] += 1
            return
        rate = sample.sampling_rate
        packets = []
        for pkt in sample.packets:
            if pkt.five_tuple is None:
                self.stats["packets_without_ip"] += 1
                continue
            seq, length = pkt.tcp or (0, 0)
            packets.append((now, where, pkt.five_tuple, pkt.frame_length * rate, seq, length))
        # the link into ``where`` is measured where its agent's samples are read (one worker's, if the collector
        # is split: a switch's agent is read by one); the flows, sampled at several switches, where all meet
        self._link_sample(now, where, sum(p.frame_length for p in sample.packets) * rate)
        if self.flow_sink is not None:  # a worker of the collector: the controller folds them (``monitoring.shard``)
            self.flow_sink(packets)
        else:
            self.fold_packets(packets)

    def fold_packets(self, rows) -> None:
        """Sampled packets into their flows' estimates, each (when, where: the switch port it entered, its
        five-tuple, the bytes it stands for, its TCP sequence number and segment length, 0 and 0 if none). What
        a worker of the collector hands the controller (``monitoring.shard``) is these rows."""
        flows, point, sampled, n = self.flows, _Point, self._sampled, 0
        for now, where, ft, nb, seq, length in rows:
            n += 1
            st = flows.get(ft)
            if st is None:
                st = flows[ft] = FlowState(ft)
            pt = st.points.get(where)
            if pt is None:
                pt = st.points[where] = point(now)
            pt.samples.append((now, nb))
            pt.total += nb
            pt.held += nb
            st.last_seen = now
            sampled[ft] = None
            if length > 0:
                self._segment(now, st, seq, length)
        self.stats["flow_samples"] += n

    @staticmethod
    def _segment(now: float, st: FlowState, seq: int, length: int) -> None:
        """Widen the flow's known sequence span with one sampled segment (32-bit wrap-around: a segment
        within 2 GB of the first one, either side, is placed relative to it)."""
        if st.seq_base is None:
            st.seq_base, st.seq_lo, st.seq_hi, st.seq_since = seq, 0, length, now
            return
        rel = (seq - st.seq_base) % 2**32
        if rel >= 2**31:
            rel -= 2**32
        if rel < st.seq_lo:
            st.seq_lo = rel
        if rel + length > st.seq_hi:
            st.seq_hi = rel + length

    def tcp_bytes(self, now: float, st: FlowState) -> float | None:
        """Bytes a TCP flow has certainly sent (its sampled sequence span); None without a segment, or
        when the span is more than its access link could have carried since its first segment was
        sampled, plus a second (a sequence number from another connection, or garbage: counted, and
        the flow falls back to the sampling estimate)."""
        if st.seq_base is None:
            return None
        span = st.seq_hi - st.seq_lo
        if span > self.access_rate_bps(st.flow) / 8 * (now - st.seq_since + 1.0):
            self.stats["implausible_tcp_span"] += 1
            st.seq_base = None
            return None
        return float(span)

    def _link_sample(self, now: float, where: tuple[str, int], nbytes: float) -> None:
        """A flow sample entering ``where`` counts for the link into it (kept in LINK_BUCKETS buckets per
        window, so a link's state stays small at any sample rate); a link going over the hot threshold
        by its samples is noted at once (a link over it is held to it again once a bucket, to see it drop)."""
        w = self.cfg.link_window_s
        if w <= 0 or nbytes <= 0:
            return
        link = self._link_of.get(where, False)
        if link is False:
            peer = self.fabric.peer(*where)
            link = self._link_of[where] = (peer[0], where[0]) if peer is not None else None
        if link is None:
            return
        if self.links_touched is not None:
            self.links_touched.add(link)
        q, tot = self.link_buckets(link)
        tot[0] += nbytes
        tot[1] += 1
        tot[2] += nbytes * nbytes
        width = w / LINK_BUCKETS
        start = now - now % width
        if q and q[-1][0] == start:
            q[-1][1] += nbytes
            q[-1][2] += 1
            q[-1][3] += nbytes * nbytes
        else:
            q.append([start, nbytes, 1, nbytes * nbytes])
        if self.hot_threshold is not None and (link not in self._over["samples"]
                                               or now - self._checked_at.get(link, -1e9) >= width):
            self._checked_at[link] = now
            over = self.hot_threshold * self.fabric.capacity_bps(link)
            rate, n, rsd = self._sampled_rate(now, link)
            if link in self._over["samples"]:  # over until surely under: the upper bound (a full link's
                self._note_over(link, "samples", n > 0 and rate * (1 + LINK_Z * rsd) > over)  # estimate
            else:  # scatters across the threshold at a few samples a window)
                self._note_over(link, "samples", n >= LINK_MIN_SAMPLES and rate * (1 - LINK_Z * rsd) > over)

    def sampled_link(self, now: float, link: tuple[str, str]) -> tuple[float, float] | None:
        """(bits/s, window start): the lower confidence bound of the link's rate from its flow samples over
        the last ``link_window_s`` (the buckets wholly inside it); None with fewer than LINK_MIN_SAMPLES
        samples in it."""
        rate, n, rsd = self._sampled_rate(now, link)
        if n < LINK_MIN_SAMPLES or self.cfg.link_window_s <= 0:
            return None
        return rate * (1 - LINK_Z * rsd), now - self.cfg.link_window_s

    def _sampled_rate(self, now: float, link: tuple[str, str]) -> tuple[float, int, float]:
        """(bits/s, samples, relative standard deviation): the estimate of the link's rate from its flow
        samples over the last ``link_window_s`` (the buckets wholly inside it), how many samples it rests
        on, and how far it scatters: √Σx² / Σx over the samples' bytes x (1/√samples when the frames are all
        one size; more when they mix: a sampled 64-byte ACK and a 1,514-byte segment are not the same news)."""
        w = self.cfg.link_window_s
        q = self._trim_link(link, now - w)
        if q is None or w <= 0:  # (0: no sampled readings, a live setting)
            return 0.0, 0, 1.0
        tot = self._link_sum[link]
        span = max(now - q[0][0], w / 2)  # the buckets' time, but a young burst counts over half a window
        return tot[0] * 8 / span, tot[1], tot[2] ** 0.5 / tot[0]

    def link_buckets(self, link: tuple[str, str]) -> tuple[deque, list]:
        """The link's sampled buckets ([start, bytes, samples, Σ bytes²] each) and their sums (bytes, samples,
        Σ bytes²), empty ones made if it has none."""
        q = self._link_samples.get(link)
        if q is None:
            q = self._link_samples[link] = deque()
            self._link_sum[link] = [0, 0, 0]
        return q, self._link_sum[link]

    def _trim_link(self, link: tuple[str, str], before: float):
        """Drop the link's buckets that began before ``before`` (out of its sums too); its buckets left, or None
        (none left: the link is forgotten)."""
        q = self._link_samples.get(link)
        if q is None:
            return None
        tot = self._link_sum[link]
        while q and q[0][0] < before:
            _, nbytes, n, sq = q.popleft()
            tot[0] -= nbytes
            tot[1] -= n
            tot[2] -= sq
        if not q:
            del self._link_samples[link], self._link_sum[link]
            return None
        return q

    def take_hot(self) -> set[tuple[str, str]]:
        """Links that went over ``hot_threshold`` (by a counter delta or by their samples) since the last call,
        and links over it on which an elephant was newly detected (what EFM needs to act: both)."""
        hot, self.hot = self.hot, set()
        return hot

    def observe_flow_rate(self, now: float, flow: FiveTuple, bps: float) -> None:
        """A flow rate measured elsewhere (sFlow-RT); replaces the sample-based estimate."""
        st = self.flows.get(flow)
        if st is None:
            st = self.flows[flow] = FlowState(flow)
        st.external_rate = bps
        st.last_seen = now
        self._sampled[flow] = None

    def flow_rate(self, now: float, st: FlowState) -> tuple[float, int]:
        """(bits/s, samples in window) of one flow."""
        if st.external_rate is not None:
            return st.external_rate, self.cfg.min_samples
        horizon = now - self.cfg.window_s
        rates, n = [], 0
        for key in list(st.points):
            pt = st.points[key]
            samples = pt.samples
            while samples and samples[0][0] < horizon:
                pt.held -= samples.popleft()[1]
            if not samples:
                del st.points[key]
                continue
            span = min(self.cfg.window_s, max(self.cfg.min_span_s, now - pt.first))
            rates.append(pt.held * 8 / span)
            n += len(pt.samples)
        return (sum(rates) / len(rates) if rates else 0.0), n

    # ----- periodic evaluation --------------------------------------------
    def _to_evaluate(self, now: float) -> list[FiveTuple]:
        """The flows sampled since the last tick, and those not worked out for ``EVALUATE_S`` (their rate
        only falls as samples age out: an end is seen within a second; at k=16 with 10,000 flows, every
        flow at every tick took a quarter of the controller)."""
        out = [f for f in self._sampled if f in self.flows]
        self._sampled = {}
        due, flows = self._due, self.flows
        while due and due[0][0] <= now - EVALUATE_S:
            at, flow = due.popleft()
            st = flows.get(flow)
            if st is not None and st.evaluated == at:  # (else worked out since, and queued again then)
                out.append(flow)
        return out

    def tick(self, now: float) -> list[ElephantStart | ElephantEnd]:
        """Re-evaluate the flows sampled since the last tick and those whose turn came (``_to_evaluate``);
        return elephant start/end events."""
        events: list[ElephantStart | ElephantEnd] = []
        evaluated = self._to_evaluate(now)
        events += self._evaluate(now, evaluated)
        readings, flows = self.flow_readings, self.flows
        for flow in evaluated:
            st = flows.get(flow)
            if st is None:
                readings.pop(flow, None)
                self._pair_of.pop(flow, None)
            elif st.evaluated == now:
                readings[flow] = FlowReading(st.rate_bps, frozenset(self.flow_links(st)), st.elephant_since is not None,
                                             st.last_seen)
        return events

    def _evaluate(self, now: float, evaluated: list[FiveTuple]) -> list[ElephantStart | ElephantEnd]:
        events: list[ElephantStart | ElephantEnd] = []
        for flow in evaluated:
            st = self.flows.get(flow)
            if st is None or st.evaluated == now:
                continue
            st.evaluated = now
            self._due.append((now, flow))
            rate, n = self.flow_rate(now, st)
            rate = min(rate, self.access_rate_bps(flow))  # a sampled rate never above its source's link: it
            st.rate_bps = rate  # becomes a reservation or a meter (issue 60: forged samples had no ceiling)
            threshold = self.cfg.elephant_fraction * self.access_rate_bps(flow)
            idle = now - st.last_seen > self.cfg.idle_s
            if st.elephant_since is None:
                if not idle and rate > threshold and n >= self.cfg.min_samples and self._big_enough(now, st):
                    st.elephant_since, st.below_since = now, None
                    sw, port = self.ingress(st)
                    events.append(ElephantStart(now, flow, rate, sw, port))
                    if self.hot_threshold is not None:  # a link already over: now it has an elephant to move
                        self.hot.update(ln for ln in self.flow_links(st)
                                        if ln in self._over["counters"] or ln in self._over["samples"])
                elif idle:
                    del self.flows[flow]
                continue
            if idle:
                events.append(ElephantEnd(now, flow, "idle", now - st.elephant_since))
                del self.flows[flow]
            elif rate <= threshold:
                st.below_since = st.below_since if st.below_since is not None else now
                if now - st.below_since >= self.cfg.hold_s:
                    events.append(ElephantEnd(now, flow, "below-threshold", now - st.elephant_since))
                    st.elephant_since = st.below_since = None
            else:
                st.below_since = None
        return events

    def _big_enough(self, now: float, st: FlowState) -> bool:
        """Has the flow sent the bar's bytes? A TCP flow by its sequence span (``elephant_min_bytes``);
        any other by the sampling estimate (``elephant_min_bytes_estimated``): each observation point
        estimates the flow's bytes on its own, and their mean is the estimate. A backend that measures
        rates itself is trusted."""
        if st.external_rate is not None:
            return True
        known = self.tcp_bytes(now, st)
        if known is not None:
            return known >= self.cfg.elephant_min_bytes
        if not st.points:
            return False
        return sum(p.total for p in st.points.values()) / len(st.points) >= self.cfg.elephant_min_bytes_estimated

    def ingress(self, st: FlowState) -> tuple[str, int]:
        """Where the flow enters the fabric: its source host's ToR port, else the first point that saw it."""
        h = self.fabric.host_by_ip(st.flow.src)
        if h is not None:
            return h.switch, h.port
        if st.points:
            return min(st.points.items(), key=lambda kv: kv[1].first)[0]
        return "", 0

    def recent_mice(self, now: float, horizon: float) -> list[tuple[str, str]]:
        """(src IP, dst IP) of flows sampled within ``horizon`` seconds that are not elephants."""
        return [(f.src, f.dst) for f, s in self.flows.items()
                if s.elephant_since is None and now - s.last_seen <= horizon]

    def flow_links(self, st: FlowState) -> set[tuple[str, str]]:
        """Directed links a flow was sampled entering a switch from (within the window)."""
        out = set()
        for sw, port in st.points:
            peer = self.fabric.peer(sw, port)
            if peer is not None:
                out.add((peer[0], sw))
        return out

    def elephants_on(self, link: tuple[str, str]) -> list[tuple[FiveTuple, float]]:
        """(flow, rate) of the current elephants sampled on a directed link."""
        return [(f, s.rate_bps) for f, s in self.flows.items()
                if s.elephant_since is not None and link in self.flow_links(s)]

    def elephants(self) -> dict[FiveTuple, float]:
        return {f: s.rate_bps for f, s in self.flows.items() if s.elephant_since is not None}

    def view(self, now: float) -> View:
        """What monitoring knows now, read-only, for one period of the policies."""
        flows, mice, pair_of = self.flow_readings, {}, self._pair_of
        for f, r in flows.items():
            if not r.elephant:
                pair = pair_of.get(f, ())
                if pair == ():
                    a, b = self.fabric.host_by_ip(f.src), self.fabric.host_by_ip(f.dst)
                    pair = pair_of[f] = (a.switch, b.switch) if a and b and a.switch != b.switch else None
                if pair is not None:
                    mice[pair] = max(mice.get(pair, r.last_seen), r.last_seen)
        sampled = self._sampled_links(now)
        return make_view(now, {}, flows, mice, sampled, self.counter_interval_s, self.columns, self.stale_links)

    def _sampled_links(self, now: float) -> dict:
        """Every link's sampled reading (``sampled_link``), those with one. A link with fewer than
        LINK_MIN_SAMPLES samples in all its buckets has fewer in its window, so no reading: it is not worked
        out (at k=48 under 1-in-1,000 most links sampled are such; working every one out was about an eighth of
        the period's samples in a profile, 2026-12-04), only forgotten once its newest bucket has left the
        window, as a reading would forget it."""
        out, sums, qs, cutoff = {}, self._link_sum, self._link_samples, now - self.cfg.link_window_s
        for ln in list(qs):
            if sums[ln][1] < LINK_MIN_SAMPLES:
                if qs[ln][-1][0] < cutoff:
                    del qs[ln], sums[ln]
                continue
            r = self.sampled_link(now, ln)
            if r is not None:
                out[ln] = r
        return out

    # ----- the links' readings as dictionaries (what a snapshot or a test reads) ----------------------------
    # (each read builds a read-only copy of every measured link's: not for a loop, and not to write to)
    @property
    def readings(self) -> Mapping[tuple[str, str], LinkReading]:
        return MappingProxyType(dict(Readings(self.columns).items()))

    @property
    def link_util(self) -> Mapping[tuple[str, str], float]:
        """Directed link -> smoothed occupancy (0..1+), of the links measured."""
        return MappingProxyType(self.columns.field_map("util").copy())

    @property
    def link_bps(self) -> Mapping[tuple[str, str], float]:
        """Directed link -> its latest raw measurement, bits/s."""
        return MappingProxyType(self.columns.field_map("bps").copy())

    @property
    def link_time(self) -> Mapping[tuple[str, str], float]:
        """Directed link -> when its latest measurement was taken."""
        return MappingProxyType(self.columns.field_map("time").copy())

    @property
    def fresh_time(self) -> Mapping[tuple[str, str], float]:
        """Directed link -> when the traffic of its latest measurement began."""
        return MappingProxyType(self.columns.field_map("fresh").copy())

    @property
    def util_array(self) -> LinkArray:
        """Every link's smoothed occupancy as a ``LinkArray`` (the estimator's own array, not a copy)."""
        return self.columns.array("util")
