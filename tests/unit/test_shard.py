"""The sFlow collector split across worker processes (``monitoring.shard``, issue 63) gives what the one
collector gives: the same datagrams fed to one ``Collector`` and to two ``Shard``s (each switch's agent on
one, as the kernel's ``SO_REUSEPORT`` keeps a source on one socket) merged into a controller's estimator
give the same link readings, port events, flows and elephants; a worker gone leaves its links stale until
they are measured again; its counters stay in the sums."""

import pickle
import random

import numpy as np
import pytest

from monitoring.collector import Collector
from monitoring.estimator import Estimator, MonitorConfig
from monitoring.events import PortState
from monitoring.sflow import FiveTuple
from monitoring.shard import Merge, Shard
from ryu_apps.simswitch import sflow as enc
from topology.fabric import fattree


def _traffic(fabric, seconds=6.0, seed=3):
    """(time, agent, datagram) of a k=4 fabric: every switch port's counters each 0.5 s (one port goes down
    at 3 s), and flow samples of four flows within a pod (two elephants at 5 Mbit/s, two mice) entering the switches on
    their paths, 1-in-10; plus some garbage."""
    rng = random.Random(seed)
    ifmap, ifindex, agent_of = {}, {}, {}
    for i, sw in enumerate(sorted(fabric.switches)):
        agent_of[sw] = f"10.255.0.{i + 1}"
        for n in fabric.neighbors(sw) + [h.name for h in fabric.hosts_on(sw)]:
            p = fabric.port_to(sw, n) if n in fabric.switches else next(h.port for h in fabric.hosts_on(sw)
                                                                         if h.name == n)
            ix = 1000 * (i + 1) + p
            ifmap[ix] = (sw, p)
            ifindex[(sw, p)] = ix
    hosts = fabric.hosts
    flows = []
    for j, (a, b, bps) in enumerate([(0, 2, 5e6), (1, 3, 5e6), (4, 6, 0.2e6), (8, 10, 0.2e6)]):
        src, dst = hosts[a], hosts[b]
        path = [src.switch] + [fabric.up_neighbors(src.switch)[j % 2]] + [dst.switch]
        flows.append((FiveTuple(src.ip, dst.ip, 6, 40000 + j, 5001), src, path, bps, rng.getrandbits(32)))
    octets = {ix: [rng.getrandbits(40), rng.getrandbits(40)] for ix in ifindex.values()}
    rate = {ix: rng.uniform(0.5e6, 8e6) for ix in ifindex.values()}
    down = ifindex[(fabric.up_neighbors("e0_0")[0], fabric.port_to(fabric.up_neighbors("e0_0")[0], "e0_0"))]
    out, t, seq = [], 0.0, 0
    while t < seconds:
        for sw in sorted(fabric.switches):
            samples = []
            for (s, _p), ix in ifindex.items():
                if s != sw:
                    continue
                octets[ix][0] += int(rate[ix] * 0.5 / 8)
                octets[ix][1] += int(rate[ix] * 0.45 / 8)
                seq += 1
                status = 1 if ix == down and t >= 3.0 else 3
                samples.append(enc.counter_sample([enc.if_counters(ix, octets[ix][0], octets[ix][1], status=status)],
                                                  seq=seq, source=(0, ix)))
            for ft, src, path, bps, seq0 in flows:
                if sw not in path:
                    continue
                prev = src.name if sw == path[0] else path[path.index(sw) - 1]
                inp = src.port if sw == path[0] else fabric.port_to(sw, prev)
                for _ in range(max(1, int(bps * 0.5 / 1500 / 8 / 10 * rng.uniform(0.8, 1.2)))):
                    seq += 1
                    hdr = enc.eth_ipv4_tcp(ft.src, ft.dst, ft.sport, ft.dport, tcp_seq=seq0 + int(bps * t / 8),
                                           payload=1446)
                    samples.append(enc.flow_sample([enc.raw_header_record(hdr, 1500)], rate=10, inp=ifindex[(sw, inp)],
                                                   out=1, seq=seq, source=(0, ifindex[(sw, inp)])))
            for k in range(0, len(samples), 8):
                out.append((t + rng.uniform(0, 0.01), agent_of[sw],
                            enc.datagram(samples[k:k + 8], agent=agent_of[sw], seq=seq, uptime=int(t * 1000) + 1)))
            if rng.random() < 0.05:
                out.append((t, agent_of[sw], b"\x00\x00\x00\x05garbage"))
        t += 0.5
    out.sort(key=lambda x: x[0])
    return ifmap, agent_of, out


