"""``freeway demo``, ``freeway experiment`` and ``freeway bench``: experiments that write JSON."""

from __future__ import annotations

import argparse
import json
import sys

from topology import options


def cmd_demo(args) -> int:
    from experiments.scenarios.demo import run

    return run(args)


def _mice_sizes(text: str) -> tuple[int, int]:
    """``MIN,MAX`` response sizes in bytes for the detection bench's mice; refused by name when invalid."""
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"freeway bench detection: --mice-sizes: MIN,MAX in whole bytes, got {text!r}") from None
    if not 1 <= lo <= hi <= 10_000_000:
        raise SystemExit(f"freeway bench detection: --mice-sizes: need 1 <= MIN <= MAX <= 10000000, got {text!r}")
    return lo, hi


def _bytes_arg(text: str) -> int:
    """A byte count on the command line: 1000000, 1M or 250k (0: off)."""
    from ryu_apps.host.demote import DemoteError, parse_bytes

    if text.strip() == "0":
        return 0
    try:
        return parse_bytes(text)
    except DemoteError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("after: ")) from None


def cmd_bench(args) -> int:
    from pathlib import Path

    from experiments.benches import controller as bench
    from experiments.benches import failover, reroute

    if args.bench == "startup":
        bench.startup(args.ks, args.link_mbps, Path(args.out))
        print(f"results in {Path(args.out) / 'startup.json'}")
    elif args.bench == "detection":
        r = bench.detection(args.trials, args.link_mbps, Path(args.out), args.elephant_mbps, args.mice, args.seed,
                            _mice_sizes(args.mice_sizes))
        print(f"elephants detected {r['detected']}/{len(r['trials'])}: median {r['median_delay_s']} s, "
              f"p95 {r['p95_delay_s']} s; mice flagged {r['mice']['wrongly_flagged']}/{r['mice']['flows']}; "
              f"decoder {r['decoder']['decode_datagrams_per_s']} datagrams/s")
        print(f"results in {Path(args.out) / 'detection.json'}")
    elif args.bench == "handshake":
        from topology.ovsproc import ProcessError, check_count

        try:
            check_count(args.switch_processes)
        except ProcessError as e:
            raise SystemExit(f"freeway bench handshake: --{e}") from None
        r = bench.handshake_latency([int(x) for x in args.announces_per_s.split(",")], args.duration, Path(args.out),
                                    args.punt_pps, args.api_poll, args.switch_processes)
        for row in r["results"]:
            print(f"{row['rate_per_s']}/s: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
                  f"{row['acks']} ACK, {row['nacks']} NACK, {row['unanswered']} unanswered of {row['sent']}")
        print(f"results in {Path(args.out) / 'handshake.json'}")
    elif args.bench == "scale":
        r = bench.scale(args.k, args.pairs, args.placements, args.seed, Path(args.out), args.exact_k, args.exact_flows)
        print(f"k={r['k']}: placement median {r['placement']['median_ms']} ms (p99 {r['placement']['p99_ms']} ms); "
              f"partition period with {r['partition_period']['active_pairs']} active pairs: median "
              f"{r['partition_period']['median_ms']} ms; Bin-Pack / optimum {r['binpack_vs_exact']['mean_ratio']}")
        print(f"results in {Path(args.out) / 'scale.json'}")
    elif args.bench == "fabric-scale":
        from experiments.benches import fabricscale

        counts = args.sflow_workers.split(",") if args.sflow_workers and "," in args.sflow_workers else [None]
        for k, count in [(k, c) for k in args.ks for c in counts]:
            out = Path(args.out) / f"workers-{count}" if count is not None else Path(args.out)
            r = fabricscale.run(k, out, args.topo, args.pairs, mode=args.mode, timeout=args.timeout,
                                steady=not args.no_steady, steady_s=args.window, active_pairs=args.active_pairs,
                                handshake_rate=args.handshake_rate, cuts=args.cuts,
                                sflow_workers=count if count is not None else args.sflow_workers,
                                sflow_levels=fabricscale.parse_levels(args.sflow_levels),
                                controller_config=args.controller_config,
                                handshake_level=(fabricscale.parse_levels(args.handshake_level) or [None])[0],
                                cpus=fabricscale.parse_cpus(args.cpus))
            w = r.get("walk", {})
            print(f"k={k}: {r['switches']} switches programmed in {r.get('startup_s')} s "
                  f"({r.get('startup_messages')} messages), RSS {r.get('controller_rss_mb')} MB; walked "
                  f"{w.get('tor_pairs_walked')} ToR pairs, {w.get('tor_pairs_failed')} failed; restart "
                  f"{json.dumps(r.get('restart'))}")
            st = r.get("steady")
            if st:
                hs = st.get("handshake", {})
                iv, sm = st["shortest_counter_interval_s"], st["densest_sampling"]
                print(f"k={k} steady state: " + (f"counters every {iv} s" if iv else "no counter interval") + " and "
                      + (f"flow samples 1-in-{sm}" if sm else "no flow sampling") + " sustained (the period under "
                      "100 ms)" + (f"; handshakes {hs.get('acks')} of {hs.get('sent')} ACKed, p99 {hs.get('p99_ms')} ms"
                                   if hs.get("sent") else ""))
            print(f"results in {out / f'fabric_scale_k{k}.json'}")
        if counts != [None]:
            for k in args.ks:
                drawn = fabricscale.plot_workers(Path(args.out), k)
                print(f"k={k} by sFlow workers: {Path(args.out) / f'sflow_workers_k{k}.json'}, plot in {drawn}")
        drawn = fabricscale.plot(Path(args.out))
        if drawn:
            print(f"plot in {drawn}")
    elif args.bench == "failover" and args.cluster:
        r = failover.cluster_failover(args.trials, args.ttl, Path(args.out))
        print(json.dumps(r["summary"]))
        print(f"results in {Path(args.out) / 'failover-cluster.json'}")
    elif args.bench == "failover":
        r = failover.failover(args.modes.split(","), args.trials, Path(args.out))
        for mode, row in r["summary"].items():
            print(f"{mode}: {json.dumps(row)}")
        print(f"results in {Path(args.out) / 'failover.json'}")
    elif args.bench == "reroute":
        from ryu_apps.host.agent import parse_size

        r = reroute.reroute(args.trials, parse_size(args.size), args.modes.split(","), Path(args.out))
        print(f"reroute delay median {r['reroute_delay_s']['median']} s over {args.trials} trials")
        for test_no, row in r["gain_vs_ecmp"].items():
            print(f"test {test_no}: " + ", ".join(f"{m} FCT {v['fct_gain_pct']}% throughput {v['throughput_gain_pct']}%"
                                                 for m, v in row.items()))
        print(f"results in {Path(args.out) / 'reroute.json'}")
    elif args.bench == "isolation":
        r = reroute.isolation_bench(args.duration, args.mice_rate, args.elephants, Path(args.out))
        for name, row in r["runs"].items():
            print(f"{name}: mice p50 {row['mice_p50_ms']} ms, p99 {row['mice_p99_ms']} ms, "
                  f"bottleneck {100 * row['bottleneck_utilisation']:.1f}%")
        print(f"mice latency with isolation: p50 -{r['mice_p50_reduction_pct']}%, p99 -{r['mice_p99_reduction_pct']}%")
        print(f"results in {Path(args.out) / 'isolation.json'}")
    elif args.bench == "hook":
        r = failover.hook_latency(args.connects, args.rounds, Path(args.out))
        for kind, row in r["results"].items():
            print(f"{kind}: connect p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms over {row['connects']}")
        print(f"results in {Path(args.out) / 'hook.json'}")
    elif args.bench == "linkcheck":
        r = failover.linkcheck(args.trials, args.duration, Path(args.out))
        for k, v in r["cost"].items():
            print(f"{k}: controller CPU {v['cpu_pct']}%, {v['probes_per_s']} probes/s sent, {v['heard_per_s']}/s heard")
        s = r["summary"]
        print(f"silent link failures: {s['detected']} found, median {s['found_median_s']} s, worst {s['found_worst_s']} s; "
              f"median {s['pings_lost_median']} pings lost")
        print(f"results in {Path(args.out) / 'linkcheck.json'}")
    elif args.bench == "state":
        r = failover.state(args.flows, args.flows_per_s, args.waves, Path(args.out))
        print(f"RSS before {r['before']['rss_mib']} MiB; " + "; ".join(
            f"wave {w['wave']}: {w['flows_installed']} flows, peak {w['peak']['rss_mib'] if w['peak'] else None} "
            f"MiB, after {w['after']['rss_mib']} MiB with {w['after'].get('hedera_edges')} edge entries"
            for w in r["waves"]))
        print(f"results in {Path(args.out) / 'state.json'}")
    elif args.bench == "crossval":
        from experiments.analysis import crossval

        r = crossval.run(Path(args.emulator), Path(args.ns3), Path(args.out))
        for key, rk in r["ranking"].items():
            print(f"{key}, best first: emulator {', '.join(rk['emulator'])}; ns-3 {', '.join(rk['ns3'])}: "
                  f"{'same' if rk['same'] else 'DIFFERENT'} ranking")
        for key, c in r["checks"].items():
            rel = c["relative_difference"]
            print(f"freeway+isolation {key}: emulator {c['emulator']}, ns-3 {c['ns3']}"
                  + ("" if rel is None else f" (ns-3 differs by {rel:+.0%})"))
        print(f"cross-validation {'met' if r['met'] else 'NOT met'}; results in {Path(args.out) / 'crossval.json'}")
    elif args.bench == "sweep":
        from experiments.sweep import bench as sweep_bench

        r = sweep_bench.run(Path(args.out), args.duration, args.workers)
        print(f"overhead {r['overhead']['ratio']}x ({'met' if r['overhead']['met'] else 'NOT met'}); resume "
              f"{'met' if r['resume']['met'] else 'NOT met'}; results in {Path(args.out) / 'sweep.json'}")
    elif args.bench == "exhaustion":
        from experiments.benches import exhaustion

        r = exhaustion.run(args.k, Path(args.out), args.handshake_rate, args.window, args.unadmitted, args.slowloris)
        print(f"k={args.k}: unloaded {json.dumps(r.get('unloaded'))}")
        print(f"k={args.k}: under attack {json.dumps(r.get('attack'))}: {json.dumps(r.get('loaded'))}")
        print(f"targets: {json.dumps(r.get('targets'))}")
        print(f"results in {Path(args.out) / f'exhaustion_k{args.k}.json'}")
    elif args.bench == "emulator":
        from experiments.benches.emulator import emulator

        try:
            ports = [int(x) for x in args.ports.split(",")]
        except ValueError:
            raise SystemExit(f"freeway bench emulator: --ports: comma-separated whole numbers, got {args.ports!r}") from None
        if not ports or min(ports) < 0 or max(ports) > 2000 or not 1 <= args.pps <= 5000:
            raise SystemExit("freeway bench emulator: --ports must be 0-2000 each and --pps 1-5000")
        emulator(ports, args.pps, args.duration, Path(args.out))
        print(f"results in {Path(args.out) / 'emulator.json'}")
    return 0


