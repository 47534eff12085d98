"""The operator API: a WSGI application served by eventlet inside the controller's own event loop.

Reads come from the same state the metrics and the events file use
(``opstate``, ``decisions``); writes (announce an elephant on behalf of a
host, withdraw one) go through the policy exactly as a host's handshake does,
and need the token given with ``--api-token-file``. Reads need the read token
(``--api-read-token-file``; the write token reads too) unless they are open
(a loopback address, or ``--api-open-reads``); the page and its script are
served to anyone (they hold no data: the view sends the token given as
``#token=`` in its address). Served over HTTPS with ``--api-cert`` and
``--api-key``. Refusals are counted by reason (``refused``). The handlers only parse,
check and call ``source`` (the app): every decision stays in the policy.
``/openapi.json`` describes exactly what is served (``openapi.document``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import re
import time
from importlib import resources

import orjson
from webob import Request, Response

from ryu_apps.host import handshake as hs
from ryu_apps.operators import openapi
from ryu_apps.operators.metrics import CONTENT_TYPE

LOG = logging.getLogger("freeway.api")
PREFIX = "/api/v1"
STATIC = ("index.html", "view.js", "view.css")
STATIC_TYPES = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
MAX_BODY = 16384


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None, **extra):
        super().__init__(message)
        self.status, self.message, self.extra, self.headers = status, message, extra, headers or {}


_ORJSON = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | \
    orjson.OPT_APPEND_NEWLINE


def encode_json(body) -> bytes:
    """An answer's JSON, with a newline. orjson: the whole fabric at k=48 (38 MB) takes a tenth of the
    standard library's time; anything that is not JSON's own (a dataclass, a set, a time) is written as
    ``str`` gives it, as before. What orjson refuses (an integer beyond 64 bits) goes through the standard
    library."""
    try:
        return orjson.dumps(body, default=str, option=_ORJSON)
    except TypeError:
        return (json.dumps(body, default=str) + "\n").encode()


def _json(status: int, body) -> Response:
    return Response(status=status, body=encode_json(body), content_type="application/json", charset=None)


def _int_param(req: Request, name: str, default: int, low: int, high: int) -> int:
    raw = req.GET.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"-?[0-9]{1,19}", raw):
        raise ApiError(400, f"{name}: expected a whole number, got {raw!r}")
    value = int(raw)
    if not low <= value <= high:
        raise ApiError(400, f"{name}: must be between {low} and {high}, got {value}")
    return value


PROTOS = {"tcp": 6, "udp": 17, 6: 6, 17: 17}


def parse_announce(body: bytes) -> tuple[list[hs.Subflow], int, int]:
    """An announce request's flows, rate (kbit/s, 0 = as fast as the path allows) and size, or a 400 that
    names the field and the problem."""
    try:
        doc = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "body: not JSON") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "body: expected an object with flows, size_bytes and optionally rate_bps")
    unknown = sorted(set(doc) - {"flows", "size_bytes", "rate_bps"})
    if unknown:
        raise ApiError(400, f"{unknown[0]}: unknown field (known: flows, rate_bps, size_bytes)")
    flows = doc.get("flows")
    if not isinstance(flows, list) or not 1 <= len(flows) <= hs.MAX_SUBFLOWS:
        raise ApiError(400, f"flows: expected a list of 1 to {hs.MAX_SUBFLOWS} flows")
    subs = []
    for i, f in enumerate(flows):
        where = f"flows[{i}]"
        if not isinstance(f, dict):
            raise ApiError(400, f"{where}: expected an object with src, dst, proto, sport, dport")
        extra = sorted(set(f) - {"src", "dst", "proto", "sport", "dport"})
        if extra:
            raise ApiError(400, f"{where}.{extra[0]}: unknown field")
        for key in ("src", "dst"):
            v = f.get(key)
            try:
                if not isinstance(v, str):
                    raise ValueError
                ipaddress.IPv4Address(v)
            except ValueError:
                raise ApiError(400, f"{where}.{key}: expected an IPv4 address, got {v!r}") from None
        proto = f.get("proto", "tcp")
        if isinstance(proto, float) and proto.is_integer():
            proto = int(proto)  # JSON does not tell 6 from 6.0
        if isinstance(proto, bool) or not isinstance(proto, (str, int)) or proto not in PROTOS:
            raise ApiError(400, f"{where}.proto: expected tcp or udp (or 6 or 17), got {proto!r}")
        ports = []
        for key in ("sport", "dport"):
            v = f.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
                raise ApiError(400, f"{where}.{key}: expected a port number 1..65535, got {v!r}")
            ports.append(v)
        subs.append(hs.Subflow(f["src"], f["dst"], PROTOS[proto], *ports))
    size = doc.get("size_bytes")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= hs.MAX_SIZE:
        raise ApiError(400, f"size_bytes: expected a whole number of bytes 1..{hs.MAX_SIZE}, got {size!r}")
    rate = doc.get("rate_bps", 0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 4_294_967_295_000:
        raise ApiError(400, f"rate_bps: expected a rate in bit/s (0: as fast as the path allows), got {rate!r}")
    if 0 < rate < 500:
        raise ApiError(400, f"rate_bps: at least 500 bit/s (announces are in kbit/s), got {rate!r}")
    kbps = min(4_294_967_295, math.ceil(rate / 1000))
    return subs, kbps, size


def _route(path: str) -> str:
    """The route a request path belongs to, for the metric's label (never the raw path: bounded labels)."""
    path = path.rstrip("/") or "/"
    if path.startswith(f"{PREFIX}/elephants/"):
        return f"{PREFIX}/elephants/{{id}}"
    known = (f"{PREFIX}/status", f"{PREFIX}/fabric", f"{PREFIX}/elephants", f"{PREFIX}/partition",
             f"{PREFIX}/decisions", f"{PREFIX}/counters", f"{PREFIX}/config", "/openapi.json", "/metrics")
    if path in known:
        return path
    return "static" if path == "/" or path.lstrip("/") in STATIC else "other"


