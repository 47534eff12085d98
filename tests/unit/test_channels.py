"""Who may speak on the controller's channels (issue 40): identities in certificates, one connection per
datapath id, the settings that turn TLS on, and the certificates ``freeway pki`` makes."""

import ssl
import subprocess

import pytest

from ryu_apps.config import Config as RealConfig
from ryu_apps.config import ConfigError
from ryu_apps.control.channels import ChannelGuard, names
from topology.fabric import fattree
from topology.pki import Pki, PkiError, fabric_pki

F = fattree(4, 10)
E00 = F.switches["e0_0"].dpid
E01 = F.switches["e0_1"].dpid


def _cert(cn="switch", uris=(), dns=()):
    """A verified peer certificate as ``SSLSocket.getpeercert()`` returns it."""
    return {"subject": ((("organizationName", "Freeway"),), (("commonName", cn),)),
            "subjectAltName": tuple(("URI", u) for u in uris) + tuple(("DNS", d) for d in dns)}


def test_a_certificate_names_datapath_ids_in_its_cn_or_its_subject_alt_names():
    assert names(_cert(cn=f"dpid:{E00:016x}")) == {E00}
    assert names(_cert(uris=(f"urn:freeway:dpid:{E00:016x}", f"urn:freeway:dpid:{E01:016X}"))) == {E00, E01}
    assert names(_cert(dns=(f"dpid-{E01:016x}.fabric.example",))) == {E01}
    assert names(_cert(cn="e0_0", uris=("urn:freeway:dpid:12345",))) == set()  # not 16 hex digits
    assert names(_cert(cn="dpid:00000000000000001")) == set()  # 17 digits is no datapath id
    assert names(None) == names({}) == set()
    dirname = {"subjectAltName": (("DirName", ((("commonName", "dpid:0000000000000001"),),)),)}
    assert names(dirname) == set()  # a DirName's value is a tuple: not read, and no error


class Conn:
    def __init__(self, alive=True):
        self.alive = alive


def test_over_tls_a_switch_gets_its_program_only_for_the_datapath_its_certificate_names():
    g = ChannelGuard(require_identity=True, known={E00, E01})
    good = g.admit(Conn(), E00, True, _cert(cn=f"dpid:{E00:016x}"))
    assert good.ok
    other = g.admit(Conn(), E01, True, _cert(cn=f"dpid:{E00:016x}"))
    assert not other.ok and other.counter == "identity" and f"{E01:016x}" in other.reason
    none = g.admit(Conn(), E01, True, _cert(cn="ovs-switch-1234"))
    assert not none.ok and none.counter == "no-identity"
    stranger = g.admit(Conn(), 0xDEAD, True, _cert(cn="dpid:000000000000dead"))
    assert not stranger.ok and stranger.counter == "not-in-fabric"
    assert g.counts() == {"openflow": {"identity": 1, "no-identity": 1, "not-in-fabric": 1}}
    off = ChannelGuard(require_identity=False, known={E00, E01})
    assert off.admit(Conn(), E01, True, _cert(cn="ovs-switch-1234")).ok  # identity checks off: the CA suffices


def test_a_second_connection_for_a_live_datapath_is_refused_and_the_first_keeps_it():
    g = ChannelGuard(known={E00})
    first, second = Conn(), Conn()
    assert g.admit(first, E00, False, None, alive=lambda c: c.alive).ok
    v = g.admit(second, E00, False, None, alive=lambda c: c.alive)
    assert not v.ok and v.counter == "duplicate" and g.live[E00] is first
    g.gone(second, E00)  # the refused one closing forgets nothing
    assert g.live[E00] is first
    first.alive = False  # the first is dead (echo unanswered) but not yet closed: the next try is admitted
    assert g.admit(second, E00, False, None, alive=lambda c: c.alive).ok and g.live[E00] is second
    g.gone(second, E00)
    assert E00 not in g.live
    third = Conn()
    assert g.admit(third, E00, False, None).ok  # after a close, the switch comes back
    assert g.counts() == {"openflow": {"duplicate": 1}}


