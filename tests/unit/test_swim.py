"""SWIM's Facebook jobs as flows (pure): the derivation's rules and the mix it is matched to."""

import pytest

from experiments.workloads.flowlist import mix
from experiments.workloads.swim import MIB, Derivation, Job, SwimError, derive, load
from topology.fabric import fattree

F = fattree(8, 100, 10)


def test_the_shipped_trace_is_a_day_of_jobs():
    jobs = load()
    assert len(jobs) == 5894 and jobs[0] == Job("job0", 49.0, 740773, 2339561, 627471)
    assert max(j.submit_s for j in jobs) < 24 * 3600 + 60  # 24 one-hour samples, joined


def test_a_malformed_line_is_refused_with_its_number(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_text("job0\t1\t1\t10\t10\t10\njob1\tx\n")
    with pytest.raises(SwimError, match="line 2"):
        load(p)


def test_a_job_becomes_shuffle_flows_between_its_servers_and_replicated_output():
    job = Job("j", 100.0, 8 * 64 * MIB, 2 * 64 * MIB, 64 * MIB)  # 8 maps on 2 servers, 2 reducers
    d = Derivation(start_s=0, window_s=200, duration_s=10, byte_scale=1.0, maps_per_server=4, spread_s=0.5)
    flows = derive([job], F, d)
    shuffle = [f for f in flows if f.start < 5.0 + 0.5]
    output = [f for f in flows if f.start >= 5.0 + 0.5]
    assert all(5.0 <= f.start < 5.5 for f in shuffle)  # submit at 100 s of 200, compressed into 10 s
    assert sum(f.bytes for f in shuffle) <= 2 * 64 * MIB and len(shuffle) <= 2 * 2
    assert len(output) == 4 and {f.bytes for f in output} == {32 * MIB}  # 2 writers x 2 replicas, half each
    assert all(f.kind == "bulk" and f.announced for f in flows)  # all at least a megabyte
    assert derive([job], F, d) == flows  # seeded


def test_jobs_outside_the_window_give_nothing_and_bad_knobs_are_refused():
    assert derive([Job("j", 500.0, 10, 10, 10)], F, Derivation(start_s=0, window_s=100)) == []
    with pytest.raises(SwimError):
        derive([], F, Derivation(byte_scale=0))


def test_the_default_derivation_gives_the_declared_mix():
    m = mix(derive(load(), F), 1_000_000)
    assert m["flows"] == 1933 and m["mice_share_of_flows"] == 0.8401 and m["mice_share_of_bytes"] == 0.1092
