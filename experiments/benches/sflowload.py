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
import struct
import sys
import time
from pathlib import Path

from ryu_apps.simswitch import sflow as enc

MAX_DATAGRAM = 1400  # Open vSwitch's agent: samples are packed into datagrams of at most this many bytes
TICK_S = 0.005
HEADER_BYTES = 54  # Ethernet, IPv4 and TCP headers: the sampled header (the frame's first bytes)


MAX_SOCKETS = 4096
_SEQ, _OCTETS = struct.Struct("!I"), struct.Struct("!Q")


def _offset(data: bytes, marker: bytes) -> int:
    at = data.find(marker)
    if at < 0 or data.find(marker, at + 1) >= 0:
        raise AssertionError(f"the encoder's layout changed: {marker.hex()} not found once")
    return at


class CounterSamples:
    """One port's counter samples as ``enc.counter_sample([enc.if_counters(...)])`` encodes them, from a
    template whose sequence number and octet counters are written in place (at k=48 the agents send 138,240
    a second: encoding each one afresh held the sender 2 s behind its schedule, so the load offered was 70-80%
    of the one asked for). The offsets are found in the encoder's own output, so the two cannot drift apart
    (``tests/unit/test_fabricload.py`` compares them)."""

    _layout: tuple[int, int, int] | None = None

    def __init__(self, ifindex: int, speed_bps: int):
        if CounterSamples._layout is None:
            probe = enc.counter_sample([enc.if_counters(7, 0x5A5A5A5A5A5A5A01, 0x5A5A5A5A5A5A5A02)],
                                       seq=0x5A5A5A03, source=(0, 7))
            CounterSamples._layout = (_offset(probe, _SEQ.pack(0x5A5A5A03)),
                                      _offset(probe, _OCTETS.pack(0x5A5A5A5A5A5A5A01)),
                                      _offset(probe, _OCTETS.pack(0x5A5A5A5A5A5A5A02)))
        self.tpl = bytearray(enc.counter_sample([enc.if_counters(ifindex, 0, 0, speed_bps=speed_bps)],
                                                seq=0, source=(0, ifindex)))

    def sample(self, seq: int, in_octets: int, out_octets: int) -> bytes:
        at_seq, at_in, at_out = self._layout
        tpl = self.tpl
        _SEQ.pack_into(tpl, at_seq, seq & 0xFFFFFFFF)
        _OCTETS.pack_into(tpl, at_in, in_octets & 0xFFFFFFFFFFFFFFFF)
        _OCTETS.pack_into(tpl, at_out, out_octets & 0xFFFFFFFFFFFFFFFF)
        return bytes(tpl)


class FlowSamples:
    """One stream's flow samples (``enc.flow_sample`` of a raw header from ``enc.eth_ipv4_tcp``), from a
    template whose sample sequence number and TCP sequence number are written in place."""

    _layout: tuple[int, int] | None = None

    def __init__(self, inp: int, outp: int, src: str, dst: str, sport: int, dport: int, sampling: int, frame: int):
        if FlowSamples._layout is None:
            probe = self._encode(1, 2, "10.0.0.2", "10.1.0.2", 40000, 5001, 10, 1500, 0x5A5A5A01, 0x5A5A5A02)
            FlowSamples._layout = (_offset(probe, _SEQ.pack(0x5A5A5A01)), _offset(probe, _SEQ.pack(0x5A5A5A02)))
        self.tpl = bytearray(self._encode(inp, outp, src, dst, sport, dport, sampling, frame, 0, 0))

    @staticmethod
    def _encode(inp, outp, src, dst, sport, dport, sampling, frame, seq, tcp_seq) -> bytes:
        hdr = enc.eth_ipv4_tcp(src, dst, sport, dport, tcp_seq=tcp_seq, payload=frame - HEADER_BYTES)
        return enc.flow_sample([enc.raw_header_record(hdr, frame)], rate=sampling, inp=inp, out=outp, seq=seq,
                               source=(0, inp))

    def sample(self, seq: int, tcp_seq: int) -> bytes:
        at_seq, at_tcp = self._layout
        tpl = self.tpl
        _SEQ.pack_into(tpl, at_seq, seq & 0xFFFFFFFF)
        _SEQ.pack_into(tpl, at_tcp, tcp_seq & 0xFFFFFFFF)
        return bytes(tpl)


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
    counter_tpl = [CounterSamples(p[0], int(p[1])) for p in ports]
    flow_tpl = [FlowSamples(s[0], s[1], s[2], s[3], s[4], s[5], sampling, frame) for s in streams]
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

    t0, cpu0 = time.monotonic(), time.process_time()
    out["t0_wall"] = time.time()
    if spec.get("started_file"):  # (the bench's warm-up counts from here)
        Path(spec["started_file"]).write_text(str(out["t0_wall"]))
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
            ifindex, _, in_bps, out_bps = ports[nxt][:4]
            due = cycle * interval + nxt * interval / n_ports
            out["behind_s"] = max(out["behind_s"], el - due)
            b_in, b_out = base[ifindex]
            sample_seq += 1
            add(ifindex, counter_tpl[nxt].sample(sample_seq, int(b_in + in_bps * due / 8), int(b_out + out_bps * due / 8)),
                now)
            out["counter_samples"] += 1
            nxt += 1
            if nxt == n_ports:
                cycle, nxt = cycle + 1, 0
        while heap and heap[0][0] <= el:
            due, i, per_s = heapq.heappop(heap)
            out["behind_s"] = max(out["behind_s"], el - due)
            inp, sport, bps = streams[i][0], streams[i][4], streams[i][6]
            if len(streams[i]) > 7 and sport not in first_sample:  # a late stream's first sample: when it was
                first_sample[sport] = time.time()  # taken (the sender may be behind its schedule)
            sample_seq += 1
            add(inp, flow_tpl[i].sample(sample_seq, seq0[i] + int(bps * due / 8)), now)
            out["flow_samples"] += 1
            heapq.heappush(heap, (due + rng.expovariate(per_s), i, per_s))
        flush_due(now)
        time.sleep(max(0.0, TICK_S - (time.monotonic() - now)))
    flush_due(0.0, every=True)
    took = time.monotonic() - t0
    out["s"] = round(took, 3)
    out["cpu_s"] = round(time.process_time() - cpu0, 3)  # (this process's own: what sending cost)
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