def test_tls_settings_come_together_name_readable_files_and_keep_the_api_off_open_networks(tmp_path):
    key = tmp_path / "k.pem"
    key.write_text("x")
    F.save(tmp_path / "fabric.json")

    class Config:  # every mapping here with the fabric given
        @staticmethod
        def from_mapping(m):
            return RealConfig.from_mapping({"fabric": str(tmp_path / "fabric.json"), **m})

    with pytest.raises(ConfigError, match="^ca_certs: OpenFlow over TLS needs"):
        Config.from_mapping({"ctl_privkey": str(key), "ctl_cert": str(key)})
    with pytest.raises(ConfigError, match="^ctl_cert: cannot read"):
        Config.from_mapping({"ctl_privkey": str(key), "ctl_cert": str(tmp_path / "none"), "ca_certs": str(key)})
    assert Config.from_mapping({"ctl_privkey": str(key), "ctl_cert": str(key), "ca_certs": str(key)}).tls
    with pytest.raises(ConfigError, match="^api_key: HTTPS needs"):
        Config.from_mapping({"api": "127.0.0.1:8080", "api_cert": str(key)})
    with pytest.raises(ConfigError, match="^api: writes on 192.0.2.1, not a loopback address, need HTTPS"):
        Config.from_mapping({"api": "192.0.2.1:8080", "api_token_file": str(key), "api_open_reads": True})
    with pytest.raises(ConfigError, match="^api: reads on 192.0.2.1, not a loopback address, need"):
        Config.from_mapping({"api": "192.0.2.1:8080"})
    Config.from_mapping({"api": "192.0.2.1:8080", "api_read_token_file": str(key)})
    Config.from_mapping({"api": "127.0.0.1:8080", "api_token_file": str(key)})  # loopback: plain HTTP allowed
    with pytest.raises(ConfigError, match="^cluster_key: a client certificate needs"):
        Config.from_mapping({"cluster": "etcd://127.0.0.1:2379", "cluster_cert": str(key)})
    with pytest.raises(ConfigError, match="^cluster_password_file: etcd's user authentication needs"):
        Config.from_mapping({"cluster": "etcd://127.0.0.1:2379", "cluster_user": "freeway"})
    with pytest.raises(ConfigError, match="^cluster_ca: an etcd password is sent over TLS only"):
        Config.from_mapping({"cluster": "etcd://127.0.0.1:2379", "cluster_user": "freeway",
                             "cluster_password_file": str(key)})
    assert Config.from_mapping({"cluster": "etcd://127.0.0.1:2379", "cluster_user": "freeway", "cluster_ca": str(key),
                                "cluster_password_file": str(key)}).cluster_password() == "x"