def cmd_experiment(args) -> int:
    from pathlib import Path

    from experiments.engines.runner import ExperimentError, print_table, run_experiment
    from experiments.scenarios import papers as scenarios
    from experiments.workloads.workload import WorkloadError

    modes = [m for m in (args.modes or scenarios.DEFAULT_MODES[args.scenario]).split(",") if m]
    k = args.k if args.k is not None else (8 if args.scenario == "paper" else 4)
    link_mbps = args.link_mbps if args.link_mbps is not None else (100.0 if args.scenario == "paper" else 10.0)
    duration = args.duration if args.duration is not None else (10.0 if args.scenario == "paper" else 30.0)
    try:
        if args.scenario == "fct":
            return _fct(args, modes)
        if args.scenario == "paper":
            from experiments.scenarios import paper

            if args.engine != "ns3":
                raise ExperimentError("paper: the paper's fabric (k=8, 320 servers) runs on --engine ns3 only")
            seeds = [int(x) for x in args.seeds.split(",")]
            if args.queues is not None:
                from topology.queues import SettingError as QueueError
                from topology.queues import check_discipline

                try:
                    check_discipline(args.queues, "ns3")
                except QueueError as e:
                    raise ExperimentError(f"--{e}") from None
            r = paper.run(Path(args.out), modes, seeds, k, args.hosts_per_edge, link_mbps, duration, jobs=args.jobs,
                          settings={"tcp": args.tcp, "link_delay_s": args.link_delay_us * 1e-6, "mtu": args.mtu},
                          queues=args.queues)
            paper.print_table(r)
            return 0
        if args.scenario in ("cut-in", "flow-control"):
            from experiments.scenarios import queueing

            if args.engine != "ns3":
                raise ExperimentError(f"{args.scenario}: needs --engine ns3 (this kernel has no prio, red or bpf "
                                      "qdisc: the emulator can neither cut in, evict, mark ECN nor pause)")
            if args.scenario == "cut-in":
                rates = [float(x) for x in args.rates.split(",")]
                dur = {r: (duration if args.duration is not None else (0.3 if r >= 1000 else 10.0)) for r in rates}
                r = queueing.cut_in(Path(args.out), rates, args.tcps.split(","), args.disciplines.split(","), dur,
                                    args.seed, args.jobs, args.short_senders)
                for row in r["rows"]:
                    print(f"{row['rate_mbps']:>7g} {row['tcp']:<8} {row['discipline']:<7} delay "
                          f"{row['queueing_delay_ms']} ms, drops {row['drop_rate']}, short p99 {row['short_p99_ms']} ms, "
                          f"long {row['long_mbps']} Mbit/s")
                for c in r["checks"]:
                    print(f"cq at {c['rate_mbps']:g} Mbit/s, {c['tcp']}: p99 {c['p99_vs_fifo']} x fifo, "
                          f"{c['p99_vs_strict']} x strict, long {c['long_vs_fifo']} x fifo: "
                          f"{'met' if c['met'] else 'NOT met'}")
            else:
                rate = args.link_mbps if args.link_mbps is not None else 10_000.0
                dur = args.duration if args.duration is not None else 0.3
                r = queueing.flow_control(Path(args.out), rate, dur, list(queueing.FC_CONFIGS),
                                          list(queueing.FC_TRAFFIC), args.seed, args.jobs)
                for row in r["rows"]:
                    print(f"{row['config']:<9} {row['traffic']:<10} mice mean {row['mice_mean_us']} us, p99 "
                          f"{row['mice_p99_us']} us, utilisation {row['utilisation']}, pauses {row['pause_frames']}")
                print(f"isolated vs hybrid: {r['checks']}")
            print(f"results in {args.out}/results.json, plots: " + ", ".join(r["plots"]))
            return 0
        if args.first_flight < 0:
            raise ExperimentError("--first-flight: bytes, at least 0")
        ns3 = ({"tcp": args.tcp, "link_delay_s": args.link_delay_us * 1e-6, "host_send": args.host_send,
                "first_flight_bytes": args.first_flight} if args.engine == "ns3" else None)
        own = None if ns3 is None else {**ns3, "mtu": args.mtu, "seed": args.seed}
        if args.engine == "emulator" and args.tcp != "cubic" and args.scenario in ("efm-collisions", "many-to-one"):
            raise ExperimentError(f"--tcp: {args.scenario} on the emulator runs cubic (its hosts are set to it); "
                                  "other congestion controls: --engine ns3")
        if args.scenario == "flows":
            from experiments.engines.runner import build_fabric

            if not args.flows_file:
                raise ExperimentError("flows: give the flow list with --flows FILE")
            r = scenarios.run_flow_list(args.flows_file, modes, Path(args.out), build_fabric(args.topo, k, link_mbps),
                                        args.engine, args.mtu, args.jobs, ns3, args.controller_config, tcp=args.tcp)
            scenarios.print_flow_list(r["table"])
        elif args.scenario == "efm-collisions":
            r = scenarios.run_efm_collisions(modes, args.flow_bytes, Path(args.out), args.engine, args.jobs, own)
            scenarios.print_collisions(r["table"])
        elif args.scenario == "many-to-one":
            if duration < 5:
                raise ExperimentError("--duration: at least 5 seconds")
            r = scenarios.run_many_to_one(modes, duration, Path(args.out), engine=args.engine, jobs=args.jobs,
                                          ns3=own)
            scenarios.print_many_to_one(r["table"])
        else:
            r = run_experiment(args.scenario, modes, duration, args.seed, Path(args.out), k,
                               args.mice_load, args.distribution, args.mice_boundary, not args.no_references,
                               link_mbps=link_mbps, repeats=args.repeat, announce=args.announce,
                               controller_config=args.controller_config, static_arp=args.static_arp,
                               mtu=args.mtu, switch_processes=args.switch_processes, engine=args.engine,
                               topo=args.topo, ns3=ns3, jobs=args.jobs, queues=args.queues, tcp=args.tcp,
                               mice_after=args.mice_after, host_demote=args.host_demote)
    except (ExperimentError, WorkloadError, scenarios.ScenarioError, ValueError) as e:
        print(f"freeway experiment: error: {e}", file=sys.stderr)
        return 2
    if args.scenario not in ("mixed", "permutation"):
        print(f"results in {args.out}/results.json, plot: " + ", ".join(f"{args.out}/{p}" for p in r["plots"]))
        return 0
    print_table(r["table"], r["results"])
    print(f"results in {args.out}/results.json, flows in {args.out}/flows.csv, plots: "
          + ", ".join(f"{args.out}/{p}" for p in r["plots"]))
    return 0


