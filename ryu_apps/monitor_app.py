"""The monitoring app: sFlow (built-in collector or sFlow-RT) in, os-ken events out.

Runs the UDP collector and the periodic evaluation in green threads so os-ken's
event loop is never blocked; publishes EventLinkLoad, EventElephantStart and
EventElephantEnd to the other apps, logs elephants, and optionally writes
JSON lines (elephant events and a per-second link snapshot) for experiments.
"""

from __future__ import annotations

import json
import logging
import os
import time

from monitoring import portmap
from monitoring.collector import Collector
from monitoring.estimator import Estimator
from monitoring.events import ElephantEnd, ElephantStart, LinkLoad, PortState, to_json
from monitoring.sflowrt import SFlowRT
from monitoring.view import View
from ryu_apps import config
from ryu_apps.control import schedule
from ryu_apps.monitor_workers import WorkerPool
from ryu_apps.openflow.framework import app_manager, base_event, green_socket, hub, run_blocking
from topology.fabric import Fabric

LOG = logging.getLogger("freeway.monitor")
SNAPSHOT_S = 1.0
PORTMAP_REFRESH_S = 10.0
# the map is read again at most as often as keeps its reading under this share of the time (at k=48 one
# reading of 138,240 interfaces takes seconds, most of them in the controller's process)
PORTMAP_SHARE = 0.01
EARLY_PORTMAP_S = 2.0  # an unknown ifIndex has the map read again after this long (doubling while it finds nothing)
# The sFlow reader's turn: it lets the others run once its datagrams have held the loop this long. At k=48
# (11 counter samples a datagram, 6,300 datagrams a second, half of the controller's core) a turn of 32
# datagrams (2-3 ms) was waited behind at every step of a handshake (its packet-in, each switch's barrier
# reply): p50 23-31 ms, p99 57-85 ms; with this turn 5.8 / 43.4 ms, and 6.5 / 50.9 ms in the bench, while the
# datagrams lost in that window rose to 14-19% (docs/lab/benchmarks-history.md, item 39).
YIELD_AFTER_S = 0.0003
READ_AT_ONCE = 8  # datagrams the reader takes in one go when they wait (their counters folded at once)


class EventLinkLoad(base_event.EventBase):
    def __init__(self, load: LinkLoad):
        super().__init__()
        self.load = load


class EventElephantStart(base_event.EventBase):
    def __init__(self, start: ElephantStart):
        super().__init__()
        self.start = start


class EventElephantEnd(base_event.EventBase):
    def __init__(self, end: ElephantEnd):
        super().__init__()
        self.end = end


class EventPortState(base_event.EventBase):
    def __init__(self, state: PortState):
        super().__init__()
        self.state = state


_WRAP = {LinkLoad: EventLinkLoad, ElephantStart: EventElephantStart, ElephantEnd: EventElephantEnd,
         PortState: EventPortState}


def bind_udp(host: str, port: int):
    """A green (non-blocking for os-ken's hub) UDP socket for sFlow."""
    sock = green_socket.socket(green_socket.AF_INET6 if ":" in host else green_socket.AF_INET, green_socket.SOCK_DGRAM)
    sock.setsockopt(green_socket.SOL_SOCKET, green_socket.SO_RCVBUF, 4 << 20)
    sock.bind((host, port))
    return sock