def test_the_pki_names_each_switch_and_ovs_all_of_them_and_the_ca_verifies_them(tmp_path):
    made = fabric_pki(tmp_path / "pki", F)
    assert names(ssl._ssl._test_decode_cert(made["switches"]["e0_0"]["cert"])) == {E00}
    ovs = names(ssl._ssl._test_decode_cert(made["ovs"]["cert"]))
    assert ovs == {sw.dpid for sw in F.switches.values()}
    verify = subprocess.run(["openssl", "verify", "-CAfile", made["ca"], "-purpose", "sslclient",
                             made["switches"]["e0_1"]["cert"], made["ovs"]["cert"]], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr  # the CA verifies what it issued, as clients
    server = subprocess.run(["openssl", "verify", "-CAfile", made["ca"], "-purpose", "sslserver",
                             made["switches"]["e0_1"]["cert"]], capture_output=True, text=True)
    assert server.returncode != 0  # a switch's certificate can never serve as the controller's
    ctl = subprocess.run(["openssl", "verify", "-CAfile", made["ca"], "-purpose", "sslserver",
                          made["controller"]["cert"]], capture_output=True, text=True)
    assert ctl.returncode == 0, ctl.stdout + ctl.stderr
    other = Pki.create(tmp_path / "other", "other")  # a second CA is kept apart, and reused when asked again
    assert other.ca.read_bytes() != Pki(tmp_path / "pki").ca.read_bytes()
    assert Pki.create(tmp_path / "other", "other").ca.read_bytes() == other.ca.read_bytes()
    assert (tmp_path / "pki" / "ovs.key").stat().st_mode & 0o077 == 0  # keys readable by their owner only
    with pytest.raises(PkiError, match="no CA"):
        Pki(tmp_path / "empty").issue("x")


def test_unread_says_how_many_bytes_a_peer_sent_that_wait_on_the_socket():
    """What the echo watch and the read-back timeout ask before they judge a switch silent."""
    import socket

    from ryu_apps.ofchannel import unread

    a, b = socket.socketpair()
    with a, b:
        assert unread(b) == 0
        a.sendall(b"x" * 100)
        import time

        deadline = time.monotonic() + 2
        while unread(b) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert unread(b) == 100
        b.recv(60)
        assert unread(b) == 40
    assert unread(b) == 0 and unread(None) == 0  # closed, or no socket: cannot say


def test_a_switch_that_stops_reading_backlogs_its_own_bytes_and_is_closed_when_stuck(monkeypatch):
    """os-ken's send waits while a switch's send queue is full: one switch that stopped reading held
    every sender of the controller (at k=32 the app's event loop and the period stopped for good). The
    gated connection's send never waits: what finds the queue full waits in the connection's own
    backlog, and a backlog that does not move for BACKLOG_STALL_S closes the connection."""
    import socket as pysocket

    from eventlet import Timeout
    from eventlet.green import socket as gsocket

    from ryu_apps import ofchannel
    from ryu_apps.openflow.framework import hub

    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    theirs = gsocket.socket()
    theirs.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_RCVBUF, 4096)  # the peer never reads: buffers fill at once
    theirs.connect(listener.getsockname())
    ours, _ = listener.accept()
    listener.close()
    ours.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_SNDBUF, 4096)
    dp = ofchannel._gated_class()(ours, ("127.0.0.1", 1), False, None)
    dp.fw_admitted, dp.fw_dpid = True, 1
    sender = hub.spawn(dp._send_loop)
    msg = bytes([4, 14]) + b"\0" * 998  # a 1,000-byte FLOW_MOD's worth
    before = dict(ofchannel.STATS)
    with Timeout(5, AssertionError("send waited on a switch that does not read")):
        for _ in range(200):  # 200 KB: far past the socket buffers and the 16-message queue
            assert dp.send(msg)
            hub.sleep(0)
    assert ofchannel.STATS["send-backlogged"] > before.get("send-backlogged", 0)
    assert len(dp._backlog) > 100 and dp.is_active
    monkeypatch.setattr(ofchannel, "BACKLOG_STALL_S", 0.2)
    hub.sleep(0.3)
    dp.send(msg)  # nothing moved for longer than the bound: taken for stuck, closed
    assert ofchannel.STATS["send-stuck"] == before.get("send-stuck", 0) + 1
    assert not dp._backlog and not dp.send(msg)
    hub.kill(sender)
    ours.close()
    theirs.close()


def test_switches_that_connect_together_send_their_echo_requests_spread_over_the_interval():
    """A fabric's switches connect within a fraction of a second; with their echo loops in step, every
    interval brought 2,880 requests and 2,880 replies at once at k=48 (the loop held 50-90 ms). Each
    connection's first echo waits a random part of the interval: 1,000 of them fall in every tenth of it,
    none outside it."""
    import random

    from ryu_apps.ofchannel import echo_phase

    rng = random.Random(7)
    phases = [echo_phase(2.0, rng) for _ in range(1000)]
    assert all(0.0 <= p <= 2.0 for p in phases)
    tenths = {int(p / 0.2) for p in phases}
    assert tenths >= set(range(10)), sorted(tenths)
    assert max(sum(1 for p in phases if int(p / 0.2) == i) for i in range(10)) < 150  # (about 100 each)


