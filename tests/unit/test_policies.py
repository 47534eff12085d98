"""Policies behind the app: what a refused install does, and the settings schema the app is built from."""

from dataclasses import fields

import pytest

from monitoring.sflow import FiveTuple
from monitoring.view import View
from ryu_apps import modes
from ryu_apps.config import SECTIONS, Config, ConfigError, settings_epilog
from ryu_apps.host import handshake as hs
from ryu_apps.openflow.intents import Meter, UdpOut
from ryu_apps.openflow.txn import METER_MOD_FAILED, Failure
from ryu_apps.simswitch.fabric import frame, packet
from topology.fabric import fattree
from topology.queues import IsolationConfig

F = fattree(4)
SRC, DST = F.hosts[0], F.hosts[-1]


def _handshake(pol, sport=40001):
    flow = FiveTuple(SRC.ip, DST.ip, 6, sport, 5001)
    ann = hs.encode(hs.Announce(sport, 10_000_000, 2000, (flow,)))
    data = frame(packet(FiveTuple(SRC.ip, hs.SERVICE_IP, 17, sport, hs.SERVICE_PORT)), SRC.mac, hs.SERVICE_MAC, ann)
    return pol.on_packet(1.0, SRC.switch, SRC.port, data)


def _answer(r):
    (sw, (out,)), = r.ops
    assert sw == SRC.switch and isinstance(out, UdpOut) and out.port == SRC.port
    return hs.decode(out.payload)


def test_a_refused_meter_retries_without_meters_then_acks():
    pol = modes.FreewayPolicy(F, IsolationConfig())
    (t,) = _handshake(pol).txns
    assert any(isinstance(i, Meter) for _, ops in t.install for i in ops)
    retry = t.failed(Failure("meter refused", SRC.switch, METER_MOD_FAILED, 1))
    (t2,) = retry.txns
    assert not any(isinstance(i, Meter) for _, ops in t2.install for i in ops)
    assert isinstance(_answer(t2.done()), hs.Ack) and pol.state.elephants


def test_any_other_refusal_releases_the_elephant_and_nacks_with_the_reason():
    pol = modes.FreewayPolicy(F)
    (t,) = _handshake(pol).txns
    nack = _answer(t.failed(Failure("switch c1 error type=5 code=1", "c1", 5, 1)))
    assert isinstance(nack, hs.Nack) and "type=5" in nack.reason
    assert not pol.state.elephants and not pol.state.alloc.link


def test_a_second_meter_refusal_is_not_retried_forever():
    pol = modes.FreewayPolicy(F, IsolationConfig())
    (t,) = _handshake(pol).txns
    (t2,) = t.failed(Failure("meter", SRC.switch, METER_MOD_FAILED, 1)).txns
    assert isinstance(_answer(t2.failed(Failure("meter", SRC.switch, METER_MOD_FAILED, 1))), hs.Nack)


@pytest.mark.parametrize("retried", [False, True])
def test_an_answered_handshake_is_freed_without_the_cycle_collector(retried):
    """Nothing a handshake builds refers to itself: once answered, its closures and intents go when the
    last reference does. (A retry closure that named itself kept every handshake for the cycle collector:
    at 500 announces/s a 20-30 ms pause every second, the handshake bench's slowest answers.)"""
    import gc
    import weakref

    pol = modes.FreewayPolicy(F, IsolationConfig())
    gc.disable()
    try:
        (t,) = _handshake(pol).txns
        if retried:
            (t,) = t.failed(Failure("meter refused", SRC.switch, METER_MOD_FAILED, 1)).txns
        refs = [weakref.ref(t.done), weakref.ref(t.failed)]
        assert isinstance(_answer(t.done()), hs.Ack)
        del t
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_hedera_polls_every_tor_and_a_switch_that_leaves_does_not_stall_the_round():
    pol = modes.HederaPolicy(F, poll_s=5.0)
    r = pol.on_period(10.0, View(10.0))
    assert sorted(sw for sw, _ in r.ops) == sorted(F.tors())
    assert not pol.on_period(12.0, View(12.0))  # not due yet
    for sw in F.tors()[1:]:
        pol.on_flow_stats(10.1, sw, [], False)
    assert pol.waiting == {F.tors()[0]}
    pol.on_switch(F.tors()[0], False)
    assert not pol.waiting
    assert pol.on_flow_stats(10.2, F.tors()[0], [], False) == modes.Reaction()  # late: counted, ignored
    assert pol.counters["stats-late-or-unknown"] == 1


def test_every_setting_is_declared_once_and_reachable():
    help_text = settings_epilog()
    for cls, _, _ in SECTIONS.values():
        for f in fields(cls):
            if f.name != "pick":
                assert f"  {f.name} (" in help_text, f.name  # in the help, generated from the declaration
    assert "mice_weight_step" in help_text and "elephant_min_bytes" in help_text
    cfg = Config(fabric="f.json", mode="efm-smallest", efm_settings=(("idle_s", "4"), ("threshold", "0.6")))
    assert cfg.efm_config().idle_s == 4 and cfg.efm_config().pick == "smallest"
    assert cfg.monitor_config().min_samples == 3