def _one(fabric, ifmap, traffic, ticks, hot=None):
    est = Estimator(fabric)
    est.set_ifmap(ifmap)
    est.hot_threshold = hot
    col = Collector(est, "any")
    events, hots = [], []
    for t, _, data in traffic:
        while ticks and ticks[0] <= t:
            now = ticks.pop(0)
            events += est.tick(now)
            hots.append((est.take_hot(), dict(est.view(now).sampled)))
        events += [e for e in col.handle(t, data, False) if isinstance(e, PortState)]
    for now in ticks:
        events += est.tick(now)
        hots.append((est.take_hot(), dict(est.view(now).sampled)))
    return est, col, events, hots


def _sharded(fabric, ifmap, agent_of, traffic, ticks, workers=2, hot=None, flow_ids=None):
    est = Estimator(fabric)
    est.set_ifmap(ifmap)
    est.hot_threshold = hot
    merge = Merge(est)
    shards = [Shard(fabric, sources="any") for _ in range(workers)]
    for s in shards:
        s.control({"ifmap": ifmap, "hot_threshold": hot})
        if flow_ids is not None:
            s.rows.flow_ids = flow_ids
    which = {a: i % workers for i, a in enumerate(sorted(agent_of.values()))}
    events, hots = [], []

    def tick(now):
        nonlocal events
        for i, s in enumerate(shards):  # each tick: the workers' batches first (they hand over every 50 ms)
            events += merge.apply(i, pickle.loads(pickle.dumps(s.drain())))
        merge.flush()
        events += est.tick(now)
        hots.append((est.take_hot(), dict(est.view(now).sampled)))

    for t, agent, data in traffic:
        while ticks and ticks[0] <= t:
            tick(ticks.pop(0))
        shards[which[agent]].handle(t, data)
    for now in ticks:
        tick(now)
    return est, merge, shards, events, hots


@pytest.mark.parametrize("hot,flow_ids", [(None, None), (0.3, 3)])
def test_two_workers_merged_give_the_readings_events_and_elephants_of_one_collector(hot, flow_ids):
    """... and the same sampled link readings at each tick; with a hot threshold, the same links over it (by
    counters and by samples) and the same hot links at each tick; with the workers' flow numbering started
    afresh every three flows, still the same."""
    fabric = fattree(4, 10.0)
    ifmap, agent_of, traffic = _traffic(fabric)
    ticks = [0.25 + 0.5 * i for i in range(13)]
    one, col, ev1, hot1 = _one(fabric, ifmap, traffic, list(ticks), hot)
    est, merge, shards, ev2, hot2 = _sharded(fabric, ifmap, agent_of, traffic, list(ticks), hot=hot, flow_ids=flow_ids)
    # link readings: every field of every link, as the one estimator has them
    for name in ("util", "bps", "time", "fresh", "since"):
        assert np.array_equal(getattr(one.columns, name), getattr(est.columns, name), equal_nan=True), name
    assert len(one.link_util) > 40
    # events: the port that went down, the elephants found (and when), in the same order
    key = [(type(e).__name__, getattr(e, "flow", None), getattr(e, "switch", None), e.time) for e in ev1]
    assert key == [(type(e).__name__, getattr(e, "flow", None), getattr(e, "switch", None), e.time) for e in ev2]
    assert any(isinstance(e, PortState) and not e.up for e in ev1)
    assert sum(type(e).__name__ == "ElephantStart" for e in ev1) == 2
    assert one.elephants() == est.elephants() and len(one.elephants()) == 2
    now = ticks[-1]
    v1, v2 = one.view(now), est.view(now)
    assert dict(v1.flows) == dict(v2.flows) and dict(v1.sampled) == dict(v2.sampled)
    # (the agents' counter interval is a running mean per worker, and their mean here: close, not equal)
    assert abs(v1.counter_interval_s - v2.counter_interval_s) < 0.01 * v1.counter_interval_s
    assert one.port_up == est.port_up
    # the counters: the collector's summed over the workers, the estimator's with the flows' folding
    coll, theirs = merge.stats()
    assert coll == col.stats and coll["decode_errors"] > 0
    assert {k: v + theirs.get(k, 0) for k, v in est.stats.items()} == one.stats
    # a worker keeps no more of a link's sampled buckets than two windows' (it has no view that would drop them)
    w = MonitorConfig().link_window_s
    assert all(q[-1][0] - q[0][0] <= 2 * w for s in shards for q in s.estimator._link_samples.values())
    # the links over the hot threshold, those taken as newly hot and the links' sampled readings at each tick
    assert hot1 == hot2 and one._over == est._over and merge.rows_dropped == 0
    assert sum(len(sampled) for _, sampled in hot1) > 10
    if hot is not None:
        assert one._over["samples"] and one._over["counters"] and sum(len(h) for h, _ in hot1) > 0


