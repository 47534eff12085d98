"""One way to declare settings: typed dataclass fields with a range and a line of help.

Every settings class of the project (monitoring, partition, Freeway, isolation,
EFM, the controller) declares its fields with ``setting(...)``. The type comes
from the annotation, so converting ``KEY=VALUE`` text, checking values and
writing the command-line help all read the same declaration and cannot drift.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import MISSING, dataclass, field, fields


class SettingError(ValueError):
    """An invalid setting; the message starts with the key and says what is wrong."""


@dataclass(frozen=True)
class Spec:
    help: str
    unit: str = ""
    min: float | None = None
    max: float | None = None
    positive: bool = False  # strictly above ``min``/0
    choices: tuple = ()
    live: bool = False  # a reload (SIGHUP) changes it in the running controller; else it needs a restart


def setting(default, help: str, unit: str = "", min: float | None = None, max: float | None = None,
            positive: bool = False, choices: tuple = (), live: bool = False):
    """A dataclass field with its range and help. Numbers are non-negative unless ``min`` says otherwise.
    ``live``: a reload of the config file changes it while the controller runs."""
    if min is None and not choices and isinstance(default, (int, float)) and not isinstance(default, bool):
        min = 0
    return field(default=default, metadata={"spec": Spec(help, unit, min, max, positive, choices, live)})


def spec(f: dataclasses.Field) -> Spec:
    return f.metadata.get("spec") or Spec("")


def types_of(cls) -> dict[str, type]:
    return typing.get_type_hints(cls)


def check_number(key: str, value, minimum: float | None = 0, maximum: float | None = None,
                 positive: bool = False, whole: bool = False) -> None:
    """The one number check: a real number (not a bool), whole if asked, within the range."""
    low = 0 if minimum is None and positive else minimum
    kind = "whole number" if whole else "number"
    if positive and low == 0:
        what = f"a positive {kind}"
    elif low == 0:
        what = f"a non-negative {kind}"
    else:
        what = f"a {kind}" + (f" of at least {low:g}" if low is not None else "")
    if maximum is not None:
        what += f" (at most {maximum:g})"
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and not (whole and not isinstance(value, int))
    ok = ok and not (low is not None and (value < low or (positive and value <= low)))
    ok = ok and not (maximum is not None and value > maximum)
    if not ok:
        raise SettingError(f"{key}: must be {what}, got {value!r}")


def validate(obj) -> None:
    """Check every declared field of a settings dataclass against its type and range."""
    hints = types_of(type(obj))
    for f in fields(obj):
        s, v, t = spec(f), getattr(obj, f.name), hints[f.name]
        if s.choices:
            if v not in s.choices:
                raise SettingError(f"{f.name}: must be one of {', '.join(map(str, s.choices))}, got {v!r}")
        elif t in (int, float):
            check_number(f.name, v, s.min, s.max, s.positive, whole=t is int)
        elif t is bool and not isinstance(v, bool):
            raise SettingError(f"{f.name}: must be true or false, got {v!r}")
        elif t is str and not isinstance(v, str):
            raise SettingError(f"{f.name}: must be text, got {v!r}")


def convert(cls, key: str, raw):
    """A value for field ``key`` of ``cls`` from text (or a number), by the declared type."""
    hints = types_of(cls)
    if key not in hints or key not in {f.name for f in fields(cls)}:
        raise SettingError(f"{key}: unknown setting (known: {', '.join(sorted(f.name for f in fields(cls)))})")
    t = hints[key]
    if not isinstance(raw, str):
        if t is float and isinstance(raw, int) and not isinstance(raw, bool):
            return float(raw)
        return raw
    text = raw.strip()
    try:
        if t is int:
            num = float(text)
            return int(num) if num.is_integer() else num  # a fraction is refused by validate, naming the key
        if t is float:
            return float(text)
    except ValueError:
        raise SettingError(f"{key}: expected a number, got {raw!r}") from None
    if t is bool:
        if text.lower() in ("1", "on", "true", "yes"):
            return True
        if text.lower() in ("0", "off", "false", "no"):
            return False
        raise SettingError(f"{key}: expected on or off, got {raw!r}")
    return text


def build(cls, pairs, what: str = ""):
    """An instance of settings class ``cls`` from (key, value) overrides; errors name the key."""
    kw = {}
    for key, raw in pairs:
        try:
            kw[key] = convert(cls, key, raw)
        except SettingError as e:
            raise SettingError(f"{what + '.' if what else ''}{e}") from None
    try:
        obj = cls(**kw)
        validate(obj)  # (a plug-in's settings class may not check itself in __post_init__)
        return obj
    except SettingError as e:
        raise SettingError(f"{what + '.' if what else ''}{e}") from None


def parse_pairs(items: list[str]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` strings (``--freeway-set lol_high=0.4``) as (key, text) pairs; ``build`` converts them."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingError(f"{item!r}: expected KEY=VALUE")
        out.append((key.strip(), value))
    return tuple(out)


def hostport(key: str, value: str) -> tuple[str, int]:
    """HOST:PORT, or an error naming the key."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingError(f"{key}: expected HOST:PORT, got {value!r}")
    return host, int(port)


def default_of(f: dataclasses.Field):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def limits(s: Spec, choice_sep: str = ", ") -> list[str]:
    """A setting's allowed values as text: its choices, lower and upper bounds."""
    out = []
    if s.choices:
        out.append("one of " + choice_sep.join(map(str, s.choices)))
    if s.min is not None:
        out.append(f"{'>' if s.positive else '>='} {s.min:g}")
    elif s.positive:
        out.append("> 0")
    if s.max is not None:
        out.append(f"<= {s.max:g}")
    return out


def describe(cls) -> list[str]:
    """One help line per setting: name, type, default, unit, range and what it does."""
    hints = types_of(cls)
    out = []
    for f in fields(cls):
        s = spec(f)
        if not s.help:
            continue
        rng = limits(s, "|")
        unit = f" {s.unit}" if s.unit else ""
        rng_text = f"; {', '.join(rng)}" if rng else ""
        live = "; reloads live" if s.live else ""
        out.append(f"{f.name} ({hints[f.name].__name__}, default {default_of(f)!r}{unit}{rng_text}{live}): {s.help}")
    return out
