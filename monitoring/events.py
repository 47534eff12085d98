"""What monitoring tells the apps: plain, serialisable events."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from monitoring.sflow import FiveTuple


@dataclass(frozen=True)
class LinkLoad:
    time: float
    link: tuple[str, str]  # directed: (from, to)
    bps: float
    utilisation: float  # smoothed, fraction of capacity


@dataclass(frozen=True)
class ElephantStart:
    time: float
    flow: FiveTuple
    rate_bps: float
    switch: str  # ingress ToR
    port: int


@dataclass(frozen=True)
class ElephantEnd:
    time: float
    flow: FiveTuple
    reason: str  # idle | below-threshold
    duration_s: float


@dataclass(frozen=True)
class PortState:
    """A switch port's operational status changed, as its sFlow agent reports it (ifStatus bit 1)."""

    time: float
    switch: str
    port: int
    up: bool


def to_json(ev) -> dict:
    """A JSON-ready dict with a ``type`` field (for the events file and logs)."""
    d = asdict(ev)
    d["type"] = {LinkLoad: "link_load", ElephantStart: "elephant_start", ElephantEnd: "elephant_end",
                 PortState: "port_state"}[type(ev)]
    if "flow" in d:
        f = ev.flow
        d["flow"] = {"src": f.src, "dst": f.dst, "proto": f.proto, "sport": f.sport, "dport": f.dport}
    return d
