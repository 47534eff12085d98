"""The fabric's sFlow agents for ``freeway bench fabric-scale``: every port's counters and the flow samples of
a synthetic load, sent to the controller's collector as Open vSwitch's agent sends them, in a process of its
own (so neither the controller nor the OpenFlow emulator pays for it).

    python -m experiments.benches.sflowload SPEC.json     (prints one JSON object when done)

The spec: ``collector`` [host, port], ``agent`` (the address every datagram names, as every bridge of one
host reports the same), ``duration_s``, ``counter_interval_s`` (0: no counter samples), ``sampling`` (1-in-N,
0: no flow samples), ``frame_bytes``, ``ports`` [[ifIndex, speed bit/s, in bit/s, out bit/s], ...] and
``streams`` [[ingress ifIndex, egress ifIndex, src, dst, sport, dport, bit/s(, start s)], ...] (one per switch
a flow crosses: each switch samples what enters it; a stream with a start begins that long after the agents
do, the wall-clock time they began being ``t0_wall`` in the result). Counter samples come once per interval per port, the ports'
phases spread evenly over the interval (each port is polled on its own); flow samples come at random
(exponential gaps) at the rate 1-in-N sampling of the stream's packets gives, each carrying the TCP
sequence number the flow has reached. Each bridge is an agent of its own, as in Open vSwitch: its samples go
from a UDP socket of its own (``ports``' fifth column names the bridge; without it, one socket for all),
packed into datagrams of up to ``MAX_DATAGRAM`` bytes, and a datagram goes when the next sample would not
fit or when its first sample has waited ``flush_s`` (Open vSwitch's agent sends what it holds once a second:
1.0, the default; at most ``MAX_SOCKETS`` sockets, bridges sharing them beyond that). When the sender falls behind its schedule it sends late rather than skipping, and
says how late it was (``behind_s``) and what it achieved per second.
"""

from __future__ import annotations

import heapq
import json
import random
import socket
import sys
import time

from ryu_apps.simswitch import sflow as enc

MAX_DATAGRAM = 1400  # Open vSwitch's agent: samples are packed into datagrams of at most this many bytes
TICK_S = 0.005
HEADER_BYTES = 54  # Ethernet, IPv4 and TCP headers: the sampled header (the frame's first bytes)


MAX_SOCKETS = 4096


class _Agent:
    """One bridge's agent: its socket and the samples it holds."""

    __slots__ = ("sock", "pending", "size", "since", "seq")

    def __init__(self, sock: socket.socket):
        self.sock, self.pending, self.size, self.since, self.seq = sock, [], 0, 0.0, 0


