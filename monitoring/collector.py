"""The sFlow collector: datagrams in, estimator updated, load events out.

``handle`` is pure (bytes and ``now`` in, events out); the app runs the UDP
socket in a green thread and calls it. Malformed datagrams are counted and
dropped; nothing a datagram contains can stop the collector. When every switch exports under an agent
address of its own (as switches on many hosts do, and the OVSDB map then names each one), a datagram from
any other agent address is counted (``unknown_agent``) and dropped: sFlow has no authentication, so this
is the only check there is (docs/security.md says what a datagram with a switch's own address can still do).
"""

from __future__ import annotations

import ipaddress
import logging

from monitoring.estimator import CounterBatch, Estimator
from monitoring.events import LinkLoad
from monitoring.sflow import Datagram, SFlowDecodeError, decode_datagram

LOG = logging.getLogger("freeway.monitor")


SOURCES = ("agent", "any")


def source_matches(agent: str, source: str) -> bool:
    """A datagram's UDP source may carry its agent address: the agent's own address, or, for an agent on a
    loopback address (switches emulated on this host, whose bridges all send from 127.0.0.1), any loopback
    address."""
    if agent == source:
        return True
    try:
        a, s = ipaddress.ip_address(agent), ipaddress.ip_address(source)
    except ValueError:
        return False
    return a == s or (a.is_loopback and s.is_loopback)


class Collector:
    def __init__(self, estimator: Estimator, sources: str = "agent"):
        if sources not in SOURCES:
            raise ValueError(f"sflow_sources: one of {', '.join(SOURCES)}, got {sources!r}")
        self.estimator = estimator
        self.sources = sources
        self.stats = {"datagrams": 0, "decode_errors": 0, "flow_samples": 0, "counter_samples": 0, "unknown_agent": 0,
                      "agent_not_source": 0}
        self.last_error = ""

    def handle(self, now: float, data: bytes, loads: bool = True, source: str | None = None) -> list[LinkLoad]:
        """A datagram's samples into the estimator; what they changed as events (link loads only if
        ``loads``: one per counter sample, 138,240 a second at k=48, made for nobody when no app listens).
        ``source``: the address it came from, which must carry its agent address (``sources`` agent)."""
        return self.handle_many([(now, data, source)], loads)

    def handle_many(self, datagrams, loads: bool = True) -> list[LinkLoad]:
        """``handle`` for several datagrams, each (when received, its bytes, where from), in the order they
        came: their counters are folded at once (``Estimator.fold_counters``: a reader that finds many waiting
        takes them in one go). The events: the ports' changes, then the link loads, each in that order."""
        est, batch, events = self.estimator, CounterBatch(), []
        for now, data, source in datagrams:
            dg = self._accept(data, source)
            if dg is None:
                continue
            self.stats["datagrams"] += 1
            if dg.counter_samples:
                self.stats["counter_samples"] += len(dg.counter_samples)
                events += est.gather_counters(now, dg.counter_samples, dg.agent, batch)
            for fs in dg.flow_samples:
                self.stats["flow_samples"] += 1
                est.on_flow_sample(now, fs, dg.agent)
        return events + est.fold_counters(batch, loads)

    def _accept(self, data: bytes, source: str | None) -> Datagram | None:
        """The datagram decoded, or None (counted) if it is malformed or from no switch of the fabric."""
        try:
            dg = decode_datagram(data, lean=True)
        except SFlowDecodeError as e:
            return self._dropped(str(e))
        except Exception as e:  # a decoder bug, not the datagram's: still dropped and counted, never fatal
            LOG.exception("sFlow decoder failed on a %d-byte datagram", len(data))
            return self._dropped(f"decoder error: {type(e).__name__}: {e}")
        if source is not None and self.sources == "agent" and not source_matches(dg.agent, source):
            self.stats["agent_not_source"] += 1  # a datagram naming another agent than where it came from
            if self.stats["agent_not_source"] in (1, 10, 100) or self.stats["agent_not_source"] % 1000 == 0:
                LOG.warning("dropped sFlow datagram naming agent %s from %s (%d so far)", dg.agent, source,
                            self.stats["agent_not_source"])
            return None
        if not self.estimator.knows_agent(dg.agent):  # not a switch of the fabric: spoofed or misdirected
            self.stats["unknown_agent"] += 1
            if self.stats["unknown_agent"] in (1, 10, 100) or self.stats["unknown_agent"] % 1000 == 0:
                LOG.warning("dropped sFlow datagram from agent %s, not a switch of the fabric (%d so far)", dg.agent,
                            self.stats["unknown_agent"])
            return None
        return dg

    def _dropped(self, why: str) -> None:
        self.stats["decode_errors"] += 1
        self.last_error = why
        if self.stats["decode_errors"] in (1, 10, 100) or self.stats["decode_errors"] % 1000 == 0:
            LOG.warning("dropped malformed sFlow datagram (%d so far): %s", self.stats["decode_errors"], why)
        return None
