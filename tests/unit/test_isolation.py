"""Isolation plans: queues, tc filters, the ToR classification table, elephant marking and meters."""

import pytest

from monitoring.sflow import FiveTuple
from ryu_apps.host import handshake as hs
from ryu_apps.modes.freeway_state import FreewayState
from ryu_apps.openflow.intents import DeleteMeter, Meter, SetField, SetQueue
from ryu_apps.openflow.pipeline import EFM
from ryu_apps.programs import isolation as iso
from ryu_apps.programs.pins import pin
from topology.fabric import fattree

F = fattree(4, 10)
CFG = iso.IsolationConfig()


def test_queue_plan_gives_mice_priority_and_the_link_to_both():
    from topology.queues import QueueSpec, queue_specs

    assert queue_specs(10_000_000, CFG) == {0: QueueSpec(10_000_000, 10_000_000, 0),  # strict for mice
                                            1: QueueSpec(12_000, 10_000_000, 1)}
    share = queue_specs(10_000_000, iso.IsolationConfig(elephant_min_share=0.2))
    assert (share[0].min_rate, share[1].min_rate) == (8_000_000, 2_000_000)


def test_tc_maps_dscp_to_classes_and_sizes_the_fifos():
    cmds = iso.tc_commands("e0_0-eth1", CFG)
    flt = [c for c in cmds if c[1] == "filter"]
    assert [c[c.index("dsfield") + 1] for c in flt] == ["0xb8", "0x20"]  # 46 << 2, 8 << 2
    assert [c[-1] for c in flt] == ["1:1", "1:2"]
    fifo = [c for c in cmds if c[1] == "qdisc"]
    assert [(c[c.index("parent") + 1], c[-1]) for c in fifo] == [("1:1", "60"), ("1:2", "40")]
    assert all(c[-3] == "pfifo" for c in fifo)


def test_with_jumbo_frames_the_fifos_keep_their_bytes_not_their_packet_count():
    from topology.queues import SettingError, check_mtu, fifo

    jumbo = [c for c in iso.tc_commands("e0_0-eth1", CFG, 9000) if c[1] == "qdisc"]
    assert [c[-3:] for c in jumbo] == [["bfifo", "limit", str(60 * 1514)], ["bfifo", "limit", str(40 * 1514)]]
    assert fifo(100) == ["pfifo", "limit", "100"] and fifo(100, 4000) == ["bfifo", "limit", "151400"]
    for bad in (1499, 9001, 9000.0, True, "9000"):
        with pytest.raises(SettingError, match="mtu: must be a whole number of bytes from 1500 to 9000"):
            check_mtu(bad)


def test_sflow_sampling_keeps_its_sample_rate_with_jumbo_frames():
    from topology.sflow_agent import SFlowAgentConfig

    assert SFlowAgentConfig.for_rate(10).sampling == 10  # 1-in-10 of ~833 full frames/s at 10 Mbit/s
    assert SFlowAgentConfig.for_rate(10, 9000).sampling == 2  # 1-in-2 of ~139 jumbo frames/s
    assert SFlowAgentConfig.for_rate(2.5, 9000).sampling == 1
    assert SFlowAgentConfig.for_rate(100, 9000, sampling=7).sampling == 7  # an explicit value wins


def test_tor_classifies_host_traffic_in_ingress_and_goes_on_to_forward():
    out, meters = iso.tor_program(F, "e0_0", CFG)
    assert meters == []
    assert all(f.table_id == 1 and f.priority == iso.PRIO_CLASSIFY for f in out)
    assert sorted(dict(f.match)["in_port"] for f in out) == [1, 2]  # host ports only: uplinks keep their marks
    assert all(f.actions == (SetField("ip_dscp", 46), SetQueue(0)) and f.goto == 2 for f in out)
    _, metered = iso.tor_program(F, "e0_0", iso.IsolationConfig(mice_meter_mbps=8))
    assert metered == [Meter(101, 8000, 412), Meter(102, 8000, 412)]


def test_host_demotion_keeps_a_hosts_own_elephant_mark_above_the_mice_classification():
    out, _ = iso.tor_program(F, "e0_0", iso.IsolationConfig(host_demotion=True))
    kept = [f for f in out if f.priority == iso.PRIO_DEMOTED]
    assert sorted(dict(f.match)["in_port"] for f in kept) == [1, 2] and iso.PRIO_DEMOTED > iso.PRIO_CLASSIFY
    assert all(dict(f.match)["ip_dscp"] == 8 and f.actions == (SetQueue(1),) and f.goto == 2 for f in kept)
    assert not [f for f in iso.tor_program(F, "e0_0", CFG)[0] if f.priority == iso.PRIO_DEMOTED]


