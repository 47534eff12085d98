"""ns-3 and Freeway's C++ part of the engine (``fwsim.cc``), loaded once per process.

Only the ns-3 modules ``fwsim.cc`` includes are loaded (``MODULES``: their headers parsed by cppyy,
their libraries opened, which open what they link): about 1.5 s. ``from ns import ns``, ns-3's own
loader, parses every module's headers (wifi, LTE, mesh...) and took about 7 s of every run on these
machines (10 s under load), the larger part of a short run. The libraries are the same either way, so a
run's results are too. ``fwsim.cc`` is compiled by cppyy the first time it is needed (about 1 s).
``load()`` returns ``(ns, fw)``: ns-3's namespace and Freeway's C++ namespace. Nothing is loaded at
import: the emulator never pays for ns-3.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SOURCE = Path(__file__).with_name("fwsim.cc")
MODULES = ("core", "network", "internet", "point-to-point", "traffic-control")  # what fwsim.cc includes
_loaded: tuple | None = None


class Ns3Unavailable(RuntimeError):
    """ns-3's Python package is not installed (``make install`` installs it) or cannot load."""


def _prefix() -> tuple[Path, Path]:
    """The ns3 package's include directory and the directory of its libraries."""
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        raise Ns3Unavailable("ns-3 is not available: no ns3 package (make install puts ns3 from PyPI in .venv)")
    root = Path(next(iter(spec.submodule_search_locations)))
    for lib in (root / "lib64", root / "lib"):
        if any(lib.glob("libns3*-core.so")):
            return root / "include", lib
    raise Ns3Unavailable(f"ns-3 is not available: no libns3*-core.so under {root}")


def _library(lib: Path, module: str) -> str:
    found = sorted(lib.glob(f"libns3*-{module}.so"))
    if not found:
        raise Ns3Unavailable(f"ns-3 is not available: its {module} module is missing from {lib}")
    return str(found[-1])


def load() -> tuple:
    global _loaded
    if _loaded is not None:
        return _loaded
    include, lib = _prefix()
    try:
        import cppyy
        import libcppyy
    except ImportError as e:
        raise Ns3Unavailable(f"ns-3 is not available: {e} (make install puts cppyy in .venv)") from None
    libcppyy.AddSmartPtrType("Ptr")  # ns3::Ptr<T> behaves as a T in Python (as ns-3's loader sets it)
    cppyy.add_include_path(str(include))
    cppyy.add_library_path(str(lib))
    for m in MODULES:
        cppyy.include(f"ns3/{m}-module.h")
    for m in MODULES:
        cppyy.load_library(_library(lib, m))
    ns = cppyy.gbl.ns3
    cppyy.add_include_path(str(SOURCE.parent))  # fwsim.cc includes its parts, fwsim/*.h
    cppyy.cppdef(SOURCE.read_text())
    fw = cppyy.gbl.fw
    fw.Register()
    _loaded = (ns, fw)
    return _loaded
