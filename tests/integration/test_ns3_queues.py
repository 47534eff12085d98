"""The port disciplines of the packet-level engine at the queue level (issue 39): cut-in order, eviction
under a full buffer, the short flows' headroom, ECN marks above K, a paused band. One ns-3 process: the
queue is fed packets directly, no simulation runs."""

from __future__ import annotations

import pytest

MICE, ELEPHANT = 46, 8
FRAME = 1514


@pytest.fixture(scope="module")
def fw():
    from experiments.engines.ns3.native import load

    return load()[1]


def _queue(fw, bands=2, cut_in=False, limit0=10 * FRAME, limit1=10 * FRAME):
    from ns import ns

    q = ns.CreateObject[fw.PortQueue]()
    q.Configure(bands, cut_in, limit0, limit1, MICE, ELEPHANT)
    q.Initialize()
    return q


def _item(fw, dscp, sport, size=FRAME, ect=False):
    return fw.TestItem(size, dscp, ect, 0x0A000002, 0x0A010002, sport)


def _drain(fw, q):
    out = []
    while True:
        item = q.Dequeue()
        if not item:
            return out
        out.append(int(fw.SportOf(item)))


def test_short_packets_cut_in_ahead_of_the_long_backlog(fw):
    q = _queue(fw, cut_in=True, limit0=20 * FRAME)
    for sport, dscp in ((1, ELEPHANT), (2, ELEPHANT), (3, MICE), (4, ELEPHANT), (5, MICE)):
        assert q.Enqueue(_item(fw, dscp, sport))
    assert _drain(fw, q) == [3, 5, 1, 2, 4]
    assert q.cutIns == 2


def test_a_short_packet_finding_the_buffer_full_evicts_the_oldest_long_one(fw):
    q = _queue(fw, cut_in=True, limit0=4 * FRAME)
    for sport in (1, 2, 3, 4):
        assert q.Enqueue(_item(fw, ELEPHANT, sport))
    assert q.Enqueue(_item(fw, MICE, 9))
    assert q.evictions == 1 and list(q.drops) == [0, 0]
    assert _drain(fw, q) == [9, 2, 3, 4]  # the head (1) went


def test_evicted_long_packets_back_off_and_leave_after_the_short_ones_in_their_order(fw):
    """The slides' back-off queue: evicted long packets wait outside the shared buffer (room for two
    here), leave once no short packet waits, oldest first and before the long ones behind them; a third
    eviction finds the back-off queue full and drops."""
    q = _queue(fw, cut_in=True, limit0=4 * FRAME)
    q.SetCutIn(100000, 0.001, 2 * FRAME)
    for sport in (1, 2, 3, 4):
        assert q.Enqueue(_item(fw, ELEPHANT, sport))
    for sport in (7, 8, 9):
        assert q.Enqueue(_item(fw, MICE, sport))
    assert q.backedOff == 2 and q.evictions == 1 and FRAME < q.backoffPeak <= 2 * FRAME
    assert _drain(fw, q) == [7, 8, 9, 1, 2, 4]  # 3, the third evicted, was dropped


def test_long_packets_leave_the_short_ones_recent_peak_free(fw):
    q = _queue(fw, cut_in=True, limit0=6 * FRAME)
    for sport in (1, 2, 3):
        q.Enqueue(_item(fw, MICE, sport))
    _drain(fw, q)
    admitted = sum(bool(q.Enqueue(_item(fw, ELEPHANT, 10 + n))) for n in range(6))
    assert admitted == 3 and q.drops[1] == 3  # 6 frames less the 3 short ones just seen (no time passed)


def test_strict_bands_keep_their_own_limits_and_mice_go_first(fw):
    q = _queue(fw, limit0=2 * FRAME, limit1=2 * FRAME)
    results = [bool(q.Enqueue(_item(fw, d, s))) for s, d in
               ((1, ELEPHANT), (2, ELEPHANT), (3, ELEPHANT), (4, MICE), (5, MICE), (6, MICE))]
    assert results == [True, True, False, True, True, False] and list(q.drops) == [1, 1]
    assert _drain(fw, q) == [4, 5, 1, 2]


def test_ecn_marks_ect_packets_above_k_and_leaves_the_others(fw):
    q = _queue(fw, bands=1, limit0=20 * FRAME)
    q.SetEcn(3 * FRAME, 0)
    for n in range(6):
        q.Enqueue(_item(fw, 0, n, ect=True))
    q.Enqueue(_item(fw, 0, 99, ect=False))
    ecn = []
    while True:
        item = q.Dequeue()
        if not item:
            break
        ecn.append(int(fw.EcnOf(item)))
    assert ecn == [2, 2, 2, 2, 3, 3, 0]  # ECT(0) until the band held more than K, then CE; not-ECT left alone
    assert q.marks[0] == 2


