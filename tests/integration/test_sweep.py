"""Sweeps on a real Dask cluster (issue 59): a scheduler and two workers started as their own processes (as
on two machines), ``freeway sweep`` sending four short ns-3 runs to them. A worker SIGKILLed in the middle
of a run: its run is done elsewhere and every run is stored once, whole. A sweep interrupted and started
again runs only what is missing, and its report is the uninterrupted one's, number for number. The
scheduler gone mid-sweep: the command says what was stored and exits non-zero."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.sweep.cluster import Cluster, stop

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SPEC = """\
scenario: fct
grid:
  mode: [ideal, ecmp]
  seed: [1, 2]
fixed:
  k: 4
  link_mbps: 10
  load: 0.5
  duration: 0.4
  grace: 5
"""


def _children(pid: int) -> list[int]:
    r = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


def _sweep(spec: Path, store: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "freeway"), "sweep", str(spec), "--store", str(store), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _stored(store: Path) -> list[str]:
    return sorted(p.stem for p in (store / "runs").glob("*.parquet"))


def _tables(store: Path, out: Path) -> str:
    r = subprocess.run([str(BIN / "freeway"), "report", str(store), "--out", str(out), "--no-plots"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return "\n".join((out / "report.md").read_text().splitlines()[1:])  # without the line naming the store


def _priority(pid: int) -> tuple[int, str | None]:
    """A process's niceness and its scheduling group's line: None without autogroup, and None for a process in
    a task group of a cgroup's, whose autogroup file is empty (the CI's test process, 2026-12-02)."""
    nice = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
    try:
        group = Path(f"/proc/{pid}/autogroup").read_text().strip() or None
    except OSError:
        group = None
    return nice, group


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep on a two-worker cluster at ``--nice 7``, one worker SIGKILLed while a run is under way (the
    runs started again without it compare number for number)."""
    tmp = tmp_path_factory.mktemp("sweep")
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC)
    cluster = Cluster(tmp, 2)
    store = tmp / "store"
    try:
        proc = _sweep(spec, store, "--scheduler", cluster.address, "--nice", "7")
        _wait_for(lambda: any(_children(w.pid) for w in cluster.workers), 180, "a run under way")
        busy = next(w for w in cluster.workers if _children(w.pid))
        engines = _children(busy.pid)
        _wait_for(lambda: all(b"ns3.engine" in Path(f"/proc/{p}/cmdline").read_bytes() for p in engines), 30,
                  "the engine to start")
        priority = [(_priority(p), _priority(busy.pid)) for p in engines]
        busy.send_signal(signal.SIGKILL)  # the worker, in the middle of a run
        _wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in engines), 30, "its engine to die with it")
        out, _ = proc.communicate(timeout=600)
    finally:
        cluster.close()
    return spec, store, proc.returncode, out, tmp, priority


def test_a_sweep_at_nice_runs_each_simulation_at_it_in_a_scheduling_group_of_its_own(swept):
    """``--nice``: without its own autogroup a niceness orders a process only within its session, and a sweep
    took half the machine from a benchmark started elsewhere (2026-12-02)."""
    *_, priority = swept
    assert priority
    for (nice, group), (_, worker) in priority:
        assert nice == 7
        if group is not None:  # (a kernel with autogroup)
            assert group.endswith(" nice 7"), group
            assert worker is None or group.split()[0] != worker.split()[0], (group, worker)


def test_a_sweep_survives_a_worker_killed_mid_run_and_stores_every_run_once(swept):
    spec, store, code, out, *_ = swept
    assert code == 0, out
    assert "4 runs: 0 already stored, 4 to run" in out
    assert len(_stored(store)) == 4 and len(list((store / "flows").glob("*.parquet"))) == 4, out
    assert not list(store.rglob("*.tmp")) and not list(store.rglob("*.progress"))
    import pandas as pd

    runs = pd.concat([pd.read_parquet(p) for p in (store / "runs").glob("*.parquet")])
    assert sorted(zip(runs["mode"], runs["seed"], strict=True)) == [("ecmp", 1), ("ecmp", 2), ("ideal", 1), ("ideal", 2)]
    assert (runs["status"] == "ok").all() and runs["hash"].is_unique
    assert all(v.startswith("{") and "commit" in v for v in runs["versions"])


