"""The sFlow collector split across processes (issue 63): what a worker keeps, and how the controller takes
in what it hands over. Pure: no sockets, no processes (``monitoring.worker`` runs a ``Shard`` behind a UDP
socket; ``ryu_apps.monitor_app`` feeds a ``Merge``).

A worker owns the agents whose datagrams the kernel gives its socket (several sockets on one port with
``SO_REUSEPORT``: the kernel keeps one source on one socket). All that a counter sample touches belongs to
its agent: the port's last octets, its status, and the link it measures (a link is measured at the switch it
leaves, or, for a host's link, at the switch it enters). So a worker runs the very ``Collector`` and
``Estimator`` the controller runs in one process, for its agents, and hands over:

- the rows of the link columns its counters changed (the smoothed occupancy as the one estimator would have
  it: the same fold, over the same samples, in the same order);
- port status changes (``PortState``), links newly over the hot threshold (by their counters or by their
  flow samples), and the sets over it by each;
- the flow samples' measure of the links they entered (a link is sampled at the switch it enters: its agent's):
  each link's buckets from the one it last handed over on (the controller keeps a copy of the rest);
- its sampled packets located (``Estimator.fold_packets``' rows): a flow is sampled at several switches,
  which can be in several workers, so flows are estimated in the controller. The rows come as columns, each
  flow and each port named by a number (``FlowRows``): a five-tuple is sent once, and a batch is a few
  lists of numbers (unpickling a named tuple per packet was a sixth of the controller at k=8 under
  1-in-10, 2026-12-05);
- its counters (the collector's and the estimator's), and the agents it saw.

The controller's ``Merge`` writes the rows into its own estimator's columns, the links' sampled buckets
into its own, and folds the packets into its flows (in the order they were taken, before each tick): the
same readings, events and elephants as one process (``tests/unit/test_shard.py`` feeds both the same
datagrams). A worker that dies leaves its links' readings in place, marked stale (no placement on them)
until a reading of each comes again.
"""

from __future__ import annotations

from monitoring.collector import Collector
from monitoring.estimator import Estimator, MonitorConfig
from monitoring.events import LinkLoad, PortState
from monitoring.sflow import FiveTuple
from topology.fabric import Fabric

AGENTS_KEPT = 100_000  # agent addresses a worker's report may name (the estimator bounds its own set)
FLOW_IDS = 200_000  # five-tuples a worker numbers before it starts its numbering afresh (its table stays bounded)
RENUMBER_BATCHES = 200  # ... and in any case after this many batches (10 s): a batch the controller could not take
# (a bug, logged) leaves its numbers unknown there, and the rows that name them are dropped until then


class FlowRows:
    """A worker's sampled packets as columns (``Estimator.fold_packets``' rows): when, the port (a number),
    the flow (a number), the bytes it stands for, TCP sequence and length. Each flow's and each port's number
    is given once and sent with the first batch that uses it; past ``FLOW_IDS`` flows or ``RENUMBER_BATCHES``
    batches both numberings start again (a batch whose first new numbers are 0 tells the controller to forget
    the old ones)."""

    def __init__(self, flow_ids: int = FLOW_IDS, renumber: int = RENUMBER_BATCHES) -> None:
        self.flow_ids, self.renumber = flow_ids, renumber
        self._batches = 0
        self._ids: dict = {}
        self._new: list = []
        self._ports: dict = {}
        self._new_ports: list = []
        self._cols: tuple[list, ...] = ([], [], [], [], [], [])

    def __call__(self, rows: list) -> None:
        ids, ports = self._ids, self._ports
        t, w, f, nb, seq, ln = self._cols
        for now, where, ft, b, sq, length in rows:
            i = ids.get(ft)
            if i is None:
                i = ids[ft] = len(ids)
                self._new.append(tuple(ft))
            p = ports.get(where)
            if p is None:
                p = ports[where] = len(ports)
                self._new_ports.append(where)
            t.append(now)
            w.append(p)
            f.append(i)
            nb.append(b)
            seq.append(sq)
            ln.append(length)

    def take(self) -> tuple | None:
        """What came since the last take (None: nothing): (the numbers of the first new flow and of the first
        new port, the new flows' five-tuples as tuples, the new ports, the six columns)."""
        if not self._cols[0] and not self._new:
            return None
        out = (len(self._ids) - len(self._new), len(self._ports) - len(self._new_ports), self._new,
               self._new_ports, self._cols)
        self._new, self._new_ports, self._cols = [], [], ([], [], [], [], [], [])
        self._batches += 1
        if len(self._ids) >= self.flow_ids or self._batches >= self.renumber:
            self._ids, self._ports, self._batches = {}, {}, 0  # (the next batch's first new numbers are 0)
        return out


