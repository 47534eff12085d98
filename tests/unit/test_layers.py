"""Packages by layer: topology < monitoring < ryu_apps < experiments. A module imports only from its own
layer or below (anywhere in the file, not only at the top), and module-level imports form no cycle."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["topology", "monitoring", "ryu_apps", "experiments"]


def _imports(path: Path, package: str):
    """(imported module, at module level?) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: within the package
                base = package if node.level == 1 else ""
                names = [f"{base}.{node.module}" if node.module else f"{base}.{a.name}" for a in node.names]
            else:
                names = [node.module]
        else:
            continue
        for n in names:
            yield n, id(node) in top


def _modules():
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).glob("*.py")):
            yield pkg, f"{pkg}.{path.stem}", path


def test_no_package_imports_one_above_it():
    bad = []
    for pkg, mod, path in _modules():
        for name, _ in _imports(path, pkg):
            target = name.split(".")[0]
            if target in LAYERS and LAYERS.index(target) > LAYERS.index(pkg):
                bad.append(f"{mod} imports {name}")
    assert not bad, bad


def test_module_level_imports_have_no_cycle():
    known = {mod for _, mod, _ in _modules()}
    graph = {}
    for pkg, mod, path in _modules():
        deps = set()
        for name, top in _imports(path, pkg):
            if top:
                deps |= {m for m in known if name == m or name.startswith(m + ".")}
        graph[mod] = deps - {mod}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for d in graph[m]:
            assert state.get(d) != 1, " -> ".join(stack + [m, d])
            if d not in state:
                visit(d, stack + [m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])
