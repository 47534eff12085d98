"""Trust (issue 40): the real controller process, real certificates (openssl), peers that lie.

The attacks of the issue, each against ``freeway controller`` as the README starts it: a peer that says
it is a switch (with no certificate, one from another CA, one naming another datapath), a second
connection for a live switch, bytes that are not OpenFlow before and after the handshake, a TLS handshake
left half way, the API without its tokens, with the wrong one, with a read token on a write route and with
an oversized body. What each got is counted at the peer (the message types it received), in the
controller's log and in its metrics; and the real switch beside them keeps its program.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from experiments.harness.procs import ControllerProcess, free_port, freeway_command
from tests.integration.fakeswitch import FLOW_MOD, GROUP_MOD, HANDSHAKE, METER_MOD, FakeSwitch
from topology.fabric import fattree
from topology.pki import Pki, fabric_pki

F = fattree(4, 10)
E00, E01 = F.switches["e0_0"].dpid, F.switches["e0_1"].dpid
READ, WRITE = "read-token-0123456789", "write-token-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    made = fabric_pki(d / "fabric", F)
    other = Pki.create(d / "other", "other")
    made["foreign"] = other.issue("foreign-e0_0", dpids=(E00,))  # right name, wrong CA
    return made


def ctx_ca(ctl) -> str:
    return ctl.ca


def _client_ctx(made, cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=made["ca"])
    ctx.check_hostname = False  # the controller's certificate names 127.0.0.1; the CA is what is checked
    ctx.load_cert_chain(cert, key)
    return ctx


def _refusals(api: str, ctx=None) -> dict[tuple[str, str], float]:
    req = urllib.request.Request(f"{api}/metrics", headers={"Authorization": f"Bearer {READ}"})
    text = urllib.request.urlopen(req, timeout=10, context=ctx).read().decode()
    out = {}
    for m in re.finditer(r'freeway_channel_refusals_total\{channel="([^"]+)",reason="([^"]+)"\} (\S+)', text):
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def _fabric(api: str, ctx=None) -> dict:
    req = urllib.request.Request(f"{api}/api/v1/fabric", headers={"Authorization": f"Bearer {READ}"})
    return json.loads(urllib.request.urlopen(req, timeout=10, context=ctx).read())


def _state(api: str, name: str, ctx=None) -> str:
    return next(s["state"] for s in _fabric(api, ctx)["switches"] if s["name"] == name)


def _wait(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def https_ctl(tmp_path_factory, pki):
    """OpenFlow on plain TCP (loopback, as the demo), the API on HTTPS with a read and a write token."""
    d = tmp_path_factory.mktemp("trust-plain")
    F.save(d / "fabric.json")
    (d / "read").write_text(READ + "\n")
    (d / "write").write_text(WRITE + "\n")
    port = free_port()
    ctl = ControllerProcess(d / "fabric.json", mode="freeway", extra=[
        "--lldp-interval", "0", "--api", f"127.0.0.1:{port}", "--api-token-file", str(d / "write"), "--api-read-token-file",
        str(d / "read"), "--api-cert", pki["controller"]["cert"], "--api-key", pki["controller"]["key"]]).start()
    ctx = ssl.create_default_context(cafile=pki["ca"])
    try:
        assert _wait(lambda: _try(lambda: _fabric(f"https://127.0.0.1:{port}", ctx)), 20)
        ctl.dir, ctl.ca = d, pki["ca"]
        yield ctl, f"https://127.0.0.1:{port}", ctx
    finally:
        ctl.stop()


def _try(f):
    try:
        return f()
    except (OSError, urllib.error.URLError):
        return None


def test_a_second_connection_for_a_live_switch_is_refused_and_the_switch_keeps_its_links(https_ctl):
    ctl, api, ctx = https_ctl
    live = FakeSwitch(ctl.address, E00).start()
    assert live.wait_for(FLOW_MOD), f"the first connection got no program: {live.got} {live.error}"
    assert _wait(lambda: _state(api, "e0_0", ctx) == "connected")
    time.sleep(1)
    seen = len(live.got)
    twin = FakeSwitch(ctl.address, E00).start()
    assert twin.closed.wait(10), "the duplicate connection was not closed"
    assert twin.program() == [] and set(twin.got) <= HANDSHAKE, twin.got
    time.sleep(2)
    assert not live.closed.is_set() and _state(api, "e0_0", ctx) == "connected"
    changes = [t for t in live.got[seen:] if t in (FLOW_MOD, GROUP_MOD, METER_MOD)]
    assert changes == [], f"the live switch was sent {changes} after the duplicate (its program changed)"
    log = ctl.log_text()
    assert "refused (duplicate)" in log and "e0_0 (%016x) disconnected" % E00 not in log
    assert _refusals(api, ctx)[("openflow", "duplicate")] == 1
    live.close()  # the switch itself goes: now it is disconnected, and its next connection is admitted
    assert _wait(lambda: _state(api, "e0_0", ctx) == "disconnected")
    again = FakeSwitch(ctl.address, E00).start()
    assert again.wait_for(FLOW_MOD)
    again.close()


def test_bytes_that_are_not_openflow_are_counted_and_the_fabric_is_still_served(https_ctl):
    ctl, api, ctx = https_ctl
    before = _refusals(api, ctx).get(("openflow", "malformed"), 0)
    with socket.create_connection(ctl.address, timeout=5) as s:  # garbage before any handshake
        s.sendall(b"\x07\x00\x00\x08" + b"\0" * 4 + b"GET / HTTP/1.1\r\n\r\n")  # an unknown version
        s.settimeout(5)
        _drain(s)
    sw = FakeSwitch(ctl.address, E01).start()  # garbage after the handshake, from an admitted switch
    assert sw.wait_for(FLOW_MOD)
    sw.send_raw(b"\x04\x0b\x00\x10" + b"\xff" * 12)  # a FLOW_REMOVED cut short: os-ken cannot parse it
    time.sleep(1)
    assert not sw.closed.is_set()  # one bad message is dropped, the switch stays
    sw.send_raw(b"\x07\x00\x00\x08" + b"\0" * 4)  # a version this controller does not speak: closed
    assert sw.closed.wait(10)
    assert _wait(lambda: _refusals(api, ctx).get(("openflow", "malformed"), 0) >= before + 3), _refusals(api, ctx)
    ok = FakeSwitch(ctl.address, E01).start()
    assert ok.wait_for(FLOW_MOD), "a switch after the garbage got no program"
    ok.close()
    assert ctl.proc.poll() is None
    assert "Encountered an error while parsing" not in ctl.log_text()  # counted and said in one line


def test_a_peer_that_never_says_which_switch_it_is_is_closed_and_counted(https_ctl):
    """A connection that answers HELLO and echo but never sends FEATURES_REPLY holds nothing for long: it
    is closed 15 s after it connected (ofchannel.ADMIT_S; echo alone would keep it forever) and counted."""
    ctl, api, ctx = https_ctl
    before = _refusals(api, ctx).get(("openflow", "handshake-timeout"), 0)
    t0 = time.monotonic()
    mute = FakeSwitch(ctl.address, None).start()
    assert mute.closed.wait(30)
    assert 14 <= time.monotonic() - t0 <= 25 and mute.program() == [], mute.got
    assert _refusals(api, ctx).get(("openflow", "handshake-timeout"), 0) == before + 1


def test_before_admission_a_peer_gets_no_large_echo_reply(https_ctl):
    """Issue 60 item 4: echo was answered before admission, so a peer that sent 64 KB echo requests and
    never read grew a 64 MiB backlog on every connection. Before admission an echo reply carries at most
    64 bytes of data: a large request gets none."""
    import struct

    ctl, _, _ = https_ctl
    host, port = ctl.address
    with socket.create_connection((host, port), timeout=5) as s:
        big = b"x" * 60000
        s.sendall(struct.pack("!BBHI", 4, 0, 8, 1) + struct.pack("!BBHI", 4, 2, 8 + len(big), 2) + big
                  + struct.pack("!BBHI", 4, 2, 8 + 16, 3) + b"y" * 16)
        got, deadline = b"", time.monotonic() + 3
        s.settimeout(0.5)
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            got += chunk
    replies = []
    while len(got) >= 8:
        _, kind, length, xid = struct.unpack("!BBHI", got[:8])
        replies.append((kind, length, xid))
        got = got[length:]
    assert (3, 8 + 16, 3) in replies, replies  # the small echo is answered (a live peer stays live)
    assert not [r for r in replies if r[0] == 3 and r[1] > 8 + 64], replies


def test_the_api_answers_while_slow_clients_hold_half_requests(https_ctl):
    """Issue 60 item 4: 80 connections that sent half a request line and then a byte every 25 s held all of
    the API's 64 slots (30 s a read, no deadline for the head): /api/v1/status and /metrics timed out at
    10 s, no token needed. Now a connection has ``HEAD_S`` for its TLS handshake and request head, one
    address holds at most ``PER_SOURCE`` connections, and the pool is 1,024: the API answers meanwhile."""
    from ryu_apps.operators import api as apimod

    ctl, api, ctx = https_ctl
    port = int(api.rsplit(":", 1)[1])
    held = []
    try:
        for i in range(300):  # 100 from each of three other loopback addresses
            s = socket.socket()
            s.bind((f"127.0.0.{2 + i % 3}", 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
                s.send(b"\x16\x03\x01")  # the start of a TLS handshake, never finished
            except OSError:
                s.close()
                continue
            held.append(s)
        t0 = time.monotonic()
        req = urllib.request.Request(f"{api}/api/v1/status", headers={"Authorization": f"Bearer {READ}"})
        st = json.loads(urllib.request.urlopen(req, timeout=10, context=ctx).read())
        took = time.monotonic() - t0
        assert st["mode"] == "freeway" and took < 1.0, took
        refused = _refusals(api, ctx)
        assert refused.get(("api", "per-source-cap"), 0) >= 300 - 3 * apimod.PER_SOURCE, refused
        time.sleep(apimod.HEAD_S + 2)
        assert _refusals(api, ctx).get(("api", "head-timeout"), 0) >= 3 * apimod.PER_SOURCE - 5
    finally:
        for s in held:
            s.close()


def _drain(s: socket.socket) -> None:
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass


def test_the_api_over_https_wants_its_tokens_and_bounds_its_bodies(https_ctl):
    ctl, api, ctx = https_ctl

    def call(method, path, token=None, body=None, headers=None):
        h = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request(f"{api}{path}", data=body, method=method, headers={**h, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    ann = json.dumps({"flows": [{"src": F.hosts[0].ip, "dst": F.hosts[-1].ip, "sport": 40000, "dport": 5001}],
                      "size_bytes": 10**7, "rate_bps": 2e6}).encode()
    ctype = {"Content-Type": "application/json"}
    assert call("GET", "/api/v1/status") == 401
    assert call("GET", "/api/v1/status", "wrong-token-0123456789") == 401
    assert call("GET", "/api/v1/status", READ) == 200 and call("GET", "/metrics", WRITE) == 200
    assert call("POST", "/api/v1/elephants", READ, ann, ctype) == 403
    assert call("POST", "/api/v1/elephants", None, ann, ctype) == 401
    # a body announced over the bound is refused before a byte of it is read (the client need not send it)
    assert call("POST", "/api/v1/elephants", WRITE, b"{}", {**ctype, "Content-Length": "70000"}) == 413
    with pytest.raises(OSError):  # plain HTTP on the HTTPS port gets nothing (URLError is an OSError)
        urllib.request.urlopen(api.replace("https", "http") + "/api/v1/status", timeout=5)
    dec = urllib.request.Request(f"{api}/api/v1/decisions", headers={"Authorization": f"Bearer {READ}"})
    decided = json.loads(urllib.request.urlopen(dec, timeout=10, context=ctx).read())["decisions"]
    assert [d for d in decided if d["type"] in ("placement", "refusal", "withdrawal")] == []  # nothing decided
    r = _refusals(api, ctx)
    assert r[("api", "tls-failed")] >= 1  # the plain HTTP request, counted without a traceback
    assert "Traceback" not in ctl.log_text()
    assert r[("api", "unauthorized")] >= 3 and r[("api", "forbidden")] >= 1 and r[("api", "oversized")] >= 1
    assert READ not in ctl.log_text() and WRITE not in ctl.log_text()
    status = [*freeway_command(), "status", "--api", api, "--ca-certs", ctx_ca(ctl)]
    ok = subprocess.run([*status, "--token-file", str(ctl.dir / "read")], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and "mode freeway" in ok.stdout, ok.stderr
    no = subprocess.run(status, capture_output=True, text=True, timeout=30)
    assert no.returncode == 2 and "HTTP 401" in no.stderr, no.stderr


@pytest.fixture(scope="module")
def tls_ctl(tmp_path_factory, pki):
    """OpenFlow over TLS with the switches' CA, identity checks on (the default)."""
    d = tmp_path_factory.mktemp("trust-tls")
    F.save(d / "fabric.json")
    port = free_port()
    ctl = ControllerProcess(d / "fabric.json", extra=[
        "--ctl-privkey", pki["controller"]["key"], "--ctl-cert", pki["controller"]["cert"],
        "--ca-certs", pki["ca"], "--api", f"127.0.0.1:{port}"]).start()
    try:
        yield ctl, f"http://127.0.0.1:{port}"
    finally:
        ctl.stop()