def test_host_demote_rules_count_what_this_host_sent_in_either_direction():
    from ryu_apps.host import demote

    text = demote.ruleset(1_000_000)
    assert "ct direction original ct original bytes > 1000000 ip dscp set 8" in text
    assert "ct direction reply ct reply bytes > 1000000 ip dscp set 8" in text
    assert text.index("delete table inet freeway_demote") < text.index("chain out")  # replaced whole: idempotent
    assert [demote.parse_bytes(t) for t in ("1M", "250kB", "1500")] == [1_000_000, 250_000, 1500]
    for bad in (0, -5, 1.5, True, "1M"):
        with pytest.raises(demote.DemoteError, match="after: a number of bytes above 0"):
            demote.ruleset(bad)
    with pytest.raises(demote.DemoteError, match="dscp: a DSCP is 0..63"):
        demote.ruleset(10, 64)
    with pytest.raises(demote.DemoteError, match="after: a number of bytes"):
        demote.parse_bytes("lots")
    # the controller's side: a bad value names its key, and isolation's other settings are checked as before
    from ryu_apps.config import Config, ConfigError, parse_settings

    with pytest.raises(ConfigError, match="isolation.host_demotion: expected on or off, got 'maybe'"):
        Config.from_mapping({"fabric": "f.json", "isolation": True,
                             "isolation_settings": tuple(parse_settings(["host_demotion=maybe"]))})


def test_elephant_entries_are_marked_at_ingress_and_queued_everywhere():
    flow = FiveTuple("10.0.0.2", "10.2.0.2", 6, 40001, 5001)
    install, _, _, _ = pin(F, ("e0_0", "a0_0", "c2", "a2_0", "e2_0"), flow, EFM, 1, 0, 10, iso=CFG)
    entries = [f for _, fs in install for f in fs]
    assert entries[-1].actions[:2] == (SetField("ip_dscp", 8), SetQueue(1))  # ingress (installed last)
    assert all(f.actions[0] == SetQueue(1) for f in entries[:-1])
    plain, _, _, _ = pin(F, ("e0_0", "a0_0", "c2", "a2_0", "e2_0"), flow, EFM, 1, 0, 10)
    assert not any(isinstance(a, (SetField, SetQueue)) for _, fs in plain for f in fs for a in f.actions)
    mark = iso.mark_detected((("eth_type", 0x800),), 2, CFG, 5)
    assert dict(mark.match)["in_port"] == 2 and (mark.table_id, mark.goto) == (1, 2)
    assert mark.priority == iso.PRIO_ELEPHANT_MARK


def test_freeway_meters_each_placed_elephant_and_releases_it():
    core = FreewayState(fattree(4, 10), iso=CFG)
    ann = hs.encode(hs.Announce(1, 10_000_000, 4000, (hs.Subflow("10.0.0.2", "10.3.1.3", 6, 40001, 5201),)))
    out = core.handshake(1.0, "e0_0", 1, "10.0.0.2", ann)
    first_sw, first = out.ops[0]
    assert first_sw == "e0_0" and first == [Meter(1001, 4200, 1260)]  # before any entry refers to it (burst: 300 ms at 4.2 Mbit/s)
    ingress = out.ops[-1][1][0]
    assert ingress.meter_id == 1001 and ingress.actions[0] == SetField("ip_dscp", 8)
    ops = core.flow_removed("e0_0", out.elephant.cookie)
    assert DeleteMeter(1001) in ops["e0_0"]
    core.no_meters.add("e0_0")  # a switch that refused meters: forward without
    out2 = core.handshake(2.0, "e0_0", 1, "10.0.0.2", ann.replace(b"\x9c\x41", b"\x9c\x42"))
    assert out2.verdict == "ack" and all(not isinstance(i, Meter) for _, fs in out2.ops for i in fs)


def test_config_errors():
    with pytest.raises(iso.IsolationConfigError, match="elephant_dscp: must differ"):
        iso.IsolationConfig(elephant_dscp=46)
    with pytest.raises(iso.IsolationConfigError, match="mice_dscp: a DSCP is 0..63"):
        iso.IsolationConfig(mice_dscp=70)
    with pytest.raises(iso.IsolationConfigError, match="elephant_min_share"):
        iso.IsolationConfig(elephant_min_share=1.0)


def test_ports_without_isolation_get_the_same_buffer_as_both_queues():
    from topology.builder import PORT_QUEUE_PKTS

    cfg = iso.IsolationConfig()
    assert cfg.mice_queue_len + cfg.elephant_queue_len == PORT_QUEUE_PKTS