def _green_pair(rcvbuf: int | None = None):
    """(ours, theirs): a connected pair of green sockets; ``rcvbuf``: their receive buffer, set before they
    connect (set after, the window agreed at the connection stays: the pair took 65,536 bytes unread on Linux
    6.18, where the test below needs a 65,000-byte message not to fit)."""
    import socket as pysocket

    from eventlet.green import socket as gsocket

    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    theirs = gsocket.socket()
    if rcvbuf is not None:
        theirs.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_RCVBUF, rcvbuf)
    theirs.connect(listener.getsockname())
    ours, _ = listener.accept()
    listener.close()
    return ours, theirs


def test_a_message_to_an_idle_connection_leaves_at_once_and_a_busy_ones_keep_their_order():
    """A message for a switch whose send loop waits on its empty queue is written at once, without a turn
    of the event loop (a handshake's answer is sent twice); what the socket does not take goes to the queue
    behind it; while the loop writes, or holds anything queued, and over TLS, messages go through the queue;
    the switch reads every byte in the order it was sent."""
    import socket as pysocket
    import time

    from eventlet import patcher

    from ryu_apps import ofchannel
    from ryu_apps.openflow.framework import hub

    os_sleep = patcher.original("time").sleep  # these wait without running the event loop
    os_select = patcher.original("select").select
    ours, theirs = _green_pair(rcvbuf=4096)  # small buffers: a big message fills them
    ours.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_SNDBUF, 4096)
    dp = ofchannel._gated_class()(ours, ("127.0.0.1", 1), False, None)
    dp._deadline.cancel()
    dp.fw_admitted, dp.fw_dpid = True, 1
    sender = hub.spawn(dp._send_loop)
    hub.sleep(0)  # the send loop now waits on its empty queue

    def readable(want: int = 0) -> bytes:
        """What the switch can read, the event loop never run meanwhile (up to 1 s for ``want`` bytes)."""
        out, deadline = b"", time.monotonic() + 1.0
        while True:
            try:
                out += theirs.fd.recv(1 << 20, pysocket.MSG_DONTWAIT)
            except BlockingIOError:
                pass
            if len(out) >= want or time.monotonic() > deadline:
                return out
            os_sleep(0.001)

    def msg(i: int, size: int = 1000) -> bytes:  # a FLOW_MOD's header (its length, xid = i), then zeros
        return bytes([4, 14]) + size.to_bytes(2, "big") + i.to_bytes(4, "big") + bytes(size - 8)

    def room() -> bytes:  # the switch reads until our socket could take a message again (the loop not run)
        out, deadline = b"", time.monotonic() + 1.0
        while not os_select([], [ours.fd], [], 0)[1] and time.monotonic() < deadline:
            out += readable()
            os_sleep(0.001)
        return out

    before = ofchannel.STATS["send-direct"]
    first = msg(0)
    assert dp.send(first) and readable(len(first)) == first  # at once
    assert ofchannel.STATS["send-direct"] == before + 1
    big, small = msg(1, 65000), msg(2)
    assert dp.send(big)  # more than the buffers take: part written at once, the rest queued behind it
    assert ofchannel.STATS["send-direct"] == before + 2 and dp.send_q.qsize() == 1
    deadline = time.monotonic() + 1.0  # the send loop takes the rest and writes, until the buffers are full again
    while (dp.send_q.qsize() or dp.send_q.getting()) and time.monotonic() < deadline:
        hub.sleep(0)  # (as many turns as it takes; a loop that wrote it all is back on its queue: failed below)
    got = room()  # room on the socket, while the loop still waits to write the rest
    assert dp.send_q.qsize() == 0 and not dp.send_q.getting()
    assert dp.send(small) and dp.send_q.qsize() == 1  # the loop is mid-write: queued, not written at once
    big2, small2 = msg(3, 65000), msg(4)
    while len(got) < len(big) + len(small):  # all of it read; the loop waits on its empty queue again
        hub.sleep(0.001)
        got += readable()
    assert dp.send(big2) and dp.send_q.qsize() == 1  # part at once, the rest queued; the loop not run yet
    got += room()
    assert dp.send(small2) and dp.send_q.qsize() == 2  # behind what the queue holds, not written at once
    assert ofchannel.STATS["send-direct"] == before + 3
    deadline = time.monotonic() + 10
    while len(got) < len(big) + len(small) + len(big2) + len(small2) and time.monotonic() < deadline:
        hub.sleep(0.001)
        got += readable()
    assert got == big + small + big2 + small2  # every byte, in order
    dp.fw_tls = True  # over TLS: through the send loop, never at once
    assert dp.send(first) and readable() == b""
    hub.sleep(0.01)
    assert readable(len(first)) == first
    hub.kill(sender)
    ours.close()
    theirs.close()


