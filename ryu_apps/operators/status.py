"""``freeway status``: what the running controller's API says, as tables in the terminal.

    freeway status [--api http://127.0.0.1:8080] [--all] [--decisions N] [--json]

Reads the API only (``/api/v1/...``), so it shows exactly what the API,
the metrics and the fabric view show.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections import Counter

DEFAULT_API = "http://127.0.0.1:8080"


class StatusError(RuntimeError):
    pass


def fetch(base: str, path: str, timeout: float = 5.0, token: str | None = None, cafile: str | None = None):
    """GET one document: with ``token`` as the bearer (a read token, when the API wants one), over HTTPS
    with the server's certificate checked against ``cafile`` (else the system's CAs)."""
    url = base.rstrip("/") + path
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    ctx = None
    if url.startswith("https://"):
        import ssl

        ctx = ssl.create_default_context(cafile=cafile)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return json.load(r)
    except ValueError:
        raise StatusError(f"{url}: the answer is not JSON (is this a Freeway controller's API?)") from None
    except urllib.error.HTTPError as e:
        raise StatusError(f"{url}: HTTP {e.code}: {e.read().decode(errors='replace').strip()}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise StatusError(f"cannot reach the controller's API at {base}: {reason} (is it started with --api?)") \
            from None


def table(headers: list[str], rows: list[list], out) -> None:
    cells = [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out.write("  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for r in cells:
        out.write("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _mbps(bps) -> str:
    return "" if bps is None else f"{bps / 1e6:.2f}"


def _flow(f: dict) -> str:
    proto = {6: "tcp", 17: "udp"}.get(f["proto"], str(f["proto"]))
    return f"{f['src']}:{f['sport']}->{f['dst']}:{f['dport']}/{proto}"


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _summary(d: dict) -> str:
    """One line for a decision record."""
    t = d["type"]
    if t == "placement":
        return (f"{d.get('how')} {', '.join(_flow(f) for f in d.get('flows', []))} at {_mbps(d.get('rate_bps'))} "
                f"Mbit/s on {' | '.join('-'.join(p) for p in d.get('paths', []))}")
    if t == "refusal":
        return f"{d.get('host')}: {d.get('cause')}: {d.get('reason')}"
    if t == "reroute":
        what = d.get("flow") or f"elephant {d.get('elephant')}"
        return f"{d.get('how')}: {what} ({d.get('reason') or d.get('link')})"
    if t == "partition":
        if d.get("change") in ("added", "removed"):
            return f"{d['src']} -> {d['dst']}: {d['lol_paths']} low-latency paths ({d['change']})"
        return f"{d.get('change')}: " + ", ".join(f"{k} {len(v)}" for k, v in d.items() if isinstance(v, list))
    if t == "rollback":
        return f"{d.get('txn')}: {d.get('reason')}"
    if t == "liveness":
        return f"{len(d.get('dead', []))} directed links down"
    if t == "config":
        return f"{d.get('result')}: " + (d.get("error") or json.dumps(d.get("changed", {})))
    return json.dumps({k: v for k, v in d.items() if k not in ("seq", "time", "type")})[:100]


def render(base: str, show_all: bool, n_decisions: int, out, fetch=fetch) -> None:
    st = fetch(base, "/api/v1/status")
    fabric = fetch(base, "/api/v1/fabric")
    elephants = fetch(base, "/api/v1/elephants")["elephants"]
    part = fetch(base, "/api/v1/partition")
    decisions = fetch(base, f"/api/v1/decisions?since=-1&limit={n_decisions}")["decisions"] if n_decisions else []
    out.write(f"Freeway {st['version']} at {base}: mode {st['mode']}{' + isolation' if st['isolation'] else ''}, "
              f"monitor {st['monitor']}, up {_duration(st['uptime_s'])}, "
              f"config {st['config_file'] or '(flags only)'}, API {'read-write' if st['writable'] else 'read-only'}\n")
    cl = st.get("cluster")
    if cl:
        since = time.strftime("%H:%M:%S", time.localtime(cl["since"])) if cl["since"] else "-"
        out.write(f"cluster {cl['name']}: this member {cl['node']} is {cl['role']} since {since}; leader "
                  f"{cl['leader'] or '(none yet)'}, generation {cl['generation']}; store "
                  f"{'up' if cl['store_ok'] else 'UNREACHABLE: ' + (cl['store_error'] or '')}\n")
    sw = fabric["switches"]
    states = Counter(s["state"] for s in sw)
    out.write(f"\nswitches: {st['switches_connected']}/{len(sw)} connected"
              + "".join(f", {n} {k}" for k, n in sorted(states.items()) if k != "connected") + "\n")
    shown = sw if show_all else [s for s in sw if s["state"] != "connected"]
    if shown:
        table(["SWITCH", "ROLE", "DPID", "STATE", "SINCE"],
              [[s["name"], s["role"], s["dpid"], s["state"],
                time.strftime("%H:%M:%S", time.localtime(s["since"])) if s["since"] else ""] for s in shown], out)
    links = fabric["links"]
    fab = [ln for ln in links if ln["class"] != "access"]
    classes = Counter(ln["class"] for ln in fab)
    out.write(f"\nlinks: {len(fab)} directed fabric links (" + ", ".join(f"{n} {k}" for k, n in sorted(classes.items()))
              + f"), {st['links_down']} links down\n")
    busiest = sorted(links, key=lambda ln: -(ln["utilisation"] or 0))
    shown = links if show_all else ([ln for ln in links if not ln["up"]]
                                    + [ln for ln in busiest if ln["up"] and (ln["utilisation"] or 0) > 0][:10])
    if shown:
        table(["SRC", "DST", "CLASS", "UTIL", "MBIT/S", "COUNTER", "MEASURED"],
              [[ln["src"], ln["dst"], ln["class"], "" if ln["utilisation"] is None else f"{100 * ln['utilisation']:.1f}%",
                _mbps(ln["bps"]), ln["counter"],
                "" if ln["measured_age_s"] is None else f"{ln['measured_age_s']:.1f} s ago"] for ln in shown], out)
    out.write(f"\nelephants: {len(elephants)}\n")
    if elephants:
        table(["ID", "HOW", "FLOW", "ALLOC", "MEASURED", "PATH", "METER"],
              [[e["id"], e["how"], ", ".join(_flow(f) for f in e["flows"]), _mbps(e["allocation_bps"]),
                _mbps(e["measured_bps"]), " | ".join("-".join(p) for p in e["paths"]) or "(ECMP)", e["meter"]]
               for e in elephants], out)
    if part.get("partitioned"):
        wide = [p for p in part["pairs"] if p["lol_paths"] != part["lol_min"]]
        out.write(f"\npartition: {part['lol_links']} LOL, {part['draining_links']} draining, {part['hol_links']} HOL "
                  f"directed links; {len(part['pairs'])} active or widened ToR pairs, {len(wide)} above the "
                  f"{part['lol_min']} fixed low-latency paths\n")
        pairs = part["pairs"] if show_all else wide
        if pairs:
            table(["SRC", "DST", "LOL PATHS", "ACTIVE"],
                  [[p["src"], p["dst"], p["lol_paths"], "yes" if p["active"] else "no"] for p in pairs], out)
    if decisions:
        out.write(f"\nlatest {len(decisions)} decisions:\n")
        table(["SEQ", "TIME", "TYPE", "WHAT"],
              [[d["seq"], time.strftime("%H:%M:%S", time.localtime(d["time"])), d["type"], _summary(d)]
               for d in decisions], out)


def cmd_status(args) -> int:
    import functools

    try:
        token = None
        if args.token_file:
            from ryu_apps.operators.api import read_token

            token = read_token(args.token_file, "--token-file")
    except ValueError as e:
        print(f"freeway status: error: {e}", file=sys.stderr)
        return 2
    get = functools.partial(fetch, token=token, cafile=args.ca_certs)
    try:
        if args.json:
            doc = {name: get(args.api, f"/api/v1/{name}") for name in
                   ("status", "fabric", "elephants", "partition", "counters", "config")}
            json.dump(doc, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            render(args.api, args.all, args.decisions, sys.stdout, get)
    except StatusError as e:
        print(f"freeway status: error: {e}", file=sys.stderr)
        return 2
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("status", help="the running controller's switches, links, elephants, partition and recent "
                                      "decisions, from its API")
    s.add_argument("--api", default=DEFAULT_API, help=f"the controller's API base URL ({DEFAULT_API})")
    s.add_argument("--all", action="store_true", help="every switch, link and pair (default: only what is notable)")
    s.add_argument("--decisions", type=int, default=10, choices=range(0, 1001), metavar="0..1000",
                   help="how many recent decisions to show (10)")
    s.add_argument("--json", action="store_true", help="the API's documents as one JSON object")
    s.add_argument("--token-file", help="a file holding the read token (or the write token) the API wants")
    s.add_argument("--ca-certs", help="the CA of the API's HTTPS certificate (default: the system's)")
    s.set_defaults(func=cmd_status)
