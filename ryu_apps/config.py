"""Controller configuration: every setting declared once, with its type, default, range and help.

The controller's own settings are ``Config``'s fields; each module's settings
are their own dataclass (``SECTIONS``), given as ``KEY=VALUE`` overrides
(``--freeway-set lol_high=0.4``) and converted by the declared type. A YAML
file (``--config``, ``load_file``) holds them nested by section: ``controller``
for ``Config``'s own, then one section per module; ``defaults_file`` writes
every setting with its default and help. The launcher sets the configuration
explicitly; under ``osken-manager`` the apps read it from FREEWAY_* environment
variables instead.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from dataclasses import dataclass, fields

from monitoring.estimator import MonitorConfig
from ryu_apps.algorithms.efm_rounds import EFMConfig
from ryu_apps.modes import registry
from ryu_apps.modes.freeway_state import FreewayConfig
from topology.queues import IsolationConfig
from topology.settings import (
    SettingError,
    build,
    convert,
    default_of,
    describe,
    hostport,
    limits,
    parse_pairs,
    setting,
    spec,
    types_of,
    validate,
)

LOG = logging.getLogger("freeway")
MODES = registry.modes()  # the built-in modes, then every usable plug-in (``modes.registry``)
MONITORS = ("sflow", "sflow-rt", "none")
LOG_FORMATS = ("text", "json")
# module settings: Config field -> (settings class, section name, what the section is for)
SECTIONS = {
    "monitor_settings": (MonitorConfig, "monitor", "monitoring (elephant detection, link occupancy)"),
    "freeway_settings": (FreewayConfig, "freeway", "Freeway mode (partition, handshake, Bin-Pack)"),
    "isolation_settings": (IsolationConfig, "isolation", "queues, marks and meters (with --isolation on)"),
    "efm_settings": (EFMConfig, "efm", "EFM rerouting (modes efm-* and freeway)"),
}

ConfigError = SettingError  # an invalid setting; the message names the key and the problem


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


parse_settings = parse_pairs
Pairs = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Config:
    fabric: str = setting("", "the fabric description (JSON) written by 'freeway fabric --describe'")
    listen: str = setting("127.0.0.1:6653", "OpenFlow listen address (HOST:PORT)")
    ctl_privkey: str = setting("", "OpenFlow over TLS: the controller's private key (PEM; with ctl_cert and "
                               "ca_certs, the controller speaks only TLS on its listen address)")
    ctl_cert: str = setting("", "OpenFlow over TLS: the controller's certificate (PEM)")
    ca_certs: str = setting("", "OpenFlow over TLS: the CA that signs the switches' certificates (PEM): a switch "
                            "without a certificate from it gets no message")
    openflow_plain: bool = setting(False, "serve OpenFlow in plain TCP on a non-loopback listen address (anyone who "
                                   "reaches it first can claim a switch's datapath id); without it such a listen "
                                   "address needs TLS (ctl_privkey, ctl_cert, ca_certs)")
    ca_crl: str = setting("", "OpenFlow over TLS: the CA's revocation list (PEM, 'freeway pki --revoke' writes it): a "
                          "switch whose certificate is on it is refused at the handshake")
    switch_identity: bool = setting(True, "OpenFlow over TLS: a switch's certificate must name the datapath id "
                                    "it claims (dpid:XXXXXXXXXXXXXXXX in its CN or a subjectAltName)")
    mode: str = setting("ecmp", "scheduling mode", choices=MODES)
    monitor: str = setting("sflow", "monitoring backend: built-in sFlow collector, sFlow-RT REST, or none",
                           choices=MONITORS)
    sflow_listen: str = setting("127.0.0.1:6343", "UDP address of the built-in sFlow collector (HOST:PORT)")
    sflow_sources: str = setting("agent", "where an sFlow datagram may come from: agent (the UDP source must be the "
                                 "agent address the datagram names, or a loopback address for an agent on loopback) "
                                 "or any (a collector behind a relay or NAT)", choices=("agent", "any"))
    sflow_workers: str = setting("auto", "processes that receive, decode and fold sFlow datagrams beside the "
                                 "controller's event loop (sockets sharing sflow_listen): auto (one per core beside "
                                 "the controller's: cores - 1, at most 8), or a number; 0: the event loop reads them")
    sflow_rt_url: str = setting("", "sFlow-RT base URL for monitor sflow-rt, e.g. http://127.0.0.1:8008")
    events_file: str = setting("", "append JSON lines here: elephant events and a link snapshot per second")
    events_max_mb: float = setting(100.0, "when the events file passes this size it is renamed FILE.1 (the "
                                   "previous FILE.1 goes) and a new one begun", "MB", positive=True, live=True)
    ovsdb: str = setting("", "the OVSDB of every switch host, comma-separated (ssl:HOST:6640 with the controller's "
                         "PKI, unix:PATH, tcp:HOST:6640 on loopback or with ovsdb_plain; '' = the local Open "
                         "vSwitch): sFlow's (agent, ifIndex) -> switch port is read from each")
    ovsdb_plain: bool = setting(False, "accept a tcp: OVSDB endpoint on a non-loopback address (clear text: anyone who "
                                "reaches it can point the switches at another controller); use ssl: instead")
    isolation: bool = setting(False, "mice and elephants in separate queues: mark, set_queue, meter elephants")
    hedera_poll_s: float = setting(5.0, "Hedera: time between flow-statistics polls of the edge switches", "s",
                                   positive=True, live=True)
    link_hold_down_s: float = setting(2.0, "a link that comes back is used again only after staying up this long",
                                      "s", min=0.0, live=True)
    lldp_interval_s: float = setting(1.0, "send an LLDP probe out of every switch port this often, to check "
                                     "every link against the description (0 = no probes, no check)", "s", min=0.0)
    lldp_timeout_s: float = setting(3.5, "a described link not heard by LLDP both ways for this long (or heard "
                                    "wired elsewhere) is a fault: taken down until it is heard again", "s",
                                    positive=True)
    lldp_budget_pps: float = setting(1000.0, "LLDP probes per second at most: a fabric with more ports than that "
                                     "in lldp_interval_s is probed in longer rounds, spread over the round, and "
                                     "lldp_timeout_s grows in proportion (k=32: 32,768 ports, a round every "
                                     "33 s)", "probes/s", positive=True)
    echo_budget_pps: float = setting(500.0, "OpenFlow echo requests per second at most: every switch is asked every "
                                     "2 s, or less often when the fabric has more switches than that in 2 s (k=48: "
                                     "2,880 switches, every 5.8 s); a switch that leaves 3 unanswered, and sent "
                                     "nothing meanwhile, is disconnected", "requests/s", positive=True)
    api: str = setting("", "serve the operator API, /metrics and the fabric view on this HOST:PORT ('' = off)")
    metrics_link_series: int = setting(2000, "per-link series on /metrics at most (a k=48 fat-tree has 110,592 "
                                       "directed switch links): every down link, then the busiest; all of them "
                                       "are summed in freeway_links and the freeway_link_utilisation histogram",
                                       "series", min=0, live=True)
    api_token_file: str = setting("", "a file holding the token that write calls (announce, withdraw) must send "
                                  "as 'Authorization: Bearer TOKEN' ('' = the API is read-only)")
    api_read_token_file: str = setting("", "a file holding the token reads must send (the write token reads too); "
                                       "'' = reads are open, which only a loopback API address or "
                                       "api_open_reads allows")
    api_open_reads: bool = setting(False, "serve reads without a token on a non-loopback API address")
    api_cert: str = setting("", "serve the API over HTTPS with this certificate (PEM; with api_key)")
    api_key: str = setting("", "the API certificate's private key (PEM)")
    log_format: str = setting("text", "log lines as text, or one JSON object per line (decisions with their "
                              "fields)", choices=LOG_FORMATS)
    cluster: str = setting("", "etcd endpoints of the cluster this controller is a member of, etcd://HOST:PORT"
                           "[,etcd://HOST:PORT...] ('' = a lone controller, as before)")
    cluster_name: str = setting("freeway", "the fabric's name in etcd: the members of one cluster share it")
    cluster_ttl_s: float = setting(3.0, "lease of the leader in etcd: a leader that stops refreshing it is replaced "
                                   "after this long", "s", min=1.0)
    node_id: str = setting("", "this member's name in the cluster ('' = HOST:PORT of its OpenFlow listen address)")
    cluster_ca: str = setting("", "etcd over TLS: the CA of the etcd members' certificates (PEM; the endpoints "
                              "are then https)")
    cluster_cert: str = setting("", "etcd over TLS: this member's client certificate (PEM; with cluster_key)")
    cluster_key: str = setting("", "etcd over TLS: the client certificate's private key (PEM)")
    cluster_user: str = setting("", "etcd's user authentication: this member's user name ('' = none; with "
                                "cluster_password_file)")
    cluster_password_file: str = setting("", "a file holding the etcd user's password (first line)")
    monitor_settings: Pairs = ()
    freeway_settings: Pairs = ()
    isolation_settings: Pairs = ()
    efm_settings: Pairs = ()
    mode_settings: Pairs = ()  # a plug-in mode's own settings (its section in the config file, --mode-set)

    def __post_init__(self) -> None:
        validate(self)
        if not self.fabric:
            raise ConfigError("fabric: a path to the fabric description is required")
        hostport("sflow_listen", self.sflow_listen)
        self.sflow_worker_count()
        hostport("listen", self.listen)
        if self.api:
            hostport("api", self.api)
        if self.lldp_interval_s and self.lldp_timeout_s < 2 * self.lldp_interval_s:
            raise ConfigError(f"lldp_timeout_s: must be at least twice lldp_interval_s ({self.lldp_interval_s:g} s) "
                              f"so that one lost probe is not a fault, got {self.lldp_timeout_s:g}")
        if self.api_token_file and not self.api:
            raise ConfigError("api_token_file: the token protects the API's write calls: give --api too")
        self._check_tls()
        if self.cluster:
            from ryu_apps.control.cluster import parse_endpoints

            parse_endpoints(self.cluster)  # raises ConfigError naming the key
            if not self.cluster_name or "/" in self.cluster_name:
                raise ConfigError(f"cluster_name: a name without '/', got {self.cluster_name!r}")
        from monitoring.portmap import parse_endpoints
        from topology.ovsdb import EndpointError, check_endpoints

        try:
            check_endpoints(parse_endpoints(self.ovsdb), bool(self.ctl_privkey), self.ovsdb_plain)
        except EndpointError as e:
            raise ConfigError(str(e)) from None
        if self.monitor == "sflow-rt" and not self.sflow_rt_url.startswith(("http://", "https://")):
            raise ConfigError(f"sflow_rt_url: the sflow-rt monitor needs an http(s) URL, got {self.sflow_rt_url!r}")
        for key in SECTIONS:
            self.section(key)
        self.plugin_settings()
        if self.mode in ("freeway", "efm-biggest", "efm-smallest") and self.monitor == "none":
            raise ConfigError(f"monitor: mode {self.mode} needs link loads: use --monitor sflow or sflow-rt")

    def _check_tls(self) -> None:
        """TLS settings come in sets, name readable files, and the API is never open where it should not be."""
        import ipaddress

        of = (self.ctl_privkey, self.ctl_cert, self.ca_certs)
        if any(of) and not all(of):
            missing = [k for k, v in zip(("ctl_privkey", "ctl_cert", "ca_certs"), of, strict=True) if not v][0]
            raise ConfigError(f"{missing}: OpenFlow over TLS needs ctl_privkey, ctl_cert and ca_certs together")
        if bool(self.api_cert) != bool(self.api_key):
            raise ConfigError(f"{'api_key' if self.api_cert else 'api_cert'}: HTTPS needs api_cert and api_key "
                              "together")
        if (self.cluster_cert or self.cluster_key) and not (self.cluster_cert and self.cluster_key):
            raise ConfigError(f"{'cluster_key' if self.cluster_cert else 'cluster_cert'}: a client certificate "
                              "needs cluster_cert and cluster_key together")
        if bool(self.cluster_user) != bool(self.cluster_password_file):
            raise ConfigError(f"{'cluster_password_file' if self.cluster_user else 'cluster_user'}: etcd's user "
                              "authentication needs cluster_user and cluster_password_file together")
        if self.cluster_user and not self.cluster_ca:
            raise ConfigError("cluster_ca: an etcd password is sent over TLS only: give the etcd members' CA")
        if self.ca_crl and not self.ca_certs:
            raise ConfigError("ca_crl: a revocation list is for the switches' CA: give ca_certs too")
        for key in ("ctl_privkey", "ctl_cert", "ca_certs", "ca_crl", "api_cert", "api_key", "api_read_token_file",
                    "cluster_ca", "cluster_cert", "cluster_key", "cluster_password_file"):
            path = getattr(self, key)
            if path and not os.access(path, os.R_OK):
                raise ConfigError(f"{key}: cannot read {path!r}")
        if (self.api_cert or self.api_read_token_file or self.api_open_reads) and not self.api:
            raise ConfigError("api: the API settings need --api HOST:PORT")
        if self.cluster_cert and not self.cluster_ca:
            raise ConfigError("cluster_ca: a client certificate is shown over TLS only: give the etcd members' CA")
        if (self.cluster_ca or self.cluster_cert or self.cluster_user) and not self.cluster:
            raise ConfigError("cluster: the etcd TLS settings need --cluster")
        of_host = hostport("listen", self.listen)[0]
        if not self.ctl_privkey and not self.openflow_plain and not _loopback(of_host):
            raise ConfigError(f"listen: OpenFlow in plain TCP on {of_host}, not a loopback address: whoever reaches it "
                              "first holds a switch's datapath id. Give ctl_privkey, ctl_cert and ca_certs (TLS), or "
                              "openflow_plain on to accept it")
        if self.api:
            host = hostport("api", self.api)[0]
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback and self.api_token_file and not self.api_cert:
                raise ConfigError(f"api: writes on {host}, not a loopback address, need HTTPS (api_cert and "
                                  "api_key): a token sent in clear text can be read off the wire")
            if not loopback and not (self.api_read_token_file or self.api_open_reads):
                raise ConfigError(f"api: reads on {host}, not a loopback address, need api_read_token_file, "
                                  "or api_open_reads on to serve them to anyone who reaches the address")

    def cluster_password(self) -> str:
        """The etcd user's password: the first line of cluster_password_file ('' without a user)."""
        if not self.cluster_password_file:
            return ""
        with open(self.cluster_password_file) as fh:
            return fh.readline().rstrip("\n")

    @property
    def tls(self) -> bool:
        """OpenFlow over TLS."""
        return bool(self.ctl_privkey)

    def section(self, key: str):
        cls, name, _ = SECTIONS[key]
        return build(cls, getattr(self, key), name)

    def plugin_settings(self):
        """A plug-in mode's settings (its class's ``settings`` built from ``mode_settings``), None for a
        built-in mode or a plug-in that declares none; refused by key when wrong."""
        p = registry.plugin(self.mode)
        if p is None or p.settings is None:
            if self.mode_settings:
                raise ConfigError(f"mode_settings: mode {self.mode} takes no settings of its own")
            return None
        return build(p.settings, self.mode_settings, self.mode)

    @property
    def sflow_address(self) -> tuple[str, int]:
        return hostport("sflow_listen", self.sflow_listen)

    def sflow_worker_count(self) -> int:
        """How many sFlow worker processes ``sflow_workers`` asks for on this machine."""
        if self.sflow_workers == "auto":
            return max(0, min(8, (os.cpu_count() or 1) - 1))
        if not self.sflow_workers.isdigit() or int(self.sflow_workers) > 64:
            raise ConfigError(f"sflow_workers: auto or a whole number from 0 to 64, got {self.sflow_workers!r}")
        return int(self.sflow_workers)

    def monitor_config(self) -> MonitorConfig:
        return self.section("monitor_settings")

    def freeway_config(self) -> FreewayConfig:
        return self.section("freeway_settings")

    def isolation_config(self) -> IsolationConfig | None:
        """The IsolationConfig when isolation is on, else None (the settings are checked either way)."""
        cfg = self.section("isolation_settings")
        return cfg if self.isolation else None

    def efm_config(self) -> EFMConfig:
        pick = "smallest" if self.mode == "efm-smallest" else "biggest"
        return build(EFMConfig, (*self.efm_settings, ("pick", pick)), "efm")

    @classmethod
    def from_mapping(cls, values: dict) -> Config:
        known = {f.name for f in fields(cls)}
        kw = {}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{key}: unknown setting (known: {', '.join(sorted(known))})")
            kw[key] = value if key in SECTIONS or key == PLUGIN_KEY else convert(cls, key, value)
        return cls(**kw)