class Api:
    """The WSGI application. ``source`` is the controller app's operator surface (``surface.Surface``); ``token`` None makes the
    write calls refuse with 403; ``read_token`` None with ``open_reads`` serves reads to anyone."""

    def __init__(self, source, token: str | None, read_token: str | None = None, open_reads: bool = True):
        self.source = source
        self.token = token
        self.read_token = read_token
        self.open_reads = open_reads and read_token is None
        self.refused: dict[str, int] = {}
        self.conns: dict[str, int] = {}  # open connections by source address (``_Listener``)
        self.doc = openapi.document()
        self.requests = 0
        self._cache: dict[str, tuple[object, bytes]] = {}  # path -> (epoch, encoded answer)
        self._static = {name: resources.files("ryu_apps.operators.web").joinpath(name).read_bytes() for name in STATIC}
        self._get = {
            f"{PREFIX}/status": lambda req: source.api_status(),
            f"{PREFIX}/fabric": self._fabric,
            f"{PREFIX}/partition": lambda req: source.api_partition(),
            f"{PREFIX}/decisions": self._decisions,
            f"{PREFIX}/counters": lambda req: source.api_counters(),
            f"{PREFIX}/config": lambda req: source.api_config(),
            "/openapi.json": lambda req: self.doc,
        }

    def __call__(self, environ, start_response):
        req = Request(environ)
        self.requests += 1
        t0 = time.perf_counter()
        try:
            resp = self.dispatch(req)
        except ApiError as e:
            reason = {401: "unauthorized", 403: "forbidden", 413: "oversized"}.get(e.status)
            if reason:
                self.refused[reason] = self.refused.get(reason, 0) + 1
            resp = _json(e.status, {"error": e.message, **e.extra})
            resp.headers.update(e.headers)
            if e.status == 401:
                resp.headers["WWW-Authenticate"] = 'Bearer realm="freeway"'
        except Exception:  # a bug here answers 500 and is logged; the controller goes on
            LOG.exception("API request %s %s failed", req.method, req.path)
            resp = _json(500, {"error": "internal error (logged by the controller)"})
        metrics = getattr(self.source, "metrics", None)
        if metrics is not None:
            metrics.api_request.labels(_route(req.path_info)).observe(time.perf_counter() - t0)
        return resp(environ, start_response)

    def dispatch(self, req: Request) -> Response:
        path = req.path_info.rstrip("/") or "/"
        if req.content_length is not None and req.content_length > MAX_BODY:
            raise ApiError(413, f"body: larger than {MAX_BODY} bytes")
        if path == "/metrics":
            self._method(req, ("GET",))
            self._authorise_read(req)
            body = self.source.metrics_exposition()  # caches its per-link part itself
            return Response(body=body, headerlist=[("Content-Type", CONTENT_TYPE)])
        if path == "/" or path.lstrip("/") in STATIC:
            self._method(req, ("GET",))
            name = "index.html" if path == "/" else path.lstrip("/")
            ctype = STATIC_TYPES[name.rpartition(".")[2]]
            return Response(body=self._static[name], content_type=ctype, charset="utf-8",
                            cache_control="no-cache")
        if path == f"{PREFIX}/elephants":
            self._method(req, ("GET", "POST"))
            if req.method == "POST":
                return self._announce(req)
            self._authorise_read(req)
            return self._cached_json(path, lambda: {"elephants": self.source.api_elephants()})
        if path in self._get:
            self._method(req, ("GET",))
            if path != "/openapi.json":
                self._authorise_read(req)
            if path == f"{PREFIX}/decisions":
                return _json(200, self._decisions(req))
            if path == f"{PREFIX}/fabric":  # checked first, then cached by what it asks (repeated or reordered
                level, group = self._fabric_query(req)  # parameters must not grow the cache)
                return self._cached_json(f"{path}?{level}&{group}", lambda: self.source.api_fabric(level, group))
            return self._cached_json(path, lambda: self._get[path](req))
        if path.startswith(f"{PREFIX}/elephants/"):
            self._method(req, ("DELETE",))
            return self._withdraw(req, path[len(f"{PREFIX}/elephants/"):])
        raise ApiError(404, f"no such resource: {path} (see /openapi.json)")

    def _cached(self, key: str, make, epoch=None) -> bytes:
        """The answer for ``key``, computed once per epoch of the controller's state (a period, a decision,
        a link or switch change: ``source.epoch()``), so that clients polling often cost the event loop
        nothing between changes."""
        epoch = self.source.epoch() if epoch is None else epoch
        hit = self._cache.get(key)
        if hit is not None and hit[0] == epoch:
            return hit[1]
        body = make()
        self._cache[key] = (epoch, body)
        return body

    def _cached_json(self, key: str, make) -> Response:
        epoch = self.source.fabric_epoch() if key.startswith(f"{PREFIX}/fabric") else None  # decisions do not change it
        body = self._cached(key, lambda: encode_json(make()), epoch)
        return Response(status=200, body=body, content_type="application/json", charset=None)

    @staticmethod
    def _method(req: Request, allowed: tuple[str, ...]) -> None:
        if req.method not in allowed:
            raise ApiError(405, f"{req.method} is not allowed here (allowed: {', '.join(allowed)})",
                           {"Allow": ", ".join(allowed)})

    @staticmethod
    def _bearer(req: Request) -> bytes | None:
        scheme, _, given = (req.headers.get("Authorization") or "").partition(" ")
        return given.strip().encode() if scheme.lower() == "bearer" else None

    @staticmethod
    def _is(given: bytes | None, token: str | None) -> bool:
        """Constant-time: how much of a token was right does not show in the time taken."""
        return given is not None and token is not None and hmac.compare_digest(given, token.encode())

    def _authorise(self, req: Request) -> None:
        if self.token is None:
            raise ApiError(403, "the API is read-only: start the controller with --api-token-file to allow writes")
        given = self._bearer(req)
        if self._is(given, self.token):
            return
        if self._is(given, self.read_token):
            raise ApiError(403, "the read token cannot write: a write call needs the write token")
        raise ApiError(401, "a write call needs 'Authorization: Bearer TOKEN' with the controller's token")

    def _authorise_read(self, req: Request) -> None:
        if self.open_reads:
            return
        given = self._bearer(req)
        if not (self._is(given, self.read_token) or self._is(given, self.token)):
            raise ApiError(401, "reads need 'Authorization: Bearer TOKEN' with the read token (or the write token)")

    def _fabric(self, req: Request) -> dict:
        return self.source.api_fabric(*self._fabric_query(req))

    def _fabric_query(self, req: Request) -> tuple[str, str | None]:
        """(level, group) of a /fabric request, or a 400/404 naming what is wrong: ``?level=groups`` (one row
        per group), ``?group=NAME`` (one group; with level=groups, its row), or the whole fabric."""
        unknown = sorted(set(req.GET) - {"level", "group"})
        if unknown:
            raise ApiError(400, f"{unknown[0]}: not a parameter of /fabric (level, group)")
        level, group = req.GET.get("level", "all"), req.GET.get("group")
        if level not in ("all", "groups"):
            raise ApiError(400, f"level: {level!r} is not one of all, groups")
        if group is not None:
            names = self.source.group_names()
            if group not in names:
                raise ApiError(404, f"group: no group {group!r} in this fabric (level=groups lists them: "
                                    f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
        return level, group

    def _decisions(self, req: Request) -> dict:
        since = _int_param(req, "since", -1, -1, 2**62)
        limit = _int_param(req, "limit", 100, 1, 1000)
        types = tuple(t for raw in req.GET.getall("type") for t in raw.split(","))
        bad = [t for t in types if t not in openapi.DECISION_TYPES]
        if bad:
            raise ApiError(400, f"type: unknown decision type {bad[0]!r} (known: {', '.join(openapi.DECISION_TYPES)})")
        page = self.source.decisions.page(since, limit, types)
        return {"decisions": page.decisions, "next": page.next, "missed": page.dropped}

    def _announce(self, req: Request) -> Response:
        self._authorise(req)
        body = req.body_file.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            raise ApiError(413, f"body: larger than {MAX_BODY} bytes")
        subs, kbps, size = parse_announce(body)
        code, body = self.source.api_announce(subs, kbps, size)
        return _json(code, body)

    def _withdraw(self, req: Request, ident: str) -> Response:
        self._authorise(req)
        code, body = self.source.api_withdraw(ident)
        return _json(code, body)


def read_token(path: str, key: str = "api_token_file") -> str:
    """A token: the file's first line, stripped. An unreadable or short file is an error."""
    try:
        with open(path) as fh:
            token = fh.readline().strip()
    except OSError as e:
        raise ValueError(f"{key}: cannot read {path}: {e.strerror}") from None
    if len(token) < 8:
        raise ValueError(f"{key}: {path} must hold a token of at least 8 characters on its first line")
    return token


HEAD_S = 10.0  # a connection's TLS handshake and request head (line and headers) must be done by then
PER_SOURCE = 64  # connections at once from one address (a scrape, a browser, `freeway status`: a few)
POOL = 1024  # connections at once: each a green thread, held at most HEAD_S until its request is in


class _Listener:
    """The API's listening socket as eventlet's server sees it: a connection from an address that already
    has ``PER_SOURCE`` open is closed at once, before it takes one of the ``POOL`` slots (issue 60: 80
    connections that sent half a request line held all 64 slots there were, each up to 30 s a read)."""

    def __init__(self, sock, api: Api):
        self._sock, self._api = sock, api

    def accept(self):
        while True:
            conn, addr = self._sock.accept()
            host = addr[0]
            if self._api.conns.get(host, 0) >= PER_SOURCE:
                self._api.refused["per-source-cap"] = self._api.refused.get("per-source-cap", 0) + 1
                conn.close()
                continue
            self._api.conns[host] = self._api.conns.get(host, 0) + 1
            return conn, addr

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _TlsFailed(TimeoutError):
    """A connection whose TLS handshake failed: closed as a timed-out one is (eventlet's server catches that)."""


def _protocol(api: Api, tls_ctx=None):
    """eventlet's HTTP protocol with the API's limits: a connection's TLS handshake (done here, in its own
    green thread, never in the accept loop) and its request head must be done within ``HEAD_S`` of its
    accept, or it is closed (``head-timeout``); one request a connection; a connection that fails TLS
    (plain HTTP on the HTTPS port, a handshake left half way, a wrong certificate) is counted as
    ``tls-failed`` and closed without a traceback."""
    import ssl

    import eventlet
    import eventlet.wsgi

    def count(reason: str) -> None:
        api.refused[reason] = api.refused.get(reason, 0) + 1

    class Protocol(eventlet.wsgi.HttpProtocol):
        def __init__(self, conn_state, server):
            self._deadline = eventlet.Timeout(HEAD_S, TimeoutError("head-timeout"))
            self._host = conn_state[0][0]
            try:
                super().__init__(conn_state, server)
            except _TlsFailed:
                raise
            except TimeoutError:
                count("head-timeout")
                raise
            finally:
                self._deadline.cancel()
                left = api.conns.get(self._host, 0) - 1
                if left > 0:
                    api.conns[self._host] = left
                else:
                    api.conns.pop(self._host, None)

        def setup(self):
            if tls_ctx is not None:
                try:
                    self.request = tls_ctx.wrap_socket(self.request, server_side=True, do_handshake_on_connect=False)
                    self.request.do_handshake()
                except (ssl.SSLError, OSError) as e:
                    if isinstance(e, TimeoutError):
                        raise
                    count("tls-failed")
                    raise _TlsFailed("tls-failed") from None
                self.conn_state[1] = self.request
            super().setup()

        def parse_request(self):
            ok = super().parse_request()  # the request line and every header read: the deadline is met
            self._deadline.cancel()
            return ok

        def handle(self):
            try:
                super().handle()
            except ssl.SSLError:
                count("tls-failed")

    return Protocol


def tls_server_context(cert: str, key: str):
    """The API's TLS: 1.2 or later (not Python's default), the controller's certificate; a green context, so
    that a handshake waits in its connection's own green thread."""
    import ssl

    from eventlet.green import ssl as green_ssl

    ctx = green_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def serve(source, listen: str, token_file: str = "", read_token_file: str = "", open_reads: bool = True,
          cert: str = "", key: str = "") -> Api | None:
    """Serve the API on ``listen`` (HOST:PORT) in green threads of the controller's own event loop: a slow
    or stalled client holds one green thread for at most ``HEAD_S`` before its request is in, never the
    OpenFlow loop. Tokens are never logged."""
    import eventlet
    import eventlet.wsgi

    from topology.settings import hostport

    host, port = hostport("api", listen)
    try:
        token = read_token(token_file) if token_file else None
        reader = read_token(read_token_file, "api_read_token_file") if read_token_file else None
        # a backlog as deep as the pool (eventlet's default is 50): a burst of connections (300 held half-open
        # by a test of issue 60) overflowed 50 before the accept loop took them, and the kernel dropped the
        # next SYNs, an operator's among them, whose client then waited a second to send its SYN again
        sock = eventlet.listen((host, port), family=6 if ":" in host else 2, backlog=POOL)
        ctx = tls_server_context(cert, key) if cert else None
    except (OSError, ValueError) as e:  # checked at start; a race (the port taken since) lands here
        LOG.error("operator API not served on %s: %s", listen, e)
        return None
    api = Api(source, token, reader, open_reads)
    source.api_app = api
    LOG.info("operator API, metrics and fabric view on %s://%s:%d/ (writes %s; reads %s)", "https" if cert else "http",
             host, port, "need the write token" if token else "refused", "open" if api.open_reads else "need a token")
    eventlet.wsgi.server(_Listener(sock, api), api, log_output=False, max_size=POOL, socket_timeout=HEAD_S,
                         keepalive=False, url_length_limit=8192, protocol=_protocol(api, ctx))
    return api
