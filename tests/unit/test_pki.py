"""The PKI ``freeway pki`` makes (issue 60 item 6): keys their owner's only from the moment they exist, in a
directory only its owner lists; no all-datapaths certificate for a real fabric; a switch's certificate
revoked without a new CA, and refused at the TLS handshake by a server given the revocation list."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import threading

import pytest

from topology.fabric import fattree
from topology.pki import Pki, fabric_pki


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki") / "pki"
    return d, fabric_pki(d, fattree(4), emulated=False)


def test_keys_are_private_from_the_start_and_the_directory_is_the_owners(made):
    d, m = made
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for key in [m["controller"]["key"], *(s["key"] for s in m["switches"].values()), str(d / "freeway-ca.key")]:
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600, key
    assert "ovs" not in m  # a real fabric: no certificate that may claim every switch


def _handshake(server_ctx, client_ctx) -> bool:
    a, b = socket.socketpair()
    out = {}

    def serve():
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.recv(1)
            out["ok"] = True
        except (ssl.SSLError, OSError):
            out["ok"] = False

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname="localhost") as c:
            c.send(b"x")
    except (ssl.SSLError, OSError):
        pass
    t.join(10)
    return out.get("ok", False)


def test_a_revoked_switch_is_refused_at_the_handshake_and_the_others_are_not(made):
    from ryu_apps.ofchannel import tls_context

    d, m = made
    pki = Pki(d)
    crl = pki.revoke("switch-e0_0")
    assert crl.exists() and pki.revoke("switch-e0_0") == crl  # twice: the same list
    server = tls_context(m["controller"]["key"], m["controller"]["cert"], m["ca"], str(crl))

    def client(name):
        ctx = ssl.create_default_context(cafile=m["ca"])
        ctx.load_cert_chain(m["switches"][name]["cert"], m["switches"][name]["key"])
        return ctx

    assert _handshake(server, client("e0_1"))
    assert not _handshake(server, client("e0_0"))
    without = tls_context(m["controller"]["key"], m["controller"]["cert"], m["ca"])
    assert _handshake(without, client("e0_0"))  # (the list is what refuses it)
