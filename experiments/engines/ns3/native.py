"""ns-3 and Freeway's C++ part of the engine (``fwsim.cc``), loaded once per process.

Only the ns-3 modules ``fwsim.cc`` includes are loaded (``MODULES``: their headers parsed by cppyy,
their libraries opened, which open what they link): about 1.5 s. ``from ns import ns``, ns-3's own
loader, parses every module's headers (wifi, LTE, mesh...) and took about 7 s of every run on these
machines (10 s under load), the larger part of a short run. The libraries are the same either way, so a
run's results are too.

``fwsim.cc`` is compiled once per machine by g++ into a library (``compiled()``: about 10 s, kept under
``~/.cache/freeway/`` by a hash of the sources, the ns-3 libraries, the compiler and the CPU) and opened
before cppyy reads the same source, so cling finds its functions compiled and does not compile them
again: that was about 3.3 s of every run's start (``fw::Register``, which reaches nearly all of it).
Without it (no compiler, a refusal, a library that cannot be opened) cling compiles it as before, and
the run says why in one ``[ns3]`` line; the source is one, so what runs is the same program either way.
``load()`` returns ``(ns, fw)``: ns-3's namespace and Freeway's C++ namespace. Nothing is loaded at
import: the emulator never pays for ns-3.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("fwsim.cc")
MODULES = ("core", "network", "internet", "point-to-point", "traffic-control")  # what fwsim.cc includes
_loaded: tuple | None = None
_built = ""  # how this process's fwsim.cc was compiled: "compiled" (the library) or "cling"
# what the library is compiled with: cling's own optimisation and target (cppyy's -O2 -march=native, C++20),
# and no multiply-adds fused by the compiler's choice (-ffp-contract=off); the engine's smoke runs and a
# web-search/data-mining sweep gave the same results, number for number, compiled and cling-only
CXXFLAGS = ("-std=c++20", "-O2", "-march=native", "-ffp-contract=off", "-fPIC", "-shared", "-w")
# the one function the library exports for its own sake: it reaches (and so makes g++ emit) every part
ENTRY = '#include "{source}"\nextern "C" void fw_compiled_register() {{ fw::Register(); }}\n'


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


def _cache() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "freeway"


def _cpu() -> str:
    """What ``-march=native`` builds for: the machine and its CPU's model and features."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    keys = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    return platform.machine() + "\n" + "\n".join(sorted({ln for ln in lines if ln.startswith(keys)}))


def _refused(marker: Path) -> None:
    print(f"[ns3] fwsim.cc does not compile here ({marker}): cling compiles it", file=sys.stderr)


def compiled(include: Path, lib: Path) -> Path | None:
    """``fwsim.cc`` compiled into a shared library (built the first time, under a lock, so that runs
    started together build it once); None, with one ``[ns3]`` line on stderr, when it cannot be had. A
    compiler that refuses the sources is not run again for the same ones (its output is kept beside the
    library, ``.failed``); one killed or out of time is tried again by the next run."""
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        print("[ns3] no C++ compiler (g++): cling compiles fwsim.cc in every run (about 3.3 s more)", file=sys.stderr)
        return None
    libs = [_library(lib, m) for m in MODULES]
    entry = ENTRY.format(source=SOURCE)
    h = hashlib.sha256()
    for f in [SOURCE, *sorted(SOURCE.with_name("fwsim").glob("*.h"))]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    for f in libs:
        st = os.stat(f)
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    paths = ":".join(os.environ.get(v, "") for v in ("CPATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH"))
    h.update((version + " ".join(CXXFLAGS) + str(include) + paths + entry + _cpu()).encode())
    out = _cache() / f"fwsim-{h.hexdigest()[:20]}.so"
    refused = out.with_suffix(".failed")
    if out.exists():
        return out
    if refused.exists():  # refused with these sources and this compiler: not again every run
        return _refused(refused)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = open(out.parent / ".fwsim.lock", "w")
    except OSError as e:
        print(f"[ns3] cannot keep the compiled fwsim.cc ({e}): cling compiles it in every run", file=sys.stderr)
        return None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        if refused.exists():  # (another run's build, waited for: refused)
            return _refused(refused)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        cmd = [cxx, *CXXFLAGS, f"-I{include}", f"-I{SOURCE.parent}", "-x", "c++", "-", "-x", "none", "-o", str(tmp),
               *libs, f"-Wl,-rpath,{lib}"]
        try:
            r = subprocess.run(cmd, input=entry, capture_output=True, text=True, timeout=300)
            why = "" if r.returncode == 0 else (r.stderr or f"exit {r.returncode}")
            lasting = r.returncode > 0  # (refused; not killed by a signal)
        except (OSError, subprocess.TimeoutExpired) as e:
            why, lasting = str(e), False
        if why:
            tmp.unlink(missing_ok=True)
            first = next((ln for ln in why.splitlines() if "error" in ln), why.splitlines()[0] if why else "")
            kept = ""
            if lasting:
                try:
                    refused.write_text(" ".join(cmd) + "\n" + why)
                    kept = f"; all of it in {refused}"
                except OSError:
                    pass
            print(f"[ns3] compiling fwsim.cc failed ({first.strip()}{kept}): cling compiles it instead",
                  file=sys.stderr)
            return None
        os.replace(tmp, out)
    return out


def built() -> str:
    """How ``fwsim.cc`` was compiled in this process: ``compiled`` (g++'s library), ``cling``, or ""."""
    return _built


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
    global _built
    try:
        built = compiled(include, lib)
        if built is not None:
            cppyy.load_library(str(built))  # before the source: cling then takes its functions from the library
    except Exception as e:  # (a cache on a noexec mount, a damaged library...): as if there were none
        print(f"[ns3] the compiled fwsim.cc cannot be used ({e}): cling compiles it", file=sys.stderr)
        built = None
    _built = "compiled" if built is not None else "cling"
    cppyy.add_include_path(str(SOURCE.parent))  # fwsim.cc includes its parts, fwsim/*.h
    cppyy.cppdef(SOURCE.read_text())
    fw = cppyy.gbl.fw
    fw.Register()
    _loaded = (ns, fw)
    return _loaded
