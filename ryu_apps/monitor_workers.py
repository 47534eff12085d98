"""The sFlow worker processes of the monitoring app (issue 63): started, fed, read and restarted here;
what they do is ``monitoring.worker``, what their batches do to the estimator ``monitoring.shard.Merge``.

The collector's UDP sockets are bound here, one a worker (``SO_REUSEPORT``), and held: a worker restarted
reads the same socket, with what came meanwhile (up to its buffer), and no agent moves to another worker.
Each worker talks to the controller over a socket pair made here (private: no other process holds an
end). A green thread per worker reads its batches, so the event loop takes in compact summaries and never
a datagram. A worker that dies (its end closes) is counted, its links are stale until measured again, and
it is started again after ``RESTART_S`` (doubling, up to ``RESTART_MAX_S``, while it keeps dying young).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from monitoring.shard import Merge
from monitoring.worker import Frames, pack
from ryu_apps.openflow.framework import green_socket, hub

LOG = logging.getLogger("freeway.monitor")
RESTART_S = 0.5
RESTART_MAX_S = 10.0
YOUNG_S = 10.0  # a worker that dies younger than this makes the next wait twice as long
ROOT = str(Path(__file__).resolve().parents[1])  # (where ``monitoring`` is: the worker imports it)


HUNG_S = 3.0  # a worker that handed over nothing for this long (it does every 50 ms) is killed and restarted
START_S = 120.0  # ... or that is not ready this long after it started (it reads the fabric: seconds at k=48)


class _Worker:
    __slots__ = ("wid", "proc", "sock", "started", "ready", "wait", "restart_at", "last_batch", "outbox")

    def __init__(self, wid: int):
        self.wid, self.proc, self.sock, self.started, self.ready = wid, None, None, 0.0, False
        self.wait, self.restart_at, self.last_batch, self.outbox = RESTART_S, None, 0.0, None


class WorkerPool:
    """``n`` workers for the collector at ``listen``; ``publish`` takes the events their batches carry;
    ``loads()`` says whether link loads are wanted as events (an app observes them)."""

    def __init__(self, n: int, cfg, estimator, publish, loads):
        self.cfg, self.estimator, self.publish, self.loads = cfg, estimator, publish, loads
        self.merge = Merge(estimator)
        self.workers = [_Worker(i) for i in range(n)]
        self.sockets: list = []  # the collector's sockets, one a worker, held here across its restarts
        self.restarts = 0
        self.batches = 0
        self._sent: dict = {}  # what the workers were last told
        self.active = True

    # ----- the controller's word ---------------------------------------------------------------
    def word(self) -> dict:
        est = self.estimator
        return {"config": est.cfg, "ifmap": est.ifmap, "hot_threshold": est.hot_threshold,
                "down": frozenset(k for k, up in est.port_up.items() if not up)}

    def tell_changes(self) -> None:
        """Tell every worker what changed since they were last told (the port map, the hot threshold, the
        settings): compared by identity, so an unchanged map is not sent again."""
        changed = {}
        for k, v in self.word().items():
            old = self._sent.get(k, self)
            if old is v:
                continue
            self._sent[k] = v  # (a new map equal to the old one is compared once, and not sent)
            if old != v:
                changed[k] = v
        if not changed:
            return
        for w in self.workers:
            if w.sock is not None:
                self._send(w, changed)

    def _send(self, w: _Worker, msg: dict) -> None:
        """Queued for the worker's own sender: a worker slow to read (importing, or hung) never holds the
        monitoring loop."""
        if w.outbox is not None:
            w.outbox.put(pack(msg))

    def _sender(self, w: _Worker, sock, outbox) -> None:
        while self.active:
            data = outbox.get()
            if data is None:
                return
            try:
                sock.sendall(data)
            except OSError as e:  # (it died: its reader sees the end and restarts it)
                LOG.warning("sFlow worker %d: %s", w.wid, e)
                return

    # ----- processes -----------------------------------------------------------------------------
    def start(self) -> None:
        from monitoring.worker import bind

        host, port = self.cfg.sflow_address
        self.sockets = [bind(host, port) for _ in self.workers]  # (a port already taken fails here, at start)
        self._sent = self.word()
        for w in self.workers:
            self._spawn(w)

    def _spawn(self, w: _Worker) -> None:
        import socket as plain

        mine, theirs = plain.socketpair(plain.AF_UNIX, plain.SOCK_STREAM)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
        try:
            udp = self.sockets[w.wid].fileno()
            w.proc = subprocess.Popen([sys.executable, "-m", "monitoring.worker", "--fd", str(theirs.fileno()),
                                       "--udp-fd", str(udp), "--listen", self.cfg.sflow_listen, "--fabric",
                                       self.cfg.fabric, "--sources", self.cfg.sflow_sources, "--parent",
                                       str(os.getpid())],
                                      pass_fds=[theirs.fileno(), udp], env=env, stdin=subprocess.DEVNULL,
                                      process_group=0)  # (a signal to the controller's group is not for it:
            # ``kill -HUP -PGID`` to reload killed the workers until 2026-11-29; it ends when the controller does)
        except OSError as e:  # (no process: tried again later, waiting longer each time)
            mine.close()
            theirs.close()
            w.proc, w.wait = None, min(RESTART_MAX_S, 2 * w.wait)
            w.restart_at = time.monotonic() + w.wait
            LOG.error("sFlow worker %d cannot start (%s): trying again in %.1f s", w.wid, e, w.wait)
            return
        theirs.close()
        w.sock = green_socket.socket(fileno=mine.detach())
        w.started, w.ready, w.restart_at = time.monotonic(), False, None
        w.last_batch = w.started
        w.outbox = hub.Queue()
        self._send(w, self.word())
        hub.spawn(self._sender, w, w.sock, w.outbox)
        hub.spawn(self._read, w, w.sock, w.proc)
        LOG.info("sFlow worker %d started (pid %d)", w.wid, w.proc.pid)

    def _read(self, w: _Worker, sock, proc) -> None:
        frames = Frames()
        why = "its stream ended"
        try:
            while self.active:
                data = sock.recv(1 << 20)
                if not data:
                    break
                w.last_batch = time.monotonic()
                for batch in frames.feed(data):
                    if "ready" in batch:
                        w.ready = True
                        continue
                    self.batches += 1
                    try:
                        for ev in self.merge.apply(w.wid, batch, self.loads()):
                            self.publish(ev)
                    except Exception:  # a batch that cannot be taken in is dropped, never the reader
                        LOG.exception("sFlow worker %d: a batch failed", w.wid)
                hub.sleep(0)
        except Exception as e:  # (a stream that cannot be read on: the worker goes, and is restarted)
            why = f"{type(e).__name__}: {e}"
        if not self.active:
            return
        self._lost(w, proc, why)

    def _lost(self, w: _Worker, proc, why: str) -> None:
        try:
            proc.kill()
        except OSError:
            pass
        code = proc.poll()
        try:
            w.sock.close()
        except OSError:
            pass
        w.sock, w.ready = None, False
        if w.outbox is not None:
            w.outbox.put(None)
            w.outbox = None
        stale = self.merge.lost(w.wid)
        now = time.monotonic()
        w.wait = min(RESTART_MAX_S, 2 * w.wait) if now - w.started < YOUNG_S else RESTART_S
        w.restart_at = now + w.wait
        LOG.error("sFlow worker %d (pid %d) is gone (%s, exit %s): %d links stale until measured again; "
                  "restarting in %.1f s", w.wid, proc.pid, why, code, stale, w.wait)

    def tick(self, now: float) -> None:
        """Tell the workers what changed; restart those whose turn came (reaping the dead one); kill one that
        handed over nothing for ``HUNG_S`` (its reader then sees the end)."""
        if not self.active:
            return
        self.tell_changes()
        for w in self.workers:
            if w.sock is None and w.restart_at is not None and now >= w.restart_at:
                if w.proc is not None:
                    w.proc.wait()  # (killed already: reaped, not left a zombie)
                self.restarts += 1
                self._spawn(w)
            elif w.sock is not None and w.proc is not None and now - w.last_batch > (HUNG_S if w.ready else START_S):
                LOG.error("sFlow worker %d (pid %d) handed over nothing for %.1f s: killed", w.wid, w.proc.pid,
                          now - w.last_batch)
                w.last_batch = now
                w.proc.kill()

    def stop(self) -> None:
        self.active = False
        for w in self.workers:
            if w.outbox is not None:
                w.outbox.put(None)
            if w.sock is not None:
                try:
                    w.sock.close()
                except OSError:
                    pass
            if w.proc is not None and w.proc.poll() is None:
                w.proc.terminate()
                try:
                    w.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
        for sock in self.sockets:
            sock.close()

    def status(self) -> dict:
        """For ``/api/v1/status`` and the metrics: workers asked for, alive, restarted, links stale meanwhile."""
        return {"workers": len(self.workers), "alive": sum(w.sock is not None for w in self.workers),
                "ready": sum(w.ready for w in self.workers), "restarts": self.restarts,
                "stale_links": len(self.merge.stale_links), "rows_dropped": self.merge.rows_dropped,
                "pids": [w.proc.pid if w.proc and w.sock else None for w in self.workers]}
