"""Issue 14 (operators), the pure parts: decision records, the operator's documents, metrics, the API's
parsing and answers, reloading the configuration, JSON logs."""

import json
import logging
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from webob import Request

from monitoring.sflow import FiveTuple
from monitoring.view import FlowReading, LinkReading
from monitoring.view import make as make_view
from ryu_apps import config
from ryu_apps.controller_app import ControllerApp
from ryu_apps.host import handshake as hs
from ryu_apps.logfmt import JsonFormatter
from ryu_apps.operators import api, opstate
from ryu_apps.operators.decision_log import DecisionLog
from ryu_apps.simswitch.fabric import SimFabric
from tests.unit.test_simswitch_programs import ISO, policy
from topology.fabric import fattree, leafspine

F = fattree(4)
SRC, DST = F.hosts_on("e0_0")[0], F.hosts_on("e3_1")[0]


def _announce(sim, pol, sport, rate_kbps=2000, src=SRC, dst=DST):
    flow = FiveTuple(src.ip, dst.ip, 6, sport, 5001)
    ann = hs.encode(hs.Announce(sport, 10_000_000, rate_kbps, (flow,)))
    sim.send(src.name, FiveTuple(src.ip, hs.SERVICE_IP, 17, sport, hs.SERVICE_PORT), payload=ann)
    return hs.decode(sim.to_hosts[-1][1].payload)


# ----- decision log ------------------------------------------------------------------------------
def test_the_decision_log_pages_by_sequence_type_and_keeps_only_the_latest():
    log = DecisionLog(keep=5)
    for i in range(8):
        log.add({"type": "placement" if i % 2 else "refusal", "i": i}, 100.0 + i)
    assert len(log) == 5 and log.seq == 8
    page = log.page(since=0, limit=10)
    assert [r["seq"] for r in page.decisions] == [4, 5, 6, 7, 8] and page.next == 8 and page.dropped == 3
    page = log.page(since=5, limit=1)
    assert [r["seq"] for r in page.decisions] == [6] and page.next == 6
    assert [r["seq"] for r in log.page(since=page.next, limit=10).decisions] == [7, 8]
    assert [r["i"] for r in log.page(since=0, types=("placement",)).decisions] == [3, 5, 7]
    assert [r["seq"] for r in log.page(since=-1, limit=2).decisions] == [7, 8]
    assert log.page(since=8).decisions == [] and log.page(since=8).next == 8
    assert log.page(since=0).decisions[0]["time"] == 103.0


# ----- what the policies record ------------------------------------------------------------------
def test_a_handshake_is_recorded_as_a_placement_with_its_path_and_a_refusal_with_its_cause():
    pol = policy("freeway", F, ISO)
    sim = SimFabric(F, pol)
    assert isinstance(_announce(sim, pol, 40001), hs.Ack)
    placed = [e for e in sim.events if e["type"] == "placement"]
    el = pol.state.elephants[placed[0]["elephant"]]
    assert placed[0]["how"] == "announced" and placed[0]["via"] == "handshake"
    assert placed[0]["paths"] == [list(el.placements[0].path)] and placed[0]["rate_bps"] == 2_000_000
    assert placed[0]["received"] == sim.now  # the app turns it into the answer's latency
    nack = _announce(sim, pol, 40002, rate_kbps=50_000)  # above the host's 10 Mbit/s link
    assert isinstance(nack, hs.Nack)
    (ref,) = [e for e in sim.events if e["type"] == "refusal"]
    assert ref["cause"] == "invalid" and ref["reason"] == nack.reason and ref["answered"]
    pol.state.cfg = pol.state.cfg.__class__(host_elephants=1)
    assert isinstance(_announce(sim, pol, 40003), hs.Nack)
    assert sim.events[-1]["type"] == "refusal" and sim.events[-1]["cause"] == "host-cap"


def test_an_announce_made_through_the_api_is_placed_installed_and_answered_like_a_handshake():
    pol = policy("freeway", F, ISO)
    sim = SimFabric(F, pol)
    got = []
    flow = FiveTuple(SRC.ip, DST.ip, 6, 41000, 5001)
    payload = hs.encode(hs.Announce(9, 10**8, 3000, (flow,)))
    r = pol.announce(sim.now, SRC.name, payload, lambda reply, ev: got.append((hs.decode(reply), ev)))
    assert [t.answers for t in r.txns] == [True]  # its caller awaits it: the controller's background work gives way
    sim.react(r)
    (reply, ev), = got
    assert isinstance(reply, hs.Ack) and reply.rate_kbps == 3000 and ev["via"] == "api"
    el = pol.state.elephant_of(flow)
    t = sim.send(SRC.name, flow)
    assert t.delivered_to == DST.name and t.hops[0].cookie == el.cookie  # the switches hold its entries
    assert not sim.to_hosts  # nothing was sent to the host: the API caller has the answer
    r = pol.withdraw(sim.now, el.eid)
    sim.react(r)
    assert r.events[0]["type"] == "withdrawal" and not pol.state.elephants
    assert sim.send(SRC.name, flow).hops[0].cookie != el.cookie  # its entries are gone
    held = {m for s in sim.switches.values() for m in s.meters}
    assert pol.state.meter_of(el).meter_id not in held
    assert pol.withdraw(sim.now, el.eid) is None


