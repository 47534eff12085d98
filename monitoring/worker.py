"""A worker process of the sFlow collector (issue 63): ``python -m monitoring.worker``, started by the
monitoring app (``ryu_apps.monitor_app``), one per ``sflow_workers``.

It reads one of the collector's UDP sockets: the controller binds them all on the collector's address with
``SO_REUSEPORT`` (the kernel hands each agent's datagrams to one socket) and holds them, so that a worker
restarted finds its socket, and the datagrams that came meanwhile, where it left them, and no agent moves to
another worker. It decodes and folds them in a ``monitoring.shard.Shard``, and every
``BATCH_S`` writes what changed to the controller over a private stream socket it was given (a socket pair
the controller made: nobody else can write to it). The same socket brings the controller's word (the port
map, the hot threshold, the settings). The controller's event loop never touches a datagram. When the
controller goes (the stream ends), the worker ends; the controller's signals (a reload's SIGHUP, a
terminal's SIGINT) are not for it: it runs in its own process group and ignores them.

Frames on the stream: a 4-byte length, then a pickle (both ends are this program: the pair is private).
"""

from __future__ import annotations

import argparse
import os
import pickle
import selectors
import signal
import socket
import struct
import sys
import time

BATCH_S = 0.05  # how often a worker hands over what changed (a counter's reading waits at most this long)
# datagrams are handled together, their counters folded in one go: once this many wait, or the first of them
# has waited this long (or a batch is due). Read as they came, few at a time (at k=48, 12,800 datagrams a
# second came one or two a wake-up), the fold's fixed cost was paid for a handful of samples
HOLD_N, HOLD_S = 128, 0.01
PREPARE_N = 1000  # the port map's routes resolved ahead at a time, when nothing waits (about 10 ms)
# each worker socket's receive buffer: a worker that shares its core falls behind for a moment and the kernel holds
# what arrives meanwhile (at k=48, counters each 1 s and 1-in-1,000, about 13,000 datagrams a second); set past
# net.core.rmem_max where the process may (SO_RCVBUFFORCE, CAP_NET_ADMIN), else as far as that allows
RCVBUF = 32 << 20
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # (Linux's number; Python names it only on some builds)
LEN = struct.Struct("!I")
MAX_FRAME = 1 << 30


def pack(obj) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return LEN.pack(len(body)) + body


