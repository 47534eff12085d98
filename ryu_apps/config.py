"""Controller configuration: declared with defaults and types, validated by key.

The launcher sets it explicitly; under ``osken-manager``/``ryu-manager`` the
apps read it from FREEWAY_* environment variables instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from monitoring.estimator import MonitorConfig, MonitorConfigError

MODES = ("ecmp", "hedera", "efm-biggest", "efm-smallest", "freeway")
MONITORS = ("sflow", "sflow-rt", "none")


INT_KEYS = {"min_samples", "fixed_lol", "fixed_hol", "punt_pps", "punt_burst", "elephant_idle_s", "mice_dscp",
            "elephant_dscp", "mice_queue_len", "elephant_queue_len", "meter_burst_ms", "mice_weight_step"}


class ConfigError(ValueError):
    """An invalid setting; the message names the key and the problem."""


def _hostport(key: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}: expected HOST:PORT, got {value!r}")
    return host, int(port)


@dataclass(frozen=True)
class Config:
    fabric: str
    mode: str = "ecmp"
    monitor: str = "sflow"  # built-in sFlow collector | sFlow-RT REST | none
    sflow_listen: str = "127.0.0.1:6343"
    sflow_rt_url: str = ""
    events_file: str = ""  # JSON lines: elephant events and a link-load snapshot per second
    ovsdb: str = ""  # where to read ifIndex -> port from ('' = local Open vSwitch)
    monitor_settings: tuple[tuple[str, float], ...] = ()  # MonitorConfig overrides
    freeway_settings: tuple[tuple[str, float], ...] = ()  # FreewayConfig overrides (mode freeway)
    isolation: bool = False  # mice and elephants in separate queues, elephants marked and metered
    isolation_settings: tuple[tuple[str, float], ...] = ()  # IsolationConfig overrides
    efm_threshold: float = 0.7  # EFM: a link above this occupancy is congested
    efm_hold_down_s: float = 10.0
    hedera_poll_s: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.fabric, str) or not self.fabric:
            raise ConfigError("fabric: a path to the fabric description is required")
        if self.mode not in MODES:
            raise ConfigError(f"mode: unknown mode {self.mode!r} (expected one of {', '.join(MODES)})")
        if self.monitor not in MONITORS:
            raise ConfigError(f"monitor: unknown backend {self.monitor!r} (expected one of {', '.join(MONITORS)})")
        _hostport("sflow_listen", self.sflow_listen)
        if self.monitor == "sflow-rt" and not self.sflow_rt_url.startswith(("http://", "https://")):
            raise ConfigError(f"sflow_rt_url: the sflow-rt monitor needs an http(s) URL, got {self.sflow_rt_url!r}")
        self.monitor_config()
        self.freeway_config()
        self.isolation_config()
        if self.mode in ("freeway", "efm-biggest", "efm-smallest") and self.monitor == "none":
            raise ConfigError(f"monitor: mode {self.mode} needs link loads: use --monitor sflow or sflow-rt")
        if not 0 < self.efm_threshold <= 1:
            raise ConfigError(f"efm_threshold: must be in (0, 1], got {self.efm_threshold}")
        if self.efm_hold_down_s <= 0 or self.hedera_poll_s <= 0:
            raise ConfigError("efm_hold_down_s and hedera_poll_s: must be positive")

    @property
    def sflow_address(self) -> tuple[str, int]:
        return _hostport("sflow_listen", self.sflow_listen)

    def monitor_config(self) -> MonitorConfig:
        return _build(MonitorConfig, self.monitor_settings, MonitorConfigError, "monitoring")

    def freeway_config(self):
        from .freeway_core import FreewayConfig, FreewayConfigError

        return _build(FreewayConfig, self.freeway_settings, FreewayConfigError, "Freeway")

    def isolation_config(self):
        """The IsolationConfig when isolation is on, else None (the settings are checked either way)."""
        from .isolation import IsolationConfig, IsolationConfigError

        cfg = _build(IsolationConfig, self.isolation_settings, IsolationConfigError, "isolation")
        return cfg if self.isolation else None

    @classmethod
    def from_mapping(cls, values: dict) -> Config:
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise ConfigError(f"{key}: unknown setting (known: {', '.join(sorted(known))})")
        return cls(**values)


def parse_settings(items: list[str]) -> tuple[tuple[str, float], ...]:
    """``KEY=NUMBER`` strings (``--monitor-set``) as typed pairs; errors name the item."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{item!r}: expected KEY=VALUE")
        try:
            num = float(value)
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        out.append((key, int(num) if num.is_integer() and key in INT_KEYS else num))
    return tuple(out)


def _build(cls, pairs, error_cls, what: str):
    """A settings dataclass from KEY=VALUE overrides; unknown keys and bad values name the key."""
    known = {f.name for f in fields(cls)}
    kw = {}
    for key, value in pairs:
        if key not in known:
            raise ConfigError(f"{key}: unknown {what} setting (known: {', '.join(sorted(known))})")
        kw[key] = int(value) if float(value).is_integer() and key in INT_KEYS else value
    try:
        return cls(**kw)
    except error_cls as e:
        raise ConfigError(str(e)) from None


_active: Config | None = None


def set_active(cfg: Config) -> None:
    global _active
    _active = cfg


def active() -> Config:
    """The configuration set by the launcher, else the FREEWAY_* environment."""
    if _active is not None:
        return _active
    env = {}
    for f in fields(Config):
        name = f"FREEWAY_{f.name.upper()}"
        if name in os.environ and not f.name.endswith("_settings"):
            raw = os.environ[name]
            env[f.name] = float(raw) if f.type == "float" else raw.lower() in ("1", "on", "true") \
                if f.type == "bool" else raw
    for key in ("monitor_settings", "freeway_settings", "isolation_settings"):
        if f"FREEWAY_{key.upper()}" in os.environ:
            env[key] = parse_settings(os.environ[f"FREEWAY_{key.upper()}"].split(","))
    if "fabric" not in env:
        raise ConfigError("fabric: set FREEWAY_FABRIC to the fabric description when loading the apps "
                          "with osken-manager, or use 'freeway controller --fabric FILE'")
    return Config.from_mapping(env)
