"""LLDP probes and the link check (issue 15): frames, proofs, verified/missing/miswired, liveness."""

import pytest

from ryu_apps.control import linkwatch as lldp
from ryu_apps.control.liveness import Liveness
from topology.fabric import fattree

SECRET = b"0123456789abcdef"


def test_a_probe_reads_back_as_the_switch_and_port_it_left_by():
    frame = lldp.probe(SECRET, 0x1234, 7)
    assert lldp.is_lldp(frame) and frame[:6] == lldp.LLDP_DST
    assert lldp.read(SECRET, frame) == (0x1234, 7)
    assert b"dpid:0000000000001234" in frame  # chassis id any LLDP tool shows


@pytest.mark.parametrize("frame,reason", [
    (lldp.probe(b"another controller", 0x1234, 7), "not-ours"),
    (lldp.probe(SECRET, 0x1234, 7)[:40], "malformed"),
    (b"\x01\x80\xc2\x00\x00\x0e" + b"\x00" * 6 + b"\x08\x00" + b"\x00" * 40, "not-lldp"),
    (b"\x01\x80\xc2\x00\x00\x0e" + b"\x00" * 6 + b"\x88\xcc" + b"\x02\x07\x07abcdef" + b"\x00\x00", "not-ours"),
    (b"\x88", "not-lldp"),
])
def test_a_frame_that_is_not_our_probe_is_told_apart(frame, reason):
    with pytest.raises(lldp.LldpError) as e:
        lldp.read(SECRET, frame)
    assert e.value.reason == reason


def test_a_forged_proof_for_another_port_is_refused():
    """A host that saw a probe cannot make it say another port: the proof covers dpid and port."""
    frame = bytearray(lldp.probe(SECRET, 0x1234, 7))
    at = frame.index(bytes.fromhex("02fee101")) + 4 + 8
    frame[at:at + 4] = (8).to_bytes(4, "big")
    with pytest.raises(lldp.LldpError, match="wrong proof"):
        lldp.read(SECRET, bytes(frame))


def _hear_all(check, fabric, now, skip=()):
    for ln in fabric.links:
        for (dst, dport), (src, sport) in (((ln.b, ln.b_port), (ln.a, ln.a_port)), ((ln.a, ln.a_port), (ln.b, ln.b_port))):
            if (src, dst) not in skip:
                check.heard(now, dst, dport, (fabric.switches[src].dpid, sport))


def _watched():
    """A k=4 fat-tree's check with every switch connected at 0."""
    f = fattree(4)
    check = lldp.LinkCheck(f, timeout_s=3.0)
    for sw in f.switches:
        check.watch(0.0, sw)
    return f, check


def _rounds(check, t0, t1, every=1.0):
    t = t0
    while t <= t1:
        check.sent(t)
        t += every


def test_links_heard_both_ways_are_verified_and_silence_is_missing_after_the_timeout():
    f = fattree(4)
    check = lldp.LinkCheck(f, timeout_s=3.0)
    assert set(check.links(0.0).values()) == {lldp.WAITING}  # no switch connected: nothing judged
    for sw in f.switches:
        check.watch(0.0, sw)
    _rounds(check, 0.0, 2.0)
    assert set(check.links(2.0).values()) == {lldp.WAITING}  # no probe delivered yet: not judged
    for t in (3.0, 4.0, 5.0, 6.0):  # c1 -> a0_0 silently lost (the port stays up)
        _hear_all(check, f, t, skip={("c1", "a0_0")})
        check.sent(t)
    assert check.links(5.0)[("a0_0", "c1")] == lldp.WAITING  # a0_0 delivers probes since 3.0: its grace
    states = check.links(6.6)
    assert states[("a0_0", "c1")] == lldp.MISSING
    assert sum(s == lldp.VERIFIED for s in states.values()) == len(f.links) - 1
    assert check.faults(6.6) == {("a0_0", "c1"), ("c1", "a0_0")}
    _hear_all(check, f, 7.0)
    assert check.faults(7.5) == set()
    _rounds(check, 8.0, 11.0)
    assert check.faults(11.6) == {(a, b) for a in f.switches for b in f.neighbors(a)}  # stale


def test_a_controller_that_stalls_or_a_switch_that_punts_nothing_takes_nothing_down():
    """Fail open: without rounds of probes sent, or before a switch has delivered any probe (its LLDP
    entry not installed yet, or it eats LLDP), silence is not a fault."""
    f, check = _watched()
    check.sent(1.0)  # one round, heard; then the controller stalls for 10 s
    _hear_all(check, f, 1.0)
    assert check.faults(11.0) == set()
    check.sent(11.0)
    assert check.faults(11.6) == set()  # one unheard round is not enough
    check.sent(12.0)
    assert len(check.faults(12.6)) == 2 * len(f.links)  # two: every link is now missing
    _, fresh = _watched()
    for t in range(1, 10):  # a0_0 punts no probe at all
        _hear_all(fresh, f, float(t), skip={(n, "a0_0") for n in f.neighbors("a0_0")})
        fresh.sent(float(t))
    assert fresh.faults(9.6) == set()
    states = fresh.links(9.6)
    assert {st for ln, st in states.items() if "a0_0" in ln} == {lldp.WAITING}
    assert {st for ln, st in states.items() if "a0_0" not in ln} == {lldp.VERIFIED}