class MonitorApp(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    _EVENTS = [EventLinkLoad, EventElephantStart, EventElephantEnd, EventPortState]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.fabric = Fabric.load(self.cfg.fabric)
        self.estimator = Estimator(self.fabric, self.cfg.monitor_config())
        self.collector = Collector(self.estimator, self.cfg.sflow_sources)
        # between two parts of a round: what waits on the loop goes on (the controller app, when there is one,
        # also has them wait for the answers hosts await: ``ControllerApp.give_way``)
        self.between_parts = lambda: hub.sleep(0)
        self.sflowrt = SFlowRT(self.cfg.sflow_rt_url, self.estimator) if self.cfg.monitor == "sflow-rt" else None
        n = self.cfg.sflow_worker_count() if self.cfg.monitor == "sflow" else 0
        # sFlow read in worker processes (issue 63), or by this event loop (sflow_workers 0)
        self.pool = WorkerPool(n, self.cfg, self.estimator, self.publish,
                               lambda: bool(self.observers.get(EventLinkLoad))) if n else None
        self.sock = bind_udp(*self.cfg.sflow_address) if self.cfg.monitor == "sflow" and not n else None
        self.events_out = open(self.cfg.events_file, "a", buffering=1) if self.cfg.events_file else None
        self._events_bytes = os.path.getsize(self.cfg.events_file) if self.cfg.events_file else 0
        self._portmap_at = -1e9
        self._portmap_took = 0.0  # how long the last reading of the map took
        self._unmapped_seen = 0
        self._early_gap = EARLY_PORTMAP_S
        self._described_ports = {(ln.a, ln.a_port) for ln in self.fabric.links} | {
            (ln.b, ln.b_port) for ln in self.fabric.links} | {(h.switch, h.port) for h in self.fabric.hosts}
        self._snapshot_sources = []  # callables returning dicts merged into each snapshot (other apps' state)
        self._next_poll = self._next_snapshot = 0.0
        self.loop_errors = 0

    def start(self):
        super().start()
        if self.cfg.monitor == "none":
            return
        LOG.info("monitoring with %s (%s%s)", self.cfg.monitor,
                 self.cfg.sflow_listen if self.cfg.monitor == "sflow" else self.cfg.sflow_rt_url,
                 f", {len(self.pool.workers)} worker processes" if self.pool else "")
        if self.pool is not None:
            self.pool.start()
        self.threads.append(hub.spawn(self._periodic))
        if self.sock is not None:
            self.threads.append(hub.spawn(self._receive))

    # ----- green threads (thin: all logic is in monitoring/) ---------------
    def _receive(self):
        held = 0.0  # how long the datagrams handled since the reader last let the others run took
        while self.is_active:
            try:
                data, source = self.sock.recvfrom(65535)
            except OSError as e:
                LOG.error("sFlow socket: %s", e)
                hub.sleep(1)
                continue
            t = time.monotonic()
            got = [(t, data, source[0])]
            while len(got) < READ_AT_ONCE:  # what else is waiting, without waiting: folded at once
                try:
                    data, source = self.sock.fd.recvfrom(65535)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                got.append((time.monotonic(), data, source[0]))
            try:
                for ev in self.collector.handle_many(got, bool(self.observers.get(EventLinkLoad))):
                    self.publish(ev)
            except Exception:  # whatever one datagram did, the next ones are still read
                LOG.exception("sFlow datagram handling failed")
            held += time.monotonic() - t
            if held >= YIELD_AFTER_S:  # a green socket that always has data never yields by itself: a burst of
                held = 0.0  # datagrams would hold the whole controller (packet-ins, barrier replies, echoes, probes)
                hub.sleep(0)

    def _periodic(self):
        while self.is_active:
            try:
                self.between_parts()
                for _ in self.step_parts(time.monotonic()):
                    self.between_parts()
            except Exception:  # (``step_parts`` catches its own: this is the waits between its parts)
                self.loop_errors += 1
                LOG.exception("monitoring loop failed (%d so far); it goes on", self.loop_errors)
            hub.sleep(schedule.TICK_S)

    def step(self, now: float) -> None:
        """One round of the periodic loop, its parts at once."""
        for _ in self.step_parts(now):
            pass

    def step_parts(self, now: float):
        """One round of the periodic loop in parts (a generator: its caller may serve others between them;
        at k=48 the round held the loop up to 112 ms in one piece, 2026-12-04); a failure is logged and
        counted, and the loop goes on."""
        try:
            if config.active() is not self.cfg:  # reloaded (SIGHUP): the live settings from now on
                self.cfg = config.active()
                self.estimator.cfg = self.cfg.monitor_config()
            self._refresh_portmap(now)
            if self.pool is not None:
                self.pool.tick(now)
            if self.sflowrt is not None and now >= self._next_poll:
                self._next_poll = now + 1.0
                fetched = run_blocking(self.sflowrt.fetch)  # HTTP in an OS thread; the estimator stays here
                for ev in self.sflowrt.apply(time.monotonic(), fetched):
                    self.publish(ev)
            if self.pool is not None:
                self.pool.merge.flush()  # the workers' flow samples since the last tick, in the order taken
                yield
            for ev in self.estimator.tick(now):
                self.publish(ev)
            if now >= self._next_snapshot:
                yield
                self._next_snapshot = now + SNAPSHOT_S
                self._snapshot(now)
        except Exception:  # a bug here must not stop monitoring silently
            self.loop_errors += 1
            LOG.exception("monitoring loop failed (%d so far); it goes on", self.loop_errors)

    def _refresh_portmap(self, now: float) -> None:
        unmapped = self.stats()["unmapped_ifindex"] if self.pool is not None else self.estimator.stats["unmapped_ifindex"]
        due = now - self._portmap_at > max(PORTMAP_REFRESH_S, self._portmap_took / PORTMAP_SHARE)
        early = unmapped > self._unmapped_seen and now - self._portmap_at > self._early_gap
        if not due and not early:
            return
        self._portmap_at, self._unmapped_seen = now, unmapped
        t = time.monotonic()
        try:
            ifmap = run_blocking(portmap.load, self.fabric, self.cfg.ovsdb)
        except Exception as e:  # OVSDB down or unreachable: keep the old map, try again later
            LOG.warning("cannot read ifIndex map from OVSDB: %s", e)
            return
        self._portmap_took = time.monotonic() - t  # (a failed reading is tried again at the usual period)
        if len(ifmap) != len(self.estimator.ifmap):
            LOG.info("ifIndex map: %d switch ports known", len(ifmap))
        # a reading that an unknown ifIndex asked for, and that found the map as it was, makes the next such
        # reading wait twice as long (issue 60: any datagram can carry an unknown ifIndex; a forger's made
        # OVSDB be read every 2 s); a reading that changed the map (an OVS restart renumbers), or one that
        # still lacks a port the description has (a fabric coming up: its ports appear one by one), keeps it
        missing = bool(self._described_ports - set(ifmap.values()))
        self._early_gap = EARLY_PORTMAP_S if ifmap != self.estimator.ifmap or missing else min(
            2 * self._early_gap, PORTMAP_REFRESH_S)
        self.estimator.set_ifmap(ifmap)

    # ----- output ------------------------------------------------------------
    def publish(self, ev) -> None:
        if type(ev) is LinkLoad and not self.observers.get(EventLinkLoad):
            return  # no app asked for link loads: none is wrapped and sent (one per counter sample: 138,240 a s at k=48)
        if isinstance(ev, ElephantStart):
            LOG.info("elephant start %s at %.2f Mbit/s (ingress %s port %d)", ev.flow, ev.rate_bps / 1e6,
                     ev.switch, ev.port)
        elif isinstance(ev, ElephantEnd):
            LOG.info("elephant end %s (%s after %.1f s)", ev.flow, ev.reason, ev.duration_s)
        elif isinstance(ev, PortState):
            LOG.info("sFlow: %s port %d is %s", ev.switch, ev.port, "up" if ev.up else "down")
        if self.events_out is not None and not isinstance(ev, LinkLoad):
            self._write({**to_json(ev), "wall": time.time()})
        self.send_event_to_observers(_WRAP[type(ev)](ev))

    def stats(self) -> dict:
        """Monitoring's counters (the collector's and the estimator's; sFlow-RT's with a prefix)."""
        collector, estimator = self.collector.stats, self.estimator.stats
        if self.pool is not None:  # the workers' counters, summed, with what the flows' folding here counted
            collector, theirs = self.pool.merge.stats()
            estimator = {k: v + theirs.get(k, 0) for k, v in estimator.items()}
        stats = {**collector, **estimator, "monitor_loop_errors": self.loop_errors,
                 "flows_tracked": len(self.estimator.flows), "agents_seen": len(self.estimator.agents),
                 "ports_mapped": len(self.estimator.ifmap)}
        if self.sflowrt is not None:
            stats.update({f"sflowrt_{k}": v for k, v in self.sflowrt.stats.items()})
        if self.pool is not None:
            st = self.pool.status()
            stats.update({"sflow_workers": st["workers"], "sflow_workers_alive": st["alive"],
                          "sflow_worker_restarts": st["restarts"], "sflow_stale_links": st["stale_links"],
                          "sflow_rows_dropped": st["rows_dropped"]})
        return stats

    def stop(self):
        if self.pool is not None:
            self.pool.stop()
        super().stop()

    def _snapshot(self, now: float) -> None:
        if self.events_out is None:
            return
        util = {f"{a}>{b}": round(u, 4) for (a, b), u in sorted(self.estimator.link_util.items())}
        stats = self.stats()
        snap = {"type": "links", "time": now, "wall": time.time(), "utilisation": util, "stats": stats,
                "elephants": {str(f): round(r) for f, r in self.estimator.elephants().items()}}
        for source in self._snapshot_sources:
            snap.update(source())
        self._write(snap)

    def view(self, now: float) -> View:
        """What monitoring knows now (read-only), for the policies' period."""
        return self.estimator.view(now)

    def add_snapshot_source(self, source) -> None:
        """Merge ``source()`` (a dict) into every per-second snapshot of the events file."""
        self._snapshot_sources.append(source)

    def write_event(self, obj: dict) -> None:
        """Let other apps put their own events into the events file."""
        if self.events_out is not None:
            self._write({**obj, "wall": time.time()})

    def _write(self, obj: dict) -> None:
        try:
            line = json.dumps(obj) + "\n"
            self.events_out.write(line)
            self._events_bytes += len(line)
            if self._events_bytes > self.cfg.events_max_mb * 1e6:
                self._rotate()
        except (OSError, ValueError) as e:  # a full disk, a file moved away: logged, never fatal
            LOG.error("events file: %s", e)

    def _rotate(self) -> None:
        """The events file passed ``events_max_mb``: it becomes FILE.1 (replacing the previous) and a new
        one begins, so the file never grows without bound. If the rename fails the file is reopened as it
        is (and tried again after another ``events_max_mb``)."""
        self._events_bytes = 0
        self.events_out.close()
        try:
            os.replace(self.cfg.events_file, self.cfg.events_file + ".1")
        finally:
            self.events_out = open(self.cfg.events_file, "a", buffering=1)
        LOG.info("events file passed %.0f MB: the previous one is %s.1", self.cfg.events_max_mb, self.cfg.events_file)
