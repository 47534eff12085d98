"""The OpenFlow channel as os-ken serves it, with Freeway's gate in front (issue 40).

os-ken accepts a connection, says HELLO, asks FEATURES_REQUEST, and on the switch's FEATURES_REPLY asks for
its ports and hands it to the apps. ``install`` replaces its listening loop with one that:

- with TLS (``ctl_privkey``, ``ctl_cert``, ``ca_certs``), does the handshake itself with a deadline,
  requires a client certificate from the switches' CA, and counts a handshake that fails
  (``tls-failed``): such a peer never gets an OpenFlow byte;
- gives every connection a ``GatedDatapath``: until ``control.channels.ChannelGuard`` has admitted it,
  nothing but HELLO, FEATURES_REQUEST and echo leaves for it. The first other message (os-ken's port
  description request, right after FEATURES_REPLY) asks the guard; a refused connection (a certificate
  that does not name the datapath it claims, a datapath that already has a live connection, one the
  description does not have) is closed there, and the refusal logged and counted;
- counts a connection whose bytes do not parse as OpenFlow (``malformed``) and closes it, without a
  traceback in the log.

``GUARD`` is the process's guard (its counts are the metric ``freeway_channel_refusals_total``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl

from ryu_apps.control.channels import ChannelGuard

LOG = logging.getLogger("freeway.channel")
HANDSHAKE_S = 10.0  # a TLS handshake not done by then is dropped
GUARD = ChannelGuard()
TLS: dict = {}  # key, cert, ca when OpenFlow runs over TLS


def tls_context(key: str, cert: str, ca: str) -> ssl.SSLContext:
    """The server's TLS context: TLS 1.2 or later, a client certificate from ``ca`` required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def install(guard: ChannelGuard, key: str = "", cert: str = "", ca: str = "") -> None:
    """Serve OpenFlow through the gate (and over TLS when key, cert and ca are given)."""
    from os_ken.controller import controller

    global GUARD
    GUARD = guard
    TLS.clear()
    if key:
        TLS.update(key=key, cert=cert, ca=ca, ctx=tls_context(key, cert, ca))
    controller.OpenFlowController.server_loop = _server_loop


@functools.cache
def _gated_class():
    from os_ken.controller import controller
    from os_ken.controller.handler import DEAD_DISPATCHER
    from os_ken.ofproto import ofproto_v1_3 as of

    before = {of.OFPT_HELLO, of.OFPT_FEATURES_REQUEST, of.OFPT_ECHO_REQUEST, of.OFPT_ECHO_REPLY, of.OFPT_ERROR}

    class GatedDatapath(controller.Datapath):
        """A switch's connection that is sent its program only once the guard admitted it."""

        def __init__(self, sock, address, tls: bool, cert: dict | None):
            super().__init__(sock, address)
            self.fw_tls, self.fw_cert = tls, cert
            self.fw_admitted: bool | None = None

        def send_msg(self, msg, close_socket=False):
            if self.fw_admitted is None and getattr(msg, "cls_msg_type", None) not in before:
                if self.id is None:
                    return False  # nothing but the handshake before the switch says which it is
                verdict = GUARD.admit(self, self.id, self.fw_tls, self.fw_cert,
                                      alive=lambda d: d.state != DEAD_DISPATCHER and d.is_active)
                self.fw_admitted = verdict.ok
                if not verdict.ok:
                    LOG.warning("switch connection from %s refused (%s): %s", _addr(self.address), verdict.counter,
                                verdict.reason)
                    self.close()
                    return False
            if self.fw_admitted is False:
                return False
            return super().send_msg(msg, close_socket)

        def close(self):
            GUARD.gone(self, self.id)
            super().close()

    return GatedDatapath


def _addr(address) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else str(address)


def _handle(sock, address) -> None:
    """One connection: the TLS handshake (when on), then OpenFlow through the gate."""
    cert, tls = None, bool(TLS)
    if tls:
        try:
            sock.settimeout(HANDSHAKE_S)
            sock = TLS["ctx"].wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            sock.do_handshake()
            cert = sock.getpeercert()
        except (ssl.SSLError, OSError, ValueError) as e:
            GUARD.count("openflow", "tls-failed")
            LOG.warning("TLS handshake from %s failed: %s", _addr(address), str(e).splitlines()[0][:200] if str(e)
                        else type(e).__name__)
            with contextlib.suppress(OSError):
                sock.close()
            return
    dp = _gated_class()(sock, address, tls, cert)
    with contextlib.closing(dp):
        try:
            dp.serve()
        except Exception as e:  # a peer whose bytes are not OpenFlow: os-ken's parser raised
            GUARD.count("openflow", "malformed")
            LOG.warning("connection from %s (datapath %s) closed: its bytes are not OpenFlow (%s)", _addr(address),
                        "unknown" if dp.id is None else f"{dp.id:016x}", type(e).__name__)


def _server_loop(self, ofp_tcp_listen_port, ofp_ssl_listen_port) -> None:
    """os-ken's ``OpenFlowController.server_loop``, through ``_handle``, on the one listen port."""
    from os_ken import cfg
    from os_ken.lib import hub

    host = cfg.CONF.ofp_listen_host
    server = hub.listen((host, ofp_tcp_listen_port), family=10 if ":" in host else 2)
    LOG.info("OpenFlow on %s:%d (%s)", host, ofp_tcp_listen_port,
             "TLS, switch certificates from " + TLS["ca"] if TLS else "plain TCP")
    while True:
        sock, addr = server.accept()
        hub.spawn(_handle, sock, addr)
