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
  traceback in the log;
- reads flow-stats replies' entries with ``ofmsg.FlowStatsOnce`` (each distinct match parsed once).

``GUARD`` is the process's guard (its counts are the metric ``freeway_channel_refusals_total``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import ssl
import time
from collections import Counter, deque

from ryu_apps.control.channels import ChannelGuard
from ryu_apps.openflow import ofmsg

LOG = logging.getLogger("freeway.channel")
HANDSHAKE_S = 10.0  # a TLS handshake not done by then is dropped
ADMIT_S = 15.0  # a connection not admitted (HELLO, FEATURES_REPLY, the guard) by then is closed
HELD_MAX = 16  # message events a connection may send before it is admitted (the handshake needs two or three)
# connections not admitted yet (TLS or OpenFlow handshake under way): at most this many in all (a k=48 fabric's
# 2,880 switches connect at once after a restart), and this many from one address other than loopback (a real
# switch has an address of its own; a fabric emulated here connects every switch from 127.0.0.1)
UNADMITTED_MAX = 4096
UNADMITTED_PER_SOURCE = 32
BACKLOG_TOTAL_MAX_BYTES = 1 << 30  # what every connection's backlog may hold together; past it the one adding goes
ECHO_BEFORE_ADMISSION_BYTES = 64  # an echo reply before admission carries at most this (the request's data)
UNADMITTED: Counter = Counter()  # source address -> connections not admitted yet
BACKLOG = [0]  # bytes in every connection's backlog
# a switch that does not read what it is sent: its bytes wait in a backlog of the connection's own (the
# sender goes on); past either bound the switch is taken for stuck and closed (it reconnects and is read back)
BACKLOG_MAX_BYTES = 64 << 20
BACKLOG_STALL_S = 120.0
CLOSE_GRACE_S = 5.0  # a closed connection's peer has this long to hang up before its reading side is shut
GUARD = ChannelGuard()
STATS: Counter = Counter()  # what the channels saw that is no refusal (``echo-late``), with the controller's counters
TLS: dict = {}  # key, cert, ca when OpenFlow runs over TLS


def tls_context(key: str, cert: str, ca: str, crl: str = "") -> ssl.SSLContext:
    """The server's TLS context: TLS 1.2 or later, a client certificate from ``ca`` required, and not on
    ``crl`` when one is given (eventlet's green context, so that a slow handshake waits in its own green
    thread, never the event loop)."""
    from eventlet.green import ssl as green_ssl

    ctx = green_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(ca)
    if crl:
        ctx.load_verify_locations(crl)
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def install(guard: ChannelGuard, key: str = "", cert: str = "", ca: str = "", crl: str = "") -> None:
    """Serve OpenFlow through the gate (and over TLS when key, cert and ca are given; certificates on
    ``crl`` refused)."""
    from os_ken.controller import controller

    global GUARD
    GUARD = guard
    TLS.clear()
    if key:
        TLS.update(key=key, cert=cert, ca=ca, ctx=tls_context(key, cert, ca, crl))
    controller.OpenFlowController.server_loop = _server_loop
    ofmsg.read_flow_stats_once()  # a restart's read-back: each distinct match parsed once, not per entry
    parser_log = logging.getLogger("os_ken.ofproto.ofproto_parser")
    if not any(isinstance(f, _ParseErrors) for f in parser_log.filters):
        parser_log.addFilter(_ParseErrors())