class Shard:
    """One worker's collector and estimator; ``handle`` each datagram, ``drain`` what changed since."""

    def __init__(self, fabric: Fabric, config: MonitorConfig | None = None, sources: str = "agent"):
        self.estimator = Estimator(fabric, config)
        self.rows = self.estimator.flow_sink = FlowRows()
        self.estimator.links_touched = set()
        self.collector = Collector(self.estimator, sources)
        self._last_time = self.estimator.columns.time.copy()
        self._ports: list[PortState] = []
        self._over: frozenset = frozenset()
        self._over_samples: frozenset = frozenset()
        self._agents = 0
        self._sent_from: dict[tuple[str, str], float] = {}  # link -> the start of its newest bucket handed over

    def handle(self, now: float, data: bytes, source: str | None = None) -> None:
        self.handle_many([(now, data, source)])

    def handle_many(self, datagrams: list) -> None:
        """Datagrams, each (when received, its bytes, where from), in the order they came."""
        try:
            self._ports += self.collector.handle_many(datagrams, False)  # (only port changes without loads)
        except Exception:  # whatever they did, the next ones are still read (as the app's reader)
            self.collector.stats["decode_errors"] += 1

    def prepare(self, limit: int) -> int:
        """Up to ``limit`` of the port map's routes resolved ahead of their samples; how many are left
        (``Estimator.prepare_routes``: what the worker does when its socket has nothing for it)."""
        return self.estimator.prepare_routes(limit)

    def control(self, msg: dict) -> None:
        """What the controller tells its workers: the port map, the hot threshold, the monitoring settings."""
        if "ifmap" in msg:
            self.estimator.set_ifmap(msg["ifmap"])
        if "hot_threshold" in msg:
            self.estimator.hot_threshold = msg["hot_threshold"]
        if "config" in msg:
            self.estimator.cfg = msg["config"]
        if "down" in msg:  # fabric ports the controller holds down: an agent that came over from another worker
            est = self.estimator  # (the kernel moves sources when a worker starts or dies) reports them as news
            for key in msg["down"]:  # when they come up, and not again while they stay down
                if est.port_up.get(key, True):
                    est.port_up[key] = False
                    est._watched.add(key)

    def drain(self) -> dict:
        """What changed since the last drain, as one batch (numbers and arrays: cheap to pickle)."""
        import numpy as np

        est = self.estimator
        cols = est.columns
        t = cols.time
        with np.errstate(invalid="ignore"):
            pos = np.flatnonzero((t != self._last_time) & ~np.isnan(t))
        self._last_time[pos] = t[pos]
        batch: dict = {"rows": (pos.astype(np.int32), cols.util[pos], cols.bps[pos], t[pos], cols.fresh[pos],
                                cols.since[pos]),
                       "stats": (dict(self.collector.stats), dict(est.stats)),
                       # the agents' counter interval as this worker measures it, and on how many samples
                       "interval": (est.counter_interval_s, est.stats["counter_samples"])}
        if cols.extra:
            batch["extra"] = dict(cols.extra)
        if self._ports:
            batch["ports"], self._ports = self._ports, []
        rows = self.rows.take()
        if rows is not None:
            batch["flows"] = rows
        if est.links_touched:
            batch["sampled"] = self._sampled_tails(est)
            est.links_touched = set()
        hot = est.take_hot()
        if hot:
            batch["hot"] = hot
        over = frozenset(est._over["counters"])
        if over != self._over:
            batch["over"] = self._over = over
        over = frozenset(est._over["samples"])
        if over != self._over_samples:
            batch["over_samples"] = self._over_samples = over
        if len(est.agents) != self._agents:
            self._agents = len(est.agents)
            batch["agents"] = sorted(est.agents)[:AGENTS_KEPT]
        return batch

    def _sampled_tails(self, est: Estimator) -> dict:
        """The sampled buckets of the links touched since the last drain, as news to the controller's copy:
        per link (its oldest bucket's start, its buckets from the one last handed over on), or None (its samples
        all left the window). The controller drops its buckets older than the first, and from the one last
        handed over on, and appends these (``Merge._sampled``): a bucket once followed by a newer one does not
        change again (a worker's clock only goes forward), so the two copies stay alike. Handing over each link's
        whole window at each drain was 13% of a worker's time at k=8 under 1-in-10 (2026-12-06)."""
        qs, sent, out = est._link_samples, self._sent_from, {}
        w = est.cfg.link_window_s
        for ln in est.links_touched:
            q = qs.get(ln)
            if q is not None and w > 0:  # (a link's buckets older than two windows before its newest are in no
                q = est._trim_link(ln, q[-1][0] - 2 * w)  # reading the controller makes from now on: a view's
                # time may be a little before the newest sample; a worker has no view that would drop them, so it
                # does here)
            if q is None:
                out[ln] = None
                sent.pop(ln, None)
                continue
            last = sent.get(ln)
            j = len(q) - 1
            if last is None or q[-1][0] < last:  # (never handed over, or a clock gone back: the whole window)
                j = 0
            else:
                while j > 0 and q[j - 1][0] >= last:
                    j -= 1
            out[ln] = (q[0][0], tuple(tuple(q[i]) for i in range(j, len(q))))
            sent[ln] = q[-1][0]
        return out