def test_a_worker_gone_leaves_its_links_stale_until_measured_again_and_keeps_its_counts():
    fabric = fattree(4, 10.0)
    ifmap, agent_of, traffic = _traffic(fabric, seconds=2.0)
    ticks = [0.25 + 0.5 * i for i in range(5)]
    est, merge, shards, _, _ = _sharded(fabric, ifmap, agent_of, traffic, list(ticks))
    before = merge.stats()[0]["datagrams"]
    n = merge.lost(1)
    assert n > 0 and len(merge.stale_links) == n
    view = est.view(2.5)
    assert view.stale(60.0) == merge.stale_links  # stale whatever their age: no placement on them
    assert merge.stats()[0]["datagrams"] == before  # its counts stay in the sums
    # a new worker (no baseline: its first readings rebaseline) measures them again: stale no more
    fresh = Shard(fabric, sources="any")
    fresh.control({"ifmap": ifmap})
    later = [(t + 2.0, a, d) for t, a, d in _traffic(fabric, seconds=1.5)[2]]
    for t, agent, data in later:
        if agent in [a for i, a in enumerate(sorted(agent_of.values())) if i % 2 == 1]:
            fresh.handle(t, data)
    merge.apply(1, fresh.drain())
    assert not merge.stale_links and not est.view(4.0).lost


def test_an_agent_moved_to_another_worker_neither_repeats_a_port_down_nor_keeps_the_old_workers_hot_links():
    """When a worker starts or dies the kernel moves sources between sockets: the new worker is told which
    ports the controller holds down (an "up" is news, a "down" is not), and a link counts as over the hot
    threshold only by the worker that measures it now."""
    from monitoring.events import PortState

    fabric = fattree(4, 10.0)
    est = Estimator(fabric)
    merge = Merge(est)
    port = ("a0_0", fabric.port_to("a0_0", "e0_0"))
    est.port_up[port] = False
    fresh = Shard(fabric)
    fresh.control({"down": frozenset({port})})
    assert fresh.estimator.port_up[port] is False and port in fresh.estimator._watched
    link = ("a0_0", "c1")
    i = est.columns.pos[link]
    rows = lambda i, t: (np.array([i], dtype=np.int32), np.array([0.9]), np.array([9e6]), np.array([t]),  # noqa: E731
                         np.array([t - 1]), np.array([t - 1]))
    stats = ({}, {"counter_samples": 0})
    merge.apply(0, {"rows": rows(i, 1.0), "stats": stats, "interval": (1.0, 0), "over": frozenset({link})})
    merge.flush()
    assert est._over["counters"] == {link}
    # the agent moved: worker 1 measures the link now, under the threshold; worker 0's word no longer counts
    merge.apply(1, {"rows": rows(i, 2.0), "stats": stats, "interval": (1.0, 0), "over": frozenset()})
    merge.flush()
    assert est._over["counters"] == set()
    # a port the controller holds down, reported down again by the worker that took it over: not news
    ev = merge.apply(1, {"rows": rows(i, 3.0), "stats": stats, "interval": (1.0, 0),
                         "ports": [PortState(3.0, port[0], port[1], False)]})
    assert ev == []
    ev = merge.apply(1, {"rows": rows(i, 4.0), "stats": stats, "interval": (1.0, 0),
                         "ports": [PortState(4.0, port[0], port[1], True)]})
    assert len(ev) == 1 and est.port_up[port] is True