def test_a_link_failure_records_the_partition_change_and_the_elephants_reroute():
    pol = policy("freeway", F, ISO)
    sim = SimFabric(F, pol)
    _announce(sim, pol, 40001)
    el = next(iter(pol.state.elephants.values()))
    a, b = el.placements[0].path[1], el.placements[0].path[2]  # its aggregation-core link
    sim.events.clear()
    sim.fail((a, b))
    kinds = [(e["type"], e.get("how") or e.get("change")) for e in sim.events]
    assert ("liveness", None) in kinds and ("reroute", "failure") in kinds
    lol = next(ln for ln, c in pol.state.partition.counter.items() if c > 0 and ln[0].startswith("a"))
    sim.events.clear()
    sim.fail(lol)  # a low-latency link: the next paths in order become low-latency
    (ev,) = [e for e in sim.events if e["type"] == "partition"]
    assert ev["change"] == "links" and ev["became_lol"] and ev["reason"] == "link down"


# ----- the operator's documents --------------------------------------------------------------------
def test_links_are_classed_as_the_partition_and_liveness_say_and_show_their_measurement():
    pol = policy("freeway", F, ISO)
    sim = SimFabric(F, pol)
    ln = ("e0_0", "a0_0")
    view = make_view(10.0, {ln: LinkReading(0.42, 4.2e6, 9.5)}, {}, {})
    docs = {(d["src"], d["dst"]): d for d in opstate.links(F, pol, view)}
    assert len(docs) == 2 * len(F.links) + 2 * len(F.hosts)
    counts = {c: sum(d["class"] == c for d in docs.values()) for c in opstate.LINK_CLASSES}
    assert counts == {"lol": 32, "draining": 0, "hol": 32, "shared": 0, "access": 32, "down": 0}
    assert all((d["class"] == "lol") == (pol.state.partition.counter[k] > 0) for k, d in docs.items()
               if d["class"] != "access")
    assert docs[ln]["utilisation"] == 0.42 and docs[ln]["bps"] == 4_200_000 and docs[ln]["measured_age_s"] == 0.5
    assert docs[("a0_0", "e0_0")]["utilisation"] is None
    sim.fail(ln)
    docs = {(d["src"], d["dst"]): d for d in opstate.links(F, pol, view)}
    assert docs[ln]["class"] == docs[ln[::-1]]["class"] == "down" and not docs[ln]["up"]
    ecmp = policy("ecmp", F, None)
    assert {d["class"] for d in opstate.links(F, ecmp, view)} == {"shared", "access"}


def test_documents_of_every_link_pause_every_so_many_links_and_read_as_without_pauses(monkeypatch):
    """Issue 41: at k=48 the links, the groups' rows and the partition are a second of work; the API and
    /metrics build them with ``pause`` (the event loop's turn for what waits) every PAUSE_EVERY links or
    pairs, and the documents are the same as without."""
    monkeypatch.setattr(opstate, "PAUSE_EVERY", 7)
    pol = policy("freeway", F, ISO)
    SimFabric(F, pol)
    view = make_view(10.0, {("e1_0", "a1_1"): LinkReading(0.42, 4.2e6, 9.5)}, {}, {})
    n = len(opstate.directed_links(F))
    for build in (lambda p: opstate.links(F, pol, view, pause=p),
                  lambda p: opstate.group_summary(F, pol, view, opstate.groups(F), pause=p),
                  lambda p: opstate.partition(pol, view, pause=p)):
        calls: list = []
        assert build(lambda c=calls: c.append(1)) == build(None)
        assert len(calls) >= 3, len(calls)
    calls = []
    opstate.links(F, pol, view, pause=lambda: calls.append(1))
    assert len(calls) == n // 7