def test_an_interrupted_sweep_started_again_runs_only_what_is_missing_and_reports_the_same(swept):
    spec, store, code, _, tmp, _ = swept
    assert code == 0
    again = tmp / "again"
    proc = _sweep(spec, again, "--workers", "2")
    try:
        _wait_for(lambda: len(_stored(again)) >= 1, 300, "a first run stored")
        os.killpg(proc.pid, signal.SIGINT)  # the user's ^C
        proc.wait(120)
    finally:
        stop(proc)
    first = _stored(again)
    assert 1 <= len(first) < 4, first
    proc = _sweep(spec, again, "--workers", "2")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert f"4 runs: {len(_stored(again)) - (4 - len(first))} already stored" in out or \
        f"already stored, {4 - len(first)} to run" in out, out
    assert _stored(again) == _stored(store)  # the same configurations
    assert _tables(again, tmp / "r-again") == _tables(store, tmp / "r-first")  # number for number


def test_a_sweep_whose_scheduler_goes_away_says_what_was_stored_and_exits_non_zero(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("seed: [1, 2]", "seed: [7, 8]"))
    cluster = Cluster(tmp_path, 1)
    store = tmp_path / "store"
    try:
        proc = _sweep(spec, store, "--scheduler", cluster.address)
        _wait_for(lambda: _children(cluster.workers[0].pid), 180, "a run under way")
        stop(cluster.scheduler)
        out, _ = proc.communicate(timeout=180)
    finally:
        cluster.close()
    assert proc.returncode == 3, out
    assert "not stored:" in out and "run the same command again" in out, out


def test_a_spec_with_a_bad_line_runs_nothing(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.replace("mode: [ideal, ecmp]", "mode: [ideal, ecmp, warp]"))
    proc = _sweep(spec, tmp_path / "store")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and f"{spec}:3:" in out and "'warp'" in out, out
    assert not (tmp_path / "store").exists()


def test_a_permutation_and_a_flow_list_of_ones_own_are_swept_and_reported_beside_the_ideal(tmp_path):
    """The existing scenarios write into a store too: a permutation (every host one flow to another pod,
    goodput against the ideal's) and a user's CSV flow list (slowdowns by bucket), each through
    ``freeway sweep`` on a local cluster, each read back by ``freeway report``."""
    import pandas as pd

    perm = tmp_path / "perm.yaml"
    perm.write_text("scenario: permutation\ngrid:\n  mode: [ideal, ecmp]\nfixed:\n  k: 4\n  link_mbps: 10\n"
                    "  duration: 1.0\n  grace: 3\n")
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "mine.csv").write_text(
        "start_s,src,dst,bytes\n0.0,h0_0_0,h3_1_1,200000\n0.0,h1_0_0,h3_1_1,200000\n0.1,h2_0_0,h0_1_0,30000\n")
    own = tmp_path / "own.yaml"
    own.write_text("scenario: flows\ngrid:\n  mode: [ideal, ecmp]\nfixed:\n  k: 4\n  link_mbps: 10\n"
                   "  flow_list: lists/mine.csv\n  grace: 3\n")
    store = tmp_path / "store"
    for spec in (perm, own):
        proc = _sweep(spec, store, "--workers", "2")
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    runs = pd.concat(pd.read_parquet(f) for f in (store / "runs").glob("*.parquet"))
    assert sorted(runs["scenario"]) == ["flows", "flows", "permutation", "permutation"]
    p = runs[runs["scenario"] == "permutation"].set_index("mode")
    assert (p["timed_flows"] == 16).all()
    ideal, ecmp = p.loc["ideal", "goodput_mean_mbps"], p.loc["ecmp", "goodput_mean_mbps"]
    assert 6 < ideal <= 10 and ecmp <= 1.05 * ideal, (ideal, ecmp)
    f = runs[runs["scenario"] == "flows"]
    assert (f["all_flows"] == 3).all() and (f["unfinished"] == 0).all(), f
    assert f.set_index("mode").loc["ecmp", "lt100KB_mean"] >= 0.97  # (never faster than alone on its fabric)
    tables = _tables(store, tmp_path / "report")
    assert "### permutation k=4" in tables and "| ideal | " in tables and "### flows k=4 mine.csv" in tables, tables
    assert f"| ecmp | {ecmp:,.2f} | {ecmp / ideal:,.2f} |" in tables, tables  # goodput, and as a share of the ideal's
    bad = tmp_path / "bad.yaml"
    bad.write_text(own.read_text().replace("lists/mine.csv", "lists/none.csv"))
    proc = _sweep(bad, tmp_path / "store2")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "none.csv" in out and "cannot read" in out, out