def test_a_worker_reads_its_socket_on_while_the_controller_takes_nothing():
    """A controller busy elsewhere (its period, a collection) takes no batch for a while: the worker keeps
    the batch it has not taken in an outbox and reads its socket on, so nothing is lost there (it waited
    for the stream once, and its socket's buffer overflowed). When the controller reads again, what it gets
    brings it to the worker's latest readings. Between datagrams, the worker resolved its map's routes."""
    import socket
    import threading
    import time

    from monitoring.worker import Frames, serve

    fabric = fattree(4, 10)
    ifmap, _, traffic = _traffic(fabric)
    datagrams = [d for _, _, d in traffic if not d.endswith(b"garbage")]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # (a few dozen datagrams, no more)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    ours, theirs = socket.socketpair()
    for s in (ours, theirs):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ours.setblocking(False)
    shard = Shard(fabric, sources="any")
    shard.control({"ifmap": ifmap})
    th = threading.Thread(target=serve, args=(shard, udp, ours, Frames(), 0.005), daemon=True)
    th.start()
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for d in datagrams:  # the controller reads nothing meanwhile
            tx.sendto(d, udp.getsockname())
            time.sleep(0.0005)
        deadline = time.monotonic() + 10
        while shard.collector.stats["datagrams"] < len(datagrams) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shard.collector.stats["datagrams"] == len(datagrams) > 300  # none lost at the worker's socket
        est = Estimator(fabric)
        merge, frames = Merge(est), Frames()
        theirs.settimeout(0.2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the controller reads again: batches until it is up to date
            try:
                data = theirs.recv(1 << 20)
            except TimeoutError:
                data = b""
            for batch in frames.feed(data):
                merge.apply(0, batch)
            if np.array_equal(est.columns.time, shard.estimator.columns.time, equal_nan=True):
                break
        assert np.array_equal(est.columns.util, shard.estimator.columns.util, equal_nan=True)
        assert len(est.columns.measured()) == len(shard.estimator.columns.measured()) > 0
        # (and between datagrams it resolved every port of its map ahead of its samples)
        assert len(shard.estimator._ready) == len(set(ifmap.values())) and shard.estimator._to_prepare == []
    finally:
        theirs.close()
        th.join(5)
        tx.close()
        udp.close()
        ours.close()
    assert not th.is_alive()  # (the controller's end closed: the worker ends)


def test_a_workers_socket_holds_what_arrives_while_it_is_behind():
    """A worker's socket asks for ``RCVBUF`` past net.core.rmem_max where the process may (root here, as the
    controller runs), else for what that allows; Linux gives twice what it grants (socket(7)), for its own
    bookkeeping."""
    import os
    import socket

    from monitoring.worker import RCVBUF, bind

    sock = bind("127.0.0.1", 0)
    try:
        got = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        allowed = RCVBUF if os.geteuid() == 0 else min(RCVBUF, int(open("/proc/sys/net/core/rmem_max").read()))
        assert got >= 2 * allowed
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
    finally:
        sock.close()


def test_a_batch_the_controller_could_not_take_costs_its_rows_until_the_worker_numbers_afresh():
    """A batch lost between a worker and the controller (a bug, logged) leaves the numbers it gave unknown
    there: the rows that name them are counted and dropped, none is folded into the wrong flow or port, and
    once the worker numbers afresh (``RENUMBER_BATCHES``) its rows are folded again."""
    fabric = fattree(4, 10.0)
    ifmap, agent_of, traffic = _traffic(fabric)
    est = Estimator(fabric)
    est.set_ifmap(ifmap)
    merge = Merge(est)
    shard = Shard(fabric, sources="any")
    shard.control({"ifmap": ifmap})
    shard.rows.renumber = 4
    folded, dropped = [], []
    for n, chunk in enumerate([traffic[i::6] for i in range(6)]):
        for t, _, data in sorted(chunk, key=lambda x: x[0]):
            shard.handle(t, data)
        batch = pickle.loads(pickle.dumps(shard.drain()))
        if n == 0:
            continue  # (lost: the controller never sees its numbers)
        before = est.stats["flow_samples"]
        merge.apply(0, batch)
        merge.flush()
        folded.append(est.stats["flow_samples"] - before)
        dropped.append(merge.rows_dropped)
    # batches 2-4 name flows and ports numbered in the lost one: dropped; the fifth numbers afresh
    assert folded[:3] == [0, 0, 0] and dropped[2] > 0 and folded[3] > 0 and folded[4] > 0
    assert dropped[3] == dropped[4] == dropped[2]
    one, _, _, _ = _one(fabric, ifmap, traffic, [])  # (no flow folded under a wrong flow's or port's name)
    assert est.flows and all(set(st.points) <= set(one.flows[ft].points) for ft, st in est.flows.items())


def test_the_links_sampled_window_turned_off_live_stops_nothing_in_a_worker():
    """``link_window_s`` is a live setting and 0 turns the sampled link readings off: a worker with samples
    still in its buckets drains on (no division by a window of 0), and the controller reads no sampled link."""
    from dataclasses import replace

    fabric = fattree(4, 10.0)
    ifmap, agent_of, traffic = _traffic(fabric, seconds=2.0)
    est = Estimator(fabric)
    est.set_ifmap(ifmap)
    merge = Merge(est)
    shard = Shard(fabric, sources="any")
    shard.control({"ifmap": ifmap, "hot_threshold": 0.3})
    for t, _, data in traffic[: len(traffic) // 2]:
        shard.handle(t, data)
    off = replace(MonitorConfig(), link_window_s=0.0)
    shard.control({"config": off})
    est.cfg = off
    for t, _, data in traffic[len(traffic) // 2:]:
        shard.handle(t, data)
    merge.apply(0, pickle.loads(pickle.dumps(shard.drain())))
    merge.flush()
    assert est.stats["flow_samples"] > 0 and not est.view(traffic[-1][0]).sampled


def test_the_controllers_copy_of_a_links_sampled_buckets_is_the_workers_after_each_batch():
    """A worker hands over only a link's buckets from the one it last handed over on (and where its window
    now starts): after each batch, the controller's copy of every link the worker holds is the worker's own,
    buckets and sums, as when the whole window came each time; batches every 50 ms and every 0.3 s."""
    fabric = fattree(4, 10.0)
    ifmap, agent_of, traffic = _traffic(fabric, seconds=4.0)
    rng = random.Random(5)  # (the datagrams spread over each half second: a link's window holds many buckets)
    traffic = sorted((t + rng.uniform(0, 0.49), a, d) for t, a, d in traffic)
    for every in (0.05, 0.3):
        est = Estimator(fabric)
        est.set_ifmap(ifmap)
        merge = Merge(est)
        shard = Shard(fabric, sources="any")
        shard.control({"ifmap": ifmap, "hot_threshold": 0.3})
        mine, theirs, compared, partial, nxt = shard.estimator._link_samples, est._link_samples, 0, 0, every
        for t, _, data in traffic:
            if t >= nxt:
                nxt = t + every
                batch = pickle.loads(pickle.dumps(shard.drain()))
                partial += sum(1 for got in batch.get("sampled", {}).values() if got and got[1][0][0] > got[0])
                merge.apply(0, batch)
                for ln, q in mine.items():
                    assert list(theirs[ln]) == list(q) and est._link_sum[ln] == shard.estimator._link_sum[ln], ln
                    compared += 1
            shard.handle(t, data)
        assert compared > 50 and partial > 20 and all(len(q) > 1 for q in theirs.values())


def test_a_links_buckets_from_a_worker_that_did_not_measure_it_last_replace_the_controllers_copy():
    """An agent that moves to another worker and back (the kernel moves sources when a worker starts or
    dies): the first worker's news of the link is only its buckets since it last handed them over, and the
    controller's copy, the other worker's buckets meanwhile, is replaced by them, not mixed with them; news
    of one bucket grown replaces that bucket."""
    fabric = fattree(4, 10.0)
    est = Estimator(fabric)
    merge = Merge(est)
    link = ("a0_0", "e0_0")
    a = [[0.0, 1500, 1, 1500 ** 2], [0.08, 3000, 2, 2 * 1500 ** 2]]
    merge._sampled(0, link, (0.0, tuple(map(tuple, a))))
    assert est._link_sum[link] == [4500, 3, 3 * 1500 ** 2]
    merge._sampled(1, link, (0.16, ((0.16, 1500, 1, 1500 ** 2),)))  # the agent moved to worker 1
    assert list(est._link_samples[link]) == [[0.16, 1500, 1, 1500 ** 2]]
    back = ((0.08, 4500, 3, 3 * 1500 ** 2), (0.24, 1500, 1, 1500 ** 2))  # and back: worker 0's news since 0.08
    merge._sampled(0, link, (0.0, back))
    assert list(est._link_samples[link]) == [list(b) for b in back]
    assert est._link_sum[link] == [6000, 4, 4 * 1500 ** 2]
    merge._sampled(0, link, (0.08, ((0.24, 3000, 2, 2 * 1500 ** 2),)))  # the next news: one bucket grew
    assert list(est._link_samples[link]) == [[0.08, 4500, 3, 3 * 1500 ** 2], [0.24, 3000, 2, 2 * 1500 ** 2]]
    assert est._link_sum[link] == [7500, 5, 5 * 1500 ** 2]
    merge._sampled(0, link, None)  # its samples all left the window
    assert link not in est._link_samples and link not in est._link_sum
