"""Two or more controllers, one fabric: the leader elected through etcd, and the state the switches cannot
tell kept there.

Election, etcd's own recipe (as in etcd's ``concurrency`` package), through the maintained ``etcd3gw``
client: every member holds a lease of ``ttl`` seconds and refreshes it every ``ttl``/3. A member that sees
no leader campaigns with one transaction: create the leader key, attached to its lease, only if the key
does not exist. The key's create revision is the leader's **generation id**: it grows with every new
leader, so a switch told MASTER with it refuses a master that comes back with an older one (OpenFlow's
generation_id). A leader whose lease lapses loses the key; the others see it gone within ``ttl``/3 and
campaign.

``Store`` talks to etcd (blocking: the app calls it in an OS thread, ``framework.run_blocking``) and tries
every endpoint before it gives up. ``Elector`` decides, one ``step`` at a time, from what the store says
(pure: the store is given, the clock too), so its every case is unit-tested with an in-memory store.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from topology.settings import SettingError

LOG = logging.getLogger("freeway.cluster")


class StoreError(RuntimeError):
    """No etcd endpoint answered (the message says what the last one said)."""


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """``etcd://HOST:PORT[,etcd://HOST:PORT...]`` (``http://`` accepted too) as (host, port) pairs."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        rest = item
        for scheme in ("etcd://", "http://"):
            if rest.startswith(scheme):
                rest = rest[len(scheme):]
        host, sep, port = rest.rstrip("/").rpartition(":")
        if not item or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingError(f"cluster: expected etcd://HOST:PORT[,etcd://HOST:PORT...], got {text!r}")
        out.append((host.strip("[]"), int(port)))
    return out


def _tls_session(ca: str, cert: str, key: str):
    """A requests session that checks the members against ``ca`` and shows ``cert``. Not from the
    environment: requests lets REQUESTS_CA_BUNDLE (set on many machines to the system's CAs) override a
    session's CA, and the members' private CA would then fail every handshake."""
    import requests

    s = requests.Session()
    s.trust_env = False
    s.verify = ca
    if cert:
        s.cert = (cert, key)
    return s


def _auth_refused(e: Exception) -> bool:
    """etcd's gateway says a request's user token is missing, invalid or expired."""
    text = f"{e} {getattr(e, 'detail_text', '') or ''}".lower()  # etcd3gw keeps the body in detail_text
    return "auth token" in text or "user name is empty" in text or "unauthenticated" in text


