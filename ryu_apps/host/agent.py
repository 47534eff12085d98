"""``freeway send``: announce an elephant to the controller, wait for the answer, then send it.

The host picks its source port(s), sends an ANNOUNCE (see ryu_apps/host/handshake.py)
to the service address, and waits for the ACK or NACK. Then it runs the
transfer from exactly the announced ports: its own TCP sender, or a command
given after ``--`` in which ``{cport}`` (first source port), ``{cports}``
(comma-separated), ``{size}``, ``{to}`` and ``{port}`` are replaced, e.g.
``freeway send --to 10.3.1.3 --port 5201 --size 20M -- iperf3 -c {to} -p {port} --cport {cport} -n {size}``.
Without an answer after the retries (or with a NACK) the flow still goes,
unannounced.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time

from ryu_apps.host import handshake as hs

UNITS = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3}


def parse_size(text: str) -> int:
    """Bytes from '20M', '500K', '1.5G', '1000' (decimal units)."""
    t = text.strip().upper().removesuffix("B")
    mult = 1
    if t and t[-1] in "KMG":
        mult, t = UNITS[t[-1]], t[:-1]
    try:
        n = int(float(t) * mult)
    except ValueError:
        raise ValueError(f"--size: not a size: {text!r} (e.g. 20M, 500K, 1000000)") from None
    if n <= 0:
        raise ValueError(f"--size: not a positive size: {text!r}")
    return n


def local_ip_toward(dst: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((dst, 9))
        return s.getsockname()[0]


def reserve_ports(ip: str, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, 0))
        socks.append(s)
    return socks


def handshake(ann: hs.Announce, service: tuple[str, int], timeout: float, tries: int):
    """Send the announce and wait for the answer with our nonce; (answer or None, seconds, tries used)."""
    t0 = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        data = hs.encode(ann)
        for i in range(1, tries + 1):
            s.sendto(data, service)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    reply, _ = s.recvfrom(2048)
                except TimeoutError:
                    break
                try:
                    msg = hs.decode(reply)
                except hs.HandshakeError:
                    continue
                if msg.nonce == ann.nonce and isinstance(msg, (hs.Ack, hs.Nack)):
                    return msg, time.monotonic() - t0, i
    return None, time.monotonic() - t0, tries


def send_bytes(sock: socket.socket, to: tuple[str, int], n: int, out: dict) -> None:
    t0 = time.monotonic()
    sock.connect(to)
    chunk = b"\0" * 65536
    left = n
    while left > 0:
        left -= sock.send(chunk[: min(left, len(chunk))])
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)  # wait for the receiver to close: all bytes delivered
    sock.close()
    out["seconds"] = time.monotonic() - t0


def byte_shares(size: int, rates: list[float]) -> list[int]:
    """The bytes each subflow sends: in proportion to the rates the controller gave them (so that they
    finish together when it split the elephant unevenly), evenly when it gave none."""
    n = len(rates)
    if sum(rates) <= 0 or min(rates) <= 0:
        rates = [1.0] * n
    per = [int(size * r / sum(rates)) for r in rates]
    for i in range(size - sum(per)):  # what the rounding left, one byte each from the first
        per[i % n] += 1
    return per


def run(args, command: list[str]) -> int:
    size = parse_size(args.size)
    if args.rate is not None and args.rate <= 0:
        raise ValueError("--rate: must be positive (Mbit/s)")
    if not 1 <= args.subflows <= hs.MAX_SUBFLOWS:
        raise ValueError(f"--subflows: must be 1..{hs.MAX_SUBFLOWS}")
    me = local_ip_toward(args.to)
    socks = reserve_ports(me, args.subflows)
    ports = [s.getsockname()[1] for s in socks]
    ann = hs.Announce(random.getrandbits(63), size, round((args.rate or 0) * 1000),
                      tuple(hs.Subflow(me, args.to, 6, p, args.port) for p in ports))
    host, _, sport = args.service.rpartition(":")
    answer, secs, tries = handshake(ann, (host, int(sport)), args.timeout, args.retries + 1)
    report = {"src": me, "to": args.to, "port": args.port, "size": size, "sports": ports,
              "handshake_s": round(secs, 4), "tries": tries}
    if isinstance(answer, hs.Ack):
        report.update(answer="ack", rate_mbps=answer.rate_kbps / 1000,
                      paths=[{"sport": sub.sport, "rate_mbps": r / 1000, "dpids": [f"{d:016x}" for d in dp]}
                             for sub, r, dp in answer.allocations])
    elif isinstance(answer, hs.Nack):
        report.update(answer="nack", reason=answer.reason)
    else:
        report.update(answer="none")
    print(json.dumps(report) if args.json else _human(report), flush=True)
    if args.announce_only:
        for s in socks:
            s.close()
        return 0 if report["answer"] == "ack" else 1
    if command:
        for s in socks:
            s.close()
        subst = {"cport": str(ports[0]), "cports": ",".join(map(str, ports)), "size": str(size), "to": args.to,
                 "port": str(args.port)}
        return subprocess.call([c.format(**subst) for c in command])
    results = [{} for _ in socks]
    given = dict((sub.sport, r) for sub, r, _ in answer.allocations) if isinstance(answer, hs.Ack) else {}
    per = byte_shares(size, [given.get(p, 0) for p in ports])
    threads = [threading.Thread(target=send_bytes, args=(s, (args.to, args.port), n, r))
               for s, n, r in zip(socks, per, results, strict=True)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = time.monotonic() - t0
    print(json.dumps({"sent": size, "seconds": round(total, 3), "goodput_mbps": round(size * 8 / total / 1e6, 3)})
          if args.json else f"sent {size} bytes in {total:.2f} s ({size * 8 / total / 1e6:.2f} Mbit/s)", flush=True)
    return 0


def _human(r: dict) -> str:
    head = f"{r['src']} -> {r['to']}:{r['port']} ({r['size']} bytes, source ports {r['sports']}): "
    if r["answer"] == "ack":
        lines = [head + f"ACK after {r['handshake_s'] * 1000:.1f} ms, {r['rate_mbps']:.2f} Mbit/s allocated"]
        lines += [f"  port {p['sport']}: {p['rate_mbps']:.2f} Mbit/s via {' '.join(p['dpids'])}" for p in r["paths"]]
        return "\n".join(lines)
    if r["answer"] == "nack":
        return head + f"NACK: {r['reason']}; sending unannounced"
    return head + f"no answer after {r['tries']} tries ({r['handshake_s']:.1f} s); sending unannounced"




def cmd_send(args) -> int:
    try:
        return run(args, args.trailing)
    except ValueError as e:
        print(f"freeway send: error: {e}", file=sys.stderr)
        return 2


def add_commands(sub) -> None:
    s = sub.add_parser("send", help="announce an elephant (handshake), then send it")
    s.add_argument("--to", required=True, help="destination IP")
    s.add_argument("--port", type=int, required=True, help="destination TCP port")
    s.add_argument("--size", required=True, help="bytes to send (e.g. 20M)")
    s.add_argument("--rate", type=float, help="expected rate in Mbit/s (default: as fast as the path allows)")
    s.add_argument("--subflows", type=int, default=1, help="TCP subflows (1)")
    s.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for the answer per try (1)")
    s.add_argument("--retries", type=int, default=2, help="extra tries without an answer (2)")
    s.add_argument("--service", default="10.255.255.254:7070", help="handshake service address (10.255.255.254:7070)")
    s.add_argument("--announce-only", action="store_true", help="handshake only, send nothing (exit 1 unless ACK)")
    s.add_argument("--json", action="store_true", help="print JSON lines")
    s.set_defaults(func=cmd_send)

