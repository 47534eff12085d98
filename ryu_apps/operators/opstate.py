"""What the operator sees, as plain JSON-ready values (pure): the fabric, the elephants, the partition.

The API, the metrics, ``freeway status`` and the fabric view all read these
functions, which read the policy's state, the liveness model and monitoring's
view and change nothing. Times are seconds: ``measured_age_s`` is how long ago a
link was last measured, ``age_s`` how long an elephant has been placed.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitoring.sflow import FiveTuple
from monitoring.view import View
from ryu_apps.modes.policy import flow_dict
from topology.fabric import Fabric
from topology.paths import path_links

Link = tuple[str, str]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("freeway")
    except PackageNotFoundError:
        return "unknown"


VERSION = _version()
LINK_CLASSES = ("lol", "draining", "hol", "shared", "access", "down")


@dataclass
class SwitchState:
    """A switch's connection as the app tracks it: never seen, reading back its tables, connected
    (programmed), or disconnected; ``since`` is wall-clock time."""

    state: str = "never"
    since: float | None = None


def switches(fabric: Fabric, states: dict[str, SwitchState]) -> list[dict]:
    out = []
    for name in sorted(fabric.switches, key=fabric._order):
        sw = fabric.switches[name]
        st = states.get(name, SwitchState())
        out.append({"name": name, "dpid": f"{sw.dpid:016x}", "role": sw.role, "pod": sw.pod, "index": sw.index,
                    "level": sw.level, "state": st.state, "connected": st.state == "connected",
                    "since": st.since})
    return out


def hosts(fabric: Fabric) -> list[dict]:
    return [{"name": h.name, "ip": h.ip, "mac": h.mac, "switch": h.switch, "port": h.port} for h in fabric.hosts]


def directed_links(fabric: Fabric) -> list[tuple[Link, int, bool]]:
    """Every directed link with the port it leaves from, switch-to-switch first, then host access links
    (both directions; a host's own end has port 0)."""
    out = []
    for ln in fabric.links:
        out.append(((ln.a, ln.b), ln.a_port, False))
        out.append(((ln.b, ln.a), ln.b_port, False))
    for h in fabric.hosts:
        out.append(((h.name, h.switch), 0, True))
        out.append(((h.switch, h.name), h.port, True))
    return out


def link_class(policy, link: Link, access: bool) -> str:
    """LOL (mice), draining (leaving LOL), HOL (elephants), shared (no partition in this mode), access
    (a host's link), or down."""
    if link in policy.dead:
        return "down"
    return "access" if access else policy.link_class(link)


def links(fabric: Fabric, policy, view: View, states: dict[str, SwitchState] | None = None,
          checks: dict[str, str] | None = None) -> list[dict]:
    """Every directed link as the API shows it; ``checks``: LLDP's state of each switch link ('a-b', a < b)."""
    out = []
    for ln, port, access in directed_links(fabric):
        r = view.links.get(ln)
        sw = ln[1] if access and ln[0] not in fabric.switches else ln[0]
        up = ln not in policy.dead and (states is None or states.get(sw, SwitchState()).state != "disconnected")
        out.append({"src": ln[0], "dst": ln[1], "port": port, "capacity_bps": fabric.capacity_bps(ln), "up": up,
                    "class": link_class(policy, ln, access) if up else "down",
                    "counter": None if access else policy.link_counter(ln),
                    "utilisation": round(r.util, 4) if r else None, "bps": round(r.bps) if r else None,
                    "measured_age_s": round(view.now - r.time, 3) if r else None,
                    "stale": ln in policy.stale,
                    "lldp": None if access or not checks else checks.get("%s-%s" % tuple(sorted(ln)))})
    return out


def _measured(view: View, flows) -> float | None:
    rates = [r.rate_bps for f in flows if (r := view.flows.get(f)) is not None]
    return round(sum(rates)) if rates else None


def elephant_totals(policy, view: View) -> dict[str, list[float]]:
    """Per how-placed: [count, allocated bit/s, measured bit/s] (the metrics; cheaper than ``elephants``)."""
    out: dict[str, list[float]] = {}

    def add(how, alloc, measured):
        row = out.setdefault(how, [0, 0.0, 0.0])
        row[0] += 1
        row[1] += alloc or 0.0
        row[2] += measured or 0.0
    seen: set = set()
    for pl in policy.placements():
        seen.update(pl.flows)
        add(pl.how, pl.allocation_bps, _measured(view, pl.flows))
    for flow, r in view.flows.items():
        if r.elephant and flow not in seen:
            add("detected", None, r.rate_bps)
    return out


def _links_of(paths, fabric: Fabric | None = None, flow=None) -> list[list[str]]:
    """The directed links a placement's paths cross, with the two hosts' access links when the flow's
    hosts are known."""
    out = [[a, b] for p in paths for a, b in path_links(p)]
    src = fabric.host_by_ip(flow.src) if fabric is not None else None
    dst = fabric.host_by_ip(flow.dst) if fabric is not None else None
    if src is not None and dst is not None:
        out = [[src.name, src.switch], *out, [dst.switch, dst.name]]
    return out


def _placed_doc(fabric: Fabric, pl) -> dict:
    """What changes only when the placement does (most of an elephant's document)."""
    flow = pl.flows[0]
    return {"id": pl.id, "how": pl.how, "flows": [flow_dict(f) for f in pl.flows],
            "src_host": _host(fabric, flow.src), "dst_host": _host(fabric, flow.dst),
            "allocation_bps": round(pl.allocation_bps) if pl.allocation_bps is not None else None,
            "rateless": pl.rateless, "measured_bps": None, "paths": [list(p) for p in pl.paths],
            "links": _links_of(pl.paths, fabric, flow), "meter": pl.meter,
            "cookie": f"{pl.cookie:016x}" if pl.cookie is not None else None, "age_s": None}


def elephants(policy, view: View, cache: dict | None = None) -> list[dict]:
    """Every elephant the controller knows of, placed or only detected:

    - what the mode placed (``Policy.placements``): ``announced`` / ``adopted`` (Freeway's; id = the
      elephant number, as in the cookie and the ACK), ``efm`` (flows EFM moved, id ``efm-N``, in EFM
      modes and Freeway's unannounced elephants), ``hedera`` (Global First Fit's, id ``hedera-N``);
    - ``detected``: elephants monitoring reports that no one placed (they keep the path ECMP gave them;
      ``links`` are the links they were sampled on).
    """
    out: list[dict] = []
    seen: set[FiveTuple] = set()
    fresh: dict = {}
    for pl in policy.placements():
        doc = cache.get(pl) if cache is not None else None
        if doc is None:
            doc = _placed_doc(policy.fabric, pl)
        fresh[pl] = doc
        seen.update(pl.flows)
        out.append({**doc, "measured_bps": _measured(view, pl.flows),
                    "age_s": round(view.now - pl.since, 1) if pl.since is not None and view.now >= pl.since
                    else None})
    if cache is not None:  # keep only the live elephants' parts
        cache.clear()
        cache.update(fresh)
    for flow, r in sorted(view.flows.items(), key=lambda fr: str(fr[0])):
        if not r.elephant or flow in seen:
            continue
        out.append({"id": f"detected-{flow.src}:{flow.sport}-{flow.dst}:{flow.dport}-{flow.proto}", "how": "detected",
                    "flows": [flow_dict(flow)], "src_host": _host(policy.fabric, flow.src),
                    "dst_host": _host(policy.fabric, flow.dst), "allocation_bps": None, "rateless": True,
                    "measured_bps": round(r.rate_bps), "paths": [], "links": sorted([a, b] for a, b in r.links),
                    "meter": None, "cookie": None, "age_s": None, "marked": policy.is_marked(flow)})
    return out


def _host(fabric: Fabric, ip: str) -> str | None:
    h = fabric.host_by_ip(ip)
    return h.name if h is not None else None


def partition(policy, view: View) -> dict:
    """Freeway's partition: per ToR pair that is active (mice seen within ``active_s``) or away from
    the minimum, its low-latency paths; and the link counts. ``{"mode": ...}`` alone in other modes."""
    held = policy.partition()
    if held is None:
        return {"mode": policy.mode, "partitioned": False, "pairs": []}
    part, active_s = held
    active = view.active_pairs(active_s)
    pairs = []
    for pair in sorted(set(part.n) | {p for p in active if part.is_partitioned(p)}):
        pairs.append({"src": pair[0], "dst": pair[1], "lol_paths": part.n_lol(pair), "active": pair in active,
                      "paths": [list(p) for p in part.lol_paths(pair)]})
    return {"mode": policy.mode, "partitioned": True, "lol_min": part.n_min, "lol_max": part.n_max,
            "lol_links": sum(1 for c in part.counter.values() if c > 0), "draining_links": len(part.draining),
            "hol_links": sum(1 for ln in _fabric_links(policy.fabric) if part.is_hol(ln)),
            "lend": policy.lending(), "lent_links": [f"{a}>{b}" for a, b in policy.lent_links()], "pairs": pairs}


def _fabric_links(fabric: Fabric) -> list[Link]:
    return [ln for ln, _, access in directed_links(fabric) if not access]
