"""One point of a sweep as a run of the engine, and a run's results as the store's rows.

``engine_spec(point)`` builds what ``experiments.engines.ns3.engine`` runs (the fabric, the flows drawn with the
point's seed, the mode's controller and its settings); its hash identifies the run in the store.
``analyse(point, spec, result)`` turns the engine's results into per-flow rows (size, bucket, FCT,
slowdown), per-second link and pair rows, and the run's summary row.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from experiments.workloads import fct

BUCKET_COLUMNS = {"all": "all", "<100KB": "lt100KB", "100KB-1MB": "100KB_1MB", "1-10MB": "1_10MB",
                  ">10MB": "gt10MB", ">=1MB": "ge1MB"}
MICE_BYTES = 1_000_000  # the Freeway paper's mice: flows under 1 MB
ANNOUNCING = ("freeway", "freeway-paper")  # the modes whose hosts announce (the others take no handshake)
POINT_COLUMNS = ("scenario", "mode", "variant", "workload", "load", "seed", "k", "topo", "link_mbps", "duration",
                 "announce_above", "local_share", "queues", "demote_after", "hosts_per_edge", "tcp", "mtu", "max_bytes",
                 "announce", "flow_list")


def label(point: dict) -> str:
    """A point in a few words: what its grid varies most often."""
    keys = ("mode", "variant", "queues", "demote_after", "workload", "load", "announce_above", "k", "seed")
    skip = {"variant": "default", "queues": "", "demote_after": 0}
    return " ".join(f"{k}={point[k]}" for k in keys if k in point and skip.get(k, None) != point[k])


def fabric_of(point: dict):
    from topology.fabric import fattree, leafspine

    if point["scenario"] == "paper":
        return fattree(point["k"], point["link_mbps"], point["hosts_per_edge"])
    if point.get("topo", "fattree") == "leafspine":
        k = point["k"]
        return leafspine(k, k, k, point["link_mbps"])
    return fattree(point["k"], point["link_mbps"])


def flows_of(point: dict, fabric) -> list:
    if point["scenario"] == "paper":
        from experiments.workloads.swim import Derivation, derive, load

        return derive(load(), fabric, Derivation(duration_s=point["duration"], seed=point["seed"]))
    if point["scenario"] == "permutation":
        from experiments.workloads.flowlist import permutation

        return permutation(fabric, point["seed"], point["duration"], announce=bool(point["announce"]))
    if point["scenario"] == "flows":  # the user's own list; every sized flow a one-way transfer
        from dataclasses import replace

        from experiments.workloads.flowlist import read_csv

        flows = read_csv(point["flow_list"], {h.name for h in fabric.hosts})
        return [replace(f, kind="bulk") if f.bytes > 0 else f for f in flows]
    return fct.poisson_flows(fabric, point["workload"], point["load"], point["duration"], point["seed"],
                             local_share=point["local_share"], local_scope=point["local_scope"],
                             announce_above=point["announce_above"] or None,
                             max_bytes=point["max_bytes"] or None)


def merge_settings(*parts: dict) -> dict:
    """Controller settings as the engine takes them (``Config`` keys; sections as pairs), later parts
    overriding earlier ones key by key within a section."""
    from ryu_apps.config import SECTIONS

    out: dict = {}
    for part in parts:
        for key, value in (part or {}).items():
            if key in SECTIONS:
                merged = dict(out.get(key, ()))
                merged.update(dict(tuple(kv) for kv in value))
                out[key] = [list(kv) for kv in merged.items()]
            else:
                out[key] = value
    return out


def engine_spec(point: dict) -> dict:
    """The engine's spec for one point (deterministic: the same point gives the same spec)."""
    from experiments.engines.ns3.engine import Settings, spec_of
    from experiments.engines.runner import _controller_mode, _controller_settings, _mode_parts
    from ryu_apps.config import load_mapping

    fabric = fabric_of(point)
    flows = flows_of(point, fabric)
    if point["mode"].partition("+")[0] not in ANNOUNCING:  # (the same run whatever was announced: one run)
        from dataclasses import replace

        flows = [replace(f, announced=False) for f in flows]
    variant = load_mapping(point.get("settings") or {}, f"variants.{point.get('variant', 'default')}")
    common = {"seed": point["seed"], "grace_s": point["grace"], "tcp": point["tcp"], "mtu": point["mtu"],
              "link_delay_s": point["link_delay_us"] * 1e-6,
              "demote_after_bytes": int(point.get("demote_after", 0))}
    mode = point["mode"]
    label = f"{mode.replace('+', '_')}-s{point['seed']}"
    boundary = MICE_BYTES if point["scenario"] == "paper" else fct.SLOWDOWN_BUCKETS[0][1]
    if mode.partition("+")[0] == fct.IDEAL:
        iso = mode.endswith("+isolation")
        st = Settings(**common, queues=point["queues"] or ("strict" if iso else "fifo"),
                      controller=merge_settings(variant))
        return spec_of(label, mode, fct.ideal_fabric(fabric), "ecmp", iso, flows, st, boundary)
    base, iso = _mode_parts(mode)
    st = Settings(**common, queues=point["queues"] or ("strict" if iso else "fifo"),
                  controller=merge_settings(_controller_settings(base), variant))
    return spec_of(label, mode, fabric, _controller_mode(base), iso, flows, st, boundary)