def test_silence_while_the_controller_loop_was_held_is_not_judged_until_it_ran_freely_a_timeout():
    """Issue 16 (k=8): a controller whose loop is held (a burst of sFlow, a reprogramming) reads the
    probes that came back late; that must not take the links down."""
    f, check = _watched()
    for t in (1.0, 2.0, 3.0):
        _hear_all(check, f, t)
        check.sent(t)
    assert check.held(3.1, 0.05) is False and not check.paused(3.1)  # a short hold changes nothing
    _rounds(check, 4.0, 7.0)  # the probes of these rounds came back, but sit unread: the loop is held
    assert check.held(7.2, 2.5) is True and check.paused(7.2)
    assert check.faults(7.2) == set() and check.faults(10.1) == set()  # paused until 7.2 + 3 s
    assert set(check.links(10.1).values()) == {lldp.WAITING}  # shown as waiting, not verified
    _hear_all(check, f, 7.3, skip={("c1", "a0_0")})  # read at last: all but one direction
    _rounds(check, 8.0, 11.0)
    _hear_all(check, f, 11.0, skip={("c1", "a0_0")})
    assert check.faults(10.1) == set()  # still paused
    assert check.faults(11.6) == {("a0_0", "c1"), ("c1", "a0_0")}  # ran freely: the real fault shows


def test_a_port_that_hears_another_peer_is_miswired_and_reported_as_unexpected():
    f, check = _watched()
    _hear_all(check, f, 1.0)
    _rounds(check, 0.0, 2.0)
    port = f.port_to("a0_0", "c1")
    check.heard(1.5, "a0_0", port, (f.switches["c3"].dpid, f.port_to("c3", "a0_1")))  # swapped cable
    assert check.links(2.0)[("a0_0", "c1")] == lldp.MISWIRED
    assert check.unexpected(2.0) == [{"switch": "a0_0", "port": port, "described": f"c1:{f.port_to('c1', 'a0_0')}",
                                      "heard": f"c3:{f.port_to('c3', 'a0_1')}"}]
    check.heard(2.0, "e0_0", 40, (0xABC, 9))  # a port the description does not know, a switch it does not know
    assert {"switch": "e0_0", "port": 40, "described": None, "heard": "0000000000000abc:9"} in check.unexpected(2.5)
    check.heard(2.6, "a0_0", port, (f.switches["c1"].dpid, f.port_to("c1", "a0_0")))  # the cable put right
    check.watch(2.6, "e0_0", 40)  # the unknown port came up again: nothing heard there since
    assert check.unexpected(2.7) == [] and check.links(2.7)[("a0_0", "c1")] == lldp.VERIFIED


def test_a_switch_that_goes_away_is_not_judged_and_a_port_back_up_gets_its_grace():
    f, check = _watched()
    _hear_all(check, f, 1.0)
    check.forget("c1")
    assert check.links(10.0)[("a0_0", "c1")] == lldp.WAITING  # the liveness model has it down already
    _hear_all(check, f, 9.0)
    check.watch(9.5, "a0_0", f.port_to("a0_0", "e0_0"))
    _rounds(check, 10.0, 12.0)
    assert check.links(10.0)[("a0_0", "e0_0")] == lldp.WAITING
    assert check.links(12.6)[("a0_0", "e0_0")] == lldp.MISSING


def test_the_liveness_model_takes_an_lldp_fault_down_and_back_after_its_hold_down():
    f = fattree(4)
    live = Liveness(f, hold_down_s=2.0)
    c = live.lldp(1.0, {("a0_0", "c1"), ("c1", "a0_0")})
    assert c.down == {("a0_0", "c1"), ("c1", "a0_0")} and not live.is_up(("a0_0", "c1"))
    assert not live.lldp(1.5, set())  # heard again: held down first
    assert not live.tick(3.0)
    assert live.tick(3.6).up == {("a0_0", "c1"), ("c1", "a0_0")}


def test_probes_go_out_of_fabric_and_unknown_ports_but_never_to_a_described_host():
    f = fattree(4)
    hosts = {h.port for h in f.hosts_on("e0_0")}
    ports = lldp.probe_ports(f, "e0_0", {1: None, 2: None, 3: None, 4: None, 40: None, 0xFFFFFFFE: None}, hosts)
    assert ports == sorted({f.port_to("e0_0", n) for n in f.neighbors("e0_0")} | {40})
