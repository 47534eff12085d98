"""Many short TCP flows from one Mininet host: ``python -m experiments.hosts.flowgen --to IP,IP --count N --rate R``.

Each flow is one non-blocking connect() to a closed port of a destination host: the SYN and the
destination's RST are two new TCP 5-tuples, each a new flow at its ingress ToR (in Hedera mode, two
packet-ins and two edge entries). A socket is closed 0.5 s after its connect, before the SYN would
be sent again, so every flow is one packet each way. Prints a JSON line with what it sent.
"""

from __future__ import annotations

import argparse
import collections
import json
import socket
import time


def run(dsts: list[str], count: int, rate: float, first_port: int) -> dict:
    pending: collections.deque = collections.deque()
    t0 = time.monotonic()
    sent = errors = 0
    for i in range(count):
        due = t0 + i / rate
        while True:
            now = time.monotonic()
            while pending and now - pending[0][0] > 0.5:
                pending.popleft()[1].close()
            if now >= due:
                break
            time.sleep(min(due - now, 0.05))
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect((dsts[i % len(dsts)], first_port + (i // len(dsts)) % 20000))
        except BlockingIOError:
            sent += 1
        except OSError:
            errors += 1
        pending.append((time.monotonic(), s))
    for _, s in pending:
        s.close()
    return {"sent": sent, "errors": errors, "seconds": round(time.monotonic() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flowgen", description=__doc__.splitlines()[0])
    p.add_argument("--to", required=True, help="destination addresses, comma-separated (round robin)")
    p.add_argument("--count", type=int, required=True, help="flows to start")
    p.add_argument("--rate", type=float, required=True, help="flows per second")
    p.add_argument("--first-port", type=int, default=20000, help="destination ports from here (20000)")
    a = p.parse_args(argv)
    if a.count < 0 or a.rate <= 0:
        p.error("--count must be >= 0 and --rate > 0")
    print(json.dumps(run(a.to.split(","), a.count, a.rate, a.first_port)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
