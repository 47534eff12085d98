"""The queueing experiments' workloads (pure): who sends what, marked how."""

from experiments.scenarios.queueing import ELEPHANT, MICE, cut_in_flows, flow_control_flows


def test_cut_in_has_two_long_flows_and_bursts_of_marked_short_ones():
    flows = cut_in_flows(100.0, 2.0, 1)
    longs = [f for f in flows if f.bytes == 0]
    shorts = [f for f in flows if f.bytes]
    assert [(f.src, f.dst, f.dscp, f.stop) for f in longs] == [("h0_1", "h0_0", ELEPHANT, 2.0), ("h0_2", "h0_0", ELEPHANT, 2.0)]
    assert all(f.src == "h0_3" and f.dst == "h0_0" and f.dscp == MICE and 10_000 <= f.bytes <= 100_000 for f in shorts)
    starts = sorted(f.start for f in shorts)
    bursts = [s for s in starts if s - 0.1 < 0.02]  # the first ON period: 16 flows within 10 ms of 100 ms
    assert len(bursts) == 16 and len(shorts) == 16 * 9  # every 200 ms, until a period before the end
    assert cut_in_flows(10_000.0, 0.02, 1)[2].start < 0.002  # 100 times faster at 100 times the rate


def test_cut_in_incast_deals_the_same_short_flows_over_the_three_senders():
    one, three = cut_in_flows(100.0, 2.0, 1), cut_in_flows(100.0, 2.0, 1, short_senders=3)
    assert [(f.start, f.bytes) for f in one] == [(f.start, f.bytes) for f in three]  # the same bursts
    shorts = [f for f in three if f.bytes]
    assert {f.src for f in shorts[:3]} == {"h0_1", "h0_2", "h0_3"}
    assert sum(f.src == "h0_3" for f in shorts) == 6 * 9  # 6, 5 and 5 of every burst of 16


def test_flow_control_traffic_is_many_to_one_with_mice_at_their_share_of_the_load():
    mixed = flow_control_flows("mixed", 10_000.0, 0.2, 3)
    assert {f.dst for f in mixed} == {"h3_0"} and len({f.src for f in mixed}) == 12
    mice = [f for f in mixed if f.bytes]
    assert all(f.dscp == MICE for f in mice) and all(f.dscp == ELEPHANT for f in mixed if not f.bytes)
    offered = sum(f.bytes for f in mice) * 8 / 0.2 / 10e9
    assert 0.04 < offered < 0.06
    assert not [f for f in flow_control_flows("mice", 10_000.0, 0.2, 3) if not f.bytes]
    assert not [f for f in flow_control_flows("elephants", 10_000.0, 0.2, 3) if f.bytes]


def test_run_at_starts_each_job_at_its_time_in_its_own_thread_and_prints_each_result_whole(capsys):
    import json
    import time

    from experiments.hosts.rr import run_at

    t0 = time.monotonic()
    started = {}

    def job(name, hold):
        started[name] = time.monotonic() - t0
        time.sleep(hold)
        return {"name": name}

    run_at([(t0 + 0.10, lambda: job("late", 0.0)), (t0, lambda: job("slow", 0.3))])
    assert started["slow"] < 0.05 and 0.09 <= started["late"] < 0.25  # the slow one did not hold the late one
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["name"] for x in lines] == ["late", "slow"]