class _ParseErrors(logging.Filter):
    """os-ken logs a message it cannot parse (a known version, a broken body) with a traceback and the whole
    buffer, and drops it: count it as ``malformed`` and say so in one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Encountered an error while parsing"):
            return True
        GUARD.count("openflow", "malformed")
        LOG.warning("dropped an OpenFlow message that does not parse (%s)",
                    record.exc_info[1].__class__.__name__ if record.exc_info else "unknown error")
        return False


@functools.cache
def _gated_class():
    from os_ken.controller import controller
    from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER
    from os_ken.lib import hub
    from os_ken.ofproto import ofproto_v1_3 as of

    before = {of.OFPT_HELLO, of.OFPT_FEATURES_REQUEST, of.OFPT_ECHO_REQUEST, of.OFPT_ECHO_REPLY, of.OFPT_ERROR}

    class GatedDatapath(controller.Datapath):
        """A switch's connection that is sent its program only once the guard admitted it, and only for
        the datapath id it was admitted as."""

        def __init__(self, sock, address, tls: bool, cert: dict | None):
            self.fw_admitted: bool | None = None
            self.fw_dpid: int | None = None  # the datapath id it was admitted as
            self._id = None
            self._backlog: deque = deque()  # (bytes, close) that found the send queue full, in order
            self._backlog_bytes, self._backlog_moved = 0, 0.0
            super().__init__(sock, address)
            # os-ken reads with the socket's timeout (5 s), only to look at its state again when nothing
            # came. Each read then leaves a timer in the hub's heap for the timeout's length, even when its
            # bytes came first: with its closure and its exception, some 170,000 objects at k=48 (two reads
            # a message), walked by every collection (the handshakes' slowest answers). Reads here wait
            # without one: a closed connection's reader is woken by ``close`` (its reading side shut after
            # a grace), a switch gone silent by the echo watch, and one that stopped reading by the backlog.
            self.socket.settimeout(None)
            self._shut_later = None
            self.fw_closed = False  # closed by the controller (or the guard), not by the switch
            self.fw_tls, self.fw_cert = tls, cert
            self._deadline = hub.spawn_after(ADMIT_S, self._not_admitted)
            self._held: list = []  # message events that came before admission: the apps get them only after
            self.fw_release = lambda: None  # what frees its place among the unadmitted (``_handle`` sets it)
            if self.ofp_brick is not None:
                self.ofp_brick = _GatedBrick(self.ofp_brick, self)

        # os-ken sets ``id`` from every FEATURES_REPLY: a second one naming another datapath, after the
        # first was admitted, must not carry the connection over to that datapath
        @property
        def id(self):
            return self._id

        @id.setter
        def id(self, value):
            if self.fw_admitted and value != self.fw_dpid:
                self._refuse("identity", f"it was admitted as datapath {self.fw_dpid:016x} and then claimed "
                                         f"{value:016x}" if value is not None else "it dropped its datapath id")
                return
            self._id = value

        def _not_admitted(self, again: bool = False) -> None:
            if self.fw_admitted is None and self.is_active:
                if not again and (self._id is not None or unread(self.socket)):
                    # the switch did speak, and the controller's loop has not got to it (held by other work:
                    # 2,880 switches connecting at once at k=48 met a 12 s period and 198 were refused, to
                    # connect and be programmed again): once more, and no more
                    self._deadline = hub.spawn_after(ADMIT_S, self._not_admitted, True)
                    return
                self._refuse("handshake-timeout", f"no datapath id admitted within {ADMIT_S:.0f} s of connecting")

        def _refuse(self, counter: str, reason: str, counted: bool = False) -> None:
            if not counted:
                GUARD.count("openflow", counter)
            self.fw_admitted = False
            self._held.clear()  # what a refused connection sent reaches no app
            LOG.warning("switch connection from %s refused (%s): %s", _addr(self.address), counter, reason)
            self.close()

        def send_msg(self, msg, close_socket=False):
            if self.fw_admitted is None and getattr(msg, "cls_msg_type", None) not in before:
                if self.id is None:
                    return False  # nothing but the handshake before the switch says which it is
                verdict = GUARD.admit(self, self.id, self.fw_tls, self.fw_cert,
                                      alive=lambda d: d.state != DEAD_DISPATCHER and d.is_active)
                if not verdict.ok:
                    self._refuse(verdict.counter, verdict.reason, counted=True)
                    return False
                self.fw_admitted, self.fw_dpid = True, self.id
                self._deadline.cancel()
                self.fw_release()
                held, self._held = self._held, []
                for ev, state in held:  # (os-ken's own handshake handlers saw them as they came)
                    self.ofp_brick.deliver(ev, state)
            if self.fw_admitted is False:
                return False
            return super().send_msg(msg, close_socket)

        def send(self, buf, close_socket=False):
            """Every byte leaves through here: before admission, only the handshake's message types. It
            never waits: os-ken's send blocks the caller while the switch's send queue is full, and one
            switch that stopped reading then held the whole controller (every app's event loop, the
            period, the echo watch that would have closed it; seen at k=32). What finds the queue full
            goes to a backlog that a thread of this connection feeds in, in order."""
            if self.fw_admitted is not True and (len(buf) < 2 or buf[1] not in before or (
                    buf[1] == of.OFPT_ECHO_REPLY and len(buf) > 8 + ECHO_BEFORE_ADMISSION_BYTES)):
                return False  # (a peer's 64 KB echo requests, answered and never read, grew a backlog each)
            if self.state == DEAD_DISPATCHER:
                return False
            if not self._backlog and self._send_q_sem.acquire(blocking=False):
                self._send_q_sem.release()  # (room now: os-ken's send takes it again, without waiting)
                return self._write_now(buf, close_socket) or super().send(buf, close_socket)
            if not self.send_q:
                return False
            if not self._backlog:
                self._backlog_moved = time.monotonic()
                hub.spawn(self._drain)
            self._backlog.append((buf, close_socket))
            self._backlog_bytes += len(buf)
            BACKLOG[0] += len(buf)
            STATS["send-backlogged"] += 1
            if self._backlog_stuck() or BACKLOG[0] > BACKLOG_TOTAL_MAX_BYTES:
                self._stuck()
            return True

        def _write_now(self, buf, close_socket) -> bool:
            """Written to the socket at once when nothing of this connection waits to go and its send loop
            is idle (waiting on its empty queue): the queue would only have handed it to that loop at the
            event loop's next turn. A handshake's answer is sent twice (its flow mods and barrier, then the
            ACK), and at k=48 a turn of the loop took up to 70-100 ms at p99 (2026-12-04). Plain TCP only:
            TLS writes through its send loop. What the socket does not take at once goes to the queue
            after what it took, in order (True even if that fails: the bytes it took must not go again).
            A message the socket refuses is queued (False), and the send loop meets the error, if any."""
            q, raw = self.send_q, getattr(self.socket, "fd", None)
            if close_socket or self.fw_tls or raw is None or q is None or q.qsize() or not q.getting():
                return False
            try:
                n = raw.send(buf)
            except (OSError, ValueError):  # (BlockingIOError: its buffer is full; others: the send loop's to meet)
                return False
            STATS["send-direct"] += 1
            if n < len(buf):
                super().send(buf[n:], close_socket)
            return True

        def _backlog_stuck(self) -> bool:
            return bool(self._backlog) and (self._backlog_bytes > BACKLOG_MAX_BYTES
                                            or time.monotonic() - self._backlog_moved > BACKLOG_STALL_S)

        def _drain(self) -> None:
            """The backlog, in order, through os-ken's (waiting) send."""
            while self._backlog and self.send_q:
                buf, close_socket = self._backlog[0]
                if not super().send(buf, close_socket) or not self._backlog:
                    break  # (closed, or found stuck and its backlog forgotten while this send waited)
                self._backlog.popleft()
                self._backlog_bytes -= len(buf)
                BACKLOG[0] -= len(buf)
                self._backlog_moved = time.monotonic()
            self._forget_backlog()

        def _forget_backlog(self) -> None:
            BACKLOG[0] -= self._backlog_bytes
            self._backlog.clear()
            self._backlog_bytes = 0

        def _stuck(self) -> None:
            STATS["send-stuck"] += 1
            LOG.warning("switch %s (%s) closed: it has not read what it was sent (%d bytes waiting, nothing taken "
                        "for %.0f s)", _addr(self.address), "unknown" if self.id is None else f"{self.id:016x}",
                        self._backlog_bytes, time.monotonic() - self._backlog_moved)
            self._forget_backlog()
            self.close()

        def set_state(self, state):
            if state == MAIN_DISPATCHER and not (self.fw_admitted and self.id == self.fw_dpid):
                if self.fw_admitted is not False:
                    self._refuse("identity", "it reached the main state without being admitted")
                return
            super().set_state(state)

        def close(self):
            """os-ken's close shuts the sending side and waits for the switch to hang up. Its reader
            waits without a timeout here, so a peer that never hangs up has its reading side shut after
            ``CLOSE_GRACE_S``: the read ends and the connection goes."""
            self._deadline.cancel()
            GUARD.gone(self, self.fw_dpid)
            self.fw_closed = True
            super().close()
            if self._shut_later is None:
                self._shut_later = hub.spawn_after(CLOSE_GRACE_S, self._shut_reading)

        def _shut_reading(self) -> None:
            import socket

            with contextlib.suppress(OSError, AttributeError):
                self.socket.shutdown(socket.SHUT_RD)

        def _echo_request_loop(self):
            """os-ken's echo watch, failing open as the LLDP check does: a switch that left
            ``maximum_unreplied_echo_requests`` unanswered is closed only if nothing it sent waits unread
            on its socket. When the controller is behind (its apps' queues full, every connection's
            reader waits to hand them a message), the replies are among those unread bytes: the switch
            is alive and closing it would only add a reconnect to the backlog (at k=32 this closed most
            of the fabric during start-up)."""
            if not self.max_unreplied_echo_requests:
                return
            interval = max(self.echo_request_interval, 0.01)
            due = time.monotonic() + echo_phase(interval)  # (spread: switches that connected together)
            while True:
                hub.sleep(max(0.0, due - time.monotonic()))
                due = next_due(due, interval, time.monotonic())
                if not self.send_q:
                    break
                if self._backlog:  # our own bytes wait to go: an echo would only queue behind them (and
                    if self._backlog_stuck():  # go unanswered); the backlog's own bounds judge
                        self._stuck()
                        break
                    continue
                if len(self.unreplied_echo_requests) > self.max_unreplied_echo_requests:
                    if not unread(self.socket):
                        break
                    STATS["echo-late"] += 1
                    self.unreplied_echo_requests.clear()
                req = self.ofproto_parser.OFPEchoRequest(self)
                self.unreplied_echo_requests.append(self.set_xid(req))
                self.send_msg(req)
            if self.send_q and self.state != DEAD_DISPATCHER:
                LOG.warning("switch %s (%s) closed: %d echo requests unanswered", _addr(self.address),
                            "unknown" if self.id is None else f"{self.id:016x}", len(self.unreplied_echo_requests))
            self.close()

    return GatedDatapath


