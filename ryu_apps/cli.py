"""The ``freeway`` command. ``controller`` is defined here; each other command lives beside what it runs:
``fabric`` in topology/, ``send`` (the host agent) in ryu_apps/host/agent.py, ``status`` in operators/; the
lab's ``demo``/``experiment``/``bench``/``sweep``/``report`` in experiments/, whose ``cli.main`` (the
installed ``freeway``) hands them to ``main`` here."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from ryu_apps.config import (
    SECTIONS,
    Config,
    ConfigError,
    defaults_file,
    load_file,
    parse_settings,
    settings_epilog,
    settings_help,
)
from ryu_apps.modes import registry
from topology import options
from topology.settings import spec


def controller_config(args) -> Config:
    """The configuration of ``freeway controller``: the config file's settings, then the command line's
    (a flag overrides the file; a module setting given as KEY=VALUE overrides the file's)."""
    values = load_file(args.config) if args.config else {}
    monitor = list(parse_settings(args.monitor_set))
    if args.elephant_fraction is not None:
        monitor.append(("elephant_fraction", args.elephant_fraction))
    efm = list(parse_settings(args.efm_set))
    if args.efm_threshold is not None:
        efm.append(("threshold", args.efm_threshold))
    if args.efm_hold_down is not None:
        efm.append(("hold_down_s", args.efm_hold_down))
    values.update({name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None})
    given = {"monitor_settings": monitor, "freeway_settings": parse_settings(args.freeway_set),
             "isolation_settings": parse_settings(args.isolation_set), "efm_settings": efm,
             "mode_settings": parse_settings(args.mode_set)}
    for key, pairs in given.items():
        values[key] = tuple(values.get(key, ())) + tuple(pairs)
    return Config.from_mapping(values)


def cmd_controller(args) -> int:
    from ryu_apps.launcher import run

    cfg = controller_config(args)
    return run(cfg, cfg.listen, args.verbose, reread=lambda: controller_config(args), config_file=args.config)


def cmd_config(args) -> int:
    text = defaults_file()
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as fh:
            fh.write(text)
        print(f"wrote every setting at its default to {args.out}")
    return 0


# Config field -> its command-line flag; the type, default, choices and help come from the declaration
FLAGS = {"fabric": "--fabric", "listen": "--listen", "mode": "--mode", "monitor": "--monitor", "sflow_listen": "--sflow-listen",
         "sflow_rt_url": "--sflow-rt", "ovsdb": "--ovsdb", "events_file": "--events", "isolation": "--isolation",
         "hedera_poll_s": "--hedera-poll", "link_hold_down_s": "--link-hold-down", "events_max_mb": "--events-max-mb",
         "api": "--api", "api_token_file": "--api-token-file", "log_format": "--log-format",
         "cluster": "--cluster", "cluster_name": "--cluster-name", "cluster_ttl_s": "--cluster-ttl", "node_id": "--node-id",
         "lldp_interval_s": "--lldp-interval", "lldp_timeout_s": "--lldp-timeout", "lldp_budget_pps": "--lldp-budget",
         "echo_budget_pps": "--echo-budget",
         "ctl_privkey": "--ctl-privkey", "ctl_cert": "--ctl-cert", "ca_certs": "--ca-certs",
         "switch_identity": "--switch-identity", "api_read_token_file": "--api-read-token-file",
         "api_open_reads": "--api-open-reads", "api_cert": "--api-cert", "api_key": "--api-key",
         "cluster_ca": "--cluster-ca", "cluster_cert": "--cluster-cert", "cluster_key": "--cluster-key",
         "cluster_user": "--cluster-user", "cluster_password_file": "--cluster-password-file",
         "ovsdb_plain": "--ovsdb-plain", "sflow_sources": "--sflow-sources", "sflow_workers": "--sflow-workers",
         "openflow_plain": "--openflow-plain",
         "ca_crl": "--ca-crl"}


def _config_flags(c) -> None:
    for f in fields(Config):
        if f.name not in FLAGS:
            continue
        s = spec(f)
        kw: dict = {"dest": f.name, "default": None}
        if s.choices:
            kw["choices"] = s.choices
        elif isinstance(f.default, bool):
            kw["choices"] = ("on", "off")
        unit = f" {s.unit}" if s.unit else ""
        shown = ("on" if f.default else "off") if isinstance(f.default, bool) else f.default
        kw["help"] = s.help + (f" ({shown}{unit})" if shown != "" else "")
        c.add_argument(FLAGS[f.name], **kw)


def add_controller(sub) -> None:
    c = sub.add_parser("controller", help="run the controller apps on os-ken",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="module settings (KEY=VALUE, repeatable):\n\n" + settings_epilog()
                       + (("\n\n" + registry.describe()) if registry.describe() else ""))
    c.add_argument("--config", metavar="FILE", help="a YAML file of settings, nested by section ('freeway config "
                                                    "--defaults' writes one); flags override it")
    _config_flags(c)
    c.add_argument("--elephant-fraction", type=float, help="same as --monitor-set elephant_fraction=F (0.1)")
    c.add_argument("--efm-threshold", type=float, help="same as --efm-set threshold=F (0.7)")
    c.add_argument("--efm-hold-down", type=float, help="same as --efm-set hold_down_s=S (10)")
    for key in SECTIONS:
        flag = "--" + key.replace("_settings", "-set")
        c.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", help=settings_help(key))
    c.add_argument("--mode-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a plug-in mode's own setting (docs/your-mode.md); its config file section is its name")
    c.add_argument("--verbose", action="store_true", help="debug logging")
    c.set_defaults(func=cmd_controller)
    g = sub.add_parser("config", help="write a config file of every setting at its default, with its help")
    g.add_argument("--defaults", action="store_true", required=True, help="every setting at its default")
    g.add_argument("--out", default="-", help="where to write it (- for standard output, the default)")
    g.set_defaults(func=cmd_config)


def cmd_discover(args) -> int:
    from ryu_apps.launcher import run_discover
    from topology.fabric import Fabric, FabricError

    if args.duration <= 0 or args.interval <= 0 or args.interval * 2 > args.duration:
        raise SystemExit("freeway discover: --duration must be at least twice --interval, both positive")
    if args.link_mbps is not None and args.link_mbps <= 0:
        raise SystemExit(f"freeway discover: --link-mbps must be positive, got {args.link_mbps:g}")
    settings = {"out": args.out, "duration_s": args.duration, "interval_s": args.interval, "rate_mbps": args.link_mbps}
    if args.expect:
        try:
            settings.update(expect=Fabric.load(args.expect), expect_file=args.expect)
        except FabricError as e:
            raise SystemExit(f"freeway discover: --expect: {e}") from None
    tls = (args.ctl_privkey or "", args.ctl_cert or "", args.ca_certs or "")
    if any(tls) and not all(tls):
        raise SystemExit("freeway discover: --ctl-privkey, --ctl-cert and --ca-certs go together (OpenFlow over TLS)")
    settings.update(tls=tls if all(tls) else None, identity=args.switch_identity != "off")
    return run_discover(args.listen, settings, args.verbose)


def add_discover(sub) -> None:
    d = sub.add_parser("discover", help="learn an unknown fabric (LLDP, the hosts' own traffic) and write its "
                                        "description, with its Clos roles inferred from the graph")
    d.add_argument("--listen", default="127.0.0.1:6653", help="OpenFlow address the switches connect to "
                                                              "(127.0.0.1:6653)")
    d.add_argument("--out", required=True, help="where to write the description (JSON)")
    d.add_argument("--duration", type=float, default=10.0, help="seconds to watch after the first switch "
                                                                "connects (10)")
    d.add_argument("--interval", type=float, default=1.0, help="seconds between LLDP probes of every port (1)")
    options.link_mbps(d, None, help="every link's rate in Mbit/s (default: the ports' advertised speeds, the "
                                    "slower end of each link)")
    d.add_argument("--expect", metavar="FILE", help="a description to compare with: exit 2 and say what "
                                                    "differs, by datapath id, if the fabric is not that one")
    d.add_argument("--ctl-privkey", help="OpenFlow over TLS: the controller's private key (PEM)")
    d.add_argument("--ctl-cert", help="OpenFlow over TLS: the controller's certificate (PEM)")
    d.add_argument("--ca-certs", help="OpenFlow over TLS: the CA of the switches' certificates (PEM)")
    d.add_argument("--switch-identity", choices=("on", "off"), default="on",
                   help="with TLS, a switch's certificate must name the datapath id it claims (on)")
    d.add_argument("--verbose", action="store_true", help="debug logging")
    d.set_defaults(func=cmd_discover)


def build_parser(extra=()) -> argparse.ArgumentParser:
    """The controller's commands and those of the packages below it; ``extra``: modules above (the lab's
    ``experiments.cli`` adds its own this way, so that no package imports one above it)."""
    from ryu_apps.host import agent, demote, hookrun
    from ryu_apps.operators import status
    from topology import cli as topology_cli

    p = argparse.ArgumentParser(prog="freeway", description="Freeway: mice/elephant path isolation for Clos fabrics")
    sub = p.add_subparsers(dest="command", required=True)
    add_controller(sub)
    add_discover(sub)
    for module in (topology_cli, agent, hookrun, demote, status, *extra):
        module.add_commands(sub)
    return p


def main(argv: list[str] | None = None, extra=()) -> int:
    """``freeway``: ``python -m ryu_apps.cli`` has the controller's commands; the installed ``freeway``
    (``experiments.cli:main``) adds the lab's (``demo``, ``experiment``, ``bench``, ``sweep``, ``report``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if argv[:1] in (["send"], ["run"]) and "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    args = build_parser(extra).parse_args(argv)
    args.trailing = command
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
