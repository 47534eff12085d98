"""The ``freeway`` command: controller, fabric and demo subcommands."""

from __future__ import annotations

import argparse
import signal
import sys


def _fabric_from_args(args):
    from topology.fabric import build

    if args.topo == "fattree":
        return build("fattree", args.rate, k=args.k)
    return build("leafspine", args.rate, spines=args.spines, leaves=args.leaves, hosts_per_leaf=args.hosts_per_leaf)


def _add_fabric_shape(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topo", choices=["fattree", "leafspine"], default="fattree", help="fabric type (fattree)")
    p.add_argument("--k", type=int, default=4, help="fat-tree arity, even >= 4 (4)")
    p.add_argument("--spines", type=int, default=2, help="leaf-spine: number of spines (2)")
    p.add_argument("--leaves", type=int, default=4, help="leaf-spine: number of leaves (4)")
    p.add_argument("--hosts-per-leaf", type=int, default=2, help="leaf-spine: hosts per leaf (2)")
    p.add_argument("--rate", type=float, default=10.0, help="link rate in Mbit/s (10)")


def cmd_controller(args) -> int:
    from ryu_apps.config import Config, parse_settings
    from ryu_apps.launcher import run

    settings = list(parse_settings(args.monitor_set))
    if args.elephant_fraction is not None:
        settings.append(("elephant_fraction", args.elephant_fraction))
    cfg = Config(fabric=args.fabric, mode=args.mode, monitor=args.monitor, sflow_listen=args.sflow_listen,
                 sflow_rt_url=args.sflow_rt or "", events_file=args.events or "", ovsdb=args.ovsdb or "",
                 monitor_settings=tuple(settings), freeway_settings=parse_settings(args.freeway_set),
                 efm_threshold=args.efm_threshold, efm_hold_down_s=args.efm_hold_down, hedera_poll_s=args.hedera_poll,
                 isolation=args.isolation == "on", isolation_settings=parse_settings(args.isolation_set))
    return run(cfg, args.listen, args.verbose)


def cmd_fabric(args) -> int:
    from topology.builder import BuildError, FabricNet

    fabric = _fabric_from_args(args)
    if args.describe:
        fabric.save(args.describe)
        print(f"fabric description written to {args.describe}")
    if args.describe_only:
        return 0
    from ryu_apps.launcher import parse_listen

    ctl = parse_listen(args.controller)
    sflow = None
    if not args.no_sflow:
        from topology.sflow_agent import SFlowAgentConfig

        try:
            sflow = SFlowAgentConfig.for_rate(fabric.link_rate_mbps, target=args.sflow_target,
                                              sampling=args.sflow_sampling, polling=args.sflow_polling,
                                              header=args.sflow_header)
        except ValueError as e:
            raise BuildError(str(e)) from None
    iso = None
    if args.isolation == "on":
        from ryu_apps.config import Config, ConfigError, parse_settings

        try:
            iso = Config(fabric="-", isolation=True, isolation_settings=parse_settings(args.isolation_set)
                         ).isolation_config()
        except ConfigError as e:
            raise BuildError(str(e)) from None
    fn = FabricNet(fabric, ctl, shape=not args.no_shape, controller_wait=args.controller_wait, sflow=sflow,
                   isolation=iso)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with fn:
        print(f"{fabric.topo} up: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, "
              f"{fabric.link_rate_mbps:g} Mbit/s links; all switches programmed in {fn.timings['programmed_s']:.1f} s")
        if args.cli:
            from mininet.cli import CLI

            CLI(fn.net)
            return 0
        if args.test == "pingall":
            secs, failed = fn.wait_reachable(args.timeout)
            n = len(fabric.hosts)
            print(f"pingall: {n * (n - 1) - len(failed)}/{n * (n - 1)} pairs reachable, "
                  f"full reachability {'in %.1f s' % (fn.timings['programmed_s'] + secs) if not failed else 'NOT reached'}"
                  " after start")
            for a, b in failed[:10]:
                print(f"  unreachable: {a} -> {b}")
            return 0 if not failed else 1
        if args.test == "iperf":
            src, dst = fabric.hosts[0].name, fabric.hosts[-1].name
            fn.wait_reachable(args.timeout)
            mbps = fn.iperf(src, dst, seconds=5)
            ok = mbps >= 0.8 * fabric.link_rate_mbps
            print(f"iperf: {src} -> {dst}: {mbps:.2f} Mbit/s ({100 * mbps / fabric.link_rate_mbps:.0f}% of "
                  f"{fabric.link_rate_mbps:g} Mbit/s) {'OK' if ok else 'BELOW 80%'}")
            return 0 if ok else 1
        print("fabric running; Ctrl-C to stop")
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


def cmd_send(args) -> int:
    from experiments.agent import run

    try:
        return run(args, args.trailing)
    except ValueError as e:
        print(f"freeway send: error: {e}", file=sys.stderr)
        return 2


def cmd_demo(args) -> int:
    from experiments.demo import run

    return run(args)


def cmd_bench(args) -> int:
    from pathlib import Path

    from experiments import bench

    if args.bench == "startup":
        ks = [int(x) for x in args.k.split(",")]
        bench.startup(ks, args.rate, Path(args.out))
        print(f"results in {Path(args.out) / 'startup.json'}")
    elif args.bench == "detection":
        r = bench.detection(args.trials, args.rate, Path(args.out), args.elephant_mbps, args.mice, args.seed)
        print(f"elephants detected {r['detected']}/{len(r['trials'])}: median {r['median_delay_s']} s, "
              f"p95 {r['p95_delay_s']} s; mice flagged {r['mice']['wrongly_flagged']}/{r['mice']['flows']}; "
              f"decoder {r['decoder']['decode_datagrams_per_s']} datagrams/s")
        print(f"results in {Path(args.out) / 'detection.json'}")
    elif args.bench == "handshake":
        r = bench.handshake_latency([int(x) for x in args.rates.split(",")], args.seconds, Path(args.out),
                                    args.punt_pps)
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
    elif args.bench == "reroute":
        from experiments.agent import parse_size

        r = bench.reroute(args.trials, parse_size(args.size), args.modes.split(","), Path(args.out))
        print(f"reroute delay median {r['reroute_delay_s']['median']} s over {args.trials} trials")
        for test_no, row in r["gain_vs_ecmp"].items():
            print(f"test {test_no}: " + ", ".join(f"{m} FCT {v['fct_gain_pct']}% throughput {v['throughput_gain_pct']}%"
                                                 for m, v in row.items()))
        print(f"results in {Path(args.out) / 'reroute.json'}")
    elif args.bench == "isolation":
        r = bench.isolation_bench(args.seconds, args.mice_rate, args.elephants, Path(args.out))
        for name, row in r["runs"].items():
            print(f"{name}: mice p50 {row['mice_p50_ms']} ms, p99 {row['mice_p99_ms']} ms, "
                  f"bottleneck {100 * row['bottleneck_utilisation']:.1f}%")
        print(f"mice latency with isolation: p50 -{r['mice_p50_reduction_pct']}%, p99 -{r['mice_p99_reduction_pct']}%")
        print(f"results in {Path(args.out) / 'isolation.json'}")
    return 0


def cmd_experiment(args) -> int:
    from pathlib import Path

    from experiments import scenarios
    from experiments.runner import ExperimentError, print_table, run_experiment
    from experiments.workload import WorkloadError

    modes = [m for m in (args.modes or scenarios.DEFAULT_MODES[args.scenario]).split(",") if m]
    try:
        if args.scenario == "efm-collisions":
            r = scenarios.run_efm_collisions(modes, args.flow_bytes, Path(args.out))
            scenarios.print_collisions(r["table"])
        elif args.scenario == "many-to-one":
            if args.duration < 5:
                raise ExperimentError("--duration: at least 5 seconds")
            r = scenarios.run_many_to_one(modes, args.duration, Path(args.out))
            scenarios.print_many_to_one(r["table"])
        else:
            r = run_experiment(args.scenario, modes, args.duration, args.seed, Path(args.out), args.k,
                               args.mice_load, args.distribution, args.mice_boundary, not args.no_references,
                               link_mbps=args.link_mbps, repeats=args.repeat)
    except (ExperimentError, WorkloadError, scenarios.ScenarioError) as e:
        print(f"freeway experiment: error: {e}", file=sys.stderr)
        return 2
    if args.scenario != "mixed":
        print(f"results in {args.out}/results.json, plot: " + ", ".join(f"{args.out}/{p}" for p in r["plots"]))
        return 0
    print_table(r["table"], r["results"])
    print(f"results in {args.out}/results.json, flows in {args.out}/flows.csv, plots: "
          + ", ".join(f"{args.out}/{p}" for p in r["plots"]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="freeway", description="Freeway: mice/elephant path isolation for Clos fabrics")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("controller", help="run the controller apps on os-ken")
    c.add_argument("--fabric", required=True, help="fabric description (JSON) written by 'freeway fabric --describe'")
    c.add_argument("--listen", default="127.0.0.1:6653", help="OpenFlow listen address HOST:PORT (127.0.0.1:6653)")
    from ryu_apps.config import MODES, MONITORS

    c.add_argument("--mode", choices=MODES, default="ecmp", help="scheduling mode (ecmp)")
    c.add_argument("--monitor", choices=MONITORS, default="sflow",
                   help="monitoring backend: built-in sFlow collector, sFlow-RT REST, or none (sflow)")
    c.add_argument("--sflow-listen", default="127.0.0.1:6343", help="UDP address of the sFlow collector (127.0.0.1:6343)")
    c.add_argument("--sflow-rt", metavar="URL", help="sFlow-RT base URL for --monitor sflow-rt, e.g. http://127.0.0.1:8008")
    c.add_argument("--ovsdb", metavar="DB", help="OVSDB to read ifIndex->port from (local Open vSwitch)")
    c.add_argument("--events", metavar="FILE", help="append JSON lines: elephant events, per-second link loads")
    c.add_argument("--elephant-fraction", type=float, help="elephant threshold as a fraction of link rate (0.1)")
    c.add_argument("--monitor-set", action="append", default=[], metavar="KEY=VALUE",
                   help="other monitoring settings: window_s, min_span_s, min_samples, hold_s, idle_s, ewma_alpha")
    c.add_argument("--isolation", choices=["on", "off"], default="off",
                   help="mice and elephants in separate queues: mark, set_queue, meter elephants (off)")
    c.add_argument("--isolation-set", action="append", default=[], metavar="KEY=VALUE",
                   help="isolation settings: mice_dscp, elephant_dscp, mice_queue_len, elephant_queue_len, "
                        "elephant_min_share, meter_burst_ms, meter_headroom, mice_meter_mbps")
    c.add_argument("--efm-threshold", type=float, default=0.7, help="EFM: congested above this occupancy (0.7)")
    c.add_argument("--efm-hold-down", type=float, default=10.0, help="EFM: seconds before a moved flow may move again (10)")
    c.add_argument("--hedera-poll", type=float, default=5.0, help="hedera: seconds between flow-statistics polls (5)")
    c.add_argument("--freeway-set", action="append", default=[], metavar="KEY=VALUE",
                   help="Freeway settings (mode freeway): lol_high, lol_low, fixed_lol, fixed_hol, drain_load, "
                        "drain_min_s, drain_max_s, punt_pps, punt_burst, elephant_idle_s, headroom, active_s")
    c.add_argument("--verbose", action="store_true", help="debug logging")
    c.set_defaults(func=cmd_controller)

    f = sub.add_parser("fabric", help="build a fabric on Open vSwitch under Mininet")
    _add_fabric_shape(f)
    f.add_argument("--controller", default="127.0.0.1:6653", help="controller address HOST:PORT (127.0.0.1:6653)")
    f.add_argument("--controller-wait", type=float, default=10.0, help="seconds to wait for the controller (10)")
    f.add_argument("--describe", metavar="FILE", help="write the fabric description (JSON) here")
    f.add_argument("--describe-only", action="store_true", help="write the description and exit")
    f.add_argument("--no-shape", action="store_true", help="do not enforce the link rate with OVS QoS")
    f.add_argument("--no-sflow", action="store_true", help="do not turn on sFlow on the bridges")
    f.add_argument("--isolation", choices=["on", "off"], default="off",
                   help="two queues per port (mice first) with DSCP filters, matching the controller's (off)")
    f.add_argument("--isolation-set", action="append", default=[], metavar="KEY=VALUE",
                   help="queue settings: mice_dscp, elephant_dscp, mice_queue_len, elephant_queue_len, "
                        "elephant_min_share (as for the controller)")
    f.add_argument("--sflow-target", default="127.0.0.1:6343", help="sFlow collector HOST:PORT (127.0.0.1:6343)")
    f.add_argument("--sflow-sampling", type=int, help="sample 1 in N packets (N = link rate in Mbit/s)")
    f.add_argument("--sflow-polling", type=int, help="counter polling interval in seconds (1)")
    f.add_argument("--sflow-header", type=int, help="bytes of each sampled header (128)")
    f.add_argument("--timeout", type=float, default=120.0, help="seconds allowed for --test pingall/iperf (120)")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--cli", action="store_true", help="open the Mininet CLI")
    g.add_argument("--test", choices=["pingall", "iperf"], help="run a check and exit non-zero on failure")
    f.set_defaults(func=cmd_fabric)

    s = sub.add_parser("send", help="announce an elephant (handshake), then send it")
    s.add_argument("--to", required=True, help="destination IP")
    s.add_argument("--port", type=int, required=True, help="destination TCP port")
    s.add_argument("--size", required=True, help="bytes to send (e.g. 20M)")
    s.add_argument("--rate", type=float, help="expected rate in Mbit/s (default: as fast as the path allows)")
    s.add_argument("--subflows", type=int, default=1, help="TCP subflows (1)")
    s.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for the answer per try (1)")
    s.add_argument("--retries", type=int, default=2, help="extra tries without an answer (2)")
    s.add_argument("--service", default="10.255.255.254:7070", help="handshake service address (10.255.255.254:7070)")
    s.add_argument("--announce-only", action="store_true", help="handshake only, send nothing (exit 1 unless ACK)")
    s.add_argument("--json", action="store_true", help="print JSON lines")
    s.set_defaults(func=cmd_send)

    d = sub.add_parser("demo", help="k=4 fat-tree under the controller: reachability, TCP rate, ECMP spread")
    d.add_argument("--k", type=int, default=4, help="fat-tree arity (4)")
    d.add_argument("--rate", type=float, default=10.0, help="link rate in Mbit/s (10)")
    d.add_argument("--out", default="results/demo", help="where to write the description and results (results/demo)")
    d.set_defaults(func=cmd_demo)

    x = sub.add_parser("experiment", help="run a scenario under several modes; results, CSV and plots")
    x.add_argument("scenario", choices=["mixed", "efm-collisions", "many-to-one"],
                   help="mixed: elephants and mice on a fat-tree; efm-collisions: the EFM paper's four tests; "
                        "many-to-one: the isolation paper's incast on a leaf-spine")
    x.add_argument("--modes", default=None,
                   help="comma-separated: ecmp, hedera, efm-biggest, efm-smallest, freeway, with +isolation "
                        "(mixed: ecmp,hedera,efm-biggest,freeway,freeway+isolation; efm-collisions: "
                        "ecmp,hedera,efm-biggest,efm-smallest; many-to-one: ecmp,ecmp+isolation)")
    x.add_argument("--flow-bytes", type=int, default=6_000_000,
                   help="efm-collisions: bytes per colliding flow (6000000)")
    x.add_argument("--duration", type=float, default=30.0,
                   help="seconds of traffic per mode (30; many-to-one: per run)")
    x.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    x.add_argument("--repeat", type=int, default=1,
                   help="mixed: run every mode this many times, in rounds; FCTs pooled, goodput averaged, "
                        "lowest-highest shown (1)")
    x.add_argument("--k", type=int, default=4, help="fat-tree arity (4; 8 when asked)")
    x.add_argument("--link-mbps", type=float, default=10.0, help="link rate in Mbit/s (10)")
    x.add_argument("--mice-load", type=float, default=0.1, help="mice load per host, fraction of its link (0.1)")
    x.add_argument("--distribution", default="websearch", help="mice sizes: websearch or datamining")
    x.add_argument("--mice-boundary", type=float, default=100_000, help="largest mouse in bytes (100000)")
    x.add_argument("--no-references", action="store_true", help="skip the floor and ceiling reference runs")
    x.add_argument("--out", default="results/experiment", help="output directory (results/experiment)")
    x.set_defaults(func=cmd_experiment)

    b = sub.add_parser("bench", help="measurements that write JSON")
    bsub = b.add_subparsers(dest="bench", required=True)
    bs = bsub.add_parser("startup", help="fat-tree start-up time to full reachability")
    bs.add_argument("--k", default="4,8", help="comma-separated arities (4,8)")
    bs.add_argument("--rate", type=float, default=10.0, help="link rate in Mbit/s (10)")
    bs.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bd = bsub.add_parser("detection", help="elephant detection delay, mice misflagged, decoder speed")
    bd.add_argument("--trials", type=int, default=10, help="elephant trials (10)")
    bd.add_argument("--rate", type=float, default=10.0, help="link rate in Mbit/s (10)")
    bd.add_argument("--elephant-mbps", type=float, default=3.0, help="elephant rate in Mbit/s (3)")
    bd.add_argument("--mice", type=int, default=100, help="request/response mice flows (100)")
    bd.add_argument("--seed", type=int, default=1, help="random seed (1)")
    bd.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bh = bsub.add_parser("handshake", help="handshake-to-answer latency at several announce rates (k=4)")
    bh.add_argument("--rates", default="10,100,500", help="announces per second, comma-separated (10,100,500)")
    bh.add_argument("--seconds", type=float, default=5.0, help="seconds per rate (5)")
    bh.add_argument("--punt-pps", type=int, default=1000, help="punt meter rate per edge switch for the run (1000)")
    bh.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bk = bsub.add_parser("scale", help="pure modules on a k=48 fat-tree model; Bin-Pack vs the exact solver")
    bk.add_argument("--k", type=int, default=48, help="fat-tree arity (48: 27,648 hosts)")
    bk.add_argument("--pairs", type=int, default=2000, help="active ToR pairs per partition period (2000)")
    bk.add_argument("--placements", type=int, default=2000, help="elephant placements to time (2000)")
    bk.add_argument("--exact-k", type=int, default=8, help="fat-tree arity for the exact comparison (8)")
    bk.add_argument("--exact-flows", type=int, default=24, help="flows per exact comparison (24)")
    bk.add_argument("--seed", type=int, default=1, help="random seed (1)")
    bk.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    br = bsub.add_parser("reroute", help="EFM reroute delay; the EFM paper's four collision tests per mode")
    br.add_argument("--trials", type=int, default=5, help="reroute-delay trials (5)")
    br.add_argument("--size", default="6M", help="bytes per flow in the collision tests (6M)")
    br.add_argument("--modes", default="ecmp,hedera,efm-biggest,efm-smallest", help="modes to compare")
    br.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    bi = bsub.add_parser("isolation", help="many-to-one on a leaf-spine: mice FCT and utilisation, isolation on/off")
    bi.add_argument("--seconds", type=float, default=20.0, help="seconds of mice per run (20)")
    bi.add_argument("--mice-rate", type=float, default=6.0, help="10 KB mice per second (6: about 5%% of the link)")
    bi.add_argument("--elephants", type=int, default=3, help="elephant senders (3)")
    bi.add_argument("--out", default="results/bench", help="output directory (results/bench)")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if argv[:1] == ["send"] and "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    args = build_parser().parse_args(argv)
    args.trailing = command
    from ryu_apps.config import ConfigError
    from ryu_apps.launcher import LaunchError
    from topology.builder import BuildError
    from topology.fabric import FabricError

    try:
        return args.func(args)
    except (FabricError, ConfigError, LaunchError, BuildError) as e:
        print(f"freeway {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
