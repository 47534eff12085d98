"""``freeway bench exhaustion``: the controller under the channels' exhaustion attacks (issue 60 item 4), beside
the same fabric unloaded.

The real controller process against every switch of a fat-tree emulated at the socket (``fabricscale``),
then twice the same window: handshakes at ``rate`` a second (their answers timed at the ToR) while the
operator API is asked for ``/api/v1/status`` every ``api_every_s``; once with nothing else going on, once
while ``unadmitted`` connections to the OpenFlow port say HELLO and nothing after (never admitted) and
``slowloris`` connections to the API from three other loopback addresses send half a request line and
nothing after. Targets (issue 60): handshake p99 at most 2x unloaded, the API answering in under 1 s.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.request
from pathlib import Path


def _hello() -> bytes:
    return struct.pack("!BBHI", 4, 0, 8, 1)


class Attack:
    """The attackers, in a thread of their own: raw sockets, opened and then left as they are."""

    def __init__(self, of_address: tuple[str, int], api_address: tuple[str, int], unadmitted: int, slowloris: int):
        self.of_address, self.api_address = of_address, api_address
        self.unadmitted, self.slowloris = unadmitted, slowloris
        self.socks: list[socket.socket] = []
        self.opened = {"openflow": 0, "api": 0, "refused": 0}

    def start(self) -> Attack:
        t = threading.Thread(target=self._open, daemon=True)
        t.start()
        t.join(120)
        return self

    def _open(self) -> None:
        for _ in range(self.unadmitted):  # from loopback: an emulated fabric's own address, no per-address cap
            self._one(self.of_address, "127.0.0.1", _hello(), "openflow")
        for i in range(self.slowloris):
            self._one(self.api_address, f"127.0.0.{2 + i % 3}", b"GET /api/v1/status HTTP/1.1\r\nHost: x", "api")

    def _one(self, address, source: str, first: bytes, kind: str) -> None:
        s = socket.socket()
        try:
            s.bind((source, 0))
            s.settimeout(2)
            s.connect(address)
            s.send(first)
            self.socks.append(s)
            self.opened[kind] += 1
        except OSError:
            s.close()
            self.opened["refused"] += 1

    def stop(self) -> None:
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks.clear()


def _api_latency(api: str, until: float, every_s: float, out: list) -> None:
    while time.monotonic() < until:
        t0 = time.monotonic()
        try:
            urllib.request.urlopen(f"http://{api}/api/v1/status", timeout=10).read()
            out.append(time.monotonic() - t0)
        except OSError:
            out.append(None)
        time.sleep(max(0.0, every_s - (time.monotonic() - t0)))


def _window(em, api: str, pairs, rate: float, seconds: float, every_s: float) -> dict:
    lat: list = []
    t = threading.Thread(target=_api_latency, args=(api, time.monotonic() + seconds + 3, every_s, lat), daemon=True)
    t.start()
    hs = em.handshakes(pairs, rate, seconds, rate_kbps=100)  # small: no host's budget refuses one
    t.join(seconds + 20)
    ok = sorted(x for x in lat if x is not None)
    return {"handshake": {k: hs[k] for k in ("sent", "acks", "nacks", "unanswered", "p50_ms", "p99_ms", "max_ms")},
            "api": {"asked": len(lat), "failed": sum(1 for x in lat if x is None),
                    "p50_ms": round(1000 * ok[len(ok) // 2], 1) if ok else None,
                    "max_ms": round(1000 * ok[-1], 1) if ok else None}}


def run(k: int, out: Path, rate: float = 100.0, seconds: float = 10.0, unadmitted: int = 2000,
        slowloris: int = 300, api_every_s: float = 0.2, progress=print) -> dict:
    from experiments.benches.controller import machine
    from experiments.benches.fabricscale import Emulator, _settle_generator, wait_programmed
    from experiments.engines.runner import build_fabric
    from experiments.harness.procs import ControllerProcess, free_port
    from ryu_apps.launcher import raise_fd_limit

    raise_fd_limit()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    fabric = build_fabric("fattree", k, 10.0)
    d = out / f"exhaustion-k{k}"
    d.mkdir(exist_ok=True)
    fabric.save(d / "fabric.json")
    api = f"127.0.0.1:{free_port()}"
    em = Emulator(fabric, ("127.0.0.1", 0))
    ctl = ControllerProcess(d / "fabric.json", mode="freeway", log_file=d / "controller.log",
                            extra=["--api", api, "--lldp-interval", "0"], events_file=False)
    result: dict = {"bench": "exhaustion", "machine": machine(), "k": k, "switches": len(fabric.switches),
                    "rate_per_s": rate, "window_s": seconds, "unadmitted": unadmitted, "slowloris": slowloris}
    attack = None
    try:
        ctl.start(timeout=120)
        em.address = ctl.address
        em.start()
        prog = wait_programmed(em, api, 600, time.monotonic(), progress)
        result["startup_s"] = None if prog is None else round(prog, 2)
        _settle_generator()
        tors = fabric.tors()
        per = len(fabric.hosts_on(tors[0]))
        pairs = [(fabric.hosts_on(a)[i], fabric.hosts_on(b)[i]) for i in range(per) for a in tors for b in tors
                 if fabric.switches[a].pod != fabric.switches[b].pod][:2000]  # every host in turn
        progress(f"[exhaustion] k={k}: the unloaded window ({rate:g} handshakes/s for {seconds:g} s)")
        result["unloaded"] = _window(em, api, pairs, rate, seconds, api_every_s)
        progress(f"[exhaustion] unloaded: {json.dumps(result['unloaded'])}")
        host, port = api.split(":")
        attack = Attack(ctl.address, (host, int(port)), unadmitted, slowloris).start()
        result["attack"] = dict(attack.opened)
        progress(f"[exhaustion] attack: {json.dumps(attack.opened)}; the loaded window")
        result["loaded"] = _window(em, api, pairs, rate, seconds, api_every_s)
        progress(f"[exhaustion] loaded: {json.dumps(result['loaded'])}")
        un, lo = result["unloaded"], result["loaded"]
        result["targets"] = {
            "handshake_p99_ratio": (round(lo["handshake"]["p99_ms"] / un["handshake"]["p99_ms"], 2)
                                    if lo["handshake"]["p99_ms"] and un["handshake"]["p99_ms"] else None),
            "handshake_p99_at_most_2x": bool(lo["handshake"]["p99_ms"] and un["handshake"]["p99_ms"]
                                             and lo["handshake"]["p99_ms"] <= 2 * un["handshake"]["p99_ms"]),
            "api_max_ms": lo["api"]["max_ms"],
            "api_under_1s": bool(lo["api"]["max_ms"] is not None and lo["api"]["max_ms"] < 1000
                                 and not lo["api"]["failed"])}
    finally:
        if attack is not None:
            attack.stop()
        em.stop()
        ctl.stop()
    (out / f"exhaustion_k{k}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
