"""sFlow-RT as a monitoring backend, through its REST API.

Defines a flow (``PUT /flow/NAME/json``) keyed by the TCP 4-tuple with bytes as
the value and an elephant threshold (``PUT /threshold/NAME/json``), then polls
``GET /activeflows/ALL/NAME/json`` (value in bytes/s, dataSource = ifIndex) and
the interfaces' output rate (``ifoutoctets``, bytes/s), which is divided by the
link's capacity from the fabric description: sFlow-RT's own
``ifoututilization`` divides by the ifSpeed the agent reports, and Open
vSwitch reports 10 Gbit/s for a veth (a saturated 10 Mbit/s link read as
0.1%). The rates go into the same estimator as the built-in collector's
samples, so the apps get the same events.

Two API generations answer metrics differently: later sFlow-RT versions have
``GET /table/ALL/ifoutoctets/json`` (rows of entries); 1.60 answers it with
404 and has ``GET /dump/ALL/ifoutoctets/json`` (one flat list of entries with
``agent``, ``dataSource``, ``metricName``, ``metricValue``). The backend tries
the table first and, on a 404, uses the dump from then on.

Flows and utilisation are requested independently: one failing does not
throw the other's answer away, and only a 404 on the flows means the flow
definition is missing. Server errors (down, 4xx/5xx, bad JSON) are logged and
retried on the next poll, never fatal.

``fetch`` does only HTTP (the monitor runs it in an OS thread); ``apply`` feeds
the answers to the estimator (in the monitor's own green thread, the only one
that touches the estimator).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from monitoring.estimator import Estimator
from monitoring.events import LinkLoad
from monitoring.sflow import FiveTuple

LOG = logging.getLogger("freeway.sflowrt")
FLOW_NAME = "freeway"
KEYS = "ipsource,ipdestination,tcpsourceport,tcpdestinationport"
TABLE = "/table/ALL/ifoutoctets/json"  # later versions: rows of entries
DUMP = "/dump/ALL/ifoutoctets/json"  # 1.60: one flat list of entries
# sFlow-RT's ifoutoctets is the rate between the agent's last two counter samples (1 s apart), fetched up to a
# poll (1 s) later: the traffic it measured may have begun this long before the fetch (what EFM needs to know
# before it takes a reading as one of the traffic after a move)
MEASURED_SPAN_S = 2.0


class SFlowRTError(RuntimeError):
    pass


class SFlowRT:
    def __init__(self, url: str, estimator: Estimator, timeout: float = 3.0):
        self.url = url.rstrip("/")
        self.estimator = estimator
        self.timeout = timeout
        self.defined = False
        self.util_path: str | None = None  # TABLE or DUMP once the server has shown which it has
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
        # one threshold for every flow: the slowest access link's (the estimator judges each flow at its own)
        threshold = self.estimator.cfg.elephant_fraction * min(fabric.host_rate_bps(h.ip) for h in fabric.hosts) / 8
        self._request("PUT", f"/flow/{FLOW_NAME}/json", {"keys": KEYS, "value": "bytes", "t": 2})
        self._request("PUT", f"/threshold/{FLOW_NAME}-elephant/json", {"metric": FLOW_NAME, "value": threshold})
        self.defined = True

    def poll(self, now: float) -> list[LinkLoad]:
        """One round in the calling thread: ``apply(now, fetch())``."""
        return self.apply(now, self.fetch())

    def fetch(self) -> tuple[object, object]:
        """One round of HTTP: (re)define if needed, then the flows and the utilisation, each None when
        its request failed. Errors are logged (once each until they change) and counted, not raised."""
        self.stats["polls"] += 1
        errors = []
        flows = util = None
        try:
            if not self.defined:
                self.define()
            flows = self._request("GET", f"/activeflows/ALL/{FLOW_NAME}/json")
        except SFlowRTError as e:
            errors.append(str(e))
            self.defined = self.defined and "HTTP 404" not in str(e)  # 404 on the flows: definition gone
        try:
            util = self._utilisation_request()
        except SFlowRTError as e:
            errors.append(str(e))
        self.stats["errors"] += len(errors)
        err = "; ".join(errors)
        if err and err != self.last_error:
            LOG.warning("sFlow-RT at %s: %s (will retry)", self.url, err)
        self.last_error = err
        return flows, util

    def _utilisation_request(self):
        if self.util_path is None or self.util_path == TABLE:
            try:
                answer = self._request("GET", TABLE)
                if self.util_path is None:
                    LOG.info("sFlow-RT at %s: utilisation from %s", self.url, TABLE)
                self.util_path = TABLE
                return answer
            except SFlowRTError as e:
                if "HTTP 404" not in str(e) or self.util_path == TABLE:
                    raise
                self.util_path = DUMP  # sFlow-RT 1.60: no table API
                LOG.info("sFlow-RT at %s: no %s (HTTP 404): utilisation from %s", self.url, TABLE, DUMP)
        return self._request("GET", DUMP)

    def apply(self, now: float, fetched: tuple[object, object]) -> list[LinkLoad]:
        """Feed one round's answers to the estimator; returns the link loads."""
        flows, util = fetched
        if flows is not None:
            self._flows(now, flows)
        return self._utilisation(now, util) if util is not None else []

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
                ifindex, bytes_s = int(e["dataSource"]), float(e["metricValue"])
            except (KeyError, ValueError, TypeError):
                self.stats["bad_entries"] += 1
                continue
            where = self.estimator.locate(e.get("agent"), ifindex)
            peer = self.estimator.fabric.peer(*where) if where else None
            if peer is None:
                continue
            link = (where[0], peer[0])
            events.append(self.estimator.observe_link(now, link, bytes_s * 8, since=now - MEASURED_SPAN_S))
        return events
