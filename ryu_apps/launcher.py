"""Start the Freeway apps on os-ken's AppManager (no osken-manager needed)."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import ssl
import warnings

from ryu_apps import config, logfmt
from topology.fabric import Fabric
from topology.settings import SettingError, hostport

APPS = ["ryu_apps.controller_app", "ryu_apps.monitor_app"]


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


def raise_fd_limit() -> tuple[int, int]:
    """The open-file limit up to the hard limit: a socket per switch (k=48: 2,880), besides the API's and
    etcd's; returns (soft, hard) as they are now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def start_osken(host: str, port: int, apps: list[str], log_format: str = "text", verbose: bool = False,
                guard=None, tls: tuple[str, ...] = ("", "", ""), echo_interval_s: float | None = None):
    """os-ken listening for switches on host:port with ``apps`` loaded, every connection through ``guard``
    (``ofchannel``; over TLS when ``tls`` is key, certificate and CA); returns (manager, services)."""
    raise_fd_limit()
    warnings.filterwarnings("ignore", message="\nEventlet is deprecated")
    warnings.filterwarnings("ignore", message="Eventlet is deprecated")
    from os_ken.lib import hub

    hub.patch(thread=True)
    from os_ken import cfg as osken_cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller  # noqa: F401  (registers the ofp-* options)

    # echo requests every 2 s (less often in a fabric larger than the echo budget), a switch that leaves 3
    # unanswered is disconnected: a half-open connection is found in seconds instead of never
    osken_cfg.CONF(args=["--ofp-listen-host", host, "--ofp-tcp-listen-port", str(port)], project="os_ken")
    osken_cfg.CONF.set_override("echo_request_interval", echo_interval_s or ECHO_INTERVAL_S)
    osken_cfg.CONF.set_override("maximum_unreplied_echo_requests", ECHO_UNANSWERED)
    logfmt.setup(log_format, verbose)
    from ryu_apps import ofchannel
    from ryu_apps.control.channels import ChannelGuard

    ofchannel.install(guard or ChannelGuard(), *tls)
    mgr = AppManager.get_instance()
    mgr.load_apps(apps)
    return mgr, mgr.instantiate_apps(**mgr.create_contexts())


ECHO_INTERVAL_S = 2.0  # every switch is sent an echo request this often, at the most
ECHO_UNANSWERED = 3  # a switch that leaves this many unanswered (and sent nothing meanwhile) is disconnected


def echo_interval(switches: int, budget_pps: float) -> float:
    """How often each switch is sent an echo request: every ``ECHO_INTERVAL_S``, or less often where the
    fabric has more switches than ``budget_pps`` (``echo_budget_pps``) allows in that time. Each request
    and its reply cost the controller's one event loop a message each way, an event and the objects of a
    wait; at k=48, 2,880 switches every 2 s were 1,440 of each a second. A switch gone silent is found
    after about ``ECHO_UNANSWERED`` + 1 intervals (a closed connection at once)."""
    return max(ECHO_INTERVAL_S, switches / budget_pps)


GC_THRESHOLDS = (50_000, 20, 100)  # the cyclic collector's generations, after start-up (Python's: 700, 10, 10)
GC_YOUNG_S = 0.1  # the youngest generation is collected at least this often (``CollectorPace``)
GC_MIDDLE_EVERY = 1  # the middle generation every this many collections of the youngest (every other tick: 0.2 s)
GC_OLDEST_PACED = 1 << 30  # threshold2 where the pace collects the oldest: Python never starts that pass
GC_OLD_EVERY = 3000  # the oldest considered after this many of the middle one (10 min; a pass at k=48: 0.26 s)


