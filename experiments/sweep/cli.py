"""``freeway sweep`` and ``freeway report``: grids of runs on Dask into a results store, and what the store
holds as tables and plots."""

from __future__ import annotations

import sys
from pathlib import Path


def cmd_sweep(args) -> int:
    from experiments.sweep import spec as specmod
    from experiments.sweep.report import ReportError, report
    from experiments.sweep.run import sweep
    from experiments.sweep.store import Store, StoreError

    try:
        spec = specmod.load(args.spec)
    except specmod.SpecError as e:
        print(f"freeway sweep: error: {e}", file=sys.stderr)
        return 2
    root = args.store or spec.store
    if not root:
        print("freeway sweep: error: --store: where the results go (or store: in the spec)", file=sys.stderr)
        return 2
    store = Store(root)
    try:
        out = sweep(spec, store, args.scheduler, args.workers, args.rerun, nice=args.nice)
    except StoreError as e:
        print(f"freeway sweep: error: {e}", file=sys.stderr)
        return 2
    print(f"[sweep] {out.points} runs: {out.stored_before} were stored, {out.ran} ran now, {len(out.failed)} failed, "
          f"{len(out.missing)} not stored; {out.wall_s:.0f} s")
    if out.interrupted:
        print("[sweep] interrupted: run the same command again to run only what is missing", file=sys.stderr)
        return 130
    if out.lost:
        print("[sweep] the scheduler went away: run the same command again to run only what is missing",
              file=sys.stderr)
    for p in out.missing[:20]:
        print(f"[sweep] not stored: {p['mode']} seed {p['seed']} " + " ".join(
            f"{k}={p[k]}" for k in ("workload", "load", "k", "variant") if k in p), file=sys.stderr)
    if not out.ok:
        return 3
    if args.report:
        try:
            rep = report(store, Path(args.report), spec.report.get("x", "load"))
        except ReportError as e:
            print(f"freeway sweep: error: {e}", file=sys.stderr)
            return 2
        print(f"[sweep] report in {Path(args.report) / 'report.md'} ({len(rep['plots'])} plots)")
    return 0


def cmd_report(args) -> int:
    from experiments.sweep.report import ReportError, report
    from experiments.sweep.store import Store

    out = Path(args.out or Path(args.store) / "report")
    try:
        rep = report(Store(args.store), out, args.x, plots=not args.no_plots)
    except ReportError as e:
        print(f"freeway report: error: {e}", file=sys.stderr)
        return 2
    print((out / "report.md").read_text())
    print(f"report in {out / 'report.md'}, figures in {out / 'report.json'}; plots: "
          + ", ".join(str(out / p) for p in rep["plots"]))
    return 0


def _nice(text: str) -> int:
    import argparse

    from experiments.sweep.task import NICE_MAX

    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= NICE_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a niceness within 0-{NICE_MAX}")
    return n


def add_commands(sub) -> None:
    s = sub.add_parser("sweep", help="a grid of runs described in a YAML file, on Dask, into a results store "
                                     "(docs/sweeps.md)")
    s.add_argument("spec", help="the sweep's YAML file (scenario, grid, fixed, variants, report)")
    s.add_argument("--store", help="the results store's directory (default: store: in the spec)")
    s.add_argument("--scheduler", metavar="URL",
                   help="a running Dask scheduler, tcp://HOST:8786 (default: a local cluster on this machine)")
    s.add_argument("--workers", type=int, default=0,
                   help="the local cluster's worker processes (0: one per core)")
    s.add_argument("--rerun", action="store_true", help="run every point again, even those stored")
    s.add_argument("--report", metavar="DIR", help="then write the report of the whole store into DIR")
    s.add_argument("--nice", type=_nice, default=0, metavar="N",
                   help="run each simulation at this niceness, 0-19, and in a scheduling group of its own at it "
                        "(Linux's autogroup), so the sweep takes only what else on the machine leaves idle; 19 "
                        "for that (default 0: as the sweep itself)")
    s.set_defaults(func=cmd_sweep)
    r = sub.add_parser("report", help="tables and plots of a results store (slowdown by size against load, "
                                      "the ideal dashed; ratios per seed and pooled)")
    r.add_argument("store", help="the results store's directory")
    r.add_argument("--out", help="where report.md, report.json and the plots go (default: STORE/report)")
    r.add_argument("--x", default="load", help="the parameter on the plots' x axis (load)")
    r.add_argument("--no-plots", action="store_true", help="tables only")
    r.set_defaults(func=cmd_report)