class _GatedBrick:
    """os-ken's OpenFlow event source as a connection sees it: a message's event goes to the apps only
    once the connection is admitted (issue 60: an unadmitted connection's ERROR, queued in CONFIG
    state, was handled under the datapath id it then claimed). Before that, events wait (at most
    ``HELD_MAX``, then the connection is refused); a refused connection's never go. os-ken's own
    handshake handlers (HELLO, FEATURES_REPLY, echo) are called directly, not through here."""

    def __init__(self, brick, dp):
        self._brick, self._dp = brick, dp

    def send_event_to_observers(self, ev, state=None):
        from os_ken.controller import ofp_event

        dp = self._dp
        if isinstance(ev, ofp_event.EventOFPMsgBase) and dp.fw_admitted is not True:
            if dp.fw_admitted is False:
                return
            if len(dp._held) >= HELD_MAX:
                dp._refuse("pre-admission-flood", f"more than {HELD_MAX} messages before it was admitted")
                return
            dp._held.append((ev, state))
            return
        self._brick.send_event_to_observers(ev, state)

    def deliver(self, ev, state) -> None:
        self._brick.send_event_to_observers(ev, state)

    def __getattr__(self, name):
        return getattr(self._brick, name)


def echo_phase(interval: float, rng: random.Random = random.Random()) -> float:
    """How long a new connection waits before its first echo request: a random part of the interval. The
    switches of a fabric connect within a fraction of a second, and with their echo loops in step every
    interval brought a request to each and a reply from each at once (at k=48, 2,880 of both every 2 s:
    a burst that held the event loop 50-90 ms, the tail of the handshakes' answers). Each keeps its
    phase, so they stay spread."""
    return rng.uniform(0.0, interval)


