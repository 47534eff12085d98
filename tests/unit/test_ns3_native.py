"""How the packet-level engine's C++ part is compiled (``experiments/engines/ns3/native.py``): once per
machine by g++ into a cached library; a compiler that fails leaves cling to compile it, says why once,
and is not run again for the same sources."""

from __future__ import annotations

import pytest

from experiments.engines.ns3 import native


@pytest.fixture
def prefix():
    try:
        return native._prefix()
    except native.Ns3Unavailable as e:
        pytest.skip(str(e))


def _fake_cxx(tmp_path, rc: int):
    """A stand-in compiler: records each call; refuses the sources (rc 1), is killed (rc 9: SIGKILL), or
    writes the output (rc 0)."""
    log = tmp_path / "calls"
    cxx = tmp_path / "cxx"
    cxx.write_text(f"""#!/bin/sh
echo "$*" >> {log}
[ "$1" = --version ] && {{ echo "fake 1.0"; exit 0; }}
cat > /dev/null
[ {rc} -eq 9 ] && kill -9 $$
if [ {rc} -ne 0 ]; then echo "In file included from fwsim.cc:1:" >&2; echo "fwsim.h:1: error: no such thing" >&2; exit {rc}; fi
while [ "$1" != -o ]; do shift; done; echo lib > "$2"
""")
    cxx.chmod(0o755)
    return cxx, log


def test_a_compiler_that_fails_leaves_cling_to_compile_and_is_not_run_again(tmp_path, monkeypatch, capsys, prefix):
    cxx, log = _fake_cxx(tmp_path, 1)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert native.compiled(*prefix) is None
    err = capsys.readouterr().err  # one line, as the engine's runs pass on: the error and where the rest is
    cache = tmp_path / "cache" / "freeway"
    (refused,) = cache.glob("*.failed")
    assert err.startswith("[ns3]") and err.count("\n") == 1 and "error: no such thing" in err and str(refused) in err
    assert not list(cache.glob("*.so")) and not list(cache.glob("*.tmp"))
    assert native.compiled(*prefix) is None  # the same sources: not compiled again
    assert "does not compile here" in capsys.readouterr().err
    assert [ln.split()[0] for ln in log.read_text().splitlines()] == ["--version", "-std=c++20", "--version"]


def test_the_library_is_built_once_for_the_same_sources_and_again_when_one_changes(tmp_path, monkeypatch, prefix):
    cxx, log = _fake_cxx(tmp_path, 0)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = native.compiled(*prefix)
    assert first is not None and first.read_text() == "lib\n" and native.compiled(*prefix) == first
    src = tmp_path / "fwsim"
    src.mkdir()
    (src / "fwsim").mkdir()
    for f in [native.SOURCE, *native.SOURCE.with_name("fwsim").glob("*.h")]:
        (src / f.relative_to(native.SOURCE.parent)).write_bytes(f.read_bytes())
    changed = src / "fwsim" / "switch.h"
    changed.write_text(changed.read_text() + "\n// one more line\n")
    monkeypatch.setattr(native, "SOURCE", src / "fwsim.cc")
    other = native.compiled(*prefix)
    assert other is not None and other != first
    builds = [ln for ln in log.read_text().splitlines() if not ln.startswith("--version")]
    assert len(builds) == 2 and f"-I{src} " in builds[1], builds  # built again, from the changed sources


def test_a_compiler_killed_midway_is_tried_again_by_the_next_run(tmp_path, monkeypatch, capsys, prefix):
    cxx, log = _fake_cxx(tmp_path, 9)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert native.compiled(*prefix) is None and native.compiled(*prefix) is None
    assert "compiling fwsim.cc failed" in capsys.readouterr().err
    assert not list((tmp_path / "cache" / "freeway").glob("*.failed"))  # not a verdict on the sources
    assert [ln.split()[0] for ln in log.read_text().splitlines()] == ["--version", "-std=c++20"] * 2
