"""Issue 17, the pure part: the elector's every case against an in-memory store with etcd's semantics (a
lease lapses ``ttl`` after its last refresh and takes its keys with it; the leader key's create revision
grows), and the endpoints' syntax. The real etcd is in tests/integration/test_cluster.py."""

import pytest

from ryu_apps.control.cluster import Elector, StoreError, parse_endpoints
from topology.settings import SettingError


class MemStore:
    """etcd as the elector uses it, on a clock the test moves."""

    def __init__(self):
        self.now = 0.0
        self.rev = 1
        self.leases: dict[int, tuple[float, float]] = {}  # id -> (ttl, expiry)
        self.key: tuple[str, int, int] | None = None  # (node, create revision, lease)
        self.down = False
        self._ids = 100

    def _check(self):
        if self.down:
            raise StoreError("no etcd endpoint answered (127.0.0.1:2379: ConnectionFailedError)")
        for lid, (_, exp) in list(self.leases.items()):
            if self.now >= exp:
                del self.leases[lid]
                if self.key and self.key[2] == lid:
                    self.key = None

    def grant(self, ttl):
        self._check()
        self._ids += 1
        self.leases[self._ids] = (ttl, self.now + ttl)
        return self._ids

    def refresh(self, lease):
        self._check()
        if lease not in self.leases:
            return 0
        ttl, _ = self.leases[lease]
        self.leases[lease] = (ttl, self.now + ttl)
        return int(ttl)

    def revoke(self, lease):
        self._check()
        self.leases.pop(lease, None)
        if self.key and self.key[2] == lease:
            self.key = None

    def leader(self):
        self._check()
        return (self.key[0], self.key[1]) if self.key else None

    def campaign(self, node, lease):
        self._check()
        if self.key is None:
            self.rev += 1
            self.key = (node, self.rev, lease)
            return True, node, self.rev
        return False, self.key[0], self.key[1]


def _step(store, *electors):
    return [e.step(store.now, store.now) for e in electors]


def test_the_first_member_leads_the_next_follows_with_the_same_generation():
    store = MemStore()
    a, b = Elector(store, "A", 3.0), Elector(store, "B", 3.0)
    ea, eb = _step(store, a, b)
    assert ea == [("leader", 2)] and eb == [("follower", "A", 2)]
    assert (a.state.role, b.state.role) == ("leader", "follower") and b.state.leader == "A"
    store.now += 1.0
    assert _step(store, a, b) == [[], []]  # steady: nothing to say


def test_a_leader_that_stops_refreshing_is_replaced_with_a_newer_generation_and_steps_down_when_back():
    store = MemStore()
    a, b = Elector(store, "A", 3.0), Elector(store, "B", 3.0)
    _step(store, a, b)
    store.now += 3.1  # A is gone (killed): its lease lapses, the key with it
    assert b.step(store.now, store.now) == [("leader", 3)] and b.state.generation == 3
    assert a.step(store.now, store.now) == [("follower", "B", 3)]  # A comes back: it follows
    assert a.state.role == "follower"


def test_a_store_that_goes_away_is_reported_after_half_a_lease_and_the_leader_stays():
    store = MemStore()
    a = Elector(store, "A", 2.0)
    a.step(0.0, 0.0)
    store.down = True
    assert a.step(0.5, 0.5) == []  # one failed call is not an outage
    assert a.state.store_ok
    out = a.step(1.1, 1.1)
    assert out == [("store", False, "no etcd endpoint answered (127.0.0.1:2379: ConnectionFailedError)")]
    assert a.state.role == "leader" and not a.state.store_ok  # it keeps forwarding; the app refuses announces
    assert a.step(1.8, 1.8) == []
    store.down = False
    store.now = 1.9  # back before the lease lapsed: same leadership
    assert a.step(2.0, 2.0) == [("store", True, "")] and a.state.generation == 2


def test_after_an_outage_longer_than_the_lease_the_leader_campaigns_again_with_a_new_generation():
    store = MemStore()
    a, b = Elector(store, "A", 2.0), Elector(store, "B", 2.0)
    _step(store, a, b)
    store.down = True
    for t in (0.7, 1.4, 2.1, 2.8):
        store.now = t
        _step(store, a, b)
    store.down, store.now = False, 3.5  # A's lease lapsed meanwhile; nobody could take the key
    ea = a.step(store.now, store.now)
    assert ("leader", 3) in ea and ("store", True, "") in ea  # the app re-asserts MASTER with 3
    assert b.step(store.now, store.now)[0] == ("follower", "A", 3)


def test_a_leader_whose_key_someone_else_took_steps_down():
    store = MemStore()
    a = Elector(store, "A", 2.0)
    a.step(0.0, 0.0)
    store.key = ("C", 9, store.grant(2.0))  # another member holds the key (A's lease was lost meanwhile)
    assert a.step(0.7, 0.7) == [("follower", "C", 9)] and a.state.role == "follower"


def test_resigning_hands_the_leadership_on_at_once():
    store = MemStore()
    a, b = Elector(store, "A", 3.0), Elector(store, "B", 3.0)
    _step(store, a, b)
    a.resign()
    assert b.step(0.1, 0.1) == [("leader", 3)]


@pytest.mark.parametrize("text,want", [
    ("etcd://127.0.0.1:2379", [("127.0.0.1", 2379)]),
    ("etcd://10.0.0.1:2379, etcd://10.0.0.2:2379", [("10.0.0.1", 2379), ("10.0.0.2", 2379)]),
    ("http://localhost:2379/", [("localhost", 2379)]),
])
def test_endpoints_are_read_from_etcd_urls(text, want):
    assert parse_endpoints(text) == want


@pytest.mark.parametrize("text", ["etcd://127.0.0.1", "127.0.0.1:99999", "etcd://:2379", "", "etcd://a:1,,"])
def test_a_wrong_endpoint_is_refused_naming_the_setting(text):
    with pytest.raises(SettingError, match="^cluster: expected etcd://HOST:PORT"):
        parse_endpoints(text)