def test_a_switch_that_stops_answering_echo_is_closed_and_one_that_answers_is_kept(https_ctl):
    """The echo watch fails open only while a switch's bytes wait unread (``ofchannel``): a programmed
    switch that goes silent (echo unanswered, nothing sent) is still closed after 3 unanswered requests
    at 2 s, logged with the count; its neighbour, answering, stays."""
    ctl, api, ctx = https_ctl
    assert _wait(lambda: {_state(api, "e0_0", ctx), _state(api, "e0_1", ctx)} <= {"disconnected", "never"})
    hung = FakeSwitch(ctl.address, E00).start()
    alive = FakeSwitch(ctl.address, E01).start()
    assert hung.wait_for(FLOW_MOD) and alive.wait_for(FLOW_MOD)
    hung.mute = True
    t = time.monotonic()
    assert hung.closed.wait(20), "a switch that answers no echo was never closed"
    assert 4 <= time.monotonic() - t <= 14, time.monotonic() - t
    assert "echo requests unanswered" in ctl.log_text()
    assert not alive.closed.is_set()
    alive.close()
    assert _wait(lambda: _state(api, "e0_0", ctx) == "disconnected" and _state(api, "e0_1", ctx) == "disconnected")


def test_over_tls_only_a_certificate_naming_the_datapath_gets_its_program(tls_ctl, pki):
    ctl, api = tls_ctl
    assert _wait(lambda: _try(lambda: _fabric(api)) is not None, 20)
    before = _refusals(api)
    plain = FakeSwitch(ctl.address, E00).start()  # no TLS at all
    assert plain.closed.wait(15)
    assert plain.got == [], plain.got  # not a byte of OpenFlow
    foreign = FakeSwitch(ctl.address, E00, _client_ctx(pki, pki["foreign"].cert, pki["foreign"].key)).start()
    assert foreign.closed.wait(15)
    assert foreign.got == [], foreign.got
    sw = pki["switches"]
    liar = FakeSwitch(ctl.address, E01, _client_ctx(pki, sw["e0_0"]["cert"], sw["e0_0"]["key"])).start()
    assert liar.closed.wait(15), "a switch claiming another's datapath was not closed"
    assert liar.program() == [] and set(liar.got) <= HANDSHAKE, liar.got
    honest = FakeSwitch(ctl.address, E00, _client_ctx(pki, sw["e0_0"]["cert"], sw["e0_0"]["key"])).start()
    assert honest.wait_for(FLOW_MOD), f"the honest switch got no program: {honest.got} {honest.error}"
    half = socket.create_connection(ctl.address, timeout=5)  # a TLS handshake left half way
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40)
    half.close()

    def grew():
        after = _refusals(api)
        return {k: after.get(k, 0) - before.get(k, 0) for k in after}

    assert _wait(lambda: grew().get(("openflow", "tls-failed"), 0) >= 3), grew()
    assert grew().get(("openflow", "identity"), 0) == 1, grew()
    assert not honest.closed.is_set() and _state(api, "e0_0") == "connected"
    log = ctl.log_text()
    assert "refused (identity)" in log and "TLS handshake from" in log
    honest.close()