def test_a_connections_reads_leave_no_timer_behind():
    """os-ken read with the socket's 5 s timeout: every read left a timer (its closure, its exception) in
    the hub's heap for 5 s even when its bytes came first; at k=48 some 170,000 objects every collection
    walked. 300 reads that each waited for their bytes leave no timer behind."""
    from eventlet.hubs import get_hub

    from ryu_apps import ofchannel
    from ryu_apps.openflow.framework import hub

    ours, theirs = _green_pair()
    dp = ofchannel._gated_class()(ours, ("127.0.0.1", 1), False, None)
    dp._deadline.cancel()
    reader = hub.spawn(dp._recv_loop)
    hub.sleep(0.05)
    timers = lambda: len(get_hub().timers) + len(get_hub().next_timers)  # noqa: E731
    before = timers()
    echo = bytes([4, 2, 0, 8, 0, 0, 0, 1])  # ECHO_REQUEST: the reader waits for each, then parses it
    for _ in range(300):
        theirs.sendall(echo)
        hub.sleep(0.001)
    assert not reader.dead
    assert timers() - before < 30, f"{timers() - before} timers left by 300 reads"
    hub.kill(reader)
    ours.close()
    theirs.close()


def test_a_closed_connection_whose_switch_never_hangs_up_is_gone_after_the_grace(monkeypatch):
    """The reader waits without a timeout, so a switch that is closed but never hangs up (a peer that
    stopped, a half-open TCP connection) would hold its reader forever: its reading side is shut after
    ``CLOSE_GRACE_S`` and the reader ends."""
    from ryu_apps import ofchannel
    from ryu_apps.openflow.framework import hub

    monkeypatch.setattr(ofchannel, "CLOSE_GRACE_S", 0.2)
    ours, theirs = _green_pair()
    dp = ofchannel._gated_class()(ours, ("127.0.0.1", 1), False, None)
    reader = hub.spawn(dp._recv_loop)
    hub.sleep(0.3)
    assert not reader.dead  # nothing came, no timeout: still waiting
    dp.close()
    hub.sleep(0.1)
    assert not reader.dead  # the grace: the switch may still hang up itself
    hub.sleep(0.4)
    assert reader.dead
    assert theirs.recv(10) == b""  # the switch sees the controller's side closed
    theirs.close()


def test_an_echo_schedule_keeps_its_phase_and_skips_what_it_missed():
    from ryu_apps.ofchannel import next_due

    assert next_due(10.0, 2.0, 9.0) == 12.0  # on time
    assert next_due(10.0, 2.0, 10.3) == 12.0  # woken late (the loop was held): the next slot of its own phase
    assert next_due(10.0, 2.0, 12.5) == 14.0  # a slot missed: skipped, not made up
    assert next_due(10.0, 2.0, 14.0) == 16.0


