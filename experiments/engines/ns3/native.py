"""ns-3 and Freeway's C++ part of the engine (``fwsim.cc``), loaded once per process.

``from ns import ns`` takes about 10 s and 640 MB; ``fwsim.cc`` is compiled by cppyy the first time it is
needed (about 1 s). ``load()`` returns ``(ns, fw)``: ns-3's namespace and Freeway's C++ namespace.
Nothing is loaded at import: the emulator never pays for ns-3.
"""

from __future__ import annotations

from pathlib import Path

SOURCE = Path(__file__).with_name("fwsim.cc")
_loaded: tuple | None = None


class Ns3Unavailable(RuntimeError):
    """ns-3's Python package is not installed (``make install`` installs it) or cannot load."""


def load() -> tuple:
    global _loaded
    if _loaded is not None:
        return _loaded
    try:
        import cppyy
        from ns import ns  # noqa: F401  (ns-3's own loader: every module's library and header)
    except (ImportError, SystemExit) as e:  # ns3's stub exits when its package is missing
        raise Ns3Unavailable(f"ns-3 is not available: {e} (make install puts ns3 from PyPI in .venv)") from None
    cppyy.add_include_path(str(SOURCE.parent))  # fwsim.cc includes its parts, fwsim/*.h
    cppyy.cppdef(SOURCE.read_text())
    fw = cppyy.gbl.fw
    fw.Register()
    _loaded = (ns, fw)
    return _loaded
