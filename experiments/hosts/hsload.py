"""Handshake load generator (runs on a Mininet host): announces at a fixed rate, times every answer.

    python -m experiments.hosts.hsload --to 10.3.1.3 --rate 100 --duration 5 --first-port 20000

Prints one JSON object: sent, acks, nacks, unanswered, and the answer latencies in ms.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import threading
import time

from ryu_apps.host import handshake as hs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="hsload")
    p.add_argument("--to", required=True)
    p.add_argument("--rate", type=float, required=True, help="announces per second")
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--first-port", type=int, default=20000)
    p.add_argument("--rate-kbps", type=int, default=10, help="rate each announce asks for")
    p.add_argument("--service", default=f"{hs.SERVICE_IP}:{hs.SERVICE_PORT}")
    a = p.parse_args(argv)
    host, _, port = a.service.rpartition(":")
    svc = (host, int(port))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((a.to, 9))
        me = probe.getsockname()[0]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    sent: dict[int, float] = {}
    got: dict[int, tuple[str, float]] = {}
    done = threading.Event()

    def receive() -> None:
        while not done.is_set():
            try:
                data, _ = s.recvfrom(4096)
            except TimeoutError:
                continue
            t = time.monotonic()
            try:
                msg = hs.decode(data)
            except hs.HandshakeError:
                continue
            if msg.nonce in sent and msg.nonce not in got:
                got[msg.nonce] = ("ack" if isinstance(msg, hs.Ack) else "nack", (t - sent[msg.nonce]) * 1000)

    th = threading.Thread(target=receive, daemon=True)
    th.start()
    n = int(a.rate * a.duration)
    t0 = time.monotonic()
    base = random.getrandbits(40) << 20
    for i in range(n):
        target = t0 + i / a.rate
        delay = target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        nonce = base + i
        sport = a.first_port + i % 40000
        ann = hs.Announce(nonce, 50_000_000, a.rate_kbps, (hs.Subflow(me, a.to, 6, sport, 5001),))
        sent[nonce] = time.monotonic()
        s.sendto(hs.encode(ann), svc)
    time.sleep(2.0)
    done.set()
    th.join()
    lat = sorted(v for _, v in got.values())
    kinds = [k for k, _ in got.values()]
    print(json.dumps({"sent": n, "acks": kinds.count("ack"), "nacks": kinds.count("nack"),
                      "unanswered": n - len(got), "latency_ms": [round(x, 3) for x in lat],
                      "send_s": round(time.monotonic() - t0 - 2.0, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
