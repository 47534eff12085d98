"""``freeway fabric``: build a fabric on Open vSwitch under Mininet and keep it running."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from topology import options
from topology.queues import IsolationConfig, check_mtu
from topology.settings import SettingError, build, hostport, parse_pairs
from topology.sflow_agent import SFlowAgentConfig


def _fabric_from_args(args):
    from topology.fabric import build as build_fabric
    from topology.fabric import scramble

    if args.topo == "fattree":
        fabric = build_fabric("fattree", args.link_mbps, k=args.k)
    else:
        fabric = build_fabric("leafspine", args.link_mbps, spines=args.spines, leaves=args.leaves,
                              hosts_per_leaf=args.hosts_per_leaf)
    seed = getattr(args, "scramble", None)
    return fabric if seed is None else scramble(fabric, seed)


def _add_fabric_shape(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topo", choices=["fattree", "leafspine"], default="fattree", help="fabric type (fattree)")
    p.add_argument("--k", type=int, default=4, help="fat-tree arity, even >= 4 (4)")
    p.add_argument("--spines", type=int, default=2, help="leaf-spine: number of spines (2)")
    p.add_argument("--leaves", type=int, default=4, help="leaf-spine: number of leaves (4)")
    p.add_argument("--hosts-per-leaf", type=int, default=2, help="leaf-spine: hosts per leaf (2)")
    options.link_mbps(p, 10.0)


def cmd_fabric(args) -> int:
    from topology.builder import BuildError, FabricNet

    fabric = _fabric_from_args(args)
    if args.describe:
        fabric.save(args.describe)
        print(f"fabric description written to {args.describe}")
    if args.describe_only:
        return 0
    ctl = [hostport("--controller", c.strip()) for c in args.controller.split(",")]
    try:
        check_mtu(args.mtu)
    except SettingError as e:
        raise BuildError(f"--{e}") from None
    sflow = None
    if not args.no_sflow:
        try:
            sflow = SFlowAgentConfig.for_rate(fabric.link_rate_mbps, args.mtu, target=args.sflow_target,
                                              sampling=args.sflow_sampling, polling=args.sflow_polling,
                                              header=args.sflow_header, agents=args.sflow_agents)
        except ValueError as e:
            raise BuildError(str(e)) from None
    iso = None
    if args.isolation == "on":
        try:
            iso = build(IsolationConfig, parse_pairs(args.isolation_set), "isolation")
        except SettingError as e:
            raise BuildError(str(e)) from None
    from topology.ovsproc import ProcessError, SwitchProcesses

    try:
        sp = SwitchProcesses(args.switch_processes)
    except ProcessError as e:
        raise BuildError(f"--{e}") from None
    if sp.ovsdb_setting:
        print(f"switches spread over {sp.n} Open vSwitch processes: the controller needs --ovsdb {sp.ovsdb_setting}")
    tls = None
    if args.tls:
        from topology.pki import PkiError, fabric_pki

        try:
            made = fabric_pki(args.tls, fabric)
        except PkiError as e:
            raise BuildError(f"--tls: {e}") from None
        tls = {**made["ovs"], "ca": made["ca"]}
        c = made["controller"]
        print(f"OpenFlow over TLS: the controller needs --ctl-privkey {c['key']} --ctl-cert {c['cert']} "
              f"--ca-certs {made['ca']}")
    fn = FabricNet(fabric, ctl, shape=not args.no_shape, controller_wait=args.controller_wait, sflow=sflow,
                   isolation=iso, mtu=args.mtu, processes=sp, tls=tls,
                   tcp=None if args.tcp == "machine" else args.tcp)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with sp, fn:
        print(f"{fabric.topo} up: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, "
              f"{fabric.link_rate_mbps:g} Mbit/s links, hosts on {fn.tcp}; all switches programmed in "
              f"{fn.timings['programmed_s']:.1f} s")
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


def add_commands(sub) -> None:
    f = sub.add_parser("fabric", help="build a fabric on Open vSwitch under Mininet")
    _add_fabric_shape(f)
    f.add_argument("--controller", default="127.0.0.1:6653",
                   help="controller address HOST:PORT, or several separated by commas (the members of a cluster: "
                        "every switch connects to each) (127.0.0.1:6653)")
    f.add_argument("--controller-wait", type=float, default=10.0, help="seconds to wait for the controller (10)")
    f.add_argument("--scramble", type=int, metavar="SEED",
                   help="random datapath ids, port numbers and host MACs (from SEED), as a fabric the controller "
                        "did not build: it must work from the description alone")
    f.add_argument("--describe", metavar="FILE", help="write the fabric description (JSON) here")
    f.add_argument("--describe-only", action="store_true", help="write the description and exit")
    f.add_argument("--no-shape", action="store_true", help="do not enforce the link rate with OVS QoS")
    f.add_argument("--tcp", default="cubic",
                   help="every host's TCP congestion control (cubic, Linux's default; reno, bbr, ...), set in each "
                        "host whatever this machine's default; 'machine' leaves the machine's")
    f.add_argument("--mtu", type=int, default=1500,
                   help="MTU of every host and switch interface, 1500-9000 (1500; 9000: jumbo frames)")
    f.add_argument("--switch-processes", type=int, default=1,
                   help="spread the switches over this many Open vSwitch processes, 1-8 (1); the controller then "
                        "needs every process's database in --ovsdb (printed)")
    f.add_argument("--tls", metavar="DIR",
                   help="switches connect over TLS (ssl: targets): a CA, the controller's certificate and one for "
                        "Open vSwitch naming every bridge's datapath id are made in DIR (kept if there), and the "
                        "controller's flags printed")
    f.add_argument("--no-sflow", action="store_true", help="do not turn on sFlow on the bridges")
    f.add_argument("--isolation", choices=["on", "off"], default="off",
                   help="two queues per port (mice first) with DSCP filters, matching the controller's (off)")
    f.add_argument("--isolation-set", action="append", default=[], metavar="KEY=VALUE",
                   help="queue settings: mice_dscp, elephant_dscp, mice_queue_len, elephant_queue_len, "
                        "elephant_min_share (as for the controller)")
    f.add_argument("--sflow-target", default="127.0.0.1:6343",
                   help="sFlow collector HOST:PORT, or several separated by commas (127.0.0.1:6343)")
    f.add_argument("--sflow-agents", metavar="PREFIX",
                   help="every bridge exports sFlow under its own agent address from PREFIX (e.g. 127.0.1.0/24; "
                        "127/8 addresses go on the loopback), as switches on many hosts do")
    f.add_argument("--sflow-sampling", type=int, help="sample 1 in N packets (N = link rate in Mbit/s)")
    f.add_argument("--sflow-polling", type=int, help="counter polling interval in seconds (1)")
    f.add_argument("--sflow-header", type=int, help="bytes of each sampled header (128)")
    f.add_argument("--timeout", type=float, default=120.0, help="seconds allowed for --test pingall/iperf (120)")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--cli", action="store_true", help="open the Mininet CLI")
    g.add_argument("--test", choices=["pingall", "iperf"], help="run a check and exit non-zero on failure")
    f.set_defaults(func=cmd_fabric)
    p = sub.add_parser("pki", help="make a CA and certificates for OpenFlow over TLS (openssl): the controller's, "
                                   "one per switch of a fabric naming its datapath id, one for Open vSwitch naming "
                                   "them all")
    p.add_argument("--fabric", required=True, help="the fabric description (JSON)")
    p.add_argument("--dir", required=True, help="directory for the CA, keys and certificates (a CA there is kept)")
    p.add_argument("--controller-host", action="append", default=[],
                   help="a DNS name or IP address the controller's certificate names (127.0.0.1, localhost)")
    p.add_argument("--real", action="store_true",
                   help="a fabric of real switches: no certificate for one Open vSwitch process naming every "
                        "datapath id (the emulated fabric's)")
    p.add_argument("--revoke", metavar="NAME", action="append", default=[],
                   help="revoke NAME.pem (switch-e0_0, say): it joins the CA's revocation list, NAME-crl.pem, "
                        "which the controller reads with --ca-crl (repeatable)")
    p.set_defaults(func=cmd_pki)


def cmd_pki(args) -> int:
    import json

    from topology.fabric import Fabric
    from topology.pki import Pki, PkiError, fabric_pki

    try:
        made = fabric_pki(args.dir, Fabric.load(args.fabric), tuple(args.controller_host) or ("127.0.0.1", "localhost"),
                          emulated=not args.real)
        for name in args.revoke:
            made["crl"] = str(Pki(Path(args.dir)).revoke(name))
            made.setdefault("revoked", []).append(name)
    except (PkiError, OSError, ValueError) as e:
        print(f"freeway pki: {e}", file=sys.stderr)
        return 2
    print(json.dumps(made, indent=1))
    return 0

