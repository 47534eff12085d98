"""Request/response TCP flows for mice: a server and a client that time every flow.

Server: for each connection, read an 8-byte size, send that many bytes; then
wait for the client's one-byte "done", and answer with the number of
retransmission timeouts its side of the connection took (2 bytes).
Client: open a new connection per flow (a fresh 5-tuple), ask for ``size``
bytes, read them all (that is the flow's completion time), then collect the
server's timeout count, and print one JSON line per flow: size, start (wall
clock), fct_s, the local port, and ``rto``: the timeouts both ends took
(SYN, request and response), from the kernel's TCP_INFO ``tcpi_total_rto``
(Linux 6.7 and later; null on older kernels). Runs on Mininet hosts with the project's
Python: ``python -m experiments.hosts.rr server --port 7000``.
"""

from __future__ import annotations

import argparse
import functools
import json
import socket
import struct
import sys
import threading
import time

CHUNK = 65536
_TOTAL_RTO_AT = 240  # offset of __u16 tcpi_total_rto in struct tcp_info (include/uapi/linux/tcp.h, Linux >= 6.7)


def total_rto(sock: socket.socket) -> int | None:
    """Retransmission timeouts this connection has taken so far (SYN/SYN-ACK included), or None when the
    kernel does not report them."""
    try:
        info = sock.getsockopt(socket.SOL_TCP, socket.TCP_INFO, 256)
    except OSError:
        return None
    if len(info) < _TOTAL_RTO_AT + 2:
        return None
    return struct.unpack_from("=H", info, _TOTAL_RTO_AT)[0]


def serve(port: int, once: bool = False) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(256)
    print(f"rr server on port {port}", flush=True)
    zeros = b"\0" * CHUNK

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                hdr = b""
                while len(hdr) < 8:
                    part = conn.recv(8 - len(hdr))
                    if not part:
                        return
                    hdr += part
                (n,) = struct.unpack("!Q", hdr)
                while n > 0:
                    sent = conn.send(zeros[: min(n, CHUNK)])
                    n -= sent
                conn.settimeout(30)
                if conn.recv(1):  # the client has everything: our timeouts are final
                    rto = total_rto(conn)
                    conn.sendall(struct.pack("!H", 0xFFFF if rto is None else min(rto, 0xFFFE)))
            except OSError:
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()
        if once:
            break


def sink(port: int) -> None:
    """Read and discard every connection's bytes; print one JSON line per connection."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)

    def handle(conn: socket.socket, addr) -> None:
        n, t0 = 0, time.time()
        with conn:
            while part := conn.recv(CHUNK):
                n += len(part)
        print(json.dumps({"from": addr[0], "sport": addr[1], "bytes": n, "seconds": round(time.time() - t0, 3)}),
              flush=True)

    while True:
        conn, addr = srv.accept()
        threading.Thread(target=handle, args=(conn, addr), daemon=True).start()


def fetch(host: str, port: int, size: int, timeout: float = 30.0) -> dict:
    t0 = time.time()
    s = socket.create_connection((host, port), timeout=timeout)
    lport = s.getsockname()[1]
    try:
        s.sendall(struct.pack("!Q", size))
        got = 0
        while got < size:
            part = s.recv(CHUNK)
            if not part:
                break
            got += len(part)
        fct = time.time() - t0
        rto = _both_rto(s) if got == size else total_rto(s)
    finally:
        s.close()
    return {"size": size, "got": got, "start": t0, "fct_s": fct, "sport": lport, "ok": got == size, "rto": rto}


def _both_rto(s: socket.socket) -> int | None:
    """Our timeouts plus the server's (it answers our "done" byte with its count)."""
    mine = total_rto(s)
    try:
        s.settimeout(10)
        s.sendall(b"\x01")
        buf = b""
        while len(buf) < 2:
            part = s.recv(2 - len(buf))
            if not part:
                return None
            buf += part
    except OSError:
        return None
    (theirs,) = struct.unpack("!H", buf)
    return None if mine is None or theirs == 0xFFFF else mine + theirs


def run_at(jobs: list, clock=time.monotonic) -> int:
    """Run each ``(when, job)`` at ``when`` on ``clock``, each in a thread of its own (a slow one never
    delays a later one); each job's result dict printed as one JSON line, whole. Returns when all end."""
    lock = threading.Lock()
    threads = []

    def one(job) -> None:
        r = job()
        with lock:
            print(json.dumps(r), flush=True)

    for when, job in sorted(jobs, key=lambda j: j[0]):
        delay = when - clock()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one, args=(job,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return 0


def run_schedule(schedule: list, port: int) -> int:
    """Start each flow at its offset (one thread each, so slow flows never delay later ones)."""

    def one(server: str, size: int) -> dict:
        try:
            r = fetch(server, port, size)
        except OSError as e:
            r = {"size": size, "ok": False, "error": str(e), "start": time.time()}
        r["server"] = server
        return r

    t0 = time.monotonic()
    return run_at([(t0 + offset, functools.partial(one, server, int(size))) for offset, server, size in schedule])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rr")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("server")
    s.add_argument("--port", type=int, default=7000)
    k = sub.add_parser("sink")
    k.add_argument("--port", type=int, default=5001)
    c = sub.add_parser("client")
    c.add_argument("--to", required=True)
    c.add_argument("--port", type=int, default=7000)
    c.add_argument("--sizes", required=True, help="comma-separated flow sizes in bytes, one flow each")
    c.add_argument("--gap", type=float, default=0.0, help="seconds between flow starts (sequential when 0)")
    sc = sub.add_parser("schedule", help="run a JSON schedule of [start offset, server, size] flows")
    sc.add_argument("--file", required=True)
    sc.add_argument("--port", type=int, default=7000)
    a = p.parse_args(argv)
    if a.cmd == "server":
        serve(a.port)
        return 0
    if a.cmd == "sink":
        sink(a.port)
        return 0
    if a.cmd == "schedule":
        return run_schedule(json.loads(open(a.file).read()), a.port)
    sizes = [int(x) for x in a.sizes.split(",") if x]
    results: list[dict] = []
    lock = threading.Lock()

    def one(sz: int) -> None:
        try:
            r = fetch(a.to, a.port, sz)
        except OSError as e:
            r = {"size": sz, "ok": False, "error": str(e), "start": time.time()}
        with lock:
            results.append(r)
            print(json.dumps(r), flush=True)

    threads = []
    for sz in sizes:
        if a.gap > 0:
            t = threading.Thread(target=one, args=(sz,))
            t.start()
            threads.append(t)
            time.sleep(a.gap)
        else:
            one(sz)
    for t in threads:
        t.join()
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