@pytest.mark.parametrize("users", [False, True], ids=["certificates", "certificates+users"])
def test_on_an_etcd_cluster_that_wants_client_certificates_members_elect_and_fail_over(tmp_path, users):
    """A real three-member etcd with ``--client-cert-auth`` (and, the second time, its user authentication
    on): two controllers with certificates from its CA (and the user's password) elect one leader and the
    other takes over when it is killed; a controller without a certificate (or with a wrong password)
    reaches no member and never leads."""
    from experiments.harness.etcd import EtcdCluster

    pki = Pki.create(tmp_path / "pki")
    server = pki.issue("etcd", hosts=("127.0.0.1", "localhost"))
    certs = {n: pki.issue(f"member-{n}", common_name=not users) for n in "ABC"}
    (tmp_path / "etcd").mkdir()
    etcd = EtcdCluster(tmp_path / "etcd", 3, tls={"ca": str(pki.ca), "cert": str(server.cert),
                                                  "key": str(server.key),
                                                  "client": {"cert": str(certs["C"].cert), "key": str(certs["C"].key)}})
    F.save(tmp_path / "fabric.json")
    ctls, apis = {}, {}
    try:
        etcd.start()
        if users:  # etcd's own users: root, and the controllers' user with the root role
            for cmd in (["user", "add", "root:root-pass-0"], ["user", "grant-role", "root", "root"],
                        ["user", "add", "freeway:freeway-pass-0"], ["user", "grant-role", "freeway", "root"],
                        ["auth", "enable"]):
                etcd._ctl(*cmd)
            (tmp_path / "pass").write_text("freeway-pass-0\n")
            (tmp_path / "wrong").write_text("freeway-pass-1\n")
        for node in "ABN":
            apis[node] = port = free_port()
            tls = ["--cluster-ca", str(pki.ca)]
            if node != "N" or users:  # N: no client certificate; with users, a certificate and a wrong password
                tls += ["--cluster-cert", str(certs[node if node != "N" else "C"].cert),
                        "--cluster-key", str(certs[node if node != "N" else "C"].key)]
            if users:
                tls += ["--cluster-user", "freeway", "--cluster-password-file",
                        str(tmp_path / ("wrong" if node == "N" else "pass"))]
            ctls[node] = ControllerProcess(tmp_path / "fabric.json", log_file=tmp_path / f"{node}.log", extra=[
                "--cluster", etcd.url, "--cluster-name", "tls", "--cluster-ttl", "2", "--node-id", node,
                "--api", f"127.0.0.1:{port}", *tls]).start()

        def cluster(node):
            req = urllib.request.urlopen(f"http://127.0.0.1:{apis[node]}/api/v1/status", timeout=5)
            return json.loads(req.read())["cluster"]

        assert _wait(lambda: {cluster("A")["role"], cluster("B")["role"]} == {"leader", "follower"}, 20), \
            (cluster("A"), cluster("B"))
        leader = "A" if cluster("A")["role"] == "leader" else "B"
        other = "B" if leader == "A" else "A"
        assert _wait(lambda: cluster("N")["store_error"] is not None, 10), cluster("N")  # reaches no member
        assert cluster("N")["role"] != "leader"
        ctls.pop(leader).kill()
        assert _wait(lambda: cluster(other)["role"] == "leader", 10), cluster(other)
        time.sleep(2)
        assert cluster("N")["role"] != "leader" and cluster(other)["leader"] == other
    finally:
        for c in ctls.values():
            c.stop()
        etcd.stop()


def test_schemathesis_finds_nothing_wrong_over_https_with_the_tokens(https_ctl, tmp_path):
    """Every operation of /openapi.json, positive and negative data, every check, over HTTPS with the write
    token (it reads too), the server's certificate checked against the CA."""
    import sys
    from pathlib import Path

    ctl, api, ctx = https_ctl
    exe = Path(sys.executable).with_name("schemathesis")
    r = subprocess.run([str(exe), "run", api + "/openapi.json", "--checks", "all", "-H",
                        f"Authorization: Bearer {WRITE}", "--tls-verify", ctl.ca, "--max-examples", "25", "-w", "1",
                        "--no-color", "--generation-database", "none", "--request-timeout", "10", "--seed", "14"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-6000:]
    assert re.search(r"(\d+) generated, \1 passed", r.stdout), r.stdout[-2000:]
    assert "Traceback" not in ctl.log_text()