class Merge:
    """The controller's side: its estimator takes in the workers' batches (``apply``); a worker gone
    (``lost``) leaves its links stale until they are measured again."""

    def __init__(self, estimator: Estimator):
        import numpy as np

        self.estimator = estimator
        n = len(estimator.columns.links) + 1
        self._owner = np.full(n, -1, dtype=np.int32)  # the worker whose counters last measured each link
        self._stale = np.zeros(n, dtype=bool)
        self._stats: dict[int, tuple[dict, dict]] = {}
        self._retired: tuple[dict, dict] = ({}, {})  # the counters of workers gone, kept in the sums
        self._over: dict[int, frozenset] = {}
        self._over_samples: dict[int, frozenset] = {}
        self._sampled_by: dict[tuple[str, str], int] = {}  # the worker whose samples last measured each link
        self._interval: dict[int, float] = {}
        self.stale_links: frozenset = frozenset()
        self._tables: dict[int, tuple[list, list]] = {}  # each worker's numbering: its flows, its ports
        self._rows: list = []  # (worker, the rows' columns) handed over, folded at ``flush``
        self.rows_dropped = 0  # rows naming a flow or port the controller was not told of (none, unless a bug)

    def flush(self) -> None:
        """Fold the flow samples handed over since the last flush into the flows, in the order they were
        taken, whichever worker took them (as one collector would have: the elephants a tick finds come in
        the order their flows were first sampled). Called before each ``Estimator.tick``."""
        chunks, self._rows = self._rows, []
        if len({wid for wid, _ in chunks}) > 1:  # (one worker's rows come in the order its clock took them)
            rows = [r for _, cols in chunks for r in zip(*cols, strict=True)]
            rows.sort(key=lambda r: r[0])  # (stable: one worker's rows keep their order)
            self.estimator.fold_packets(rows)
        else:
            for _, cols in chunks:
                self.estimator.fold_packets(zip(*cols, strict=True))
        # the links over the hot threshold by their counters: each by the worker that measures it now (one that
        # lost an agent to another keeps its last word on that agent's links, which nothing would correct); and
        # by their samples, each by the worker whose samples last measured it
        pos, owner = self.estimator.columns.pos, self._owner
        self.estimator._over["counters"] = {ln for wid, over in self._over.items() for ln in over
                                            if owner[pos.get(ln, -1)] == wid}
        by = self._sampled_by
        self.estimator._over["samples"] = {ln for wid, over in self._over_samples.items() for ln in over
                                           if by.get(ln) == wid}

    def apply(self, wid: int, batch: dict, loads: bool = False) -> list:
        """One batch of worker ``wid`` into the estimator; the events it carries (port changes; link loads
        too if ``loads``, one per link measured)."""
        est = self.estimator
        cols = est.columns
        pos, util, bps, t, fresh, since = batch["rows"]
        events: list = []
        if len(pos):
            links = cols.links
            cols.util[pos], cols.bps[pos], cols.time[pos], cols.fresh[pos], cols.since[pos] = util, bps, t, fresh, since
            cols._measured = None
            self._owner[pos] = wid
            back = pos[self._stale[pos]]
            if len(back):  # measured again: off the stale set (a difference, not the set built again from every
                self._stale[back] = False  # link: 166k links once a batch held the loop 160 ms at k=48)
                self.stale_links = self.stale_links.difference([links[i] for i in back.tolist() if i < len(links)])
                self.estimator.stale_links = self.stale_links
            if loads:
                events += [LinkLoad(w, links[i], b, u) for i, u, b, w in
                           zip(pos.tolist(), util.tolist(), bps.tolist(), t.tolist(), strict=True)]
        for link, r in batch.get("extra", {}).items():
            cols.extra[link] = r
        for ev in batch.get("ports", ()):
            key = (ev.switch, ev.port)
            if est.port_up.get(key, True) != ev.up:  # (news only if it changes what the controller holds)
                est.port_up[key] = ev.up
                events.append(ev)
        est.hot.update(batch.get("hot", ()))
        if "over" in batch:
            self._over[wid] = batch["over"]
        if "over_samples" in batch:
            self._over_samples[wid] = batch["over_samples"]
        for ln, got in batch.get("sampled", {}).items():
            self._sampled(wid, ln, got)
        if "flows" in batch:
            self._take_rows(wid, *batch["flows"])
        self._stats[wid] = batch["stats"]
        self._interval[wid] = batch["interval"]
        weight = sum(n for _, n in self._interval.values())
        if weight:  # (a worker that measured nothing yet, or has no agents, does not count)
            est.counter_interval_s = sum(v * n for v, n in self._interval.values()) / weight
        for agent in batch.get("agents", ()):
            if len(est.agents) >= len(est.fabric.switches) + 64:
                break
            est.agents.add(agent)
        return events

    def _sampled(self, wid: int, ln: tuple[str, str], got: tuple | None) -> None:
        """A worker's news of a link's sampled buckets (``Shard._sampled_tails``) into the controller's copy,
        its sums kept with it. An agent that moves between workers (as when a worker starts or dies) moves
        forward in time: news from the worker that has it now replaces every bucket the other one handed over
        after its first, so the copy never mixes the two (one machine's monotonic clock for all)."""
        est = self.estimator
        self._sampled_by[ln] = wid
        if got is None:  # (its samples all left the window)
            est._link_samples.pop(ln, None)
            est._link_sum.pop(ln, None)
            return
        head, tail = got
        est._trim_link(ln, head)
        q, tot = est.link_buckets(ln)
        first = tail[0][0]
        while q and q[-1][0] >= first:
            _, nbytes, n, sq = q.pop()
            tot[0] -= nbytes
            tot[1] -= n
            tot[2] -= sq
        for b in tail:
            q.append(list(b))
            tot[0] += b[1]
            tot[1] += b[2]
            tot[2] += b[3]

    def _take_rows(self, wid: int, first: int, first_port: int, new: list, new_ports: list, cols: tuple) -> None:
        """A batch's sampled packets, their numbers turned back into five-tuples and ports."""
        flows, ports = self._tables.get(wid) or ([], [])
        if first == 0 and first_port == 0:
            flows, ports = [], []  # (the worker started its numberings afresh)
        if first != len(flows) or first_port != len(ports):  # a batch missed (a worker's come in order: none is
            self.rows_dropped += len(cols[0])  # but by a bug): its rows cannot be read until the worker numbers
            return  # afresh (``RENUMBER_BATCHES``)
        flows += [FiveTuple._make(ft) for ft in new]
        ports += new_ports
        self._tables[wid] = flows, ports
        t, w, f, nb, seq, ln = cols
        self._rows.append((wid, (t, [ports[i] for i in w], [flows[i] for i in f], nb, seq, ln)))

    def lost(self, wid: int) -> int:
        """Worker ``wid`` is gone: its links are stale until measured again, its counters stay in the sums;
        the number of links it leaves stale."""
        gone = self._owner == wid
        self._stale |= gone
        self._owner[gone] = -1
        self._restale()
        for total, part in zip(self._retired, self._stats.pop(wid, ({}, {})), strict=True):
            for k, v in part.items():
                total[k] = total.get(k, 0) + v
        self._over.pop(wid, None)
        self._over_samples.pop(wid, None)
        self._tables.pop(wid, None)  # (a worker started in its place numbers from 0)
        self._interval.pop(wid, None)
        return int(gone.sum())

    def _restale(self) -> None:
        import numpy as np

        links = self.estimator.columns.links
        self.stale_links = frozenset(links[i] for i in np.flatnonzero(self._stale[:-1]).tolist())
        self.estimator.stale_links = self.stale_links

    def stats(self) -> tuple[dict, dict]:
        """The workers' counters summed (with those of workers gone): the collector's, the estimator's."""
        out: tuple[dict, dict] = ({}, {})
        for parts in [self._retired, *self._stats.values()]:
            for total, part in zip(out, parts, strict=True):
                for k, v in part.items():
                    total[k] = total.get(k, 0) + v
        return out