def test_a_large_fabric_is_grouped_by_pod_or_by_blocks_of_leaves_and_each_group_sums_its_links():
    """Issue 41: the fabric view of a large fabric starts from one row per group; a group opens alone."""
    assert opstate.groups(F)["e2_1"] == opstate.groups(F)["a2_0"] == opstate.groups(F)["h2_1_0"] == "pod2"
    assert "c1" not in opstate.groups(F)
    ls = leafspine(4, 40, 2)
    g = opstate.groups(ls)
    assert g["l0"] == g["l15"] == g["h15_1"] == "l0..l15" and g["l16"] == "l16..l31" and g["l39"] == "l32..l39"
    assert "s1" not in g and len(set(g.values())) == 3
    pol = policy("freeway", F, ISO)
    sim = SimFabric(F, pol)
    view = make_view(10.0, {("e1_0", "a1_1"): LinkReading(0.42, 4.2e6, 9.5),
                            ("a1_1", "c3"): LinkReading(0.25, 2.5e6, 9.5)}, {}, {})
    sim.fail(("a1_0", "c1"))
    rows = {r["group"]: r for r in opstate.group_summary(F, pol, view, opstate.groups(F))}
    assert list(rows) == ["pod0", "pod1", "pod2", "pod3"]
    links = opstate.links(F, pol, view)
    for name, r in rows.items():  # the same links as the whole document, summed
        mine = [d for d in links if opstate.groups(F).get(d["src"]) == name or opstate.groups(F).get(d["dst"]) == name]
        assert r["links"] == len(mine) == 2 * 4 + 2 * 4 + 2 * 4  # edge-agg, agg-core, host links
        assert r["links_down"] == sum(not d["up"] for d in mine)
        assert r["classes"] == {c: sum(d["class"] == c for d in mine) for c in {d["class"] for d in mine}}
        assert r["switches"] == 4 and r["hosts"] == 4
    assert rows["pod1"]["links_down"] == 2 and rows["pod0"]["links_down"] == 0
    assert rows["pod1"]["utilisation_max"] == 0.42 and rows["pod1"]["hottest"] == "e1_0>a1_1"
    assert rows["pod1"]["up_bps"] == 2_500_000 and rows["pod0"]["utilisation_max"] is None
    checks = {"a1_1-c3": "missing", "a0_0-e0_0": "verified", "a2_0-c1": "miswired"}
    lldp = {r["group"]: r["lldp_problems"] for r in opstate.group_summary(F, pol, view, opstate.groups(F), None, checks)}
    assert lldp == {"pod0": 0, "pod1": 1, "pod2": 1, "pod3": 0}
    members, above = opstate.group_members(F, opstate.groups(F), "pod1")
    assert members == {"a1_0", "a1_1", "e1_0", "e1_1"} | {h.name for h in F.hosts if h.name.startswith("h1_")}
    assert above == {"c1", "c2", "c3", "c4"}
    only = opstate.links(F, pol, view, only=members)
    assert len(only) == rows["pod1"]["links"] and all(d in links for d in only)