def test_a_paused_band_sends_nothing_and_counts_who_waited(fw):
    q = _queue(fw)
    q.SetPaused(0, True)
    q.Enqueue(_item(fw, MICE, 1))
    q.Enqueue(_item(fw, ELEPHANT, 2))
    assert _drain(fw, q) == [2] and q.blocked == 1 and q.IsPaused(0)
    q.SetPaused(0, False)
    assert _drain(fw, q) == [1] and q.pauses[0] == 1


def test_a_host_splits_an_announced_flow_over_its_subflows_as_freeway_send_does(fw):
    """The simulated host reads each subflow's rate from the controller's ACK (the wire format of
    ``ryu_apps/host/handshake.py``, paths of different lengths) and gives each subflow its bytes in
    proportion to it, evenly without one, as ``freeway send --subflows N`` (``agent.byte_shares``)."""
    from ryu_apps.host import handshake as hs
    from ryu_apps.host.agent import byte_shares

    subs = [hs.Subflow("10.0.0.2", "10.1.0.3", 6, p, 5001) for p in (40001, 40002, 40003)]
    ack = hs.encode(hs.Ack(7, 3_000_001, 9000, ((subs[0], 5000, (1, 2, 3, 4, 5)), (subs[1], 3000, (1, 2, 3)),
                                                (subs[2], 1000, (1, 2, 3, 4, 5)))))
    got = fw.Host.AckRates(ack)
    assert {int(k): float(v) for k, v in got} == {40001: 5000.0, 40002: 3000.0, 40003: 1000.0}
    assert not list(fw.Host.AckRates(hs.encode(hs.Nack(7, 1, "no room"))))
    for size, rates in ((3_000_001, [5000.0, 3000.0, 1000.0]), (1_000_000, [0.0, 0.0]), (999, [4.0, 0.0, 4.0]),
                        (10, [1.0, 2.0, 3.0, 4.0]), (0, [1.0, 1.0])):
        assert [int(x) for x in fw.Host.ByteShares(size, rates)] == byte_shares(size, rates), (size, rates)


def test_the_elephant_bands_assured_share_goes_ahead_of_waiting_mice_at_its_rate(fw):
    """``elephant_min_share`` on ns-3 as on the emulator's HTB queues: with both bands backlogged on a
    100 Mbit/s port and a frame dequeued every frame time, a 10% assured share sends one elephant frame in ten
    ahead of the mice, after its bucket's two (12 of 100); strict priority (none assured) sends none until the
    mice are gone."""
    from ns import ns

    frame_s = FRAME * 8 / 100e6
    for share, lo, hi in ((0.1, 11, 13), (0.0, 0, 0)):
        q = _queue(fw, limit0=200 * FRAME, limit1=200 * FRAME)
        if share:
            q.SetMinRate(100e6 * share / 8, 2 * FRAME)
        for n in range(150):
            assert q.Enqueue(_item(fw, MICE, 10_000 + n)) and q.Enqueue(_item(fw, ELEPHANT, 20_000 + n))
        out = []
        for _ in range(100):
            ns.Simulator.Stop(ns.Seconds(frame_s))
            ns.Simulator.Run()
            out.append(int(fw.SportOf(q.Dequeue())))
        elephants = sum(s >= 20_000 for s in out)
        assert lo <= elephants <= hi, (share, elephants)
        assert q.assured == elephants


def test_a_fabric_is_built_with_any_discipline_with_or_without_isolation_and_the_share_on_every_switch_port(fw):
    """A mode without isolation passes no isolation settings (``iso=None``): every discipline still builds (the
    assured share's check once read the settings before their default was taken, and raised). With a share,
    every switch port is a PortQueue holding it; without one, ``strict`` stays ns-3's own queue."""
    from experiments.engines.ns3.net import build
    from topology.fabric import fattree
    from topology.queues import IsolationConfig

    fabric = fattree(4, 100)
    for queues in ("fifo", "strict", "cq", "shared"):
        net = build(fabric, queues=queues, iso=None)
        assert len(net.ports) == 2 * len(fabric.links) + len(fabric.hosts), queues  # every switch port
    net = build(fabric, queues="strict", iso=IsolationConfig(elephant_min_share=0.1))
    assert {round(p.queue.minRate) for p in net.ports.values()} == {100e6 * 0.1 / 8}
    plain = build(fabric, queues="strict", iso=IsolationConfig())
    assert not any(hasattr(p.queue, "minRate") for p in plain.ports.values())