def test_an_echo_loop_held_late_keeps_its_phase(monkeypatch):
    """Each connection's echo loop slept the interval after each request: a loop woken late by a hold of
    the event loop stayed late, and the loops due during a hold left it in step (at k=48, bursts of
    hundreds of requests within 10 ms). Held 0.3 s past its slot, the loop's next request is still on its
    own schedule (0.9 s), not an interval after the late one (1.15 s)."""
    import time as pytime

    from ryu_apps import ofchannel
    from ryu_apps.openflow.framework import hub

    monkeypatch.setattr(ofchannel, "echo_phase", lambda interval: 0.1)
    ours, theirs = _green_pair()
    dp = ofchannel._gated_class()(ours, ("127.0.0.1", 1), False, None)
    dp._deadline.cancel()
    dp.echo_request_interval, dp.max_unreplied_echo_requests = 0.4, 100
    sent = []
    dp.send_msg = lambda msg, close_socket=False: sent.append(pytime.monotonic()) or True
    t0 = pytime.monotonic()
    loop = hub.spawn(dp._echo_request_loop)
    hub.sleep(0.45)  # requests at 0.1 (and due at 0.5)
    pytime.sleep(0.3)  # the event loop held until 0.75: the 0.5 request goes late
    hub.sleep(0.35)
    hub.kill(loop)
    at = [round(t - t0, 2) for t in sent]
    assert len(at) == 3, at
    assert 0.7 <= at[1] <= 0.85, at  # the late one, as soon as the hold ended
    assert 0.85 <= at[2] <= 1.0, at  # back on its schedule (0.9), not 0.4 s after the late one
    ours.close()
    theirs.close()


def test_a_connection_closed_here_is_not_counted_malformed_when_its_last_read_fails(monkeypatch):
    """Over TLS os-ken's close ends the session, and the reader's next read raises ValueError ("Read on
    closed or unwrapped SSL socket"): that is the controller's own close, not bytes that are not OpenFlow.
    A connection that raises while still open is counted."""
    from ryu_apps import ofchannel

    base = ofchannel._gated_class()

    class ClosedThenRead(base):
        def serve(self):
            self.close()
            raise ValueError("Read on closed or unwrapped SSL socket")

    class Garbage(base):
        def serve(self):
            raise ValueError("not OpenFlow")

    counted = lambda: ofchannel.GUARD.refused[("openflow", "malformed")]  # noqa: E731
    before = counted()
    for cls, more in ((ClosedThenRead, 0), (Garbage, 1)):
        monkeypatch.setattr(ofchannel, "_gated_class", lambda cls=cls: cls)
        ours, theirs = _green_pair()
        ofchannel._handle(ours, ("127.0.0.1", 1))
        theirs.close()
        assert counted() == before + more, cls.__name__
        before = counted()


def test_each_switch_is_asked_for_an_echo_every_2_s_unless_the_fabric_is_larger_than_the_echo_budget():
    from ryu_apps.config import Config, ConfigError
    from ryu_apps.launcher import ECHO_INTERVAL_S, echo_interval

    assert ECHO_INTERVAL_S == 2.0
    assert echo_interval(20, 500.0) == 2.0  # k=4
    assert echo_interval(1000, 500.0) == 2.0  # exactly the budget in 2 s
    assert echo_interval(1280, 500.0) == pytest.approx(2.56)  # k=32
    assert echo_interval(2880, 500.0) == pytest.approx(5.76)  # k=48: 500 requests a second, not 1,440
    assert 2880 / echo_interval(2880, 100.0) == pytest.approx(100.0)
    assert Config.from_mapping({"fabric": "f.json"}).echo_budget_pps == 500.0
    with pytest.raises(ConfigError, match="echo_budget_pps"):
        Config.from_mapping({"fabric": "f.json", "echo_budget_pps": 0})