@pytest.mark.parametrize("section,pairs,needle", [
    ("freeway_settings", (("lol_hgh", "1"),), "freeway.lol_hgh: unknown setting"),
    ("freeway_settings", (("punt_pps", "1.5"),), "freeway.punt_pps: must be a whole number"),
    ("monitor_settings", (("min_samples", "x"),), "monitor.min_samples: expected a number"),
    ("efm_settings", (("threshold", "2"),), "efm.threshold: must be a positive number (at most 1)"),
    ("isolation_settings", (("mice_dscp", "8"),), "elephant_dscp: must differ"),
])
def test_a_bad_setting_names_its_section_and_key(section, pairs, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        Config(fabric="f.json", **{section: pairs})


def test_controller_settings_are_typed_by_their_declaration():
    cfg = Config.from_mapping({"fabric": "f.json", "isolation": "on", "hedera_poll_s": "2"})
    assert cfg.isolation is True and cfg.hedera_poll_s == 2.0
    with pytest.raises(ConfigError, match="mode: must be one of"):
        Config(fabric="f.json", mode="fast")
    with pytest.raises(ConfigError, match="nonsense: unknown setting"):
        Config.from_mapping({"fabric": "f.json", "nonsense": 1})


def test_the_configuration_page_is_the_declarations():
    from pathlib import Path

    from topology.settings import describe

    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert settings_epilog() in page
    assert all(line in page for line in describe(Config))


@pytest.mark.parametrize("mode", ["ecmp", "hedera", "efm-biggest", "freeway"])
def test_everything_sent_to_the_controller_goes_through_the_sending_hosts_own_punt_meter(mode):
    """Issue 13 item 10: ARP, handshakes and Hedera's first packets are metered per host port, so one host
    flooding the controller cannot starve its neighbours (the handshake meter was one per ToR, ARP had none)."""
    from ryu_apps.openflow import pipeline
    from ryu_apps.openflow.intents import Flow, Meter, ToController
    from tests.unit.test_simswitch_programs import policy
    from topology.fabric import fattree

    fabric = fattree(4)
    pol = policy(mode, fabric, None)
    lldp = pipeline.prio("lldp-host")
    for sw in fabric.switches:
        prog = pol.program(sw)
        meters = {m.meter_id: m for m in prog if isinstance(m, Meter)}
        punts = [f for f in prog if isinstance(f, Flow) and any(isinstance(a, ToController) for a in f.actions)]
        # the fabric's LLDP probes, from each port facing a switch: the switch's own meter (issue 60 item 6:
        # LLDP from any other port goes through a meter of its own, a few a second, not through it)
        switch_ports = {fabric.port_to(sw, n) for n in fabric.neighbors(sw) if n in fabric.switches}
        probes = [f for f in punts if f.priority == lldp and dict(f.match).get("in_port") in switch_ports]
        assert sorted((dict(f.match)["in_port"], f.meter_id) for f in probes) == sorted(
            (p, pipeline.LLDP_METER.id(0)) for p in switch_ports)
        assert all(dict(f.match)["eth_type"] == 0x88CC for f in probes) and meters[pipeline.LLDP_METER.id(0)].pktps
        (stray,) = [f for f in prog if isinstance(f, Flow) and f.priority == pipeline.prio("lldp")]
        assert "in_port" not in dict(stray.match) and stray.meter_id == pipeline.STRAY_LLDP_METER.id(0)
        assert meters[stray.meter_id].pktps and meters[stray.meter_id].rate <= 10
        punts = [f for f in punts if f not in probes and f is not stray]
        if not fabric.switches[sw].is_tor:
            assert not punts
            continue
        hosts = {h.port for h in fabric.hosts_on(sw)}
        assert punts and all(dict(f.match).get("in_port") in hosts for f in punts), sw
        for f in punts:
            m = meters[f.meter_id]
            assert m.pktps and f.meter_id == pipeline.host_punt_meter(
                fabric.host_slot(next(h for h in fabric.hosts_on(sw) if h.port == dict(f.match)["in_port"])))
            assert pipeline.HOST_PUNT_METERS.first <= f.meter_id <= pipeline.HOST_PUNT_METERS.last


def test_a_link_is_stale_after_a_few_of_the_agents_counter_intervals_when_they_poll_slowly():
    """At k=48 the controller sustains counters every 5 s: a link measured 6 s ago is then as fresh as a
    link gets (with a fixed 5 s bound every other link was stale, and every announce refused); at one
    second, 6 s is stale."""
    from monitoring.view import LinkReading, make
    from ryu_apps.modes.policy import STALE_INTERVALS, STALE_S

    pol = modes.FreewayPolicy(F)
    ln = ("e0_0", "a0_0")
    for interval, stale in ((5.0, False), (1.0, True), (None, True)):
        v = make(10.0, {ln: LinkReading(0.1, 1e6, 4.0)}, {}, {}, counter_interval_s=interval)
        pol.observe(v)
        assert (ln in pol.stale) is stale, (interval, pol.stale)
    assert STALE_INTERVALS * 5.0 > 6.0 > STALE_S
