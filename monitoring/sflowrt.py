"""sFlow-RT as a monitoring backend, through its REST API.

Defines a flow (``PUT /flow/NAME/json``) keyed by the TCP 4-tuple with bytes as
the value and an elephant threshold (``PUT /threshold/NAME/json``), then polls
``GET /activeflows/ALL/NAME/json`` (value in bytes/s, dataSource = ifIndex) and
``GET /table/ALL/ifoututilization/json`` (percent per interface). The rates go
into the same estimator as the built-in collector's samples, so the apps get
the same events. Server errors (down, 4xx/5xx, bad JSON) are logged and
retried on the next poll, never fatal.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from .estimator import Estimator
from .events import LinkLoad
from .sflow import FiveTuple

LOG = logging.getLogger("freeway.sflowrt")
FLOW_NAME = "freeway"
KEYS = "ipsource,ipdestination,tcpsourceport,tcpdestinationport"


class SFlowRTError(RuntimeError):
    pass


class SFlowRT:
    def __init__(self, url: str, estimator: Estimator, timeout: float = 3.0):
        self.url = url.rstrip("/")
        self.estimator = estimator
        self.timeout = timeout
        self.defined = False
        self.stats = {"polls": 0, "errors": 0, "bad_entries": 0}
        self.last_error = ""

    def _request(self, method: str, path: str, body: object | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise SFlowRTError(f"{method} {path}: HTTP {e.code}") from None
        except (urllib.error.URLError, OSError) as e:
            raise SFlowRTError(f"{method} {path}: {getattr(e, 'reason', e)}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise SFlowRTError(f"{method} {path}: response is not JSON") from None

    def define(self) -> None:
        """Define the flow and the elephant threshold (bytes/s at the configured fraction of link rate)."""
        fabric = self.estimator.fabric
        threshold = self.estimator.cfg.elephant_fraction * fabric.link_rate_mbps * 1e6 / 8
        self._request("PUT", f"/flow/{FLOW_NAME}/json", {"keys": KEYS, "value": "bytes", "t": 2})
        self._request("PUT", f"/threshold/{FLOW_NAME}-elephant/json", {"metric": FLOW_NAME, "value": threshold})
        self.defined = True

    def poll(self, now: float) -> list[LinkLoad]:
        """One round: (re)define if needed, read flows and utilisation. Errors are logged, not raised."""
        self.stats["polls"] += 1
        try:
            if not self.defined:
                self.define()
            flows = self._request("GET", f"/activeflows/ALL/{FLOW_NAME}/json")
            util = self._request("GET", "/table/ALL/ifoututilization/json")
        except SFlowRTError as e:
            self.stats["errors"] += 1
            if str(e) != self.last_error:
                LOG.warning("sFlow-RT at %s: %s (will retry)", self.url, e)
            self.last_error = str(e)
            self.defined = self.defined and "HTTP 404" not in str(e)
            return []
        self.last_error = ""
        self._flows(now, flows)
        return self._utilisation(now, util)

    def _flows(self, now: float, entries) -> None:
        rates: dict[FiveTuple, list[float]] = {}
        for e in entries if isinstance(entries, list) else []:
            try:
                src, dst, sport, dport = str(e["key"]).split(",")
                flow = FiveTuple(src, dst, 6, int(sport), int(dport))
                bps = float(e["value"]) * 8
            except (KeyError, ValueError, TypeError):
                self.stats["bad_entries"] += 1
                continue
            rates.setdefault(flow, []).append(bps)
        for flow, vals in rates.items():
            self.estimator.observe_flow_rate(now, flow, sum(vals) / len(vals))

    def _utilisation(self, now: float, entries) -> list[LinkLoad]:
        events = []
        flat = [x for row in entries for x in (row if isinstance(row, list) else [row])] \
            if isinstance(entries, list) else []
        for e in flat:
            try:
                ifindex, pct = int(e["dataSource"]), float(e["metricValue"])
            except (KeyError, ValueError, TypeError):
                self.stats["bad_entries"] += 1
                continue
            where = self.estimator.ifmap.get(ifindex)
            peer = self.estimator.fabric.peer(*where) if where else None
            if peer is None:
                continue
            link = (where[0], peer[0])
            events.append(self.estimator.observe_link(now, link, pct / 100 * self.estimator.fabric.capacity_bps(link)))
        return events