def _fct(args, modes: list[str]) -> int:
    """``freeway experiment fct``: the standard benchmark as a sweep (modes x workloads x loads x seeds) on a
    local Dask cluster into a results store, then its report."""
    from pathlib import Path

    from experiments.sweep.report import report
    from experiments.sweep.run import sweep
    from experiments.sweep.spec import Spec, SpecError, check_value
    from experiments.sweep.store import Store, StoreError

    if args.engine != "ns3":
        print("freeway experiment: error: fct: the benchmark runs on --engine ns3 (k=8 at 100 Mbit/s is past what "
              "this machine can emulate faithfully)", file=sys.stderr)
        return 2
    try:
        grid = {"mode": [check_value("mode", m, "mode", "--modes", {}) for m in modes],
                "workload": [check_value("workload", w, "choice:websearch,datamining", "--workloads", {})
                             for w in args.workloads.split(",")],
                "load": [check_value("load", float(x), "fraction", "--loads", {}) for x in args.loads.split(",")],
                "seed": [int(x) for x in args.seeds.split(",")]}
    except (SpecError, ValueError) as e:
        print(f"freeway experiment: error: {e}", file=sys.stderr)
        return 2
    fixed = {"k": args.k if args.k is not None else 8, "link_mbps": args.link_mbps or 100.0,
             "duration": args.duration if args.duration is not None else 2.0, "announce_above": args.announce_above,
             "local_share": args.local_share, "local_scope": args.local_scope, "max_bytes": args.max_bytes,
             "tcp": args.tcp, "mtu": args.mtu, "link_delay_us": args.link_delay_us, "topo": args.topo}
    if args.queues:
        fixed["queues"] = args.queues
    variants = {"default": {}}
    if args.host_demote:  # the hosts demote, and the ToRs keep their mark (a variant: it is the controller's)
        fixed["demote_after"] = float(args.host_demote)
        variants = {"host-demotion": {"isolation": {"host_demotion": True}}}
        grid["variant"] = ["host-demotion"]
    spec = Spec("fct", "ns3", grid, fixed, variants)
    out = Path(args.out)
    store = Store(args.store or out / "store")
    try:
        res = sweep(spec, store, args.scheduler, args.jobs)
    except StoreError as e:
        print(f"freeway experiment: error: {e}", file=sys.stderr)
        return 2
    if not res.ok:
        print(f"freeway experiment: {len(res.failed)} runs failed, {len(res.missing)} not stored: run the same "
              "command again to run only those", file=sys.stderr)
        return 3
    rep = report(store, out)
    print((out / "report.md").read_text())
    print(f"results in {store.root} (Parquet), report in {out / 'report.md'}, plots: "
          + ", ".join(str(out / p) for p in rep["plots"]))
    return 0


