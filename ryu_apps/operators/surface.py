"""What the operator sees and asks of a running controller: the API's documents, the metrics' state, and
the API's writes (an announce on a host's behalf, a withdrawal).

``Surface`` reads the controller app (its policy, liveness model, switch states, link watch, queue keeper,
cluster handover and monitoring's view) through ``opstate``, whose functions are pure, and caches each
document per *epoch*: a period, a decision, a link or switch change, a reload, a write. A client polling
every 100 ms costs one computation a second while nothing happens. Writes go through the policy exactly
as a handshake does, and the answer waits for the switches' barriers like the host's ACK.
"""

from __future__ import annotations

import functools
import random
import time

from ryu_apps import config
from ryu_apps.host import handshake as hs
from ryu_apps.openflow.framework import hub
from ryu_apps.operators import opstate

BARRIER_TIMEOUT_S = 3.0
API_ANSWER_S = 2 * BARRIER_TIMEOUT_S  # an API announce waits this long for the switches' confirmation


def _pause() -> None:
    """Between parts of a document of the whole fabric: what waits on the event loop goes on (at k=48 the
    links alone are a second of work; a scrape of /metrics in one go held handshakes and echo replies)."""
    hub.sleep(0)


class Surface:
    """The operator's side of one controller app (``ctl``)."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.writes = 0  # announces and withdrawals through the API (part of the epoch)
        self._elephants: tuple = (None, [])
        self._totals: tuple = (None, {})  # (epoch, the metrics' elephant totals)
        self._parts: dict = {}  # the unchanging part of each elephant's document
        self.api_app = None  # the API's WSGI application, once served (its refusals)
        self._groups: dict[str, str] | None = None  # the fabric view's groups (opstate.groups), once

    @property
    def decisions(self):
        return self.ctl.decisions

    @property
    def metrics(self):
        return self.ctl.metrics

    def forget(self) -> None:
        """A fresh policy (a change of leader): nothing cached of the old one's elephants counts."""
        self._parts.clear()

    # ----- epochs --------------------------------------------------------------------------------
    def fabric_epoch(self) -> tuple:
        """Changes whenever the fabric as the operator sees it may have: every period (loads, the
        partition), every link or switch change, a reload."""
        c = self.ctl
        return c.periods, c.liveness.version, c.switch_changes, c.reloads

    def epoch(self) -> tuple:
        """... and every write through the API (so that what an operator announced or withdrew shows at
        once). The API answers from its cache while it stays: the elephants shown are at most a period
        old, however many handshakes arrive (recomputing them on every one would take the loop's time
        from the handshakes themselves)."""
        return self.fabric_epoch() + (self.writes,)

    @property
    def link_series(self) -> int:
        """Per-link series /metrics shows at most (``metrics_link_series``)."""
        return self.ctl.cfg.metrics_link_series

    pause = staticmethod(_pause)  # what the metrics call between parts of the whole fabric's links

    # ----- reads --------------------------------------------------------------------------------
    def lldp_doc(self) -> dict:
        return self.ctl.linkwatch.doc(time.monotonic(), self.ctl.master())

    def groups(self) -> dict[str, str]:
        if self._groups is None:
            self._groups = opstate.groups(self.ctl.fabric)
        return self._groups

    def group_names(self) -> list[str]:
        return list(dict.fromkeys(self.groups().values()))

    def api_fabric(self, level: str = "all", group: str | None = None) -> dict:
        """The whole fabric (``level`` all), one row per group (``groups``: what the view draws first when
        the fabric is large; only ``group``'s if given), or one group's switches, hosts and links and the
        top-tier switches it links to."""
        c = self.ctl
        view = c.shown_view()
        check = self.lldp_doc()
        if level == "groups":
            top = [s for s in opstate.switches(c.fabric, c.switch_states) if s["name"] not in self.groups()]
            rows = opstate.group_summary(c.fabric, c.policy, view, self.groups(), c.switch_states, check["links"],
                                         _pause)
            return {"topo": c.fabric.topo, "level": "groups",
                    "groups": [r for r in rows if group is None or r["group"] == group],
                    "top": top, "unexpected": check["unexpected"]}
        only, above = (None, set()) if group is None else opstate.group_members(c.fabric, self.groups(), group)
        switches = opstate.switches(c.fabric, c.switch_states)
        hosts = opstate.hosts(c.fabric)
        if only is not None:
            switches = [s for s in switches if s["name"] in only or s["name"] in above]
            hosts = [h for h in hosts if h["name"] in only]
        doc = {"topo": c.fabric.topo, "switches": switches,
               "links": opstate.links(c.fabric, c.policy, view, c.switch_states, check["links"], only, _pause),
               "hosts": hosts, "unexpected": check["unexpected"]}
        return doc if group is None else {**doc, "level": "group", "group": group}

    def api_elephants(self) -> list[dict]:
        """Every elephant (computed once per epoch: the API, the status and the metrics share it)."""
        epoch = self.epoch()
        if self._elephants[0] != epoch:
            self._elephants = (epoch, opstate.elephants(self.ctl.policy, self.ctl.shown_view(), self._parts))
        return self._elephants[1]

    def api_partition(self) -> dict:
        return opstate.partition(self.ctl.policy, self.ctl.shown_view(), _pause)

    def cluster_doc(self) -> dict | None:
        return self.ctl.handover.doc() if self.ctl.handover is not None else None

    def api_status(self) -> dict:
        c, now = self.ctl, time.time()
        return {"version": opstate.VERSION, "mode": c.policy.mode, "isolation": c.cfg.isolation,
                "monitor": c.cfg.monitor, "started": round(c.started, 3), "uptime_s": round(now - c.started, 1),
                "fabric": {"topo": c.fabric.topo, "switches": len(c.fabric.switches),
                           "links": len(c.fabric.links), "hosts": len(c.fabric.hosts)},
                "switches_connected": sum(st.state == "connected" for st in c.switch_states.values()),
                "links_down": sum(1 for a, b in c.policy.dead if a < b),
                "elephants": sum(int(row[0]) for row in self.elephant_totals().values()),
                "decisions": c.decisions.seq,
                "config_file": config.source_file(), "config_loaded": round(c.config_loaded, 3),
                "writable": bool(c.cfg.api_token_file), "cluster": self.cluster_doc(),
                "links_unverified": c.linkwatch.unverified(c.master()),
                "sflow_workers": (c.monitor.pool.status() if c.monitor is not None and getattr(c.monitor, "pool", None)
                                  is not None else None),
                "queues": dict(c.queues.state) if c.cfg.isolation else None}

    def api_counters(self) -> dict:
        snap = self.ctl.snapshot()
        monitor = self.ctl.monitor
        return {"controller": snap["controller"], "freeway": snap.get("freeway", {}),
                "monitor": monitor.stats() if monitor is not None else {}, "state": snap["state"]}

    def api_config(self) -> dict:
        c = self.ctl
        return {"settings": config.sections(c.cfg, redact=True), "live": config.live_settings(),
                "config_file": config.source_file(), "loaded": round(c.config_loaded, 3),
                "restart_needed": [{"key": k, "running": old, "file": new} for k, old, new in c.restart_needed]}

    def elephant_totals(self) -> dict:
        """The elephants' totals (``opstate.elephant_totals``) once per epoch, as the API's elephants
        document, shared by the metrics and the status: a scrape does not walk every elephant (some
        2,500 at 500 announces/s)."""
        epoch = self.epoch()
        if self._totals[0] != epoch:
            self._totals = (epoch, opstate.elephant_totals(self.ctl.policy, self.ctl.shown_view()))
        return self._totals[1]

    def metrics_state(self) -> dict:
        c = self.ctl
        return {"mode": c.policy.mode, "isolation": c.cfg.isolation, "monitor": c.cfg.monitor,
                "elephants": self.elephant_totals(),
                "monitor_stats": c.monitor.stats() if c.monitor is not None else {},
                "transactions": len(c.executor), "cluster": self.cluster_doc(), "refusals": self.refusals()}

    def refusals(self) -> dict[str, dict[str, int]]:
        """What each channel refused, by reason: OpenFlow connections (the guard), API requests, sFlow
        datagrams from agents not in the fabric."""
        guard = getattr(self.ctl, "channel_guard", None)
        out = guard.counts() if guard is not None else {}
        if self.api_app is not None and self.api_app.refused:
            out["api"] = dict(self.api_app.refused)
        stats = self.ctl.monitor.stats() if self.ctl.monitor is not None else {}
        sflow = {reason: stats.get(key, 0) for reason, key in (("unknown-agent", "unknown_agent"),
                                                                ("agent-not-source", "agent_not_source"))}
        if any(sflow.values()):
            out["sflow"] = {k: v for k, v in sflow.items() if v}
        return out

    def metrics_fabric(self) -> dict:
        """What the metrics show of the fabric. Not ``api_fabric``'s document: at k=48 that is 165,888 link
        documents and 27,648 hosts' for a scrape that counts the links and shows 2,000 of them (1.1 s of the
        event loop a scrape, 2026-12-02); here the links are the plain items, ``link_doc`` makes the
        documents of those shown, ``link_fields`` gives what is counted of each."""
        c = self.ctl
        view, check = c.shown_view(), self.lldp_doc()
        checks = check["links"]
        return {"switches": opstate.switches(c.fabric, c.switch_states),
                "links": opstate.link_states(c.fabric, c.policy, view, c.switch_states, _pause),
                "link_doc": functools.partial(opstate.link_doc, c.fabric, c.policy, view, checks),
                "link_fields": functools.partial(opstate.link_fields, checks),
                "partition": self.api_partition(), "unexpected": check["unexpected"]}

    def metrics_exposition(self) -> bytes:
        return self.ctl.metrics.exposition(self.fabric_epoch())

    # ----- writes -------------------------------------------------------------------------------
    def api_announce(self, subflows, rate_kbps: int, size: int) -> tuple[int, dict]:
        """An announce on behalf of the flows' source host; waits for the switches' confirmation."""
        c = self.ctl
        if not c.policy.takes_announces:
            return 503, {"error": f"announces need --mode freeway (this controller runs {c.policy.mode})"}
        if not c.master():
            st = c.handover.state
            return 503, {"error": f"this controller ({st.node}) is not the cluster's leader: announce through the "
                                  f"leader's API ({st.leader or 'not elected yet'})"}
        host = c.fabric.host_by_ip(subflows[0].src)
        if host is None:
            return 409, {"verdict": "nack", "reason": f"source {subflows[0].src} is not a host of this fabric",
                         "cause": "invalid"}
        payload = hs.encode(hs.Announce(random.getrandbits(63), size, rate_kbps, tuple(subflows)))
        answered, box = hub.Event(), {}

        def deliver(reply: bytes | None, event: dict) -> None:
            box.update(reply=hs.decode(reply) if reply is not None else None, event=event)
            answered.set()
        c.react(c.policy.announce(time.monotonic(), host.name, payload, deliver))
        answered.wait(API_ANSWER_S)
        self.writes += 1
        if not answered.is_set():
            return 504, {"error": f"no answer within {API_ANSWER_S:.0f} s (the switches did not confirm); the "
                                  "install goes on or is rolled back", "elephant": c.policy.placed_id(subflows[0])}
        reply, event = box["reply"], box["event"]
        if not isinstance(reply, hs.Ack):
            return 409, {"verdict": "nack", "reason": event.get("reason", ""), "cause": event.get("cause", "invalid")}
        eid = str(event["elephant"])
        el = next((e for e in self.api_elephants() if e["id"] == eid), None)
        if el is None:  # gone again meanwhile (withdrawn, expired, released around a failure)
            el = {"id": eid, "how": "announced", "flows": event["flows"], "src_host": host.name, "dst_host": None,
                  "allocation_bps": event["rate_bps"], "rateless": not rate_kbps, "measured_bps": None,
                  "paths": event["paths"], "links": [], "meter": None, "cookie": None, "age_s": None}
        return 201, {"verdict": "ack", "elephant": el, "allocation_bps": reply.rate_kbps * 1000}

    def api_withdraw(self, ident: str) -> tuple[int, dict]:
        c = self.ctl
        if not c.master():
            return 404, {"error": "this controller is not the cluster's leader: withdraw through the leader's API "
                                  f"({c.handover.state.leader or 'not elected yet'})"}
        r = c.policy.withdraw(time.monotonic(), int(ident)) if (
            ident.isascii() and ident.isdigit() and len(ident) < 19) else None
        if r is None:
            return 404, {"error": f"no Freeway elephant {ident!r} (only announced and adopted elephants, by the id "
                                  "/api/v1/elephants shows, can be withdrawn)"}
        c.react(r)
        self.writes += 1
        return 200, {"withdrawn": ident}
