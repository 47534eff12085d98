"""A flow list on the emulator's hosts, as the ns-3 engine's ``fw::Host`` runs it.

Each Mininet host runs the flows it sends (``run``): request/response mice as ``experiments.hosts.rr`` times
them, and bulk flows that send an 8-byte size first and then the bytes (size 0: until their stop time),
paced by the sender when the flow has a rate (as ``iperf3 -b``), from their own source port when the
list gives one. An announced flow sends the Freeway handshake first, as ``freeway send`` does (the same
wire format, 1 s per try, three tries), from the source port it then connects from. Receivers of bulk
flows run ``sink``: per connection, the bytes and the wall-clock time the last of a sized flow's bytes
arrived. Every host shares the machine's clock, so a flow's completion time is measured against the
start it was scheduled at: ``t0 + start``.

    python -m experiments.hosts.hostflows sink --ports 6000,6001
    python -m experiments.hosts.hostflows run --file flows-h0_0_0.json --t0 1764130000.0

Both print one JSON line per flow or connection, and nothing else.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import socket
import struct
import sys
import threading
import time

from experiments.hosts import rr

CHUNK = 65536
SERVICE = ("10.255.255.254", 7070)


def sink(ports: list[int]) -> None:
    """Accept bulk flows on ``ports``; per connection print its sender, bytes, announced size and when the
    last of its bytes arrived (a sized flow: when it had them all; else when the sender closed)."""
    lock = threading.Lock()

    def handle(conn: socket.socket, addr) -> None:
        got, size, done = 0, None, None
        hdr = b""
        with conn:
            try:
                while len(hdr) < 8:
                    part = conn.recv(8 - len(hdr))
                    if not part:
                        break
                    hdr += part
                if len(hdr) == 8:
                    (size,) = struct.unpack("!Q", hdr)
                    while part := conn.recv(CHUNK):
                        got += len(part)
                        if size and got >= size and done is None:
                            done = time.time()
            except OSError:
                pass
        with lock:
            print(json.dumps({"from": addr[0], "sport": addr[1], "bytes": got, "size": size,
                              "done": done if size else time.time()}), flush=True)

    def serve(port: int) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(256)
        while True:
            conn, addr = srv.accept()
            threading.Thread(target=handle, args=(conn, addr), daemon=True).start()

    for p in ports[1:]:
        threading.Thread(target=serve, args=(p,), daemon=True).start()
    serve(ports[0])


def announce(me: str, dst: str, sport: int, dport: int, size: int) -> str:
    """The handshake for one subflow, as ``freeway send`` sends it: ack, nack or none."""
    from ryu_apps.host import agent
    from ryu_apps.host import handshake as hs

    ann = hs.Announce(random.getrandbits(63), size or 1_000_000_000, 0, (hs.Subflow(me, dst, 6, sport, dport),))
    answer, _, _ = agent.handshake(ann, SERVICE, 1.0, 3)
    return "ack" if isinstance(answer, hs.Ack) else "nack" if isinstance(answer, hs.Nack) else "none"


def bulk(f: dict, t0: float) -> dict:
    """One bulk flow: (announce,) connect, the size, the bytes (paced when it has a rate) until they are
    all written or its stop time; the sender's view (the receiver's is the sink's)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    me = rr_local(f["dst_ip"])
    s.bind((me, f.get("sport") or 0))
    sport = s.getsockname()[1]
    out = {"id": f["id"], "sport": sport, "answer": None, "sent": 0, "ok": False}
    if f.get("announced"):
        out["answer"] = announce(me, f["dst_ip"], sport, f["dport"], f["bytes"])
        out["answered"] = time.time()
    stop_at = None if f.get("stop") is None else t0 + f["stop"]
    rate = (f.get("rate_mbps") or 0) * 1e6 / 8
    try:
        s.settimeout(30)
        s.connect((f["dst_ip"], f["dport"]))
        s.settimeout(None)
        s.sendall(struct.pack("!Q", f["bytes"]))
        left = f["bytes"] or None
        chunk = b"\0" * CHUNK
        began = time.time()
        while left is None or left > 0:
            now = time.time()
            if stop_at is not None and now >= stop_at:
                break
            n = CHUNK if left is None else min(left, CHUNK)
            if rate:
                ahead = out["sent"] - (now - began) * rate  # bytes written beyond the pace
                if ahead > 0:
                    time.sleep(min(ahead / rate, 0.01))
                    continue
                n = min(n, 16384)
            if stop_at is not None:
                s.settimeout(max(0.001, stop_at - now))
            try:
                sent = s.send(chunk[:n])
            except TimeoutError:
                break
            out["sent"] += sent
            if left is not None:
                left -= sent
        out["ok"] = True
    except OSError as e:
        out["error"] = str(e)
    finally:
        out["end"] = time.time()
        s.close()
    return out


def rr_local(dst: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.connect((dst, 9))
        return u.getsockname()[0]


def run(flows: list[dict], t0: float, rr_port: int) -> int:
    """Start each flow at ``t0 + start`` (one thread each); one JSON line per flow."""

    def one(f: dict) -> dict:
        if f["kind"] != "rr":
            return bulk(f, t0)
        try:
            r = rr.fetch(f["dst_ip"], rr_port, int(f["bytes"]))
        except OSError as e:
            r = {"ok": False, "error": str(e), "start": time.time()}
        r["id"] = f["id"]
        r["end"] = r["start"] + r["fct_s"] if r.get("fct_s") is not None else None
        return r

    return rr.run_at([(t0 + f["start"], functools.partial(one, f)) for f in flows], clock=time.time)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hostflows")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--ports", required=True)
    r = sub.add_parser("run")
    r.add_argument("--file", required=True)
    r.add_argument("--t0", type=float, required=True)
    r.add_argument("--rr-port", type=int, default=7100)
    a = p.parse_args(argv)
    if a.cmd == "sink":
        sink([int(x) for x in a.ports.split(",")])
        return 0
    return run(json.loads(open(a.file).read()), a.t0, a.rr_port)


if __name__ == "__main__":
    sys.exit(main())