def analyse(point: dict, spec: dict, result: dict) -> tuple[dict[str, list[dict]], dict]:
    """The run's tables (flows, links, pairs) and its summary row."""
    from experiments.workloads.flowlist import Flow

    fabric = fabric_of(point)
    flows = [Flow(**f) for f in spec["flows"]]
    st = spec["settings"]
    rows = fct.flow_rows(result, fabric, flows, st["mtu"], st["link_delay_s"])
    keys = {k: point.get(k) for k in POINT_COLUMNS}
    flow_rows = [{**keys, **r} for r in rows]
    summary = fct.summarise(rows)
    row: dict = {}
    for name, col in BUCKET_COLUMNS.items():
        s = summary[name]
        row.update({f"{col}_flows": s["flows"], f"{col}_done": s["done"], f"{col}_mean": s["mean"],
                    f"{col}_p50": s["p50"], f"{col}_p99": s["p99"]})
    mice = [r for r in rows if r["bytes"] < MICE_BYTES]
    mice_fct = [r["fct_s"] for r in mice if r["fct_s"] is not None]
    from experiments.analysis import stats

    bulk = {b["id"]: b for b in result.get("bulk", [])}
    row.update({
        "flows": len(rows), "unfinished": sum(1 for r in rows if not r["done"]),
        "mice_fct_mean_s": sum(mice_fct) / len(mice_fct) if mice_fct else None,
        "mice_fct_p99_s": stats.percentile(mice_fct, 99),
        "mice_rto": sum(r["rto"] or 0 for r in mice),
        "elephant_bytes": sum(bulk[n]["bytes"] for n, f in enumerate(flows) if f.bytes >= MICE_BYTES and n in bulk)
        + sum(e.get("bytes") or 0 for e in result.get("elephants", [])),  # (and what flows sent for a time delivered)
        "elephant_rto": sum(r["rto"] or 0 for r in rows if r["bytes"] >= MICE_BYTES),
        "core_drops": sum(result.get("core_drops", {}).values()), "all_drops": result.get("all_drops"),
        "core_drops_by_switch": json.dumps(_by_switch(result.get("core_drops", {}))),
        "meter_drops": (result.get("switch_drops") or {}).get("meter"),
        "nacks": sum(1 for r in rows if r["answer"] == "nack"),
        "unanswered": sum(1 for r in rows if r["answer"] == "none"),
        "simulated_s": result.get("simulated_s"), "engine_wall_s": result.get("seconds"),
        "host_demoted_packets": result.get("host_demoted_packets", 0),
    })
    t = summary[fct.TIMED]
    row.update({"timed_flows": t["flows"], "goodput_mean_mbps": t["mean"], "goodput_min_mbps": t["min"],
                "goodput_p1_mbps": t["p1"]})
    links, pairs = _series(result, fabric, keys)
    return {"flows": flow_rows, "links": links, "pairs": pairs}, row


def _by_switch(drops: dict) -> dict:
    out: dict = {}
    for dev, n in drops.items():
        sw = dev.split("-eth")[0]
        out[sw] = out.get(sw, 0) + n
    return out


def _series(result: dict, fabric, keys: dict) -> tuple[list[dict], list[dict]]:
    """Once a second: every switch link's utilisation and class; Freeway's low-latency paths per pair."""
    switch_links = {f"{a}>{b}" for a in fabric.switches for b in fabric.neighbors(a)}
    links, pairs = [], []
    for s in (e for e in result.get("events", []) if e.get("type") == "links"):
        lol = set(s.get("lol_link_names", []))
        cls = "lol" if "lol_link_names" in s else "all"
        for name, u in s.get("utilisation", {}).items():
            if name in switch_links:
                links.append({**keys, "t": s["time"], "link": name, "util": u,
                              "cls": ("lol" if name in lol else "hol") if cls == "lol" else "all"})
        for pair, n in (s.get("lol_paths") or {}).items():
            pairs.append({**keys, "t": s["time"], "pair": str(pair), "lol_min": s.get("lol_min"),
                          "lol_paths": n if isinstance(n, (int, float)) else len(n)})
    return links, pairs


def settings_of(spec: dict) -> dict:
    from experiments.engines.ns3.engine import Settings

    return asdict(Settings(**spec["settings"]))
