"""The modes a controller can run: the built-in ones and those other packages declare.

A package adds a mode by declaring a ``Policy`` subclass in the entry-point group ``freeway.modes``:

```toml
[project.entry-points."freeway.modes"]
least-loaded = "freeway_least_loaded:LeastLoadedPolicy"
```

The entry point's name is the mode's name (``--mode least-loaded``, ``--modes least-loaded+isolation``).
The class is built as ``cls(fabric, iso, settings)``: ``iso`` the isolation settings (None without
isolation), ``settings`` an instance of the class's ``settings`` attribute (a dataclass of ``setting()``
fields, given in the config file's section named after the mode, or ``--mode-set KEY=VALUE``), None if
it declares none. A plug-in that does not import, is not a ``Policy``, or takes a built-in mode's name is
listed as unusable with the reason (``unusable``); the built-in modes work whatever plug-ins are there.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

GROUP = "freeway.modes"
BUILTIN = ("ecmp", "hedera", "efm-biggest", "efm-smallest", "freeway")


@dataclass(frozen=True)
class Plugin:
    name: str
    cls: type | None  # None when unusable
    source: str  # the distribution (package) that declares it, and its entry point's value
    error: str = ""  # why it cannot be used ('' when it can)

    @property
    def settings(self) -> type | None:
        s = getattr(self.cls, "settings", None) if self.cls is not None else None
        return s if s is not None and dataclasses.is_dataclass(s) else None


def _check(name: str, obj, source: str) -> Plugin:
    from ryu_apps.modes.policy import Policy

    if name in BUILTIN:
        return Plugin(name, None, source, f"its name clashes with the built-in mode {name!r}")
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        return Plugin(name, None, source, f"{source} is not a Policy subclass ({type(obj).__name__})")
    s = getattr(obj, "settings", None)
    if s is not None and not dataclasses.is_dataclass(s):
        return Plugin(name, None, source, f"{source}.settings is not a dataclass of settings")
    return Plugin(name, obj, source)


@functools.cache
def plugins() -> dict[str, Plugin]:
    """Every mode the installed packages declare, usable or not, by name."""
    from importlib.metadata import entry_points

    out: dict[str, Plugin] = {}
    for ep in entry_points(group=GROUP):
        source = f"{ep.dist.name if ep.dist else '?'}: {ep.value}"
        try:
            obj = ep.load()
        except Exception as e:  # a plug-in's own fault: reported, never fatal
            out[ep.name] = Plugin(ep.name, None, source, f"it does not import: {type(e).__name__}: {e}")
            continue
        out[ep.name] = _check(ep.name, obj, source)
    return out


def modes() -> tuple[str, ...]:
    """The modes a controller may be given: the built-in ones, then every usable plug-in."""
    return BUILTIN + tuple(sorted(n for n, p in plugins().items() if p.cls is not None))


def unusable() -> dict[str, str]:
    """Plug-ins that cannot be used, with why."""
    return {n: p.error for n, p in sorted(plugins().items()) if p.cls is None}


def plugin(name: str) -> Plugin | None:
    p = plugins().get(name)
    return p if p is not None and p.cls is not None else None


def describe() -> str:
    """A paragraph for ``--help``: the plug-in modes and those that cannot be used."""
    ok = [f"{n} ({p.source})" for n, p in sorted(plugins().items()) if p.cls is not None]
    bad = [f"{n}: {why}" for n, why in unusable().items()]
    lines = []
    if ok:
        lines.append("plug-in modes: " + "; ".join(ok))
    if bad:
        lines.append("unusable plug-ins: " + "; ".join(bad))
    return "\n".join(lines)