def test_an_unadmitted_connections_messages_reach_no_app_until_it_is_admitted():
    """Issue 60 item 2: os-ken queues a message's event with the state it came in; an unadmitted
    connection's ERROR (role request failed) was then handled under the datapath id it claimed, and a
    cluster's leader demoted itself. Through the gate a connection's message events wait until it is
    admitted (then go in order, with their state); a refused connection's never go; past ``HELD_MAX``
    the connection is refused."""
    from types import SimpleNamespace

    from os_ken.controller import ofp_event
    from os_ken.ofproto import ofproto_v1_3_parser as p

    from ryu_apps import ofchannel

    got = []
    brick = SimpleNamespace(send_event_to_observers=lambda ev, state=None: got.append((type(ev).__name__, state)),
                            name="ofp_event")
    refused = []

    def dp():
        d = SimpleNamespace(fw_admitted=None, _held=[])
        d._refuse = lambda counter, reason: (refused.append(counter), setattr(d, "fw_admitted", False))
        return d

    def err(conn):
        return ofp_event.EventOFPErrorMsg(p.OFPErrorMsg(SimpleNamespace(id=None), type_=11, code=0))

    conn = dp()
    gate = ofchannel._GatedBrick(brick, conn)
    gate.send_event_to_observers(err(conn), "config")
    gate.send_event_to_observers(SimpleNamespace(), "config")  # a state change: not a message, it goes
    assert got == [("SimpleNamespace", "config")] and len(conn._held) == 1
    conn.fw_admitted = True  # (what GatedDatapath.send_msg does on the guard's yes)
    for ev, state in conn._held:
        gate.deliver(ev, state)
    assert got[-1] == ("EventOFPErrorMsg", "config")
    assert gate.name == "ofp_event"  # everything else is os-ken's

    bad = dp()
    gate = ofchannel._GatedBrick(brick, bad)
    gate.send_event_to_observers(err(bad), "config")
    bad._refuse("identity", "")
    bad._held.clear()
    gate.send_event_to_observers(err(bad), "config")
    assert not bad._held and got[-1] == ("EventOFPErrorMsg", "config") and len(got) == 2

    flood = dp()
    gate = ofchannel._GatedBrick(brick, flood)
    for _ in range(ofchannel.HELD_MAX + 1):
        gate.send_event_to_observers(err(flood), "config")
    assert refused[-1] == "pre-admission-flood" and len(got) == 2


def test_unadmitted_connections_are_capped_in_all_and_per_address():
    """Issue 60 item 4: nothing capped the connections that never got admitted. In all at most
    ``UNADMITTED_MAX`` (a k=48 restart brings 2,880 at once), and from one address other than loopback
    (where an emulated fabric's switches all connect from) at most ``UNADMITTED_PER_SOURCE``."""
    from ryu_apps import ofchannel

    saved = dict(ofchannel.UNADMITTED)
    try:
        ofchannel.UNADMITTED.clear()
        ofchannel.UNADMITTED["192.0.2.9"] = ofchannel.UNADMITTED_PER_SOURCE
        assert ofchannel._admissible(("192.0.2.9", 40000)) == "unadmitted-source-cap"
        assert ofchannel._admissible(("192.0.2.10", 40000)) is None
        ofchannel.UNADMITTED["127.0.0.1"] = 2000
        assert ofchannel._admissible(("127.0.0.1", 40000)) is None  # loopback: no per-address cap
        ofchannel.UNADMITTED["::1"] = ofchannel.UNADMITTED_MAX
        assert ofchannel._admissible(("192.0.2.10", 40000)) == "unadmitted-cap"
    finally:
        ofchannel.UNADMITTED.clear()
        ofchannel.UNADMITTED.update(saved)
