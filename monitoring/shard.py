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
- port status changes (``PortState``), links newly over the hot threshold by their counters, and the set
  over it;
- its flow samples located (``Estimator.fold_flow``'s arguments): a flow is sampled at several switches,
  which can be in several workers, so flows are estimated in the controller, from few records;
- its counters (the collector's and the estimator's), and the agents it saw.

The controller's ``Merge`` writes the rows into its own estimator's columns and folds the flow samples
into its flows (in the order they were taken, before each tick): the same readings, events and elephants as one process (``tests/unit/test_shard.py`` feeds
both the same datagrams). A worker that dies leaves its links' readings in place, marked stale (no
placement on them) until a reading of each comes again.
"""

from __future__ import annotations

from monitoring.collector import Collector
from monitoring.estimator import Estimator, MonitorConfig
from monitoring.events import LinkLoad, PortState
from topology.fabric import Fabric

AGENTS_KEPT = 100_000  # agent addresses a worker's report may name (the estimator bounds its own set)


class Shard:
    """One worker's collector and estimator; ``handle`` each datagram, ``drain`` what changed since."""

    def __init__(self, fabric: Fabric, config: MonitorConfig | None = None, sources: str = "agent"):
        self.estimator = Estimator(fabric, config)
        self.estimator.flow_sink = []
        self.collector = Collector(self.estimator, sources)
        self._last_time = self.estimator.columns.time.copy()
        self._ports: list[PortState] = []
        self._over: frozenset = frozenset()
        self._agents = 0

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
        if est.flow_sink:
            batch["flows"], est.flow_sink = est.flow_sink, []
        hot = est.take_hot()
        if hot:
            batch["hot"] = hot
        over = frozenset(est._over["counters"])
        if over != self._over:
            batch["over"] = self._over = over
        if len(est.agents) != self._agents:
            self._agents = len(est.agents)
            batch["agents"] = sorted(est.agents)[:AGENTS_KEPT]
        return batch


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
        self._interval: dict[int, float] = {}
        self.stale_links: frozenset = frozenset()
        self._flows: list = []  # flow samples handed over, folded at ``flush``

    def flush(self) -> None:
        """Fold the flow samples handed over since the last flush into the flows, in the order they were
        taken, whichever worker took them (as one collector would have: the elephants a tick finds come in
        the order their flows were first sampled). Called before each ``Estimator.tick``."""
        flows, self._flows = self._flows, []
        flows.sort(key=lambda r: r[0])  # (stable: one worker's records keep their order)
        fold = self.estimator.fold_flow
        for record in flows:
            fold(*record)
        # the links over the hot threshold by their counters: each by the worker that measures it now (one that
        # lost an agent to another keeps its last word on that agent's links, which nothing would correct)
        pos, owner = self.estimator.columns.pos, self._owner
        self.estimator._over["counters"] = {ln for wid, over in self._over.items() for ln in over
                                            if owner[pos.get(ln, -1)] == wid}

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
        self._flows += batch.get("flows", ())
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
