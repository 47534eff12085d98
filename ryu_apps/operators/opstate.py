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


PAUSE_EVERY = 4096  # directed links looked at between two calls of a caller's ``pause``


def _link_states(fabric: Fabric, policy, view: View, states: dict[str, SwitchState] | None, only=None,
                 pause=None):
    """(directed link, port, access, up, class, reading) of every directed link (of those with an end in
    ``only``, a set of switch and host names, if given). ``pause()``, if given, is called every
    ``PAUSE_EVERY`` links: a k=48 fabric has 165,888 of them, a second of work that a caller in an event
    loop must not do in one go (what waits on the loop: handshakes, echo replies, barriers)."""
    for i, (ln, port, access) in enumerate(directed_links(fabric)):
        if pause is not None and i % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        if only is not None and ln[0] not in only and ln[1] not in only:
            continue
        r = view.links.get(ln)
        sw = ln[1] if access and ln[0] not in fabric.switches else ln[0]
        up = ln not in policy.dead and (states is None or states.get(sw, SwitchState()).state != "disconnected")
        yield ln, port, access, up, (link_class(policy, ln, access) if up else "down"), r


def links(fabric: Fabric, policy, view: View, states: dict[str, SwitchState] | None = None,
          checks: dict[str, str] | None = None, only=None, pause=None) -> list[dict]:
    """Every directed link as the API shows it (those with an end in ``only``, if given); ``checks``:
    LLDP's state of each switch link ('a-b', a < b); ``pause`` as ``_link_states`` calls it."""
    return [link_doc(fabric, policy, view, checks, item)
            for item in _link_states(fabric, policy, view, states, only, pause)]


def link_states(fabric: Fabric, policy, view: View, states: dict[str, SwitchState] | None = None,
                pause=None) -> list[tuple]:
    """Every directed link as ``_link_states`` gives it, without its API document: what a caller that
    counts every link and shows a few (the metrics: 165,888 links at k=48, 2,000 shown) needs, with
    ``link_doc`` for the few."""
    return list(_link_states(fabric, policy, view, states, None, pause))


def link_lldp(checks: dict[str, str] | None, ln: Link, access: bool) -> str | None:
    """LLDP's state of a switch link (None: an access link, or no check)."""
    return None if access or not checks else checks.get("%s-%s" % tuple(sorted(ln)))


def link_util(r) -> float | None:
    return round(r.util, 4) if r else None


def link_fields(checks: dict[str, str] | None, item: tuple) -> tuple:
    """What the metrics count of a ``_link_states`` item: src, dst, up, class, LLDP state, utilisation."""
    ln, _, access, up, cls, r = item
    return ln[0], ln[1], up, cls, link_lldp(checks, ln, access), link_util(r)


def link_doc(fabric: Fabric, policy, view: View, checks: dict[str, str] | None, item: tuple) -> dict:
    """One directed link's API document, from its ``_link_states`` item."""
    ln, port, access, up, cls, r = item
    return {"src": ln[0], "dst": ln[1], "port": port, "capacity_bps": fabric.capacity_bps(ln), "up": up,
            "class": cls, "counter": None if access else policy.link_counter(ln),
            "utilisation": link_util(r), "bps": round(r.bps) if r else None,
            "measured_age_s": round(view.now - r.time, 3) if r else None,
            "stale": ln in policy.stale, "lldp": link_lldp(checks, ln, access)}


GROUP_TORS = 16  # a group of a fabric without pods (a leaf-spine): this many ToRs, in order


def groups(fabric: Fabric) -> dict[str, str]:
    """Every switch and host below the top tier -> the group the fabric view draws it in when the fabric
    is too large to draw whole: a fat-tree's pods (``pod3``: its edge and aggregation switches and their
    hosts); in a fabric whose switches share one pod (a leaf-spine), blocks of 16 ToRs in order
    (``l0..l15``) with their hosts. The top tier (cores, spines) is in none."""
    top = max(sw.level for sw in fabric.switches.values())
    below = [sw for sw in fabric.switches.values() if sw.level < top]
    out: dict[str, str] = {}
    if len({sw.pod for sw in below}) > 1:
        for sw in below:
            out[sw.name] = f"pod{sw.pod}"
    else:
        tors = fabric.tors()
        for i in range(0, len(tors), GROUP_TORS):
            block = tors[i:i + GROUP_TORS]
            name = block[0] if len(block) == 1 else f"{block[0]}..{block[-1]}"
            for t in block:
                out[t] = name
        for sw in below:  # a middle tier without pods: with its first ToR's group
            if sw.name not in out:
                down = [n for n in fabric.down_neighbors(sw.name) if n in out]
                out[sw.name] = out[down[0]] if down else "other"
    for h in fabric.hosts:
        out[h.name] = out.get(h.switch, "other")
    return out