CONTROLLER = "controller"  # the config file's section for Config's own settings
PLUGIN_KEY = "mode_settings"  # a plug-in mode's section, under the mode's own name
FILE_SECTIONS = {CONTROLLER: None, **{name: key for key, (_, name, _) in SECTIONS.items()}}


def _nearest(word: str, names) -> str:
    close = difflib.get_close_matches(word, list(names), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f" (known: {', '.join(sorted(names))})"


def _section_names(section: str) -> list[str]:
    if section == CONTROLLER:
        return [f.name for f in fields(Config) if f.name not in SECTIONS and f.name != PLUGIN_KEY]
    cls = SECTIONS[FILE_SECTIONS[section]][0]
    return [f.name for f in fields(cls) if f.name != "pick"]


def load_file(path: str) -> dict:
    """A config file's settings as a mapping for ``Config.from_mapping`` (and the command line's flags to
    override). Every key is checked against the declarations: an unknown one is refused with its path
    and the nearest valid name, a wrong value names its path and the problem."""
    import yaml

    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not YAML: {e}".replace("\n", " ")) from None
    return load_mapping(data, path)


def load_mapping(data, origin: str = "settings") -> dict:
    """Sections of settings (a config file's body, or a sweep's ``settings``) as a mapping for
    ``Config.from_mapping``, every key checked as ``load_file`` checks it."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected sections ({', '.join(FILE_SECTIONS)}), got {type(data).__name__}")
    values: dict = {}
    for section, body in data.items():
        plug = registry.plugin(section) if section not in FILE_SECTIONS else None
        if plug is not None and plug.settings is not None:  # a plug-in mode's own section
            if not isinstance(body, dict):
                raise ConfigError(f"{section}: expected KEY: VALUE lines, got {type(body).__name__}")
            pairs = tuple(body.items())
            build(plug.settings, pairs, section)
            values["mode_settings"] = pairs
            continue
        if section not in FILE_SECTIONS:
            known = [*FILE_SECTIONS, *(n for n in registry.modes() if registry.plugin(n) and registry.plugin(n).settings)]
            raise ConfigError(f"{section}: unknown section{_nearest(str(section), known)}")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"{section}: expected KEY: VALUE lines, got {type(body).__name__}")
        names = _section_names(section)
        for key in body:
            if key not in names:
                raise ConfigError(f"{section}.{key}: unknown setting{_nearest(str(key), names)}")
        if section == CONTROLLER:
            for key, value in body.items():
                try:
                    values[key] = convert(Config, key, value)
                except SettingError as e:
                    raise ConfigError(f"{section}.{e}") from None
        else:
            cls = SECTIONS[FILE_SECTIONS[section]][0]
            pairs = tuple(body.items())
            build(cls, pairs, section)  # every value checked now, its error naming section.key
            values[FILE_SECTIONS[section]] = pairs
    return values


def _yaml_value(value) -> str:
    return json.dumps(value)  # a JSON scalar is a YAML scalar


def defaults_file() -> str:
    """A complete config file of the defaults: every setting of every section, each with a comment that
    says what it does, its unit and its range (``freeway config --defaults``)."""
    out = ["# Freeway controller configuration: every setting, at its default.",
           "# freeway controller --config FILE; a command-line flag overrides the file.", ""]
    for section in FILE_SECTIONS:
        cls = Config if section == CONTROLLER else SECTIONS[FILE_SECTIONS[section]][0]
        what = "the controller" if section == CONTROLLER else SECTIONS[FILE_SECTIONS[section]][2]
        out.append(f"{section}:  # {what}")
        names = _section_names(section)
        hints = types_of(cls)
        for f in fields(cls):
            if f.name not in names:
                continue
            sp = spec(f)
            facts = ([hints[f.name].__name__] + ([sp.unit] if sp.unit else []) + limits(sp)
                     + (["reloads live"] if sp.live else []))
            out.append(f"  # {sp.help} [{'; '.join(facts)}]")
            out.append(f"  {f.name}: {_yaml_value(default_of(f))}")
        out.append("")
    return "\n".join(out)


def settings_help(key: str) -> str:
    """Help text for one ``--*-set`` option, generated from the settings class."""
    cls, _, what = SECTIONS[key]
    names = ", ".join(f.name for f in fields(cls) if f.name != "pick")
    return f"{what}: {names} (see 'freeway controller --help' for each)"


def settings_epilog() -> str:
    """Every module setting with its type, default, unit, range and meaning."""
    parts = []
    for key, (cls, _, what) in SECTIONS.items():
        flag = "--" + key.replace("_settings", "-set")
        lines = [f"  {line}" for line in describe(cls) if not line.startswith("pick ")]
        parts.append(f"{flag} KEY=VALUE, {what}:\n" + "\n".join(lines))
    return "\n\n".join(parts)


def _redacted(url: str) -> str:
    """A URL without the password it may carry (``http://user:secret@host`` -> ``http://user:***@host``)."""
    import re

    return re.sub(r"^(\w+://[^:/@]*):[^@/]*@", r"\1:***@", url)


def sections(cfg: Config, redact: bool = False) -> dict[str, dict]:
    """The configuration as the config file nests it: section -> key -> value (what the API shows, with
    ``redact``: without a password in the sFlow-RT URL)."""
    out: dict[str, dict] = {CONTROLLER: {f.name: getattr(cfg, f.name) for f in fields(Config)
                                         if f.name not in SECTIONS and f.name != PLUGIN_KEY}}
    if redact:
        out[CONTROLLER]["sflow_rt_url"] = _redacted(cfg.sflow_rt_url)
    for key, (_, name, _) in SECTIONS.items():
        obj = cfg.efm_config() if key == "efm_settings" else cfg.section(key)
        out[name] = {f.name: getattr(obj, f.name) for f in fields(obj) if f.name != "pick"}
    return out


def _is_live(section: str, key: str) -> bool:
    cls = Config if section == CONTROLLER else SECTIONS[FILE_SECTIONS[section]][0]
    return next(spec(f).live for f in fields(cls) if f.name == key)


def live_settings() -> list[str]:
    """section.key of every setting a reload changes in the running controller."""
    return [f"{sec}.{k}" for sec, body in sections(Config(fabric="-")).items() for k in body if _is_live(sec, k)]


@dataclass
class Reload:
    """The outcome of reloading the configuration: the new one (None when the file is invalid: nothing
    changes), the live settings that changed, and those that changed but need a restart (kept)."""

    cfg: Config | None
    changed: list[tuple[str, object, object]]  # (section.key, old, new)
    restart: list[tuple[str, object, object]]
    error: str = ""

    def report(self) -> dict:
        """Say what the reload did (the log) and return its decision record."""
        if self.cfg is None:
            LOG.error("config reload refused, nothing changed: %s", self.error)
            return {"type": "config", "result": "refused", "error": self.error}
        for key, old, new in self.changed:
            LOG.info("config reload: %s %r -> %r (from the next period)", key, old, new)
        for key, old, new in self.restart:
            LOG.warning("config reload: %s changed in the file (%r -> %r) but needs a restart: still %r", key, old,
                        new, old)
        if not self.changed and not self.restart:
            LOG.info("config reload: nothing changed")
        return {"type": "config", "result": "applied", "changed": {k: new for k, _, new in self.changed},
                "restart_needed": [k for k, _, _ in self.restart]}


def reload(old: Config, reread) -> Reload:
    """Read the configuration again (``reread()``: the file, then the flags over it) and take from it
    the settings that can change live; the others stay as they are and are listed in ``restart``."""
    try:
        new = reread()
    except (ConfigError, OSError) as e:
        return Reload(None, [], [], str(e))
    except Exception as e:  # anything else a file can provoke (not UTF-8, ...): refused the same way
        return Reload(None, [], [], f"{type(e).__name__}: {e}")
    before, after = sections(old), sections(new)
    changed, restart = [], []
    values: dict = {}
    for sec, body in before.items():
        merged = {}
        for key, was in body.items():
            now = after[sec][key]
            live = _is_live(sec, key)
            if now != was:
                (changed if live else restart).append((f"{sec}.{key}", was, now))
            merged[key] = now if live else was
        if sec == CONTROLLER:
            values.update(merged)
        else:
            values[FILE_SECTIONS[sec]] = tuple(merged.items())
    try:
        cfg = Config.from_mapping(values)
    except ConfigError as e:
        return Reload(None, [], [], str(e))
    return Reload(cfg, changed, restart)


_active: Config | None = None
_reread = None  # how to read the configuration again (the launcher's: the file, then the flags)
_source_file: str | None = None
_reload_requested = False


def set_active(cfg: Config) -> None:
    global _active
    _active = cfg


def set_reread(fn, path: str | None = None) -> None:
    """How to read the configuration again on SIGHUP, and the file it comes from (None: flags only)."""
    global _reread, _source_file
    _reread, _source_file = fn, path


def source_file() -> str | None:
    return _source_file


def request_reload() -> None:
    """Called from the SIGHUP handler: only a flag, the app reloads in its own loop."""
    global _reload_requested
    _reload_requested = True


def take_reload_request() -> bool:
    global _reload_requested
    asked, _reload_requested = _reload_requested, False
    return asked


def reload_active() -> Reload:
    """Reload the active configuration (if the launcher said how); on success it becomes the active one
    and the apps pick it up at their next period."""
    if _reread is None:
        return Reload(None, [], [], "no way to read the configuration again (not started by 'freeway controller')")
    res = reload(active(), _reread)
    if res.cfg is not None:
        set_active(res.cfg)
    return res


def active() -> Config:
    """The configuration set by the launcher, else the FREEWAY_* environment."""
    if _active is not None:
        return _active
    env: dict[str, object] = {}
    for f in fields(Config):
        name = f"FREEWAY_{f.name.upper()}"
        if name in os.environ:
            raw = os.environ[name]
            env[f.name] = (parse_settings([x for x in raw.split(",") if x]) if f.name in SECTIONS or f.name == PLUGIN_KEY
                           else raw)
    if "fabric" not in env:
        raise ConfigError("fabric: set FREEWAY_FABRIC to the fabric description when loading the apps "
                          "with osken-manager, or use 'freeway controller --fabric FILE'")
    return Config.from_mapping(env)
