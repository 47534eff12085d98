"""The fabric-scale bench's sFlow agents (``experiments.benches.sflowload``) read by the real collector and estimator:
the counters give each port's rate, the flow samples the flow, its ingress port and its TCP progress; and
the histogram quantile the steady state is judged by."""

import socket
import threading
import time

from experiments.benches import fabricload, sflowload
from monitoring.collector import Collector
from monitoring.estimator import Estimator
from monitoring.sflow import FiveTuple
from topology.fabric import fattree


def test_the_agents_templates_write_the_very_bytes_the_encoder_writes():
    """The agents write counters and sequence numbers into a sample's template (the sender kept up no more at
    k=48): byte for byte what the message builder encodes, for any values, and the collector reads them."""
    import random

    from ryu_apps.simswitch import sflow as enc

    rnd = random.Random(5)
    for _ in range(200):
        ifindex, speed = rnd.randrange(1, 1 << 20), rnd.choice([10**7, 10**9, 10**11])
        seq, a, b = rnd.getrandbits(32), rnd.getrandbits(64), rnd.getrandbits(64)
        got = sflowload.CounterSamples(ifindex, speed).sample(seq, a, b)
        assert got == enc.counter_sample([enc.if_counters(ifindex, a, b, speed_bps=speed)], seq=seq,
                                         source=(0, ifindex))
        inp, outp, sport, dport, tcp = rnd.randrange(1, 999), rnd.randrange(1, 999), rnd.randrange(1024, 65535), \
            rnd.randrange(1, 65535), rnd.getrandbits(32)
        src, dst = f"10.{rnd.randrange(256)}.0.2", f"10.{rnd.randrange(256)}.1.3"
        got = sflowload.FlowSamples(inp, outp, src, dst, sport, dport, 1000, 1500).sample(seq, tcp)
        hdr = enc.eth_ipv4_tcp(src, dst, sport, dport, tcp_seq=tcp, payload=1500 - sflowload.HEADER_BYTES)
        assert got == enc.flow_sample([enc.raw_header_record(hdr, 1500)], rate=1000, inp=inp, out=outp, seq=seq,
                                      source=(0, inp))


def test_the_agents_counters_and_flow_samples_read_back_as_the_rates_they_were_given():
    fabric = fattree(4, 10.0)
    tor = "e0_0"
    agg = fabric.up_neighbors(tor)[0]
    up, host_port = fabric.port_to(tor, agg), fabric.hosts_on(tor)[0].port
    src, dst = fabric.hosts_on(tor)[0], fabric.hosts_on("e1_0")[0]
    ifmap = {101: (tor, up), 102: (tor, host_port)}
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(0.2)
    spec = {"collector": ["127.0.0.1", rx.getsockname()[1]], "duration_s": 2.6, "counter_interval_s": 0.5,
            "sampling": 10, "frame_bytes": 1500, "flush_s": 0.05,  # (not OVS's 1 s: two polls of a port a datagram)
            "ports": [[101, 10e6, 0.0, 4e6], [102, 10e6, 4e6, 0.0]],  # 4 Mbit/s from the host, up to the agg
            "streams": [[102, 101, src.ip, dst.ip, 40000, 5001, 4e6]]}
    sent = {}
    th = threading.Thread(target=lambda: sent.update(sflowload.run(spec)))
    th.start()
    est = Estimator(fabric)
    est.set_ifmap(ifmap)
    col = Collector(est)
    while th.is_alive():
        try:
            data = rx.recv(65535)
        except TimeoutError:
            continue
        col.handle(time.monotonic(), data)
    th.join()
    rx.close()
    assert col.stats["decode_errors"] == 0 and col.stats["datagrams"] == sent["datagrams"] > 0
    assert sent["counter_samples"] >= 8 and est.stats["unmapped_ifindex"] == 0
    # the counters: the uplink carries 4 Mbit/s out, the host link 4 Mbit/s in (the ToR's receive side)
    assert abs(est.link_bps[(tor, agg)] - 4e6) < 0.2e6, est.link_bps
    assert abs(est.link_bps[(src.name, tor)] - 4e6) < 0.2e6, est.link_bps
    # the flow samples: ~33 a second at 1-in-10 of 4 Mbit/s in 1,500-byte frames, taken entering the ToR
    flow = FiveTuple(src.ip, dst.ip, 6, 40000, 5001)
    assert 40 <= sent["flow_samples"] <= 140, sent
    st = est.flows[flow]
    assert set(st.points) == {(tor, host_port)}
    span = est.tcp_bytes(time.monotonic(), st)  # the sequence numbers advance at the flow's rate
    assert span is not None and 0.5e6 < span * 8 / 2.6 <= 4.2e6, span


def test_a_quantile_is_read_from_two_scrapes_of_a_histogram_as_prometheus_reads_it():
    name = "freeway_period_duration_seconds"
    before = {name + ":buckets": {0.01: 5.0, 0.1: 5.0, 1.0: 5.0, float("inf"): 5.0}}
    after = {name + ":buckets": {0.01: 5.0, 0.1: 15.0, 1.0: 25.0, float("inf"): 25.0}}  # 10 in (.01,.1], 10 in (.1,1]
    assert abs(fabricload.quantile(0.5, before, after, name) - 0.1) < 1e-9
    assert abs(fabricload.quantile(0.25, before, after, name) - 0.055) < 1e-9
    assert abs(fabricload.quantile(0.99, before, after, name) - (0.1 + 0.9 * 0.98)) < 1e-9
    assert fabricload.quantile(0.5, after, after, name) is None  # nothing observed between them