class Frames:
    """Frames out of a stream's bytes, as they come (``feed`` returns the whole ones)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list:
        self._buf += data
        out = []
        while len(self._buf) >= LEN.size:
            (n,) = LEN.unpack_from(self._buf)
            if n > MAX_FRAME:
                raise ValueError(f"a frame of {n} bytes")
            if len(self._buf) < LEN.size + n:
                break
            out.append(pickle.loads(bytes(self._buf[LEN.size:LEN.size + n])))
            del self._buf[:LEN.size + n]
        return out


def bind(host: str, port: int) -> socket.socket:
    """The collector's UDP address, shared with the other workers (``SO_REUSEPORT``)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except OSError:  # (not permitted: what net.core.rmem_max allows)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def serve(shard, udp: socket.socket, ctl: socket.socket, frames: Frames, batch_s: float = BATCH_S) -> None:
    """Datagrams into ``shard``, batches out to ``ctl``, the controller's word in (``frames``: what was read of
    it so far), until ``ctl`` ends. Never waits for the controller: a batch it has not taken yet stays in an
    outbox, written as it takes it, and no new batch is made meanwhile, so what changes comes in the next one
    (a drain is everything since the last: the rows as they are then, the flow samples kept in order). The
    socket is read on all the while: with Linux's default socket buffer (212 KB) a k=48 batch of rows (about
    370 KB) does not fit in the stream, and a worker that waited for a controller busy with its period
    stopped reading its own socket until the period ended."""
    sel = selectors.DefaultSelector()
    sel.register(udp, selectors.EVENT_READ, "udp")
    sel.register(ctl, selectors.EVENT_READ, "ctl")
    out = bytearray()  # what the controller has not taken yet
    writing = False  # ``ctl`` is watched for room too
    got: list = []  # datagrams read and not yet handled: folded together (``HOLD_S``, ``HOLD_N``)
    next_batch = time.monotonic() + batch_s
    left = shard.prepare(0)  # the port map's routes still to resolve, a few at a time while nothing comes
    while True:
        due = min(next_batch, got[0][0] + HOLD_S) if got else next_batch
        ready = sel.select(0.0 if left else max(0.0, due - time.monotonic()))
        if left and not ready:
            left = shard.prepare(PREPARE_N)
        for key, mask in ready:
            if key.data == "udp":
                for _ in range(256):  # (then the batch's time and the controller's word are looked at)
                    try:
                        data, source = udp.recvfrom(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    got.append((time.monotonic(), data, source[0]))
            elif mask & selectors.EVENT_READ:
                data = ctl.recv(1 << 20)
                if not data:
                    return  # the controller is gone
                for msg in frames.feed(data):
                    shard.control(msg)
                left = shard.prepare(0)  # (a new map: its routes, from the start)
        now = time.monotonic()
        if got and (len(got) >= HOLD_N or now >= got[0][0] + HOLD_S or now >= next_batch):
            shard.handle_many(got)  # (their counters folded at once)
            got = []
        if now >= next_batch:
            next_batch = now + batch_s
            if not out:  # (else the controller has not taken the last one yet: what changed waits for the next)
                out += pack(shard.drain())
        if out:
            try:
                del out[:ctl.send(out)]
            except (BlockingIOError, InterruptedError):
                pass
        if bool(out) != writing:
            writing = bool(out)
            sel.modify(ctl, selectors.EVENT_READ | (selectors.EVENT_WRITE if writing else 0), "ctl")


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL when the process that started this one dies (Linux's PR_SET_PDEATHSIG); and if it died
    before that was set, go now."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # (not Linux: the stream's end still ends the worker)
        pass
    if parent is not None and os.getppid() != parent:
        sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fd", type=int, required=True, help="the stream socket to the controller")
    ap.add_argument("--listen", required=True, help="HOST:PORT of the collector")
    ap.add_argument("--udp-fd", type=int, default=None,
                    help="the collector's socket, bound by the controller (else bound here, SO_REUSEPORT)")
    ap.add_argument("--fabric", required=True)
    ap.add_argument("--sources", default="agent")
    ap.add_argument("--parent", type=int, default=None, help="the controller's pid: the worker dies with it")
    a = ap.parse_args(argv)
    # the controller's signals are its own: a reload (SIGHUP) or a Ctrl-C (SIGINT) in its terminal ends nothing
    # here; the worker ends when the controller's stream does, and is killed when the controller dies (in its
    # own process group, a SIGKILL to the controller's group no longer reaches it: a worker still loading
    # the fabric, or hung, would keep the collector's port from a restarted controller)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(a.parent)
    ctl = socket.socket(fileno=a.fd)
    host, _, port = a.listen.rpartition(":")
    from monitoring.shard import Shard
    from topology.fabric import Fabric

    # the first frame is the controller's word: the settings, the port map, the hot threshold
    frames, first = Frames(), []
    while not first:
        data = ctl.recv(1 << 20)
        if not data:
            return 0
        first = frames.feed(data)
    shard = Shard(Fabric.load(a.fabric), first[0].get("config"), a.sources)
    for msg in first:
        shard.control(msg)
    if a.udp_fd is not None:
        udp = socket.socket(fileno=a.udp_fd)
        udp.setblocking(False)
    else:
        udp = bind(host.strip("[]"), int(port))
    try:
        ctl.sendall(pack({"ready": os.getpid()}))
        ctl.setblocking(False)
        serve(shard, udp, ctl, frames)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