def test_the_api_pages_the_fabric_by_group_and_refuses_a_bad_query(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    ro = api.Api(app.surface, None)
    code, whole, _ = _call(ro, "GET", "/api/v1/fabric")
    code, summary, _ = _call(ro, "GET", "/api/v1/fabric?level=groups")
    assert code == 200 and [r["group"] for r in summary["groups"]] == ["pod0", "pod1", "pod2", "pod3"]
    assert [s["name"] for s in summary["top"]] == ["c1", "c2", "c3", "c4"]
    assert sum(r["links"] for r in summary["groups"]) == len(whole["links"])
    code, pod, _ = _call(ro, "GET", "/api/v1/fabric?group=pod2")
    assert code == 200 and pod["group"] == "pod2" and len(pod["hosts"]) == 4 and len(pod["switches"]) == 4 + 4
    assert all(ln in whole["links"] for ln in pod["links"]) and len(pod["links"]) == 24
    for i in range(20):  # the same question asked with its parameters repeated: one cached answer
        _call(ro, "GET", "/api/v1/fabric?" + "&".join(["level=groups"] * (i + 1)))
    assert sum(k.startswith("/api/v1/fabric") for k in ro._cache) == 3
    code, one, _ = _call(ro, "GET", "/api/v1/fabric?level=groups&group=pod1")
    assert code == 200 and one["groups"] == [r for r in summary["groups"] if r["group"] == "pod1"]
    for query, code_, field in (("group=pod9", 404, "group:"), ("group=", 404, "group:"), ("level=pods", 400, "level:"),
                                ("pod=1", 400, "pod:")):
        code, body, _ = _call(ro, "GET", f"/api/v1/fabric?{query}")
        assert code == code_ and body["error"].startswith(field), (query, body)
    assert app.decisions.seq == 0


def test_elephants_are_listed_with_how_they_were_placed_their_path_meter_and_rates():
    pol = policy("freeway", F, ISO)
    sim = SimFabric(F, pol)
    _announce(sim, pol, 40001)
    el = next(iter(pol.state.elephants.values()))
    flow = FiveTuple(SRC.ip, DST.ip, 6, 40001, 5001)
    other = FiveTuple(F.hosts_on("e1_0")[0].ip, DST.ip, 6, 1234, 80)
    view = make_view(5.0, {}, {flow: FlowReading(1.9e6, frozenset(), True, 4.9),
                               other: FlowReading(3e6, frozenset({("e1_0", "a1_0")}), True, 4.9)}, {})
    docs = {d["id"]: d for d in opstate.elephants(pol, view)}
    mine = docs[str(el.eid)]
    assert mine["how"] == "announced" and mine["allocation_bps"] == 2_000_000 and mine["measured_bps"] == 1_900_000
    assert mine["paths"] == [list(el.placements[0].path)] and mine["meter"] == pol.state.meter_of(el).meter_id
    path = el.placements[0].path
    hops = [list(ln) for ln in zip(path, path[1:], strict=False)]
    assert mine["links"] == [[SRC.name, SRC.switch], *hops, [DST.switch, DST.name]]
    (det,) = [d for d in docs.values() if d["how"] == "detected"]
    assert det["flows"][0]["sport"] == 1234 and det["links"] == [["e1_0", "a1_0"]] and det["measured_bps"] == 3e6
    totals = opstate.elephant_totals(pol, view)  # what the metrics count: the same, cheaper
    assert totals == {"announced": [1, 2_000_000, 1_900_000], "detected": [1, 0.0, 3e6]}
    cache: dict = {}
    assert opstate.elephants(pol, view, cache) == opstate.elephants(pol, view, cache) == list(docs.values())
    assert len(cache) == 1  # the announced one's unchanging part
    part = opstate.partition(pol, make_view(5.0, {}, {}, {("e0_0", "e3_1"): 4.5}))
    assert part["pairs"] == [{"src": "e0_0", "dst": "e3_1", "lol_paths": 2, "active": True,
                              "paths": [list(p) for p in pol.state.partition.lol_paths(("e0_0", "e3_1"))]}]


# ----- metrics -----------------------------------------------------------------------------------
def _app(tmp_path, monkeypatch, **kw):
    fattree(4, 10).save(tmp_path / "f.json")
    monkeypatch.setattr(config, "_active", config.Config(fabric=str(tmp_path / "f.json"), **kw))
    return ControllerApp()


def _samples(app) -> dict:
    out = {}
    for fam in text_string_to_metric_families(app.surface.metrics_exposition().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_follow_the_decisions_and_the_state(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    m = _samples(app)
    assert m[("freeway_switches", (("state", "never"),))] == 20 and m[("freeway_switches_connected", ())] == 0
    assert m[("freeway_links", (("class", "lol"),))] == 32 and m[("freeway_link_up", (("dst", "a0_0"), ("src", "e0_0")))] == 1
    assert m[("freeway_info", (("isolation", "off"), ("mode", "freeway"), ("monitor", "sflow")))] == 1
    app.record({"type": "placement", "how": "announced", "via": "handshake", "elephant": 1, "received": 0.0})
    app.record({"type": "refusal", "how": "announced", "cause": "host-cap", "answered": True, "received": 0.0})
    app.record({"type": "refusal", "how": "announced", "cause": "spoofed", "answered": False, "received": 0.0})
    app.record({"type": "reroute", "how": "efm"})
    app.record({"type": "rollback", "txn": "x", "reason": "y", "switch": "e0_0"})
    m = _samples(app)
    assert m[("freeway_handshakes_total", (("cause", "none"), ("outcome", "ack"), ("via", "handshake")))] == 1
    assert m[("freeway_handshakes_total", (("cause", "host-cap"), ("outcome", "nack"), ("via", "handshake")))] == 1
    assert m[("freeway_handshakes_total", (("cause", "spoofed"), ("outcome", "dropped"), ("via", "handshake")))] == 1
    assert m[("freeway_handshake_latency_seconds_count", ())] == 2  # the answered ones
    assert m[("freeway_reroutes_total", (("how", "efm"),))] == 1 and m[("freeway_rollbacks_total", ())] == 1
    assert m[("freeway_decisions_total", (("type", "refusal"),))] == 2
    assert [r["seq"] for r in app.decisions.page(0).decisions] == [1, 2, 3, 4, 5]
    assert "latency_s" in app.decisions.page(0).decisions[0] and "received" not in app.decisions.page(0).decisions[0]
    names = {fam.name for fam in text_string_to_metric_families(app.surface.metrics_exposition().decode())}
    assert all(n.startswith("freeway_") for n in names)


def test_a_scrape_walks_the_elephants_once_per_epoch_as_the_api_does(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    calls = []
    real = opstate.elephant_totals
    monkeypatch.setattr(opstate, "elephant_totals", lambda *a: calls.append(1) or real(*a))
    for _ in range(3):
        app.surface.metrics_exposition()
    assert len(calls) == 1
    app.periods += 1  # a period (or a link change, a reload, an API write): the totals are read again
    app.surface.metrics_exposition()
    app.surface.writes += 1
    app.surface.metrics_exposition()
    assert len(calls) == 3


def test_metrics_show_the_switches_share_and_the_collectors_pauses(tmp_path, monkeypatch):
    import gc
    import time

    from ryu_apps.openflow.txn import Outcome, Txn

    app = _app(tmp_path, monkeypatch, mode="freeway")
    app.executor.finish(Outcome(Txn("x", []), started=time.monotonic() - 0.03))  # confirmed 30 ms after it went out
    gc.callbacks.append(app._gc_observer)
    try:
        gc.collect()
        gc.collect(0)
    finally:
        gc.callbacks.remove(app._gc_observer)
    m = _samples(app)
    assert m[("freeway_install_confirm_seconds_count", ())] == 1
    assert 0.03 <= m[("freeway_install_confirm_seconds_sum", ())] < 1
    assert m[("freeway_gc_pause_seconds_count", (("generation", "2"),))] == 1
    assert m[("freeway_gc_pause_seconds_count", (("generation", "0"),))] >= 1
    assert 0 < m[("freeway_gc_pause_seconds_sum", (("generation", "2"),))] < 5


def test_the_app_observes_the_collector_from_start_to_stop(tmp_path, monkeypatch):
    import gc

    from os_ken.base import app_manager

    from ryu_apps import controller_app

    app = _app(tmp_path, monkeypatch, mode="freeway")
    base = app_manager.OSKenApp
    assert base in type(app).__mro__
    monkeypatch.setattr(base, "start", lambda self: None)  # no event loop here: only the registration
    monkeypatch.setattr(base, "stop", lambda self: None)
    monkeypatch.setattr(controller_app.hub, "spawn", lambda *a, **k: None)
    try:
        app.start()
        assert gc.callbacks.count(app._gc_observer) == 1
    finally:
        app.stop()
    assert app._gc_observer not in gc.callbacks


# ----- the API's WSGI application --------------------------------------------------------------
def _call(app_obj, method, path, body=None, token=None):
    req = Request.blank(path, method=method)
    if body is not None:
        req.body = body if isinstance(body, bytes) else json.dumps(body).encode()
        req.content_type = "application/json"
    if token:
        req.headers["Authorization"] = f"Bearer {token}"
    resp = req.get_response(app_obj)
    return resp.status_int, (resp.json if resp.content_type == "application/json" else resp.body), resp


ANN = {"flows": [{"src": SRC.ip, "dst": DST.ip, "sport": 40000, "dport": 5001}], "size_bytes": 10**7,
       "rate_bps": 2e6}


def test_the_api_serves_reads_and_refuses_writes_without_the_token(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    ro = api.Api(app.surface, None)
    for path in ("/api/v1/status", "/api/v1/fabric", "/api/v1/elephants", "/api/v1/partition", "/api/v1/decisions",
                 "/api/v1/counters", "/api/v1/config", "/openapi.json"):
        code, body, _ = _call(ro, "GET", path)
        assert code == 200 and isinstance(body, dict), path
    assert _call(ro, "GET", "/")[1].startswith(b"<!doctype html>")
    assert b"freeway_switches_connected 0.0" in _call(ro, "GET", "/metrics")[1]
    code, body, _ = _call(ro, "POST", "/api/v1/elephants", ANN)
    assert code == 403 and "read-only" in body["error"]
    rw = api.Api(app.surface, "s3cret-token")
    code, body, resp = _call(rw, "POST", "/api/v1/elephants", ANN, token="wrong-token")
    assert code == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")
    code, body, resp = _call(rw, "PUT", "/api/v1/status")
    assert code == 405 and resp.headers["Allow"] == "GET"
    assert _call(rw, "GET", "/api/v2/nothing")[0] == 404
    assert _call(rw, "GET", "/api/v1/decisions?since=x")[1]["error"].startswith("since:")
    assert _call(rw, "GET", "/api/v1/decisions?type=bogus")[1]["error"].startswith("type:")
    assert app.decisions.seq == 0  # nothing was decided by any of it


def test_a_read_token_guards_every_read_and_cannot_write_and_refusals_are_counted(tmp_path, monkeypatch):
    """Issue 40: with a read token, every read but the OpenAPI document needs it (or the write token); the
    read token on a write route is 403, no token 401, a wrong one 401; each refusal is counted and nothing
    was decided by any of it."""
    app = _app(tmp_path, monkeypatch, mode="freeway")
    a = api.Api(app.surface, "write-token-1", read_token="read-token-1", open_reads=False)
    reads = ("/api/v1/status", "/api/v1/fabric", "/api/v1/elephants", "/api/v1/partition", "/api/v1/decisions",
             "/api/v1/counters", "/api/v1/config", "/metrics")
    for path in reads:
        assert _call(a, "GET", path)[0] == 401, path
        assert _call(a, "GET", path, token="read-token-2")[0] == 401, path
        assert _call(a, "GET", path, token="read-token-1")[0] == 200, path
        assert _call(a, "GET", path, token="write-token-1")[0] == 200, path
    assert _call(a, "GET", "/openapi.json")[0] == 200  # the document is public, as the view's page
    code, body, _ = _call(a, "POST", "/api/v1/elephants", ANN, token="read-token-1")
    assert code == 403 and "read token cannot write" in body["error"]
    assert _call(a, "DELETE", "/api/v1/elephants/x", token="read-token-1")[0] == 403
    assert _call(a, "POST", "/api/v1/elephants", ANN)[0] == 401
    assert a.refused == {"unauthorized": 2 * len(reads) + 1, "forbidden": 2}
    assert app.decisions.seq == 0
    app.surface.api_app = a  # as serve() does
    assert app.surface.refusals()["api"] == a.refused


def test_a_body_over_the_bound_is_refused_on_any_route_before_it_is_read(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    a = api.Api(app.surface, "write-token-1")
    req = Request.blank("/api/v1/status", method="GET")
    req.headers["Content-Length"] = str(api.MAX_BODY + 1)
    assert req.get_response(a).status_int == 413
    code, _, _ = _call(a, "POST", "/api/v1/elephants", b"x" * (api.MAX_BODY + 1), token="write-token-1")
    assert code == 413 and a.refused == {"oversized": 2} and app.decisions.seq == 0


@pytest.mark.parametrize("body,field", [
    (b"{", "body"), ([1], "body"), ({**ANN, "extra": 1}, "extra"), ({**ANN, "flows": []}, "flows"),
    ({**ANN, "flows": [{**ANN["flows"][0], "src": "10.0.0"}]}, "flows[0].src"),
    ({**ANN, "flows": [{**ANN["flows"][0], "proto": "sctp"}]}, "flows[0].proto"),
    ({**ANN, "flows": [{**ANN["flows"][0], "proto": {}}]}, "flows[0].proto"),
    ({**ANN, "flows": [{**ANN["flows"][0], "sport": 0}]}, "flows[0].sport"),
    ({**ANN, "size_bytes": 0}, "size_bytes"), ({**ANN, "rate_bps": -1}, "rate_bps"),
    ({**ANN, "rate_bps": 100}, "rate_bps"), ({**ANN, "rate_bps": True}, "rate_bps")])
def test_a_bad_announce_is_refused_with_the_field_named_and_changes_nothing(tmp_path, monkeypatch, body, field):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    code, out, _ = _call(api.Api(app.surface, "s3cret-token"), "POST", "/api/v1/elephants", body, token="s3cret-token")
    assert code == 400 and out["error"].startswith(field + ":"), out
    assert app.decisions.seq == 0 and not app.policy.state.elephants


def test_an_announce_the_fabric_cannot_satisfy_says_why(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    rw = api.Api(app.surface, "s3cret-token")
    code, out, _ = _call(rw, "POST", "/api/v1/elephants", ANN, token="s3cret-token")  # no switch is connected
    assert code == 409 and out["verdict"] == "nack" and out["cause"] == "switch-refused"
    assert "e3_1 is not connected" in out["reason"] or "not connected" in out["reason"]
    assert not app.policy.state.elephants
    code, out, _ = _call(rw, "POST", "/api/v1/elephants", {**ANN, "rate_bps": 2e7}, token="s3cret-token")
    assert code == 409 and "above the host's link rate" in out["reason"] and out["cause"] == "invalid"
    bad_src = {**ANN, "flows": [{**ANN["flows"][0], "src": "192.0.2.1"}]}
    assert _call(rw, "POST", "/api/v1/elephants", bad_src, token="s3cret-token")[1]["reason"].startswith("source")
    assert _call(rw, "DELETE", "/api/v1/elephants/7", token="s3cret-token")[0] == 404
    assert app.surface.api_withdraw("\u00b9")[0] == 404  # str.isdigit() says yes to "¹" (schemathesis found it)
    ecmp = api.Api(_app(tmp_path, monkeypatch, mode="ecmp").surface, "s3cret-token")
    assert _call(ecmp, "POST", "/api/v1/elephants", ANN, token="s3cret-token")[0] == 503
    types = [d["type"] for d in app.decisions.page(0).decisions]
    assert types == ["rollback", "refusal", "refusal"]  # the NACKs, and the install rolled back


# ----- reloading the configuration ----------------------------------------------------------------
def _write(path, text):
    path.write_text(text)
    return str(path)


def test_a_reload_applies_live_settings_names_the_others_and_an_invalid_file_changes_nothing(tmp_path):
    fattree(4, 10).save(tmp_path / "f.json")
    cfg_file = _write(tmp_path / "c.yaml", f"controller:\n  fabric: {tmp_path / 'f.json'}\n  mode: freeway\n"
                                           "freeway:\n  host_elephants: 8\n")
    reread = lambda: config.Config.from_mapping(config.load_file(cfg_file))  # noqa: E731
    old = reread()
    _write(tmp_path / "c.yaml", f"controller:\n  fabric: {tmp_path / 'f.json'}\n  mode: ecmp\n  hedera_poll_s: 2\n"
                                "freeway:\n  host_elephants: 1\n  punt_pps: 10\nefm:\n  threshold: 0.5\n")
    res = config.reload(old, reread)
    assert sorted(k for k, _, _ in res.changed) == ["controller.hedera_poll_s", "efm.threshold",
                                                   "freeway.host_elephants"]
    assert sorted(k for k, _, _ in res.restart) == ["controller.mode", "freeway.punt_pps"]
    new = res.cfg
    assert new.mode == "freeway" and new.hedera_poll_s == 2 and new.freeway_config().host_elephants == 1
    assert new.freeway_config().punt_pps == 200 and new.efm_config().threshold == 0.5
    _write(tmp_path / "c.yaml", "freeway:\n  lol_hgh: 0.4\n")
    res = config.reload(new, reread)
    assert res.cfg is None and res.error == "freeway.lol_hgh: unknown setting; did you mean lol_high?"
    _write(tmp_path / "c.yaml", f"controller:\n  fabric: {tmp_path / 'f.json'}\nfreeway:\n  lol_low: 0.2\n")
    assert "lol_low" in config.reload(new, reread).error  # above lol_high/2: refused as at start
    assert "freeway.host_elephants" in config.live_settings() and "isolation.mice_dscp" not in config.live_settings()


def test_the_policies_take_a_reloaded_configuration(tmp_path, monkeypatch):
    app = _app(tmp_path, monkeypatch, mode="freeway")
    new = config.Config.from_mapping({"fabric": app.cfg.fabric, "mode": "freeway", "link_hold_down_s": 7.0,
                                      "freeway_settings": (("host_elephants", 2), ("lol_high", 0.5)),
                                      "efm_settings": (("threshold", 0.6),)})
    monkeypatch.setattr(config, "_active", new)
    app.period(1.0)
    assert app.policy.state.cfg.host_elephants == 2 and app.policy.state.partition.cfg.lol_high == 0.5
    assert app.policy.rerouter.efm.cfg.threshold == 0.6 and app.liveness.hold_down_s == 7.0


# ----- JSON logs -----------------------------------------------------------------------------------
def test_a_json_log_line_carries_the_decisions_fields():
    rec = logging.LogRecord("freeway.decisions", logging.INFO, __file__, 1, "%s", ("placement",), None)
    rec.decision = {"seq": 3, "time": 12.5, "type": "placement", "elephant": 1, "paths": [["e0_0", "a0_0"]]}
    line = json.loads(JsonFormatter().format(rec))
    assert line["type"] == "placement" and line["seq"] == 3 and line["wall"] == 12.5 and line["paths"] == [["e0_0", "a0_0"]]
    assert line["level"] == "info" and line["logger"] == "freeway.decisions" and line["time"].endswith("+00:00")
    plain = json.loads(JsonFormatter().format(logging.LogRecord("freeway", logging.WARNING, __file__, 1,
                                                                "link %s is down", ("a-b",), None)))
    assert plain["message"] == "link a-b is down" and "type" not in plain


def test_the_openapi_document_names_every_route_the_api_serves(tmp_path, monkeypatch):
    doc = api.Api(_app(tmp_path, monkeypatch, mode="freeway").surface, None).doc
    assert set(doc["paths"]) == {"/api/v1/status", "/api/v1/fabric", "/api/v1/elephants", "/api/v1/elephants/{id}",
                                 "/api/v1/partition", "/api/v1/decisions", "/api/v1/counters", "/api/v1/config",
                                 "/metrics", "/openapi.json", "/", "/index.html", "/view.js", "/view.css"}
    assert SimpleNamespace(**doc["components"]["schemas"]["Link"]).properties["class"]["enum"] == list(
        opstate.LINK_CLASSES)


def test_per_link_series_are_bounded_with_every_down_link_kept_and_all_links_counted(tmp_path, monkeypatch):
    """``metrics_link_series`` bounds the per-link series (a k=48 fabric has 110,592 directed switch links):
    the down links first, then the busiest; the class counts and the occupancy histogram still count all."""
    app = _app(tmp_path, monkeypatch, mode="freeway", metrics_link_series=5)
    app.policy.on_links(0.0, {("e0_0", "a0_0"), ("a0_0", "e0_0")})
    m = _samples(app)
    ups = {k: v for k, v in m.items() if k[0] == "freeway_link_up"}
    total = sum(v for k, v in m.items() if k[0] == "freeway_links")
    assert len(ups) == 5 and m[("freeway_link_series_omitted", ())] == total - 5, (len(ups), total)
    assert ups[("freeway_link_up", (("dst", "a0_0"), ("src", "e0_0")))] == 0  # the down ones are kept
    assert ups[("freeway_link_up", (("dst", "e0_0"), ("src", "a0_0")))] == 0
    assert m[("freeway_link_utilisation_count", ())] >= 0 and ("freeway_link_utilisation_bucket", (("le", "+Inf"),)) in m
    app.cfg = config.Config(fabric=app.cfg.fabric, mode="freeway")  # a reload back to the default: all of k=4
    app.reloads += 1
    m = _samples(app)
    assert len([k for k in m if k[0] == "freeway_link_up"]) == total and m[("freeway_link_series_omitted", ())] == 0


def test_api_json_reads_as_the_standard_librarys():
    """The API's encoder (orjson) writes what ``json.dumps(default=str)`` wrote, as a reader sees it: int
    keys as strings, a dataclass or set as ``str`` gives it, tuples as lists; an integer beyond 64 bits
    through the standard library."""
    import dataclasses
    import json

    from ryu_apps.operators.api import encode_json

    @dataclasses.dataclass
    class Held:
        x: int

    doc = {"links": [{"src": "e0_0", "dst": "a0_0", "utilisation": 0.1234, "bps": 12, "up": True, "lldp": None}],
           7: "seven", "held": Held(3), "ids": {5}, "pair": ("a", 1), "cookie": 0xF5 << 56}
    got = encode_json(doc)
    assert got.endswith(b"\n") and json.loads(got) == json.loads(json.dumps(doc, default=str))
    big = {"n": 2 ** 70}
    assert json.loads(encode_json(big)) == big


def test_the_link_summary_is_the_plain_sort_and_count_in_one_paced_pass():
    """``link_summary`` picks the per-link series and counts classes, LLDP states and the occupancy
    histogram as sorting and counting every link would, and lets the event loop go on every
    ``PAUSE_EVERY`` links (a k=48 scrape held it 0.7 s in one go)."""
    import random
    from collections import Counter

    from ryu_apps.operators.metrics import PAUSE_EVERY, UTIL_BUCKETS, link_summary

    rng = random.Random(7)
    links = [{"src": f"s{rng.randrange(50)}", "dst": f"s{rng.randrange(50)}", "up": rng.random() > 0.05,
              "class": rng.choice(("lol", "hol", "access", "down")),
              "lldp": rng.choice((None, "verified", "waiting")),
              "utilisation": rng.choice((None, 0.0, 0.5, 1.2, round(rng.random(), 2)))} for _ in range(3 * PAUSE_EVERY)]
    pauses = []
    got = link_summary(links, 700, lambda: pauses.append(1))
    want = sorted(links, key=lambda ln: (ln["up"], -(ln["utilisation"] or 0.0)))[:700]
    assert [id(x) for x in got.shown] == [id(x) for x in want]
    assert got.classes == Counter(ln["class"] for ln in links)
    assert got.lldp == Counter(ln["lldp"] for ln in links if ln["lldp"] is not None and ln["src"] < ln["dst"])
    measured = [ln["utilisation"] for ln in links if ln["utilisation"] is not None]
    assert got.at_most == [sum(1 for u in measured if u <= le) for le in UTIL_BUCKETS]
    assert got.measured == len(measured) and abs(got.util_sum - sum(measured)) < 1e-6
    assert len(pauses) == 3
    assert link_summary(links[:10], 700).shown == links[:10]  # under the limit: every link, in order


def test_the_metrics_show_every_link_as_the_api_documents_it_without_building_every_document(tmp_path, monkeypatch):
    """The metrics read the fabric's links as plain items and make the API's document of those shown only
    (k=48: 165,888 links, 2,000 shown): every sample is what the documents of ``/api/v1/fabric`` give."""
    from ryu_apps.operators.metrics import _FabricCollector

    app = _app(tmp_path, monkeypatch, mode="freeway", metrics_link_series=7)
    app.policy.on_links(0.0, {("e0_0", "a0_0"), ("a0_0", "e0_0")})
    lean = app.surface.metrics_fabric()
    assert isinstance(lean["links"][0], tuple) and "hosts" not in lean
    doc = app.surface.api_fabric()
    by_docs = {"switches": doc["switches"], "links": doc["links"], "partition": app.surface.api_partition(),
               "unexpected": doc["unexpected"]}

    class Docs:  # the same collector, handed the API's documents
        link_series = 7
        metrics_fabric = staticmethod(lambda: by_docs)

    class Lean(Docs):
        metrics_fabric = staticmethod(lambda: lean)

    def samples(src):
        return sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                      for fam in _FabricCollector(src).collect() for s in fam.samples)

    got, want = samples(Lean), samples(Docs)
    assert got == want and len([s for s in got if s[0] == "freeway_link_up"]) == 7
    assert len(lean["links"]) == len(doc["links"])
