"""The controller's Prometheus metrics (``/metrics``), named and labelled by Prometheus conventions.

Two kinds: what happens (handshakes, reroutes, rollbacks, OpenFlow errors,
reloads: counters and histograms fed as the app records each decision) and what
is (links, switches, elephants, the partition: gauges read from the same state
the API shows, at scrape time, so a scrape never sees a value the API would not).
Everything lives in a registry of its own, not prometheus_client's global one.
"""

from __future__ import annotations

import heapq
import itertools
import time
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

disable_created_metrics()  # no *_created series: Prometheus's text format does not need them

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PERIOD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
HOWS = ("announced", "adopted", "efm", "hedera", "detected")


class Metrics:
    """Counters fed by the app; gauges read at scrape time from ``source`` (see ``_StateCollector``)."""

    def __init__(self, source):
        self.registry = CollectorRegistry(auto_describe=True)
        self.handshake_latency = Histogram(
            "freeway_handshake_latency_seconds", "Time from a handshake reaching the controller to its answer "
            "(ACK once every switch confirmed the entries, or NACK)", buckets=LATENCY_BUCKETS,
            registry=self.registry)
        self.period = Histogram("freeway_period_duration_seconds", "Time the controller's periodic decision "
                                "round took (monitoring view, policy, messages)", buckets=PERIOD_BUCKETS,
                                registry=self.registry)
        self.loop_lag = Histogram("freeway_event_loop_lag_seconds", "How late the controller's 100 ms tick woke: "
                                  "time its single event loop was held by other work (every handler, echo "
                                  "reply and barrier waits as long)", buckets=LAG_BUCKETS, registry=self.registry)
        self.install_confirm = Histogram(
            "freeway_install_confirm_seconds", "Time from a confirmed install's entries going out to the last "
            "of its switches' confirmations (barrier replies) being handled: mostly the switches' share of a "
            "handshake's answer time (every confirmed install counts, not only handshakes)",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self.event_wait = Histogram(
            "freeway_event_wait_seconds", "Time from an event reaching the controller app (a switch's message "
            "parsed, monitoring's elephant) to its handler starting: the app's queue (128 places, one handler at "
            "a time), by kind; barrier replies, errors and handshake packet-ins skip the queue (its channel's "
            "reader handles them, in order)", ["kind"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.gc_pause = Histogram("freeway_gc_pause_seconds", "Pauses of Python's cyclic garbage collector in "
                                  "the controller's process (its single event loop does nothing meanwhile), by "
                                  "the oldest generation collected", ["generation"], buckets=LATENCY_BUCKETS,
                                  registry=self.registry)
        self.api_request = Histogram("freeway_api_request_duration_seconds", "Time the controller's loop spent "
                                     "answering one API request (the loop does nothing else meanwhile)",
                                     ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.counts: Counter[tuple] = Counter()
        self.registry.register(_StateCollector(self, source))
        self.fabric_registry = CollectorRegistry(auto_describe=True)  # the big part: per switch, per link
        self.fabric_registry.register(_FabricCollector(source))
        self._fabric: tuple[object, bytes] = (None, b"")

    def decided(self, rec: dict) -> None:
        """Count one decision record (``decisions``)."""
        kind = rec["type"]
        self.counts[("decisions", kind)] += 1
        if kind in ("placement", "refusal") and rec.get("how") == "announced":
            outcome = "ack" if kind == "placement" else ("nack" if rec.get("answered") else "dropped")
            self.counts[("handshakes", outcome, rec.get("cause", "none") or "none", rec.get("via", "handshake"))] += 1
            if "latency_s" in rec and (kind == "placement" or rec.get("answered")):
                self.handshake_latency.observe(rec["latency_s"])
        elif kind == "reroute":
            self.counts[("reroutes", rec.get("how", "other"))] += 1
        elif kind == "rollback":
            self.counts[("rollbacks",)] += 1
        elif kind == "config":
            self.counts[("reloads", rec.get("result", "applied"))] += 1

    def gc_callback(self):
        """A callback for ``gc.callbacks`` that observes each collection's pause into ``gc_pause``. The
        three generations' series are made here, once: a collection can start inside a scrape that holds
        the histogram's own lock (``labels`` takes it), and the callback must not ask for it again."""
        started = [0.0]
        by_generation = [self.gc_pause.labels(str(g)) for g in range(3)]

        def observe(phase: str, info: dict) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                by_generation[info["generation"]].observe(time.perf_counter() - started[0])
        return observe

    def openflow_error(self, type_name: str) -> None:
        self.counts[("openflow_errors", type_name)] += 1

    def exposition(self, fabric_epoch: object = None) -> bytes:
        """The text exposition. The per-switch and per-link part is rendered again only when
        ``fabric_epoch`` changes (a period, a link or switch change), the rest at every scrape."""
        if fabric_epoch is None or self._fabric[0] != fabric_epoch:
            self._fabric = (fabric_epoch, generate_latest(self.fabric_registry))
        return generate_latest(self.registry) + self._fabric[1]


def _counter(name: str, doc: str, labels: list[str], counts: Counter, key: str) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for k, n in sorted(counts.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if k[0] == key:
            fam.add_metric(list(k[1:]), n)
    return fam


class _StateCollector:
    """The controller, its elephants and counters, read from ``source`` at each scrape. ``source`` gives
    ``metrics_state()`` -> dict with keys mode, isolation, monitor, elephants (``opstate.elephant_totals``),
    monitor_stats, transactions."""

    def __init__(self, metrics: Metrics, source):
        self.metrics = metrics
        self.source = source

    def describe(self):
        return []  # metrics with labels known only at scrape time

    def collect(self):
        st = self.source.metrics_state()
        c = self.metrics.counts
        info = GaugeMetricFamily("freeway_info", "The running controller: mode, isolation, monitoring backend",
                                 labels=["mode", "isolation", "monitor"])
        info.add_metric([st["mode"], "on" if st["isolation"] else "off", st["monitor"]], 1)
        yield info

        n = GaugeMetricFamily("freeway_elephants", "Elephants the controller knows of, by how they were placed",
                              labels=["how"])
        alloc = GaugeMetricFamily("freeway_elephant_allocated_bytes_per_second", "Sum of the elephants' "
                                  "allocations, by how they were placed", labels=["how"])
        meas = GaugeMetricFamily("freeway_elephant_measured_bytes_per_second", "Sum of the elephants' measured "
                                 "rates, by how they were placed", labels=["how"])
        totals = st["elephants"]  # how -> [count, allocated bit/s, measured bit/s]
        for how in HOWS:
            count, a, m = totals.get(how, (0, 0.0, 0.0))
            n.add_metric([how], count)
            alloc.add_metric([how], a / 8)
            meas.add_metric([how], m / 8)
        yield from (n, alloc, meas)


        yield _counter("freeway_handshakes_total", "Announces by outcome (ack, nack, dropped), refusal cause and "
                       "how they came (handshake: the host's; api: an operator's)", ["outcome", "cause", "via"], c,
                       "handshakes")
        yield _counter("freeway_reroutes_total", "Elephants moved, by why (efm, failure, hot-link, partition)",
                       ["how"], c, "reroutes")
        rb = CounterMetricFamily("freeway_rollbacks_total", "Transactions rolled back (a switch refused or did "
                                 "not confirm)")
        rb.add_metric([], c[("rollbacks",)])
        yield rb
        ref = CounterMetricFamily("freeway_channel_refusals_total", "What the controller's channels refused, by "
                                  "channel (openflow, api, sflow) and reason", labels=["channel", "reason"])
        for channel, reasons in sorted(st.get("refusals", {}).items()):
            for reason, n in sorted(reasons.items()):
                ref.add_metric([channel, reason], n)
        yield ref
        yield _counter("freeway_decisions_total", "Decisions recorded, by type", ["type"], c, "decisions")
        yield _counter("freeway_openflow_errors_total", "OpenFlow error messages from the switches, by type",
                       ["type"], c, "openflow_errors")
        yield _counter("freeway_config_reloads_total", "Configuration reloads (SIGHUP), by result", ["result"], c,
                       "reloads")
        ms = st["monitor_stats"]
        for name, key, doc in (("freeway_sflow_datagrams_total", "datagrams", "sFlow datagrams received"),
                               ("freeway_sflow_decode_errors_total", "decode_errors",
                                "sFlow datagrams dropped as malformed"),
                               ("freeway_sflow_flow_samples_total", "flow_samples", "sFlow flow samples used"),
                               ("freeway_sflow_interface_samples_total", "counter_samples",
                                "sFlow interface counter samples used"),
                               ("freeway_sflow_unmapped_samples_total", "unmapped_ifindex",
                                "sFlow samples dropped: their ifIndex is not in the port map (OVSDB)")):
            fam = CounterMetricFamily(name, doc)
            fam.add_metric([], ms.get(key, 0))
            yield fam
        if "sflow_workers" in ms:  # the collector's worker processes (sflow_workers)
            yield GaugeMetricFamily("freeway_sflow_workers", "sFlow worker processes asked for",
                                    value=ms["sflow_workers"])
            yield GaugeMetricFamily("freeway_sflow_workers_alive", "sFlow worker processes running",
                                    value=ms["sflow_workers_alive"])
            fam = CounterMetricFamily("freeway_sflow_worker_restarts", "sFlow worker processes restarted after dying")
            fam.add_metric([], ms["sflow_worker_restarts"])
            yield fam
            yield GaugeMetricFamily("freeway_sflow_stale_links", "Links stale since their sFlow worker died, until "
                                    "measured again", value=ms["sflow_stale_links"])
            fam = CounterMetricFamily("freeway_sflow_rows_dropped", "Sampled packets a worker handed over naming "
                                      "a flow or port the controller was not told of (none but by a bug)")
            fam.add_metric([], ms.get("sflow_rows_dropped", 0))
            yield fam
        yield GaugeMetricFamily("freeway_transactions_open", "Installs waiting for the switches' confirmation",
                                value=st["transactions"])
        cl = st.get("cluster")
        if cl is not None:
            yield GaugeMetricFamily("freeway_cluster_leader", "1 while this member is the cluster's leader",
                                    value=1 if cl["role"] == "leader" else 0)
            yield GaugeMetricFamily("freeway_cluster_generation", "The leader's generation id (etcd revision)",
                                    value=cl["generation"])
            yield GaugeMetricFamily("freeway_cluster_store_up", "1 while the cluster's store (etcd) answers",
                                    value=1 if cl["store_ok"] else 0)


LINK_SERIES = 2000  # per-link series at most (``metrics_link_series``): k=48 has 110,592 directed switch links
UTIL_BUCKETS = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


PAUSE_EVERY = 4096  # links looked at between two calls of the source's ``pause`` (as ``opstate.PAUSE_EVERY``)


@dataclass
class LinkSummary:
    """What the metrics say of every directed link, from one pass over them."""

    shown: list[dict]  # the links given series of their own: every one down first, then the busiest
    classes: Counter
    lldp: Counter  # switch links (each once) by LLDP's state
    at_most: list[int]  # measured links at or below each of UTIL_BUCKETS
    measured: int
    util_sum: float


def _dict_fields(ln: dict) -> tuple:
    return ln["src"], ln["dst"], ln["up"], ln["class"], ln["lldp"], ln["utilisation"]


def link_summary(links: list, limit: int, pause=None, fields=_dict_fields) -> LinkSummary:
    """One pass over the links (a k=48 fabric has 165,888 directed links: sorting them all, then counting
    them once per bucket, held the event loop 0.7 s a scrape), calling ``pause()`` every ``PAUSE_EVERY``
    links so that what waits on the loop (handshakes, echo replies, barriers) goes on. A link is an API
    document, or anything ``fields`` reads (src, dst, up, class, LLDP state, utilisation) from; ``shown``
    holds the links as they were given."""
    classes: Counter = Counter()
    lldp: Counter = Counter()
    per_bucket = [0] * (len(UTIL_BUCKETS) + 1)
    util_sum, measured = 0.0, 0
    heap: list = []  # the ``limit`` links shown, as (down, utilisation, -index): the smallest is the one to drop
    for i, ln in enumerate(links):
        if pause is not None and i % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        src, dst, up, cls, state, u = fields(ln)
        classes[cls] += 1
        if state is not None and src < dst:
            lldp[state] += 1
        if u is not None:
            measured += 1
            util_sum += u
            per_bucket[bisect_left(UTIL_BUCKETS, u)] += 1
        key = (not up, u or 0.0, -i)
        if len(heap) < limit:
            heapq.heappush(heap, key)
        elif key > heap[0]:
            heapq.heapreplace(heap, key)
    at_most = list(itertools.accumulate(per_bucket))[:len(UTIL_BUCKETS)]
    shown = [links[-k[2]] for k in sorted(heap, reverse=True)] if len(links) > limit else links
    return LinkSummary(shown, classes, lldp, at_most, measured, util_sum)


class _FabricCollector:
    """Switches, links and the partition, from ``source.metrics_fabric()`` -> dict with keys switches,
    links, partition (the API's documents)."""

    def __init__(self, source):
        self.source = source

    def describe(self):
        return []

    def collect(self):
        st = self.source.metrics_fabric()
        sw_state = GaugeMetricFamily("freeway_switches", "Switches of the description by connection state",
                                     labels=["state"])
        states = Counter(s["state"] for s in st["switches"])
        for s in ("connected", "syncing", "standby", "disconnected", "never"):
            sw_state.add_metric([s], states[s])
        yield sw_state
        yield GaugeMetricFamily("freeway_switches_connected", "Switches connected and programmed",
                                value=states["connected"])
        conn = GaugeMetricFamily("freeway_switch_connected", "1 while the switch is connected and programmed",
                                 labels=["switch"])
        for s in st["switches"]:
            conn.add_metric([s["name"]], 1 if s["connected"] else 0)
        yield conn

        up = GaugeMetricFamily("freeway_link_up", "1 while the directed link is up (liveness model)",
                               labels=["src", "dst"])
        util = GaugeMetricFamily("freeway_link_utilisation_ratio", "Smoothed occupancy of the directed link as "
                                 "monitoring measured it, by its class (lol, draining, hol, shared, access, down)",
                                 labels=["src", "dst", "class"])
        load = GaugeMetricFamily("freeway_link_load_bytes_per_second", "Latest measured rate on the directed link",
                                 labels=["src", "dst"])
        cap = GaugeMetricFamily("freeway_link_capacity_bytes_per_second", "Capacity of the directed link",
                                labels=["src", "dst"])
        age = GaugeMetricFamily("freeway_link_measurement_age_seconds", "Time since the link was last measured",
                                labels=["src", "dst"])
        counter = GaugeMetricFamily("freeway_link_lol_paths", "Freeway's per-link counter: the low-latency paths (of every ToR pair) "
                                    "that cross the link (> 0: the link is LOL)", labels=["src", "dst"])
        links = st["links"]
        limit = getattr(self.source, "link_series", LINK_SERIES)
        summary = link_summary(links, limit, getattr(self.source, "pause", None), st.get("link_fields", _dict_fields))
        doc = st.get("link_doc")
        shown, classes = ([doc(x) for x in summary.shown] if doc else summary.shown), summary.classes
        for ln in shown:
            lab = [ln["src"], ln["dst"]]
            up.add_metric(lab, 1 if ln["up"] else 0)
            cap.add_metric(lab, ln["capacity_bps"] / 8)
            if ln["utilisation"] is not None:
                util.add_metric(lab + [ln["class"]], ln["utilisation"])
                load.add_metric(lab, ln["bps"] / 8)
                age.add_metric(lab, ln["measured_age_s"])
            if ln["counter"] is not None:
                counter.add_metric(lab, ln["counter"])
        yield from (up, util, load, cap, age, counter)
        yield GaugeMetricFamily("freeway_link_series_omitted", "Directed links left out of the per-link series "
                                "above (metrics_link_series: every down link and the busiest are kept); all of them "
                                "are counted in freeway_links and freeway_link_utilisation", value=len(links) - len(shown))
        yield HistogramMetricFamily("freeway_link_utilisation", "Directed links by their smoothed occupancy, every "
                                    "measured link of the fabric",
                                    buckets=[(str(le), n) for le, n in zip(UTIL_BUCKETS, summary.at_most, strict=True)]
                                    + [("+Inf", summary.measured)], sum_value=summary.util_sum)
        by_class = GaugeMetricFamily("freeway_links", "Directed links by class", labels=["class"])
        for cls in ("lol", "draining", "hol", "shared", "access", "down"):
            by_class.add_metric([cls], classes[cls])
        yield by_class
        checked = GaugeMetricFamily("freeway_lldp_links", "Switch links by what LLDP says of them (verified: heard "
                                    "both ways; waiting: not yet; missing, miswired: faults, not used)",
                                    labels=["state"])
        for state in ("verified", "waiting", "missing", "miswired"):
            checked.add_metric([state], summary.lldp[state])
        yield checked
        yield GaugeMetricFamily("freeway_lldp_unexpected", "Adjacencies LLDP hears that the fabric description does "
                                "not have (reported, never used)", value=len(st.get("unexpected", ())))

        part = st["partition"]
        pairs = GaugeMetricFamily("freeway_partition_pairs", "Active or widened ToR pairs by their number of "
                                  "low-latency paths", labels=["lol_paths"])
        by_n = Counter(p["lol_paths"] for p in part["pairs"])
        for k in sorted(by_n):
            pairs.add_metric([str(k)], by_n[k])
        yield pairs
        if part.get("partitioned"):
            yield GaugeMetricFamily("freeway_partition_min_lol_paths", "Fixed low-latency paths per ToR pair",
                                    value=part["lol_min"])
