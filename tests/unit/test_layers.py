"""The house's rules, checked on every module of every package and sub-package:

- layers, bottom to top (``LAYERS``): a module imports only from its own layer or below, anywhere in the
  file (not only at the top), and module-level imports form no cycle;
- algorithms/ decide with plain values: no intents, no OpenFlow;
- nothing outside modes/ asks a policy which class it is or reaches into a mode's private state (the
  Freeway mode's ``state``, EFM's ``rerouter``, Hedera's ``scheduler``): what the app, the cluster and
  the operator need is a ``Policy`` method every mode answers;
- every module's first line says what it is for, and every folder's ``__init__`` says its rule.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["topology", "monitoring", "ryu_apps", "experiments"]
LAYERS = [
    "topology",  # the fabric description: Mininet topologies, addressing, sorted paths, the builder
    "monitoring",  # sFlow in, one read-only view per period out
    "ryu_apps.openflow",  # the pipeline as data, intents, the one message builder, confirmed installs
    "ryu_apps.host",  # programs that run on a host (freeway send, run, host-demote) and the handshake's wire format
    "ryu_apps.simswitch",  # a switch simulated at the message level: fed what the real switches are sent
    "ryu_apps.algorithms",  # partition, Bin-Pack, max-min, Hedera's GFF, EFM's rounds: plain values, no intents
    "ryu_apps.programs",  # what a switch holds, as intents: forwarding, ARP, isolation, mice groups, pins
    "ryu_apps.modes",  # one policy per mode
    "ryu_apps.control",  # the process's control pieces: liveness, link watch, queue keeper, cluster handover
    "ryu_apps.config",  # the controller's configuration, every setting declared once
    "ryu_apps.operators",  # what the operator sees: API, OpenAPI, metrics, status, decision log, the view
    "ryu_apps",  # the process: the os-ken apps (thin), the launcher, the CLI, log format
    "experiments.analysis",  # statistics (one percentile), result writers, plots: pure
    "experiments.workloads",  # every generator and reader of flows, and their data: pure
    "experiments.hosts",  # programs that run inside an emulated host
    "experiments.harness",  # the processes a run starts: the controller, etcd, a browser
    "experiments.engines",  # where flows run: the emulator (runner) and ns-3
    "experiments.testing",  # the pytest plugin and its simulated fabric
    "experiments.benches",  # freeway bench
    "experiments.scenarios",  # freeway experiment's scenarios
    "experiments.sweep",  # grids of runs on Dask, the results store, reports
    "experiments",  # the commands (cli) that put the lab's rooms together
]
PRIVATE = re.compile(r"\bpolicy\.(core|state|rerouter|scheduler)\b|isinstance\([^)]*\b(FreewayPolicy|HederaPolicy|"
                     r"EFMPolicy|Policy)\b|getattr\(\s*policy\s*,\s*[\"'](core|state|rerouter|scheduler)")


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
            yield ".".join(parts), path


def _layer(mod: str) -> int:
    """The index of the deepest layer a module belongs to."""
    best = -1
    for i, name in enumerate(LAYERS):
        if (mod == name or mod.startswith(name + ".")) and (best < 0 or len(name) > len(LAYERS[best])):
            best = i
    assert best >= 0, f"{mod} belongs to no layer"
    return best


def _imports(path: Path, mod: str):
    """(imported module, at module level?) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            yield n, id(node) in top


def _known(name: str, known: set[str]) -> str | None:
    """The project module an import name refers to (a module, or the module a name is taken from)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def test_every_module_belongs_to_a_layer_and_imports_only_its_own_or_below():
    mods = dict(_modules())
    bad = []
    for mod, path in mods.items():
        for name, _ in _imports(path, mod):
            target = _known(name, set(mods))
            if target is not None and _layer(target) > _layer(mod):
                bad.append(f"{mod} ({LAYERS[_layer(mod)]}) imports {target} ({LAYERS[_layer(target)]})")
    assert not bad, "\n".join(sorted(set(bad)))


def test_module_level_imports_have_no_cycle():
    mods = dict(_modules())
    graph = {}
    for mod, path in mods.items():
        graph[mod] = {t for name, top in _imports(path, mod) if top and (t := _known(name, set(mods)))} - {mod}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, " -> ".join(stack + [m, d])
            if d not in state:
                visit(d, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_algorithms_decide_without_intents_or_openflow():
    mods = dict(_modules())
    bad = [f"{mod} imports {name}" for mod, path in mods.items() if mod.startswith("ryu_apps.algorithms")
           for name, _ in _imports(path, mod) if name.startswith("ryu_apps.openflow") or "os_ken" in name]
    assert not bad, bad


def test_no_one_outside_the_modes_reaches_into_a_policy():
    bad = []
    for mod, path in _modules():
        if mod.startswith("ryu_apps.modes"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_the_private_state_check_can_fail():
    """The pattern above catches what it is for (so that the test above can fail)."""
    for line in ("x = self.policy.state.records", "isinstance(self.policy, modes.FreewayPolicy)",
                 "core = getattr(policy, 'core', None)", "policy.rerouter.pins"):
        assert PRIVATE.search(line), line
    assert not PRIVATE.search("self.policy.records(now)")


def test_every_module_says_what_it_is_for_and_every_folder_its_rule():
    missing = []
    for _, path in _modules():
        if path.stat().st_size == 0 and path.name == "__init__.py" and path.parent.name in PACKAGES:
            continue  # a top package's empty marker
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if not doc:
            missing.append(str(path.relative_to(ROOT)))
        elif path.name == "__init__.py" and "Rule:" not in doc and path.parent.name != "web":
            missing.append(f"{path.relative_to(ROOT)} (no 'Rule:')")
    assert not missing, missing


def test_host_programs_need_only_the_standard_library_and_the_host_package():
    """What runs in an emulated host's namespace imports nothing of the lab or the controller but
    ``ryu_apps.host`` (the handshake's wire format) and its own room."""
    mods = dict(_modules())
    bad = [f"{mod} imports {t}" for mod, path in mods.items() if mod.startswith("experiments.hosts")
           for name, _ in _imports(path, mod) if (t := _known(name, set(mods)))
           and not t.startswith(("experiments.hosts", "ryu_apps.host"))]
    assert not bad, bad


def test_every_experiments_module_lives_in_a_room():
    """experiments/ keeps only its commands at the top: every other module is in a room by role."""
    loose = sorted(p.name for p in (ROOT / "experiments").glob("*.py") if p.name not in ("__init__.py", "cli.py"))
    assert not loose, loose
