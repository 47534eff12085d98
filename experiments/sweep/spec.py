"""A sweep described in one YAML file: the scenario, the grid of parameters, fixed values, named variants
of the controller's settings, and what to report. Checked before anything runs: an unknown key, scenario,
mode, engine or setting, or a value of the wrong kind, is refused with its line and why.

```yaml
scenario: fct                 # fct (Poisson flows, FCT slowdown), paper (the Freeway paper's SWIM run),
engine: ns3                   # permutation (every host one long flow to another pod: goodput), flows (a CSV)
grid:                         # every combination is one run
  mode: [ideal, ecmp, ecmp+isolation, freeway+isolation]
  workload: [websearch, datamining]
  load: [0.5, 0.7]
  seed: [1, 2, 3]
fixed:                        # one value for every run (anything the grid may hold)
  k: 8
  duration: 2.0
variants:                     # named settings of the controller; grid.variant picks among them
  default: {}
  no-cap: {freeway: {host_elephants: 1000}}
report:
  x: load                     # the parameter on the plots' x axis
```
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

SCENARIOS = ("fct", "paper", "permutation", "flows")
ENGINES = ("ns3",)
TOP_KEYS = ("scenario", "engine", "grid", "fixed", "variants", "report", "store")
REPORT_KEYS = ("x", "title")


class SpecError(ValueError):
    """A spec that cannot run; the message names the line and the problem."""


ANY = SCENARIOS  # (a parameter every scenario takes)
# parameter -> (kind, default, scenarios that take it, help)
PARAMS: dict[str, tuple[str, object, tuple[str, ...], str]] = {
    "mode": ("mode", "ecmp", ANY, "a mode (with +isolation), or ideal (ideal+isolation: its ports strict)"),
    "seed": ("int", 1, ANY, "the workload's and the engine's seed"),
    "k": ("int", 8, ANY, "fat-tree arity"),
    "topo": ("choice:fattree,leafspine", "fattree", ("fct", "permutation", "flows"), "fabric"),
    "link_mbps": ("float", 100.0, ANY, "every link's rate, Mbit/s"),
    "workload": ("choice:websearch,datamining", "websearch", ("fct",), "flow sizes"),
    "load": ("fraction", 0.5, ("fct",), "offered load, a fraction of each access link"),
    "duration": ("float", 2.0, ("fct", "paper", "permutation"), "seconds of arrivals (paper: the trace hour "
                 "compressed; permutation: how long every flow sends)"),
    "announce": ("bool", False, ("permutation",), "the permutation's flows announce themselves (rate-less)"),
    "flow_list": ("path", "", ("flows",), "a flow list (CSV: start_s, src, dst, bytes, ...; docs/ns3.md), "
                  "relative to the spec's directory"),
    "max_bytes": ("float", 30_000_000.0, ("fct",), "sizes conditioned on at most this (0: the whole distribution)"),
    "local_share": ("fraction0", 0.0, ("fct",), "share of flows kept inside the source's rack or pod"),
    "local_scope": ("choice:rack,pod", "rack", ("fct",), "where local flows stay"),
    "announce_above": ("float", 1_000_000.0, ("fct",), "flows of this many bytes or more announce (0: none)"),
    "hosts_per_edge": ("int", 10, ("paper",), "servers a ToR"),
    "queues": ("str", "", ANY, "every port's discipline ('' = strict with isolation, else fifo)"),
    "tcp": ("choice:cubic,newreno,bbr,dctcp", "cubic", ANY, "the hosts' congestion control"),
    "mtu": ("int", 1500, ANY, "frame size"),
    "link_delay_us": ("float", 5.0, ANY, "one-way delay of every link, us"),
    "demote_after": ("float", 0.0, ANY, "hosts demote a TCP connection to the elephant DSCP once they have sent "
                     "this many bytes on it, as PIAS's do (0: never); the ToRs keep the mark with isolation's "
                     "host_demotion (a variant)"),
    "grace": ("float", 30.0, ANY, "seconds after the last arrival a run waits for the rest"),
    "variant": ("variant", "default", ANY, "a named set of controller settings (variants:)"),
}


@dataclass
class Spec:
    scenario: str
    engine: str
    grid: dict[str, list]
    fixed: dict[str, object]
    variants: dict[str, dict] = field(default_factory=lambda: {"default": {}})
    report: dict = field(default_factory=dict)
    store: str | None = None

    def points(self) -> list[dict]:
        """Every run of the sweep: the defaults, the fixed values and one combination of the grid."""
        base = {k: v[1] for k, v in PARAMS.items() if self.scenario in v[2]}
        base.update(self.fixed)
        keys = list(self.grid)
        out = []
        for combo in itertools.product(*(self.grid[k] for k in keys)):
            p = dict(base, **dict(zip(keys, combo, strict=True)))
            p["scenario"] = self.scenario
            p["engine"] = self.engine
            p["settings"] = self.variants.get(p["variant"], {})
            out.append(p)
        return out


def _line(node) -> int:
    return node.start_mark.line + 1


def _scalar(node):
    import yaml

    return yaml.safe_load(yaml.serialize(node))


def _known_modes() -> tuple[str, ...]:
    from experiments.engines.runner import MODES
    from experiments.workloads.fct import IDEAL

    return (IDEAL, f"{IDEAL}+isolation", *MODES)


def check_value(name: str, value, kind: str, where: str, variants: dict) -> object:
    """One parameter's value converted and checked; a ``SpecError`` naming ``where`` if it is wrong."""

    def bad(why: str) -> SpecError:
        return SpecError(f"{where}: {name}: {why}, got {value!r}")

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad("a whole number")
        if name == "k" and (value < 2 or value % 2):
            raise bad("an even arity of at least 2")
        return value
    if kind in ("float", "fraction", "fraction0"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise bad("a non-negative number")
        if kind == "fraction" and not 0 < value < 1:
            raise bad("a fraction in (0, 1)")
        if kind == "fraction0" and value > 1:
            raise bad("a fraction in [0, 1]")
        if name in ("link_mbps", "duration", "link_delay_us") and value <= 0:
            raise bad("above 0")
        return float(value)
    if kind.startswith("choice:"):
        choices = kind.split(":", 1)[1].split(",")
        if value not in choices:
            raise bad(f"one of {', '.join(choices)}")
        return value
    if kind == "str":
        if value is None:
            return ""
        if not isinstance(value, str):
            raise bad("text")
        if name == "queues" and value:
            from topology.queues import SettingError as QueueError
            from topology.queues import check_discipline

            try:
                check_discipline(value, "ns3")
            except QueueError as e:
                raise SpecError(f"{where}: queues: {e}") from None
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if kind == "path":
        if not isinstance(value, str) or not value.strip():
            raise bad("a file's path")
        return value
    if kind == "mode":
        known = _known_modes()
        if value not in known:
            raise bad(f"a known mode ({', '.join(known)})")
        return value
    if kind == "variant":
        if value not in variants:
            raise bad(f"a variant the spec names ({', '.join(variants) or 'none'})")
        return value
    raise AssertionError(kind)


def parse(text: str, origin: str = "spec") -> Spec:
    """A spec from YAML text; every problem refused with ``origin:LINE``."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{origin}{at}: not YAML: {getattr(e, 'problem', e)}") from None
    if root is None or not isinstance(root, yaml.MappingNode):
        raise SpecError(f"{origin}: a mapping of {', '.join(TOP_KEYS)} expected")
    top = {}
    for k, v in root.value:
        key = _scalar(k)
        if key not in TOP_KEYS:
            raise SpecError(f"{origin}:{_line(k)}: {key!r}: unknown key (known: {', '.join(TOP_KEYS)})")
        if key in top:
            raise SpecError(f"{origin}:{_line(k)}: {key!r} given twice")
        top[key] = (k, v)
    if "scenario" not in top:
        raise SpecError(f"{origin}: scenario: missing ({', '.join(SCENARIOS)})")
    scenario = _scalar(top["scenario"][1])
    if scenario not in SCENARIOS:
        raise SpecError(f"{origin}:{_line(top['scenario'][1])}: scenario: unknown {scenario!r} "
                        f"(known: {', '.join(SCENARIOS)})")
    engine = _scalar(top["engine"][1]) if "engine" in top else "ns3"
    if engine not in ENGINES:
        raise SpecError(f"{origin}:{_line(top['engine'][1])}: engine: unknown {engine!r} "
                        f"(sweeps run on: {', '.join(ENGINES)})")
    variants = _variants(top.get("variants"), origin)
    grid = _section(top.get("grid"), "grid", scenario, origin, variants, lists=True)
    fixed = _section(top.get("fixed"), "fixed", scenario, origin, variants, lists=False)
    both = set(grid) & set(fixed)
    if both:
        name = sorted(both)[0]
        raise SpecError(f"{origin}: {name}: in both grid and fixed; give it once")
    report = {}
    if "report" in top:
        node = top["report"][1]
        if not isinstance(node, yaml.MappingNode):
            raise SpecError(f"{origin}:{_line(node)}: report: a mapping ({', '.join(REPORT_KEYS)})")
        for k, v in node.value:
            key = _scalar(k)
            if key not in REPORT_KEYS:
                raise SpecError(f"{origin}:{_line(k)}: report.{key}: unknown (known: {', '.join(REPORT_KEYS)})")
            report[key] = _scalar(v)
        if "x" in report and report["x"] not in PARAMS:
            raise SpecError(f"{origin}:{_line(node)}: report.x: {report['x']!r} is not a parameter")
    store = _scalar(top["store"][1]) if "store" in top else None
    spec = Spec(scenario, engine, grid, fixed, variants, report, store)
    if scenario == "flows":
        _check_flow_lists(spec, origin)
    return spec


def _check_flow_lists(spec: Spec, origin: str) -> None:
    """Every flow list a ``flows`` sweep names, resolved against the spec's directory and read against
    the fabric of each point that uses it: a missing file or a bad line refused before anything runs."""
    import os

    from experiments.sweep.runs import fabric_of
    from experiments.workloads.flowlist import FlowListError, read_csv

    base = os.path.dirname(os.path.abspath(origin)) if os.path.isfile(origin) else os.getcwd()
    for section in (spec.grid, spec.fixed):
        if "flow_list" in section:
            vals = section["flow_list"]
            resolved = [os.path.join(base, v) for v in (vals if isinstance(vals, list) else [vals])]
            section["flow_list"] = resolved if isinstance(vals, list) else resolved[0]
    if "flow_list" not in spec.grid and "flow_list" not in spec.fixed:
        raise SpecError(f"{origin}: flow_list: scenario flows needs one (in fixed or grid)")
    seen = set()
    for p in spec.points():
        key = (p["flow_list"], p["k"], p["topo"], p["link_mbps"])
        if key in seen:
            continue
        seen.add(key)
        try:
            read_csv(p["flow_list"], {h.name for h in fabric_of(p).hosts})
        except FlowListError as e:
            raise SpecError(f"{origin}: flow_list: {e}") from None


def _section(entry, name: str, scenario: str, origin: str, variants: dict, lists: bool) -> dict:
    import yaml

    if entry is None:
        return {}
    node = entry[1]
    if not isinstance(node, yaml.MappingNode):
        raise SpecError(f"{origin}:{_line(node)}: {name}: a mapping of parameters expected")
    out: dict = {}
    for k, v in node.value:
        key = _scalar(k)
        where = f"{origin}:{_line(k)}"
        if key not in PARAMS:
            raise SpecError(f"{where}: {name}.{key}: unknown parameter (known: {', '.join(sorted(PARAMS))})")
        kind, _, takes, _ = PARAMS[key]
        if scenario not in takes:
            raise SpecError(f"{where}: {name}.{key}: scenario {scenario} does not take it")
        if lists:
            if not isinstance(v, yaml.SequenceNode) or not v.value:
                raise SpecError(f"{where}: grid.{key}: a non-empty list of values")
            vals = [check_value(key, _scalar(x), kind, f"{origin}:{_line(x)}", variants) for x in v.value]
            if len(set(map(repr, vals))) != len(vals):
                raise SpecError(f"{where}: grid.{key}: a value is listed twice")
            out[key] = vals
        else:
            out[key] = check_value(key, _scalar(v), kind, where, variants)
    return out


def _variants(entry, origin: str) -> dict:
    import yaml

    from ryu_apps.config import ConfigError, load_mapping

    if entry is None:
        return {"default": {}}
    node = entry[1]
    if not isinstance(node, yaml.MappingNode):
        raise SpecError(f"{origin}:{_line(node)}: variants: a mapping of names to settings")
    out = {}
    for k, v in node.value:
        name = _scalar(k)
        if not isinstance(name, str) or not name:
            raise SpecError(f"{origin}:{_line(k)}: variants: a name, got {name!r}")
        body = _scalar(v) or {}
        try:
            load_mapping(body, f"variants.{name}")
        except ConfigError as e:
            msg = str(e)
            where = "" if msg.startswith(f"variants.{name}") else f"variants.{name}."
            raise SpecError(f"{origin}:{_line(v)}: {where}{msg}") from None
        out[name] = body
    out.setdefault("default", {})
    return out


def load(path: str) -> Spec:
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror}") from None
    return parse(text, path)
