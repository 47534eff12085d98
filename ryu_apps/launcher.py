"""Start the Freeway apps on os-ken's AppManager (no osken-manager needed)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import warnings

from topology.fabric import Fabric
from topology.settings import SettingError, hostport

from . import config, logfmt

APPS = ["ryu_apps.freeway_app", "ryu_apps.monitor_app"]


class LaunchError(RuntimeError):
    """A problem found before anything was started."""


ON_TERMINATE: list = []  # what to do on SIGTERM before the process goes (a cluster's leader resigns)


def _terminate(*_):
    for hook in ON_TERMINATE:
        try:
            hook()
        except Exception as e:  # the store away: the lease lapses by itself
            logging.getLogger("freeway").warning("on SIGTERM: %s", e)
    logging.shutdown()
    os._exit(0)


def parse_listen(listen: str) -> tuple[str, int]:
    try:
        return hostport("--listen", listen)
    except SettingError as e:
        raise LaunchError(str(e)) from None


def check_listen(host: str, port: int) -> None:
    """Fail early, with the OS's reason, if the controller could not listen there."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise LaunchError(f"--listen: cannot resolve {host!r}: {e.strerror}") from None
    fam, _, _, _, addr = infos[0]
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise LaunchError(f"--listen: cannot listen on {host}:{port}: {e.strerror}") from None


def check_udp(host: str, port: int) -> None:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise LaunchError(f"--sflow-listen: cannot receive sFlow on {host}:{port}: {e.strerror}") from None


def run(cfg: config.Config, listen: str = "127.0.0.1:6653", verbose: bool = False, reread=None,
        config_file: str | None = None) -> int:
    """Start the apps and serve until stopped. ``reread()`` builds the configuration again (the file, then
    the flags) for a reload on SIGHUP."""
    Fabric.load(cfg.fabric)  # validate before starting anything
    host, port = parse_listen(listen)
    check_listen(host, port)
    if cfg.api:
        from .api import read_token

        api_host, api_port = hostport("api", cfg.api)
        if (api_host, api_port) == (host, port):
            raise LaunchError("--api: the API cannot share the OpenFlow listen address")
        try:
            check_listen(api_host, api_port)
        except LaunchError as e:
            raise LaunchError(str(e).replace("--listen", "--api", 1)) from None
        if cfg.api_token_file:
            try:
                read_token(cfg.api_token_file)
            except ValueError as e:
                raise LaunchError(str(e)) from None
    if cfg.monitor == "sflow":
        check_udp(*cfg.sflow_address)
    if cfg.events_file:
        try:
            open(cfg.events_file, "a").close()
        except OSError as e:
            raise LaunchError(f"--events: cannot write {cfg.events_file}: {e.strerror}") from None

    warnings.filterwarnings("ignore", message="\nEventlet is deprecated")
    warnings.filterwarnings("ignore", message="Eventlet is deprecated")
    from os_ken.lib import hub

    hub.patch(thread=True)
    from os_ken import cfg as osken_cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller  # noqa: F401  (registers the ofp-* options)

    # echo requests every 2 s, a switch that leaves 3 unanswered is disconnected: a half-open
    # connection is found in seconds instead of never
    osken_cfg.CONF(args=["--ofp-listen-host", host, "--ofp-tcp-listen-port", str(port)], project="os_ken")
    osken_cfg.CONF.set_override("echo_request_interval", 2.0)
    osken_cfg.CONF.set_override("maximum_unreplied_echo_requests", 3)
    logfmt.setup(cfg.log_format, verbose)
    config.set_active(cfg)
    config.set_reread(reread, config_file)
    signal.signal(signal.SIGHUP, lambda *_: config.request_reload())  # the app reloads in its own loop
    if cfg.cluster:  # a clean stop hands a cluster's leadership on at once
        signal.signal(signal.SIGTERM, _terminate)
    mgr = AppManager.get_instance()
    mgr.load_apps(APPS)
    services = mgr.instantiate_apps(**mgr.create_contexts())
    logging.getLogger("freeway").info("listening for switches on %s:%d", host, port)
    try:
        hub.joinall(services)
    except KeyboardInterrupt:
        pass
    finally:
        mgr.close()
    return 0
