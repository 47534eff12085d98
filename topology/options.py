"""One vocabulary for every command's options: the shared names, and old names kept one release as aliases
that warn.

The words (docs/commands.md lists every command's options, generated from the parsers):

- ``--link-mbps``: a link's rate in Mbit/s (``--rate`` is a flow's rate, in ``freeway send``);
- ``--k``: one fat-tree arity (an int); ``--ks``: several, comma-separated;
- ``--duration``: seconds of a run or a measurement; ``--seeds``, ``--modes``, ``--loads``: lists;
- ``--out``: an output directory; ``--api``: the operator API's URL.

Rule: an old name stores where the new one does and says on stderr which name replaces it.
"""

from __future__ import annotations

import argparse
import sys


class _Renamed(argparse.Action):
    """An option's old name: stores as the new one does, and says which name replaces it."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        self.new = new
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is an old name, kept for one release: use {self.new}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def renamed(parser: argparse.ArgumentParser, old: str, new: str, type=None) -> None:
    """``old`` stays accepted (hidden from ``--help``) for the option now called ``new``."""
    dest = new.lstrip("-").replace("-", "_")
    parser.add_argument(old, dest=dest, type=type, action=_Renamed, new=new, help=argparse.SUPPRESS)


def link_mbps(parser: argparse.ArgumentParser, default: float | None, help: str | None = None) -> None:
    """``--link-mbps`` (the old ``--rate`` kept as an alias)."""
    shown = f"every link's rate in Mbit/s ({default:g})" if default is not None else "every link's rate in Mbit/s"
    parser.add_argument("--link-mbps", type=float, default=default, help=help or shown)
    renamed(parser, "--rate", "--link-mbps", float)


def arities(text: str) -> list[int]:
    """``--ks``: comma-separated fat-tree arities."""
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated whole numbers, got {text!r}") from None
    if not ks:
        raise argparse.ArgumentTypeError("at least one arity")
    return ks


def _one_arity(text: str) -> list[int]:
    if "," in text:
        print(f"freeway: --k {text}: several arities are --ks now (--k with a list is kept for one release)",
              file=sys.stderr)
        return arities(text)
    try:
        return [int(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None


def ks(parser: argparse.ArgumentParser, default: str) -> None:
    """``--ks 4,8`` for several arities, or ``--k 8`` for one (both land in ``args.ks``, a list)."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--ks", type=arities, default=arities(default), help=f"fat-tree arities, comma-separated ({default})")
    g.add_argument("--k", dest="ks", type=_one_arity, help="one fat-tree arity (the same as --ks with one)")


def duration(parser: argparse.ArgumentParser, default: float, help: str) -> None:
    """``--duration`` in seconds (the old ``--seconds`` kept as an alias)."""
    parser.add_argument("--duration", type=float, default=default, help=help)
    renamed(parser, "--seconds", "--duration", float)