class CollectorPace:
    """The cyclic collector on a clock as well as on allocations: the youngest generation every
    ``young_s`` (the controller's tick), the middle one once ``middle_every`` of those have passed (0.2 s), the
    oldest (what ``gc.freeze`` left out) once ``old_every`` middle ones have passed (10 min) and it has
    grown by a quarter since its last collection (Python's own rule for it, on its size). That pass
    walks all that is not frozen (261.5 ms at k=48, 87.6 ms at k=16 when it was asked for every 50 s).
    The counts are Python's (``gc.get_count()``), so an automatic collection in between counts too;
    Python's own thresholds (``GC_THRESHOLDS``) still start a young or middle pass when a burst
    allocates more between two ticks.

    Python starts a collection when allocations less deallocations pass ``threshold0``. A controller
    in its steady state mostly replaces what it holds (an LLDP record, a wait of each connection's
    send loop, a message), so that count stays low while the objects allocated since the last pass
    pile up: at k=48 a pass found 166,348 of them and held the event loop 107 ms in the handshakes'
    window (2026-11-27, docs/lab/benchmarks-history.md item 38). Collected every tenth of a second they are a
    tenth of a second's worth, and the middle generation every half second half a second's: no pass
    over 50 ms in the k=48 windows since, for about three times the collector's time (objects living
    a tenth of a second to a second are walked now, where they used to die unwalked). The middle passes
    then took 35 ms on average and over 50 ms four or five times in a 15 s window (2026-12-04, k=48, the
    handshakes' window: 27-29 passes, 838-945 ms): they walk what five young passes left. Every other
    tick, they walk what one left. Pure but for the callables: ``due`` says which generation."""

    def __init__(self, young_s: float | None = None, middle_every: int | None = None, old_every: int | None = None,
                 collect=gc.collect, counts=gc.get_count, enabled=gc.isenabled,
                 old_size=lambda: len(gc.get_objects(generation=2))):
        self.young_s = GC_YOUNG_S if young_s is None else young_s
        self.middle_every = GC_MIDDLE_EVERY if middle_every is None else middle_every
        self.old_every = GC_OLD_EVERY if old_every is None else old_every
        self._collect, self._counts, self._enabled, self._old_size = collect, counts, enabled, old_size
        self._next = float("-inf")
        self.old_after = 0  # the oldest generation's size after its last collection (a freeze empties it)
        self._old_skip = 0  # middle collections counted when its growth was last found too small
        self.passes = [0, 0, 0]

    def due(self, now: float, counts: tuple[int, int, int], old_size=None) -> int | None:
        """The generation to collect at ``now`` (None: not yet), given ``gc.get_count()``; ``old_size()``
        is asked only when the oldest is a candidate."""
        if now < self._next:
            return None
        self._next = now + self.young_s
        _, middle, old = counts
        if old >= self.old_every + self._old_skip:
            if old_size is None or old_size() > self.old_after * 1.25:
                return 2
            self._old_skip = old  # (not grown enough: asked again after another ``old_every`` middle ones)
        return 1 if middle >= self.middle_every else 0

    def tick(self, now: float) -> int | None:
        """Collect what is due (nothing while the collector is off: a caller's ``gc.disable`` holds)."""
        if not self._enabled():
            return None
        g = self.due(now, self._counts(), self._old_size)
        if g is not None:
            self._collect(g)
            self.passes[g] += 1
            if g == 2:
                self.old_after, self._old_skip = self._old_size(), 0
        return g

    def frozen(self) -> None:
        """The heap was frozen (``gc.freeze``): the oldest generation is empty again."""
        self.old_after, self._old_skip = 0, 0


def dump_greenthreads() -> int:
    """Log where each of the apps' green threads is (SIGUSR1): a controller whose loop runs but whose
    decisions stopped shows which thread waits where (an event queue, a switch's send queue), or has
    ended. Returns how many were logged."""
    import traceback

    from ryu_apps.openflow.framework import app_manager

    log = logging.getLogger("freeway")
    n = 0
    for name, app in sorted(app_manager.SERVICE_BRICKS.items()):
        for t in getattr(app, "threads", []):
            n += 1
            frame = getattr(t, "gr_frame", None)
            if frame is None:
                state = "ended" if getattr(t, "dead", False) else "running (this one)"
                log.warning("green thread %d of %s: %s", n, name, state)
            else:
                log.warning("green thread %d of %s:\n%s%s", n, name, "".join(traceback.format_stack(frame)),
                            _waits_on(frame))
    log.warning("%d green threads of the apps dumped (SIGUSR1)", n)
    return n


def _waits_on(frame) -> str:
    """A switch connection the thread waits to send to: its datapath id, state and send queue."""
    while frame is not None:
        dp = frame.f_locals.get("self")
        if frame.f_code.co_name == "send" and hasattr(dp, "send_q"):
            q, sem = dp.send_q, getattr(dp, "_send_q_sem", None)
            return (f"  waits to send to datapath {dp.id!r} from {dp.address}: state {dp.state}, active {dp.is_active}, "
                    f"send queue {'gone' if q is None else q.qsize()}, semaphore {getattr(sem, 'counter', '?')}\n")
        frame = frame.f_back
    return ""