def next_due(due: float, interval: float, now: float) -> float:
    """When a connection's next echo request is due: its schedule's next slot after ``now``. A loop that
    slept ``interval`` after each request lost its phase whenever the event loop was held: every loop due
    during the hold woke at its end together and stayed in step from then on. Over a start-up's holds the
    2,880 loops of k=48 gathered into bursts of hundreds of requests within 10 ms every interval, whose
    replies held the loop in turn (the handshakes' slowest answers came with them). A slot missed is
    skipped, not made up (a request sent late may then leave less than an interval before the next: the
    watch's allowance of unanswered requests covers it)."""
    if now < due:
        return due + interval
    return due + interval * (1 + int((now - due) // interval))


def unread(sock) -> int:
    """Bytes a peer sent that wait on ``sock`` unread (0 if it cannot say)."""
    import array
    import fcntl
    import termios

    try:
        n = array.array("i", [0])
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, n)
        return n[0] + (sock.pending() if hasattr(sock, "pending") else 0)
    except (OSError, ValueError, AttributeError):
        return 0


def _addr(address) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else str(address)


def _admissible(address) -> str | None:
    """Why a new connection from ``address`` is refused at once (too many not admitted yet), or None."""
    import ipaddress

    host = address[0] if isinstance(address, tuple) else str(address)
    if sum(UNADMITTED.values()) >= UNADMITTED_MAX:
        return "unadmitted-cap"
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and UNADMITTED[host] >= UNADMITTED_PER_SOURCE:
        return "unadmitted-source-cap"
    return None


def _handle(sock, address) -> None:
    """One connection: the TLS handshake (when on), then OpenFlow through the gate; counted among the
    unadmitted until the guard admits it or it closes."""
    host = address[0] if isinstance(address, tuple) else str(address)
    why = _admissible(address)
    if why is not None:
        GUARD.count("openflow", why)
        with contextlib.suppress(OSError):
            sock.close()
        return
    UNADMITTED[host] += 1
    held = [True]

    def release() -> None:
        if held[0]:
            held[0] = False
            UNADMITTED[host] -= 1
            if UNADMITTED[host] <= 0:
                del UNADMITTED[host]

    try:
        _serve(sock, address, release)
    finally:
        release()


def _serve(sock, address, release) -> None:
    cert, tls = None, bool(TLS)
    if tls:
        import eventlet

        try:
            with eventlet.Timeout(HANDSHAKE_S, TimeoutError(f"no TLS handshake within {HANDSHAKE_S:.0f} s")):
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
    dp.fw_release = release
    with contextlib.closing(dp):
        try:
            dp.serve()
        except Exception as e:  # a peer whose bytes are not OpenFlow: os-ken's parser raised
            if dp.fw_closed:  # closed here: the reader's last read failed on it (over TLS, os-ken's close
                return  # ends the session, and the read after it raises ValueError), not the peer's bytes
            GUARD.count("openflow", "malformed")
            LOG.warning("connection from %s (datapath %s) closed: its bytes are not OpenFlow (%s)", _addr(address),
                        "unknown" if dp.id is None else f"{dp.id:016x}", type(e).__name__)


def _server_loop(self, ofp_tcp_listen_port, ofp_ssl_listen_port) -> None:
    """os-ken's ``OpenFlowController.server_loop``, through ``_handle``, on the one listen port."""
    from os_ken import cfg
    from os_ken.lib import hub

    host = cfg.CONF.ofp_listen_host
    # a whole fabric's switches connect at once after a restart (k=48: 2,880); os-ken's backlog is 50
    server = hub.listen((host, ofp_tcp_listen_port), family=10 if ":" in host else 2, backlog=4096)
    LOG.info("OpenFlow on %s:%d (%s)", host, ofp_tcp_listen_port,
             "TLS, switch certificates from " + TLS["ca"] if TLS else "plain TCP")
    while True:
        try:
            sock, addr = server.accept()
        except OSError as e:  # out of file descriptors, say: the listener goes on once there are some again
            LOG.error("OpenFlow: accept failed: %s", e)
            hub.sleep(0.5)
            continue
        hub.spawn(_handle, sock, addr)