class Store:
    """The cluster's keys in etcd, under ``/freeway/NAME/``; every call tries each endpoint in turn."""

    def __init__(self, endpoints: list[tuple[str, int]], name: str, timeout: float = 1.0,
                 tls: tuple[str, str, str] = ("", "", ""), user: tuple[str, str] = ("", "")):
        """``tls``: (CA, client certificate, its key): the endpoints are then https, the members' certificates
        checked against the CA and this member's certificate shown to them (etcd's ``--client-cert-auth``)."""
        import etcd3gw

        ca, cert, key = tls
        opts = {"protocol": "https", "session": _tls_session(ca, cert, key)} if ca else {}
        self.clients = [etcd3gw.client(host=h, port=p, timeout=timeout, **opts) for h, p in endpoints]
        self.user, self._password = user  # etcd's user authentication: a token per endpoint, fetched when refused
        self.endpoints = endpoints
        self.prefix = f"/freeway/{name}/"
        self.current = 0

    def _call(self, fn):
        from etcd3gw import exceptions

        errors = []
        for i in range(len(self.clients)):
            k = (self.current + i) % len(self.clients)
            try:
                try:
                    out = fn(self.clients[k])
                except exceptions.Etcd3Exception as e:
                    if not (self.user and _auth_refused(e)):
                        raise
                    self._login(self.clients[k])  # no token yet, or it expired: once more with a new one
                    out = fn(self.clients[k])
            except (exceptions.Etcd3Exception, OSError) as e:
                text = f"{e} {getattr(e, 'detail_text', '') or ''}".strip()
                text = text.splitlines()[0][:160] if text else ""
                errors.append(f"{self.endpoints[k][0]}:{self.endpoints[k][1]}: {type(e).__name__} {text}".rstrip())
                continue
            self.current = k
            return out
        raise StoreError(f"no etcd endpoint answered ({'; '.join(errors)})")

    def _login(self, client) -> None:
        """etcd's Authenticate: the user's token, sent in every later request's Authorization header."""
        from etcd3gw import exceptions

        client.session.headers.pop("Authorization", None)
        answer = client.post(client.get_url("/auth/authenticate"), json={"name": self.user, "password": self._password})
        token = answer.get("token") if isinstance(answer, dict) else None
        if not token:
            raise exceptions.Etcd3Exception(f"etcd gave user {self.user!r} no token", "authenticate")
        client.session.headers["Authorization"] = token

    @staticmethod
    def _b64(text: str | bytes) -> str:
        from etcd3gw.utils import _encode

        return _encode(text)

    @staticmethod
    def _text(b64: str) -> str:
        from etcd3gw.utils import _decode

        return _decode(b64).decode()

    def grant(self, ttl: float) -> int:
        return self._call(lambda c: int(c.post(c.get_url("/lease/grant"), json={"TTL": int(round(ttl)), "ID": 0})["ID"]))

    def refresh(self, lease: int) -> int:
        """The lease's remaining TTL after a keep-alive; 0 or less when it is gone."""
        def keepalive(c):
            res = c.post(c.get_url("/lease/keepalive"), json={"ID": lease})
            return int(res.get("result", {}).get("TTL", 0) or 0)
        return self._call(keepalive)

    def revoke(self, lease: int) -> None:
        self._call(lambda c: c.post(c.get_url("/kv/lease/revoke"), json={"ID": lease}))

    def leader(self) -> tuple[str, int] | None:
        """(node, generation) of the current leader, None if there is none."""
        key = self.prefix + "leader"

        def get(c):
            res = c.post(c.get_url("/kv/range"), json={"key": self._b64(key)})
            kvs = res.get("kvs") or []
            return kvs[0] if kvs else None
        kv = self._call(get)
        if kv is None:
            return None
        return self._text(kv["value"]), int(kv["create_revision"])

    def campaign(self, node: str, lease: int) -> tuple[bool, str, int]:
        """Take the leader key if nobody holds it: (won, leader node, generation)."""
        key = self._b64(self.prefix + "leader")
        txn = {"compare": [{"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
               "success": [{"request_put": {"key": key, "value": self._b64(node), "lease": lease}},
                           {"request_range": {"key": key}}],
               "failure": [{"request_range": {"key": key}}]}
        res = self._call(lambda c: c.post(c.get_url("/kv/txn"), json=txn))
        won = bool(res.get("succeeded"))
        rng = [r["response_range"] for r in res.get("responses", []) if "response_range" in r]
        kvs = (rng[-1].get("kvs") or []) if rng else []
        if not kvs:
            return won, node if won else "", 0
        return won, self._text(kvs[0]["value"]), int(kvs[0]["create_revision"])

    def put(self, key: str, value: dict) -> None:
        body = {"key": self._b64(self.prefix + key), "value": self._b64(json.dumps(value, sort_keys=True))}
        self._call(lambda c: c.post(c.get_url("/kv/put"), json=body))

    def delete(self, key: str) -> None:
        self._call(lambda c: c.post(c.get_url("/kv/deleterange"), json={"key": self._b64(self.prefix + key)}))

    def get_prefix(self, prefix: str) -> dict[str, dict]:
        from etcd3gw.utils import _increment_last_byte

        start = (self.prefix + prefix).encode()
        body = {"key": self._b64(start), "range_end": self._b64(_increment_last_byte(start))}
        res = self._call(lambda c: c.post(c.get_url("/kv/range"), json=body))
        out = {}
        for kv in res.get("kvs") or []:
            key = self._text(kv["key"])
            try:
                out[key[len(self.prefix):]] = json.loads(self._text(kv["value"]))
            except ValueError:
                LOG.warning("cluster store: %s is not JSON: ignored", key)
        return out


@dataclass
class ClusterState:
    """What this member knows: its role (candidate: no leader seen yet; leader; follower), the leader and
    its generation id, since when, and whether the store answers."""

    node: str
    role: str = "candidate"
    leader: str | None = None
    generation: int = 0
    since: float = 0.0  # wall clock of the last role change
    store_ok: bool = True
    store_error: str = ""
    events: list = field(default_factory=list)


class Elector:
    """One member's side of the election. ``step(now, wall)`` is called every ``ttl``/3 (in an OS thread:
    it calls the store) and returns what changed: ``("leader", generation)``, ``("follower", leader,
    generation)``, ``("store", ok, reason)``."""

    def __init__(self, store, node: str, ttl: float):
        self.store = store
        self.ttl = ttl
        self.state = ClusterState(node)
        self.lease: int | None = None
        self.last_refresh = -1e9
        self.last_ok = 0.0  # when the store last answered

    def step(self, now: float, wall: float) -> list[tuple]:
        st, out = self.state, []
        try:
            if st.role == "leader":
                out += self._lead(now, wall)
            else:
                out += self._follow_or_campaign(now, wall)
        except StoreError as e:
            # one failed call is not an outage (an etcd member going, its cluster electing a new leader):
            # the store is called unreachable once nothing has answered for half a lease
            if st.store_ok and now - self.last_ok >= self.ttl / 2:
                out.append(("store", False, str(e)))
                st.store_ok = False
            st.store_error = str(e)
            return out
        self.last_ok = now
        if not st.store_ok:
            out.append(("store", True, ""))
        st.store_ok, st.store_error = True, ""
        return out

    def _lead(self, now: float, wall: float) -> list[tuple]:
        st = self.state
        remaining = self.store.refresh(self.lease) if self.lease is not None else 0
        if remaining > 0:
            self.last_refresh = now
            cur = self.store.leader()
            if cur is not None and cur == (st.node, st.generation):
                return []
        # the lease lapsed (the store was away longer than it) or the key is someone else's now
        LOG.warning("cluster: %s is no longer the leader (lease %s)", st.node,
                    "lapsed" if remaining <= 0 else "kept but the key changed")
        self.lease = None
        st.role = "candidate"
        return self._follow_or_campaign(now, wall)

    def _follow_or_campaign(self, now: float, wall: float) -> list[tuple]:
        st = self.state
        cur = self.store.leader()
        if cur is None:
            if self.lease is None or self.store.refresh(self.lease) <= 0:
                self.lease = self.store.grant(self.ttl)
            won, node, gen = self.store.campaign(st.node, self.lease)
            if won:
                self.last_refresh = now
                st.role, st.leader, st.generation, st.since = "leader", st.node, gen, wall
                return [("leader", gen)]
            cur = (node, gen) if node else None
        if cur is None:
            return []
        if st.role != "follower" or (st.leader, st.generation) != cur:
            st.role, (st.leader, st.generation), st.since = "follower", cur, wall
            return [("follower", cur[0], cur[1])]
        return []

    def resign(self) -> None:
        """Give the leadership up at once (a clean stop): the lease goes, and with it the key."""
        if self.lease is not None:
            self.store.revoke(self.lease)
            self.lease = None


class Member:
    """A cluster member's I/O with etcd: the election, and the elephant records. Every call blocks, so the
    app runs it through ``run`` (its framework's way to call into an OS thread); what follows from the
    answers is ``handover.Handover``'s to decide."""

    def __init__(self, endpoints: str, name: str, node: str, ttl: float, run=lambda fn, *a: fn(*a),
                 tls: tuple[str, str, str] = ("", "", ""), user: tuple[str, str] = ("", "")):
        from ryu_apps.control.handover import Handover

        self.store = Store(parse_endpoints(endpoints), name, tls=tls, user=user)
        self.elector = Elector(self.store, node, ttl)
        self.handover = Handover(self.elector.state, name)
        self.run = run

    def step(self, now: float, wall: float, programming: bool) -> list:
        """One step of the election: the ``handover.Step`` of each thing that changed."""
        return [self.handover.event(ev, programming) for ev in self.run(self.elector.step, now, wall)]

    def pause(self, follower_look_s: float) -> float:
        """How long until the next step: the leader refreshes its lease every third of it; the others look
        for a lapsed leader more often, so that a new one is elected within the lease."""
        third = self.elector.ttl / 3
        return third if self.handover.leads() else min(follower_look_s, third)

    def read_records(self) -> dict[int, dict]:
        """At a take-over: the elephant records the store holds (none if it cannot be read: the switches
        alone are recovered from)."""
        from ryu_apps.control.handover import RECORDS

        try:
            held = self.run(self.store.get_prefix, RECORDS)
        except Exception as e:
            LOG.error("cluster: cannot read the elephant records: %s; recovering from the switches alone", e)
            held = {}
        return self.handover.taken_over(held)

    def put_first(self, items: list[tuple[str, dict]]) -> str:
        """Write the records a confirmed install's answer relies on; '' if the store took them, else why not."""
        try:
            self.run(lambda: [self.store.put(key, value) for key, value in items])
        except StoreError as e:
            return str(e)
        self.handover.written({int(key.rpartition("/")[2]): value for key, value in items})
        return ""

    def sync(self, want) -> None:
        """Make the store hold ``want`` (``Policy.records``): changed records written, gone ones deleted."""
        if not self.elector.state.store_ok:
            return
        puts, gone = self.handover.writes(want)
        if not puts and not gone:
            return

        def write():
            for eid, rec in puts.items():
                self.store.put(self.handover.key(eid), rec)
            for eid in gone:
                self.store.delete(self.handover.key(eid))
        self.run(write)
        self.handover.written(puts, gone)