def test_the_links_fabric_scale_cuts_are_distinct_uplinks_of_the_middle_tier_even_past_one_per_pod():
    from experiments.benches.fabricscale import _cut_links

    f = fattree(4, 10)
    got = _cut_links(f, 8)  # 4 pods x 2 uplinks of their first aggregation switch: all of them, once each
    assert len(got) == len(set(got)) == 8
    assert all(b in f.up_neighbors(a) and f.down_neighbors(a) for a, b in got)
    assert _cut_links(f, 3) == [("a0_0", "c1"), ("a1_0", "c2"), ("a2_0", "c1")]


def test_the_generator_collects_no_cycles_while_a_measurement_runs_and_again_after_it():
    import asyncio
    import gc

    from experiments.benches.fabricscale import _GeneratorStalls

    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        assert gc.isenabled()
        with _GeneratorStalls(loop) as stalls:
            assert not gc.isenabled()  # a collection here would hold every answer under way
            junk = [[] for _ in range(100_000)]  # (enough allocations for several collections, were it on)
        del junk
        assert gc.isenabled()
        assert stalls.report(time.monotonic())["gc_pauses"] == []
        gc.disable()  # one who had it off keeps it off
        with _GeneratorStalls(loop):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)


def test_the_handshakes_wait_until_the_emulated_switches_have_applied_what_the_levels_before_left():
    """``settle``: the controller's elephants the same three reads running, and nothing left for the
    generator's switches to apply at any of them (its queue at k=32 once held 6.7 s of group mods when
    the handshakes began)."""
    import http.server
    import json

    from experiments.benches.fabricscale import settle

    class Status(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"elephants": 7}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = "127.0.0.1:%d" % server.server_address[1]
        left = iter([40, 12, 0, 0, 0])
        r = settle(api, timeout=20, backlog=lambda: next(left))
        assert r["settled"] and r["generator_backlog_at_start"] == 40 and r["waited_s"] >= 4.0  # not after 3 reads
        assert not settle(api, timeout=2.5, backlog=lambda: 1)["settled"]  # never drained: not settled
    finally:
        server.shutdown()


def test_the_cpu_a_level_used_is_read_by_role_from_the_processes_own_counts():
    """``cpu_seconds`` finds each part by its command line: a process spinning for 0.4 s of CPU named as the
    agents are counts for the agents (and not for the controller); this process counts as the emulator."""
    import subprocess
    import sys
    import time

    from experiments.benches.fabricload import cpu_seconds

    before = cpu_seconds()
    spin = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4:\n    pass\n"
            "import sys; sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", spin, "experiments.benches.sflowload"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while cpu_seconds()["agents"] - before["agents"] < 0.38 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = cpu_seconds()
    finally:
        p.communicate(b"")
    assert 0.38 <= after["agents"] - before["agents"] < 1.0
    assert after["controller"] == before["controller"]
    assert after["emulator"] >= before["emulator"] > 0


def test_the_handshakes_run_under_the_densest_level_kept_up_with_else_the_lightest_tried():
    """Never under no sFlow at all: without counters no link is measured and every announce is refused."""
    lv = [{"counter_interval_s": 1.0, "sampling": 10}, {"counter_interval_s": 2.0, "sampling": 1000},
          {"counter_interval_s": 2.0, "sampling": 0}, {"counter_interval_s": 1.0, "sampling": 1000}]
    kept = {"levels": lv, "shortest_counter_interval_s": 1.0, "densest_sampling": 1000}
    assert fabricload.handshake_level(kept) == (1.0, 1000, True)
    none = {"levels": lv, "shortest_counter_interval_s": None, "densest_sampling": None}
    assert fabricload.handshake_level(none) == (2.0, 0, False)  # the longest interval, no flow samples
    assert fabricload.handshake_level({**none, "levels": lv[:2]}) == (2.0, 1000, False)
    assert fabricload.handshake_level({**none, "levels": []}) == (0, 0, False)


def test_cpus_for_each_role_are_read_as_taskset_writes_them_and_a_bad_one_is_refused_by_name():
    import pytest

    from experiments.benches.fabricscale import parse_cpus

    assert parse_cpus(None) is None
    assert parse_cpus(["controller=0", "generator=1-3", "workers=1,3"], available=range(4)) == {
        "controller": {0}, "generator": {1, 2, 3}, "workers": {1, 3}}
    for bad, says in [("switches=0", "ROLE one of"), ("controller=x", "--cpus controller"),
                      ("generator=", "--cpus generator"), ("workers=2-5", "[4, 5] are not among")]:
        with pytest.raises(SystemExit, match=says.replace("[", r"\[").replace("]", r"\]")):
            parse_cpus([bad], available=range(4))


def test_the_controllers_workers_are_pinned_and_read_back_apart_from_the_controller():
    """``pin_workers`` finds the children of a process that run ``monitoring.worker`` (here two of this
    process's: one named so, one not) and pins every thread of those only; ``affinities`` reads them back."""
    import os
    import subprocess
    import sys

    from experiments.benches.fabricscale import affinities, pin_workers

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        import pytest
        pytest.skip("one CPU: nothing to pin apart")
    wait = "import sys; sys.stdin.read()"
    worker = subprocess.Popen([sys.executable, "-c", wait, "monitoring.worker"], stdin=subprocess.PIPE)
    other = subprocess.Popen([sys.executable, "-c", wait, "monitoring.other"], stdin=subprocess.PIPE)
    try:
        assert pin_workers(os.getpid(), {cpus[-1]}) == [worker.pid]
        assert os.sched_getaffinity(worker.pid) == {cpus[-1]}
        assert os.sched_getaffinity(other.pid) == set(cpus)
        got = affinities(os.getpid())
        assert got["workers"] == [cpus[-1]] and got["controller"] == cpus == got["generator"]
    finally:
        worker.communicate(b"")
        other.communicate(b"")