ALL = "ALL"
SCENARIOS = {
    "mixed": "elephants and mice on a fat-tree",
    "permutation": "every host sends one long flow to a host of another pod and receives one",
    "paper": "the Freeway paper's comparison (k=8, 320 servers, SWIM's Facebook jobs; --engine ns3)",
    "fct": "the field's benchmark: Poisson arrivals of web-search or data-mining flows, slowdowns against the "
           "ideal, swept on Dask into a results store (--engine ns3)",
    "efm-collisions": "the EFM paper's four tests",
    "many-to-one": "the isolation paper's incast on a leaf-spine",
    "cut-in": "the CQ slides' many-to-one under fifo, strict and cq (--engine ns3)",
    "flow-control": "the isolation paper's Fig. 1 with PFC, ECN and isolated queues (--engine ns3)",
    "flows": "the flows of a CSV (--flows FILE), on either engine",
}


def add_commands(sub) -> None:
    d = sub.add_parser("demo", help="k=4 fat-tree under the controller: reachability, TCP rate, ECMP spread")
    d.add_argument("--k", type=int, default=4, help="fat-tree arity (4)")
    options.link_mbps(d, 10.0)
    d.add_argument("--out", default="results/demo", help="where to write the description and results (results/demo)")
    d.set_defaults(func=cmd_demo)

    x = sub.add_parser("experiment", help="run a scenario under several modes; results, CSV and plots")
    xsub = x.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    # (no abbreviations: paper's --seed would have been read as --seeds)
    scen = {name: xsub.add_parser(name, help=text, description=f"freeway experiment {name}: {text}",
                                  allow_abbrev=False) for name, text in SCENARIOS.items()}
    unset: dict[str, dict] = {name: {} for name in scen}  # per scenario, the options it does not take (defaults)

    # the scenarios whose hosts run TCP flows of their own (their congestion control, links, MTU, modes)
    with_hosts = "mixed permutation paper fct efm-collisions many-to-one flows"
    ns3_hosts = "mixed permutation efm-collisions many-to-one flows"  # ... and whose ns-3 hosts are set by hand

    def opt(where: str, *names, **kw) -> None:
        """An option of the scenarios ``where`` names (ALL, or a space-separated list); the others refuse it
        (argparse: unrecognized arguments) and read its default."""
        takes = set(scen) if where == ALL else set(where.split())
        assert takes <= set(scen), takes - set(scen)
        for name, sp in scen.items():
            if name in takes:
                sp.add_argument(*names, **kw)
            else:
                dest = kw.get("dest") or names[0].lstrip("-").replace("-", "_")
                unset[name][dest] = kw.get("default", False if kw.get("action") == "store_true" else None)

    opt("fct", "--workloads", default="websearch,datamining",
        help="fct: flow sizes, websearch (DCTCP) and/or datamining (VL2) (both)")
    opt("fct", "--loads", default="0.5,0.7", help="fct: offered loads, fractions of the access link (0.5,0.7)")
    opt("fct", "--announce-above", type=float, default=1_000_000, metavar="BYTES",
        help="fct: flows of this many bytes or more announce themselves (1000000; 0: none does)")
    opt("fct", "--local-share", type=float, default=0.0,
        help="fct: share of flows kept inside the source's rack or pod (0: destinations uniform)")
    opt("fct", "--local-scope", choices=["rack", "pod"], default="rack", help="fct: where local flows stay")
    opt("fct", "--max-bytes", type=float, default=30_000_000, metavar="BYTES",
        help="fct: sizes drawn up to this (30000000: web-search's largest; data-mining's reach 973 MB, "
        "78 s alone at 100 Mbit/s; 0: the whole distribution)")
    opt("fct", "--store", metavar="DIR", help="fct: the results store (default: OUT/store)")
    opt("fct", "--scheduler", metavar="URL", help="fct: a running Dask scheduler (default: a local cluster)")
    opt("flows", "--flows", metavar="FILE", dest="flows_file",
        help="flows: a CSV of flows (start_s,src,dst,bytes and optionally announced, kind, stop_s, sport, "
        "dport, rate_mbps; hosts by the description's names: docs/ns3.md)")
    opt("cut-in", "--rates", default="10000,100", help="cut-in: link rates in Mbit/s (10000,100)")
    opt("cut-in", "--tcps", default="newreno,cubic,bbr,dctcp", help="cut-in: congestion controls (all four)")
    opt("cut-in", "--disciplines", default="fifo,strict,cq", help="cut-in: port disciplines (fifo,strict,cq)")
    opt("cut-in", "--short-senders", type=int, choices=[1, 3], default=1,
        help="cut-in: the short flows from one host (1), or dealt over all three senders (3: an incast)")
    opt("paper fct", "--seeds", default="1,2,3", help="paper: workload and engine seeds, one run each per mode (1,2,3)")
    opt("paper", "--hosts-per-edge", type=int, default=10, help="paper: servers an edge switch (10, the paper's)")
    opt(ALL, "--engine", choices=["emulator", "ns3"], default="emulator",
        help="mixed, permutation, efm-collisions, many-to-one, flows: Open vSwitch under Mininet (emulator, "
        "default) or the packet-level ns-3 engine, whose switches carry out the same OpenFlow program")
    opt("mixed permutation flows fct", "--topo", choices=["fattree", "leafspine"], default="fattree",
        help="permutation, flows: a k-ary fat-tree, or a leaf-spine of k spines, k leaves, k hosts a leaf")
    opt(ALL, "--jobs", type=int, default=0, help="ns3: runs at once, each its own process (0: one per core)")
    opt(with_hosts, "--tcp", choices=["cubic", "newreno", "bbr", "dctcp"], default="cubic",
        help="the hosts' congestion control (cubic, Linux's default), on both engines: the emulator sets "
        "it in every host, whatever this machine's default")
    opt(with_hosts, "--link-delay-us", type=float, default=5.0, help="ns3: each link's one-way delay in us (5)")
    opt(ns3_hosts, "--first-flight", type=int, default=0,
        help="ns3: a new connection's first flight in bytes, standing in for a Linux receiver's first "
        "advertised window (35840 on these machines: 4 jumbo segments); 0: ten segments (0)")
    opt(ns3_hosts, "--host-send", choices=["link", "unshaped"], default="link",
        help="ns3: hosts send at their link's rate (link), or unshaped into their switch, as the "
        "emulator's hosts do (only switch ports are shaped there): for comparing the engines")
    opt("mixed permutation paper fct", "--queues", default=None,
        help="ns3: every switch port's discipline: fifo, strict (mice first, by DSCP) or cq (cut-in with "
        "eviction over one buffer), with +ecn (CE marks on the elephant band above K) and +pfc (the "
        "mice band paused hop by hop); by default strict with +isolation, fifo without (the "
        "emulator carries only those)")
    from ryu_apps.modes import registry  # (modes of installed plug-ins are described too)

    opt(with_hosts, "--modes", default=None,
        help="comma-separated: ecmp, hedera (polls every 5 s), hedera-1s (every second), efm-biggest, "
        "efm-smallest, freeway, perpkt (ns3 only: per-packet load balancing), with +isolation "
        "(mixed: ecmp,hedera,efm-biggest,freeway,freeway+isolation; permutation: "
        "ecmp,hedera,efm-biggest,freeway; efm-collisions: ecmp,hedera,efm-biggest,efm-smallest; "
        "many-to-one: ecmp,ecmp+isolation)" + (f"; {registry.describe()}" if registry.describe() else ""))
    opt("efm-collisions", "--flow-bytes", type=int, default=6_000_000,
        help="efm-collisions: bytes per colliding flow (6000000)")
    opt("mixed permutation paper fct many-to-one cut-in flow-control", "--duration", type=float, default=None,
        help="seconds of traffic per mode (30; many-to-one: per run; paper: the trace's hour compressed "
        "into 10)")
    opt("mixed permutation efm-collisions many-to-one cut-in flow-control flows", "--seed", type=int, default=1, help="workload seed (1)")
    opt("mixed permutation", "--repeat", type=int, default=1,
        help="mixed: run every mode this many times, in rounds; FCTs pooled, goodput averaged, "
        "lowest-highest shown (1)")
    opt("mixed permutation paper fct flows", "--k", type=int, default=None, help="fat-tree arity (4; paper: 8)")
    opt("mixed permutation paper fct flows flow-control", "--link-mbps", type=float, default=None, help="link rate in Mbit/s (10; paper: 100)")
    opt("mixed permutation", "--mice-load", type=float, default=0.1, help="mice load per host, fraction of its link (0.1)")
    opt("permutation", "--mice-after", type=float, default=None, metavar="S",
        help="permutation: mice (at --mice-load) join the elephants S seconds into the run, until its "
        "end (default: no mice)")
    opt("mixed permutation", "--distribution", default="websearch", help="mice sizes: websearch or datamining")
    opt("mixed permutation", "--mice-boundary", type=float, default=100_000, help="largest mouse in bytes (100000)")
    opt("mixed permutation", "--no-references", action="store_true", help="skip the floor and ceiling reference runs")
    opt("mixed permutation flows", "--controller-config", metavar="FILE",
        help="mixed: every controller of the run (floor and ceiling too) reads this config file "
        "('freeway config --defaults' writes one); the run's own mode and addresses override it")
    opt("mixed permutation", "--static-arp", action="store_true",
        help="mixed: once every host reaches every other, give each host all its neighbours' MACs "
        "(no ARP during the runs; a diagnosis aid that takes the controller's proxy ARP out)")
    opt(with_hosts, "--mtu", type=int, default=1500,
        help="mixed: MTU of every host and switch interface, 1500-9000 (1500; 9000: jumbo frames, "
        "fewer packets for the same bytes; port buffers stay the same in bytes)")
    opt("mixed permutation", "--switch-processes", type=int, default=1,
        help="mixed: spread the fabric's switches over this many Open vSwitch processes, 1-8 (1; each "
        "process's forwarding thread reads every port it has for every packet: docs/lab/experiments-history.md)")
    opt("mixed permutation fct", "--host-demote", type=_bytes_arg, default=0, metavar="BYTES",
        help="mixed, permutation, fct: every host demotes a TCP connection to the elephant DSCP once it has sent "
        "this many bytes on it (PIAS-like; the emulator runs 'freeway host-demote' in each host, ns-3's hosts "
        "mark at their egress), and with +isolation the ToRs keep the mark (host_demotion) (0: off)")
    opt("mixed permutation", "--announce", choices=["send", "hook", "none"], default="send",
        help="how Freeway modes announce the elephants: the host agent 'freeway send' (default), "
        "the connect() hook under 'freeway run' with iperf3 unmodified, or none (they do not "
        "announce; monitoring finds them)")
    opt(ALL, "--out", default="results/experiment", help="output directory (results/experiment)")
    for name, sp in scen.items():
        sp.set_defaults(func=cmd_experiment, **unset[name])

    b = sub.add_parser("bench", help="measurements that write JSON")
    bsub = b.add_subparsers(dest="bench", required=True)
    bs = bsub.add_parser("startup", help="fat-tree start-up time to full reachability")
    options.ks(bs, "4,8")
    options.link_mbps(bs, 10.0)
    bs.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bd = bsub.add_parser("detection", help="elephant detection delay, mice misflagged, decoder speed")
    bd.add_argument("--trials", type=int, default=10, help="elephant trials (10)")
    options.link_mbps(bd, 10.0)
    bd.add_argument("--elephant-mbps", type=float, default=3.0, help="elephant rate in Mbit/s (3)")
    bd.add_argument("--mice", type=int, default=100, help="request/response mice flows (100)")
    bd.add_argument("--mice-sizes", default="1000,50000", metavar="MIN,MAX",
                    help="mice response sizes in bytes, log-uniform between MIN and MAX (1000,50000)")
    bd.add_argument("--seed", type=int, default=1, help="random seed (1)")
    bd.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bh = bsub.add_parser("handshake", help="handshake-to-answer latency at several announce rates (k=4)")
    bh.add_argument("--announces-per-s", default="10,100,500",
                    help="announces per second, comma-separated (10,100,500)")
    options.renamed(bh, "--rates", "--announces-per-s")
    options.duration(bh, 5.0, "seconds per rate (5)")
    bh.add_argument("--punt-pps", type=int, default=1000, help="punt meter rate per edge switch for the run (1000)")
    bh.add_argument("--api-poll", type=float, default=0.1,
                    help="each rate also runs with a client polling the operator API this often, in s (0.1; 0: not)")
    bh.add_argument("--switch-processes", type=int, default=1,
                    help="spread the fabric's switches over this many Open vSwitch processes, 1-8 (1)")
    bh.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bk = bsub.add_parser("scale", help="pure modules on a k=48 fat-tree model; Bin-Pack vs the exact solver")
    bk.add_argument("--k", type=int, default=48, help="fat-tree arity (48: 27,648 hosts)")
    bk.add_argument("--pairs", type=int, default=2000, help="active ToR pairs per partition period (2000)")
    bk.add_argument("--placements", type=int, default=2000, help="elephant placements to time (2000)")
    bk.add_argument("--exact-k", type=int, default=8, help="fat-tree arity for the exact comparison (8)")
    bk.add_argument("--exact-flows", type=int, default=24, help="flows per exact comparison (24)")
    bk.add_argument("--seed", type=int, default=1, help="random seed (1)")
    bk.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bf = bsub.add_parser("fabric-scale", help="the controller process against a fabric's switches emulated at the "
                                             "socket (one OpenFlow connection each): start-up, program walk, restart")
    options.ks(bf, "8")
    bf.add_argument("--topo", choices=["fattree", "leafspine"], default="fattree")
    bf.add_argument("--pairs", type=int, default=2000, help="ToR pairs walked through the tables (2000; 0: every one)")
    bf.add_argument("--mode", default="freeway", help="the controller's mode (freeway)")
    bf.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for start-up and restart (600)")
    bf.add_argument("--active-pairs", type=int, default=2000,
                    help="ToR pairs carrying the steady state's synthetic load (2000; 0: every one)")
    bf.add_argument("--window", type=float, default=10.0, help="seconds per sFlow level of the steady state (10)")
    bf.add_argument("--handshake-rate", type=float, default=100.0, help="announces a second in the steady state (100)")
    bf.add_argument("--cuts", type=int, default=3, help="aggregation-core links cut in turn, each restored (3)")
    bf.add_argument("--no-steady", action="store_true", help="skip the steady state (sFlow, handshakes)")
    bf.add_argument("--sflow-workers", default=None,
                    help="the controller's sflow_workers (its default: auto, one per core beside its own); several "
                         "(0,1,2,4): a run each, into OUT/workers-N, compared in OUT/sflow_workers_kK.json and .png")
    bf.add_argument("--sflow-levels", default=None,
                    help="only these sFlow levels, INTERVAL:SAMPLING,... (0: none; e.g. 1:1000,2:0); default: the "
                         "ladder from the product's defaults down")
    bf.add_argument("--handshake-level", metavar="INTERVAL:SAMPLING",
                    help="time the handshakes under this sFlow level (e.g. 1:1000), kept up with or not; default: "
                         "the densest the controller kept up with, which differs between runs on a busier machine")
    bf.add_argument("--controller-config", metavar="FILE",
                    help="the controller reads this config file ('freeway config --defaults' writes one): to "
                         "measure a setting's cost at scale (its settings are recorded in the results)")
    bf.add_argument("--cpus", metavar="ROLE=CPUS", action="append",
                    help="the CPUs a role runs on, as taskset writes them (repeatable; ROLE: controller, workers "
                         "(its sFlow collector's; the controller's when not given), generator (the emulated "
                         "switches, the handshakes and the sFlow agents)); e.g. --cpus controller=0 --cpus "
                         "generator=1: the generator given a budget of its own")
    bf.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    br = bsub.add_parser("reroute", help="EFM reroute delay; the EFM paper's four collision tests per mode")
    br.add_argument("--trials", type=int, default=5, help="reroute-delay trials (5)")
    br.add_argument("--size", default="6M", help="bytes per flow in the collision tests (6M)")
    br.add_argument("--modes", default="ecmp,hedera,efm-biggest,efm-smallest", help="modes to compare")
    br.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bf = bsub.add_parser("failover", help="link cuts and a controller restart on k=4: reachability, ping gaps")
    bf.add_argument("--trials", type=int, default=3, help="trials per mode (3)")
    bf.add_argument("--modes", default="ecmp,freeway", help="modes (ecmp,freeway; freeway runs with isolation)")
    bf.add_argument("--cluster", action="store_true",
                    help="instead: two controllers on a three-member etcd, the leader SIGKILLed in each trial")
    bf.add_argument("--ttl", type=float, default=2.0, help="with --cluster: the leader's lease in s (2)")
    bf.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bi = bsub.add_parser("isolation", help="many-to-one on a leaf-spine: mice FCT and utilisation, isolation on/off")
    options.duration(bi, 20.0, "seconds of mice per run (20)")
    bi.add_argument("--mice-rate", type=float, default=6.0, help="10 KB mice per second (6: about 5%% of the link)")
    bi.add_argument("--elephants", type=int, default=3, help="elephant senders (3)")
    bi.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bo = bsub.add_parser("hook", help="connect latency with and without the connect() hook (freeway run), k=4")
    bo.add_argument("--connects", type=int, default=100, help="connects per run (100)")
    bo.add_argument("--rounds", type=int, default=3, help="rounds of the three runs, in turns (3)")
    bo.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bt = bsub.add_parser("state", help="Hedera mode, waves of short TCP flows: the controller's RSS and tables")
    bt.add_argument("--flows", type=int, default=100_000, help="flows per wave (100000; each connect is two)")
    bt.add_argument("--flows-per-s", type=float, default=1000.0, help="flows per second, all hosts together (1000)")
    options.renamed(bt, "--rate", "--flows-per-s", float)
    bt.add_argument("--waves", type=int, default=2, help="waves, each after the last one's flows expired (2)")
    bt.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bl = bsub.add_parser("linkcheck", help="the LLDP link check on k=4: its CPU cost, and how fast a silent "
                                           "one-way link failure is found")
    bl.add_argument("--trials", type=int, default=5, help="silent failures (5)")
    options.duration(bl, 20.0, "idle seconds for the CPU cost, each run (20)")
    bl.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bx = bsub.add_parser("crossval", help="the same mixed workload on the emulator and on ns-3, compared")
    bx.add_argument("--emulator", required=True, help="a 'freeway experiment mixed' output directory")
    bx.add_argument("--ns3", required=True, help="the same with --engine ns3")
    bx.add_argument("--out", default="results/crossval", help="output directory (results/crossval)")
    bw = bsub.add_parser("sweep", help="a sweep of 8 short ns-3 runs on a Dask scheduler and two workers started as "
                                       "processes: its overhead over the runs' own time, and an interrupted "
                                       "sweep started again (runs only what is missing, the same tables)")
    bw.add_argument("--duration", type=float, default=0.4, help="seconds of arrivals a run (0.4)")
    bw.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    bw.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bz = bsub.add_parser("exhaustion", help="handshakes and the API while unadmitted OpenFlow connections and a "
                                            "slowloris on the API hold what they can, beside the same unloaded "
                                            "(the controller against a fat-tree emulated at the socket)")
    bz.add_argument("--k", type=int, default=8, help="fat-tree arity (8)")
    bz.add_argument("--handshake-rate", type=float, default=100.0, help="announces a second (100)")
    bz.add_argument("--window", type=float, default=10.0, help="seconds of each window (10)")
    bz.add_argument("--unadmitted", type=int, default=2000, help="OpenFlow connections that never say which switch "
                                                                 "they are (2000)")
    bz.add_argument("--slowloris", type=int, default=300, help="API connections that send half a request line (300)")
    bz.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    be = bsub.add_parser("emulator", help="what a packet costs Open vSwitch's forwarding thread, by ports on its "
                                          "datapath, and with those ports in a second process")
    be.add_argument("--ports", default="0,200,700", help="idle ports to add, comma-separated (0,200,700)")
    be.add_argument("--pps", type=int, default=500, help="pings per second through the bridge (500)")
    options.duration(be, 5.0, "seconds per measurement (5)")
    be.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    b.set_defaults(func=cmd_bench)


def options_table() -> str:
    """Every command's options as docs/commands.md lists them (a test keeps the page equal to this):
    one line per command, its options in the order ``--help`` gives them; old names, hidden, left out."""
    import argparse

    from experiments.sweep import cli as sweep_cli
    from ryu_apps import cli

    rows = []

    def walk(parser, path):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, path + [name])
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            opts = [a.option_strings[0] if len(a.option_strings) == 1 else " / ".join(a.option_strings)
                    for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS
                    and "--help" not in a.option_strings]
            pos = [a.dest.upper() for a in parser._actions if not a.option_strings]
            rows.append(f"| `freeway {' '.join(path)}` | {' '.join(pos)} | {', '.join(f'`{o}`' for o in opts)} |")

    walk(cli.build_parser((sys.modules[__name__], sweep_cli)), [])
    return "\n".join(["| command | arguments | options |", "|---|---|---|", *sorted(rows)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The installed ``freeway`` command: the controller's commands (``ryu_apps.cli``) and the lab's."""
    from experiments.sweep import cli as sweep_cli
    from ryu_apps import cli

    return cli.main(argv, extra=(sys.modules[__name__], sweep_cli))


if __name__ == "__main__":
    sys.exit(main())
