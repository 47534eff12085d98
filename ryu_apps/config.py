"""Controller configuration: declared with defaults and types, validated by key.

The launcher sets it explicitly; under ``osken-manager``/``ryu-manager`` the
apps read it from FREEWAY_* environment variables instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

MODES = ("ecmp",)


class ConfigError(ValueError):
    """An invalid setting; the message names the key and the problem."""


@dataclass(frozen=True)
class Config:
    fabric: str
    mode: str = "ecmp"

    def __post_init__(self) -> None:
        if not isinstance(self.fabric, str) or not self.fabric:
            raise ConfigError("fabric: a path to the fabric description is required")
        if self.mode not in MODES:
            raise ConfigError(f"mode: unknown mode {self.mode!r} (expected one of {', '.join(MODES)})")

    @classmethod
    def from_mapping(cls, values: dict) -> Config:
        known = {f.name: f.type for f in fields(cls)}
        for key in values:
            if key not in known:
                raise ConfigError(f"{key}: unknown setting (known: {', '.join(known)})")
        return cls(**values)


_active: Config | None = None


def set_active(cfg: Config) -> None:
    global _active
    _active = cfg


def active() -> Config:
    """The configuration set by the launcher, else the FREEWAY_* environment."""
    if _active is not None:
        return _active
    env = {f.name: os.environ[f"FREEWAY_{f.name.upper()}"] for f in fields(Config)
           if f"FREEWAY_{f.name.upper()}" in os.environ}
    if "fabric" not in env:
        raise ConfigError("fabric: set FREEWAY_FABRIC to the fabric description when loading the apps "
                          "with osken-manager, or use 'freeway controller --fabric FILE'")
    return Config.from_mapping(env)