def tune_gc(paced: bool = False) -> None:
    """After start-up: what start-up built (the fabric model, the partition: at k=48 some 1.5 million
    objects) lives as long as the process, so the cyclic collector stops walking it (``gc.freeze``), and
    the youngest generation is collected every 50,000 allocations instead of 700. A busy period at k=48
    allocates some 100,000 short-lived objects (its messages, freed by reference counting); with Python's
    defaults the collector walked the whole heap every few periods, a pause of about a second
    (``freeway bench scale``). With ``paced`` (the controller, whose
    tick runs ``CollectorPace``), the oldest generation is left to the pace alone: its middle passes
    every 0.2 s promote what is alive then, and Python's own rule (more than ``threshold2`` middle
    passes and a quarter of the oldest promoted since) started a full pass of 205-262 ms in the k=48
    handshakes' window (2026-11-27 23:35 and 23:52)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS[:2], GC_OLDEST_PACED if paced else GC_THRESHOLDS[2])


def serve(mgr, services) -> int:
    from os_ken.lib import hub

    try:
        hub.joinall(services)
    except KeyboardInterrupt:
        pass
    finally:
        mgr.close()
    return 0


def run_discover(listen: str, settings: dict, verbose: bool = False) -> int:
    """``freeway discover``: the discovery app alone (it exits when it is done)."""
    host, port = parse_listen(listen)
    check_listen(host, port)
    from ryu_apps import discover_app

    discover_app.SETTINGS.update(settings)
    from ryu_apps.control.channels import ChannelGuard

    tls = settings.get("tls") or ("", "", "")
    mgr, services = start_osken(host, port, ["ryu_apps.discover_app"], verbose=verbose,
                                guard=ChannelGuard(require_identity=settings.get("identity", True)), tls=tls)
    logging.getLogger("freeway").info("discover: listening for switches on %s:%d for %.0f s after the first",
                                      host, port, settings["duration_s"])
    return serve(mgr, services)


def run(cfg: config.Config, listen: str = "127.0.0.1:6653", verbose: bool = False, reread=None,
        config_file: str | None = None) -> int:
    """Start the apps and serve until stopped. ``reread()`` builds the configuration again (the file, then
    the flags) for a reload on SIGHUP."""
    Fabric.load(cfg.fabric)  # validate before starting anything
    if cfg.tls:
        from ryu_apps.ofchannel import tls_context

        try:
            tls_context(cfg.ctl_privkey, cfg.ctl_cert, cfg.ca_certs, cfg.ca_crl)
        except (ssl.SSLError, OSError) as e:
            raise LaunchError(f"--ctl-privkey/--ctl-cert/--ca-certs/--ca-crl: not a usable key, certificate, CA and "
                              f"revocation list: "
                              f"{e}") from None
    host, port = parse_listen(listen)
    check_listen(host, port)
    if cfg.api:
        from ryu_apps.operators.api import read_token

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

    from topology import ovsdb

    ovsdb.use_tls(cfg.ctl_privkey, cfg.ctl_cert, cfg.ca_certs)  # ssl: OVSDB endpoints: the same PKI
    config.set_active(cfg)
    config.set_reread(reread, config_file)
    signal.signal(signal.SIGHUP, lambda *_: config.request_reload())  # the app reloads in its own loop
    signal.signal(signal.SIGUSR1, lambda *_: dump_greenthreads())  # where each green thread waits, to the log
    if cfg.cluster:  # a clean stop hands a cluster's leadership on at once
        signal.signal(signal.SIGTERM, _terminate)
    from ryu_apps.control.channels import ChannelGuard

    fabric = Fabric.load(cfg.fabric)
    guard = ChannelGuard(cfg.switch_identity, {s.dpid for s in fabric.switches.values()})
    echo_s = echo_interval(len(fabric.switches), cfg.echo_budget_pps)
    mgr, services = start_osken(host, port, APPS, cfg.log_format, verbose, guard,
                                (cfg.ctl_privkey, cfg.ctl_cert, cfg.ca_certs, cfg.ca_crl), echo_s)
    tune_gc(paced=True)  # (the controller's tick collects by ``CollectorPace``)
    logging.getLogger("freeway").info("listening for switches on %s:%d (an echo request to each every %.1f s)",
                                      host, port, echo_s)
    return serve(mgr, services)