def run(spec: dict) -> dict:
    rng = random.Random(spec.get("seed", 1))
    dest = tuple(spec["collector"])
    flush_s = float(spec.get("flush_s", 1.0))
    bridge_of = {p[0]: (p[4] if len(p) > 4 else 0) for p in spec.get("ports", [])}
    socks: list[socket.socket] = []
    for _ in range(min(MAX_SOCKETS, max(1, len(set(bridge_of.values()))))):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        socks.append(sock)
    agents: dict[int, _Agent] = {}
    for b in sorted(set(bridge_of.values())) or [0]:
        agents[b] = _Agent(socks[len(agents) % len(socks)])
    agent = spec.get("agent", "127.0.0.1")
    interval, sampling = float(spec.get("counter_interval_s", 1.0)), int(spec.get("sampling", 10))
    frame = int(spec.get("frame_bytes", 1500))
    ports = spec.get("ports", []) if interval > 0 else []
    streams = spec.get("streams", []) if sampling > 0 else []
    n_ports = len(ports)
    base = {p[0]: (rng.getrandbits(40), rng.getrandbits(40)) for p in ports}  # counters never start at zero
    heap = []
    for i, s in enumerate(streams):
        per_s = s[6] / (frame * 8) / sampling
        if per_s > 0:
            heap.append(((s[7] if len(s) > 7 else 0.0) + rng.expovariate(per_s), i, per_s))
    heapq.heapify(heap)
    seq0 = [rng.getrandbits(32) for _ in streams]
    out = {"datagrams": 0, "counter_samples": 0, "flow_samples": 0, "bytes": 0, "behind_s": 0.0}
    sample_seq = 0
    holding: dict[int, _Agent] = {}  # the agents holding samples, the longest-holding first

    def flush(a: _Agent):
        if not a.pending:
            return
        a.seq += 1
        data = enc.datagram(a.pending, agent=agent, seq=a.seq, uptime=int((time.monotonic() - t0) * 1000) + 1000)
        try:
            a.sock.sendto(data, dest)
        except OSError:
            out["send_errors"] = out.get("send_errors", 0) + 1
        out["datagrams"] += 1
        out["bytes"] += len(data)
        a.pending, a.size = [], 0

    def add(ifindex: int, sample: bytes, now: float):
        b = bridge_of.get(ifindex, 0)
        a = agents.get(b) or agents[next(iter(agents))]
        if a.size + len(sample) > MAX_DATAGRAM - 28:
            flush(a)
            holding.pop(b, None)
        if not a.pending:
            a.since = now
            holding[b] = a
        a.pending.append(sample)
        a.size += len(sample)

    def flush_due(now: float, every: bool = False):
        while holding:
            b, a = next(iter(holding.items()))
            if not every and now - a.since < flush_s:
                break
            del holding[b]
            flush(a)

    t0 = time.monotonic()
    out["t0_wall"] = time.time()
    first_sample: dict[int, float] = {}
    out["first_sample_wall"] = first_sample
    end = t0 + float(spec["duration_s"])
    cycle, nxt = 0, 0  # counters: which interval, and the next port due in it
    while True:
        now = time.monotonic()
        if now >= end:
            break
        el = now - t0
        while n_ports and cycle * interval + nxt * interval / n_ports <= el:
            ifindex, speed, in_bps, out_bps = ports[nxt][:4]
            due = cycle * interval + nxt * interval / n_ports
            out["behind_s"] = max(out["behind_s"], el - due)
            b_in, b_out = base[ifindex]
            sample_seq += 1
            add(ifindex, enc.counter_sample([enc.if_counters(ifindex, int(b_in + in_bps * due / 8),
                                                             int(b_out + out_bps * due / 8), speed_bps=int(speed))],
                                            seq=sample_seq, source=(0, ifindex)), now)
            out["counter_samples"] += 1
            nxt += 1
            if nxt == n_ports:
                cycle, nxt = cycle + 1, 0
        while heap and heap[0][0] <= el:
            due, i, per_s = heapq.heappop(heap)
            out["behind_s"] = max(out["behind_s"], el - due)
            inp, outp, src, dst, sport, dport, bps = streams[i][:7]
            if len(streams[i]) > 7 and sport not in first_sample:  # a late stream's first sample: when it was
                first_sample[sport] = time.time()  # taken (the sender may be behind its schedule)
            sample_seq += 1
            hdr = enc.eth_ipv4_tcp(src, dst, sport, dport, tcp_seq=seq0[i] + int(bps * due / 8),
                                   payload=frame - HEADER_BYTES)
            add(inp, enc.flow_sample([enc.raw_header_record(hdr, frame)], rate=sampling, inp=inp, out=outp,
                                     seq=sample_seq, source=(0, inp)), now)
            out["flow_samples"] += 1
            heapq.heappush(heap, (due + rng.expovariate(per_s), i, per_s))
        flush_due(now)
        time.sleep(max(0.0, TICK_S - (time.monotonic() - now)))
    flush_due(0.0, every=True)
    took = time.monotonic() - t0
    out["s"] = round(took, 3)
    out["behind_s"] = round(out["behind_s"], 3)
    for key in ("datagrams", "counter_samples", "flow_samples"):
        out[f"{key}_per_s"] = round(out[key] / took, 1)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    print(json.dumps(run(spec)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