def group_members(fabric: Fabric, group_map: dict[str, str], group: str) -> tuple[set[str], set[str]]:
    """The switches and hosts of ``group``, and the top-tier switches they link to."""
    members = {n for n, g in group_map.items() if g == group}
    return members, {p for n in members if n in fabric.switches for p in fabric.up_neighbors(n)} - members


def group_summary(fabric: Fabric, policy, view: View, group_map: dict[str, str],
                  states: dict[str, SwitchState] | None = None, checks: dict[str, str] | None = None,
                  pause=None) -> list[dict]:
    """One row per group (``groups``), in the fabric's order: its switches and their states, hosts, the
    directed links with an end in it (an uplink to the top tier is its group's) and how many are down,
    by class, unverified by LLDP (``missing`` or ``miswired``) and stale, its most loaded link, and the
    rate leaving it upwards (bit/s)."""
    rows: dict[str, dict] = {}
    for name in dict.fromkeys(group_map.get(n) for n in sorted(fabric.switches, key=fabric._order)):
        if name is not None:
            rows[name] = {"group": name, "switches": 0, "states": {}, "hosts": 0, "links": 0, "links_down": 0,
                          "classes": {}, "lldp_problems": 0, "stale": 0, "utilisation_max": None,
                          "hottest": None, "up_bps": 0}
    for name in fabric.switches:
        g = group_map.get(name)
        if g is not None:
            r = rows[g]
            r["switches"] += 1
            st = (states or {}).get(name, SwitchState()).state
            r["states"][st] = r["states"].get(st, 0) + 1
    for h in fabric.hosts:
        rows[group_map[h.name]]["hosts"] += 1
    for key, state in (checks or {}).items():  # LLDP's problems, by the group of either end
        a, _, b = key.partition("-")
        g = group_map.get(a) or group_map.get(b)
        if state in ("missing", "miswired") and g is not None:
            rows[g]["lldp_problems"] += 1
    stale, get = policy.stale, group_map.get
    for ln, _port, access, up, cls, reading in _link_states(fabric, policy, view, states, pause=pause):
        g = get(ln[0]) or get(ln[1])
        if g is None:
            continue
        r = rows[g]
        r["links"] += 1
        if not up:
            r["links_down"] += 1
        classes = r["classes"]
        classes[cls] = classes.get(cls, 0) + 1
        if ln in stale:
            r["stale"] += 1
        if reading is not None:
            if r["utilisation_max"] is None or reading.util > r["utilisation_max"]:
                r["utilisation_max"], r["hottest"] = reading.util, f"{ln[0]}>{ln[1]}"
            if not access and get(ln[1]) is None:
                r["up_bps"] += reading.bps
    for r in rows.values():
        r["up_bps"] = round(r["up_bps"])
        if r["utilisation_max"] is not None:
            r["utilisation_max"] = round(r["utilisation_max"], 4)
    return list(rows.values())


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


def partition(policy, view: View, pause=None) -> dict:
    """Freeway's partition: per ToR pair that is active (mice seen within ``active_s``) or away from
    the minimum, its low-latency paths; and the link counts. ``{"mode": ...}`` alone in other modes.
    ``pause()``, if given, is called every ``PAUSE_EVERY`` pairs and links."""
    held = policy.partition()
    if held is None:
        return {"mode": policy.mode, "partitioned": False, "pairs": []}
    part, active_s = held
    active = view.active_pairs(active_s)
    pairs = []
    for i, pair in enumerate(sorted(set(part.n) | {p for p in active if part.is_partitioned(p)})):
        if pause is not None and i % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        pairs.append({"src": pair[0], "dst": pair[1], "lol_paths": part.n_lol(pair), "active": pair in active,
                      "paths": [list(p) for p in part.lol_paths(pair)]})
    return {"mode": policy.mode, "partitioned": True, "lol_min": part.n_min, "lol_max": part.n_max,
            "lol_links": sum(1 for c in part.counter.values() if c > 0), "draining_links": len(part.draining),
            "hol_links": _count(_fabric_links(policy.fabric), part.is_hol, pause),
            "lend": policy.lending(), "lent_links": [f"{a}>{b}" for a, b in policy.lent_links()], "pairs": pairs}


def _count(items, test, pause=None) -> int:
    n = 0
    for i, x in enumerate(items):
        if pause is not None and i % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        if test(x):
            n += 1
    return n


def _fabric_links(fabric: Fabric) -> list[Link]:
    return [ln for ln, _, access in directed_links(fabric) if not access]
