"""``freeway host-demote``: a host lowers its own long connections to the elephant DSCP, as PIAS's hosts do.

    freeway host-demote --after BYTES [--dscp 8] [--print | --off]

Once this host has sent more than BYTES on a TCP connection (IP bytes, headers
included, as the kernel's connection tracking counts them), the connection's
packets from here carry the elephant DSCP, starting with the one that takes the
count past BYTES (with TSO/GSO the kernel counts a segment of up to 64 KB as one
packet, so marking may begin up to one segment before BYTES). With isolation's
``host_demotion`` on, Freeway's ToRs keep that mark and put those packets in
the elephant queue; every other DSCP a host sends is still overwritten with
the mice's, so a host can lower its own packets but never raise them.

Why: a large flow that is not announced is found by sFlow only after a second
or more, and a web-search flow of a few megabytes is over by then; until it is
found it is marked a mouse and shares the mice queue (issue 58's "unadopted
elephants ride the mice band"). Demotion needs no change to the application,
as PIAS (Bai et al., NSDI 2015) argues; Freeway's detection and placement of
elephants are unchanged.

The rule is nftables' (one table, ``inet freeway_demote``, replaced whole on
every call, so the command is idempotent); the byte counts need the
connection tracker's accounting (``net.netfilter.nf_conntrack_acct``, set
here). The ns-3 engine's hosts do the same at their egress (``fw::HostMarker``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

TABLE = "freeway_demote"
ACCT = Path("/proc/sys/net/netfilter/nf_conntrack_acct")
MAX_BYTES = 2**63 - 1
LIST_COMMAND = f"nft -j list table inet {TABLE}"  # the table with its counters, as JSON (``counted``)


class DemoteError(ValueError):
    pass


def ruleset(after_bytes: int, dscp: int = 8) -> str:
    """The nftables script: this host's TCP packets, on a connection over which it has sent more than
    ``after_bytes``, leave with ``dscp`` (the two rules: connections this host opened, counted in the original
    direction, and connections it answered, counted in the reply direction)."""
    if isinstance(after_bytes, bool) or not isinstance(after_bytes, int) or not 0 < after_bytes <= MAX_BYTES:
        raise DemoteError(f"after: a number of bytes above 0, got {after_bytes!r}")
    if isinstance(dscp, bool) or not isinstance(dscp, int) or not 0 <= dscp <= 63:
        raise DemoteError(f"dscp: a DSCP is 0..63, got {dscp!r}")
    rule = "meta l4proto tcp ct direction {d} ct {d} bytes > {n} ip dscp set {dscp} counter"
    return "\n".join([
        f"table inet {TABLE}",  # (created if missing, so that the delete below never fails)
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        "  chain out {",
        "    type filter hook output priority mangle; policy accept;",
        "    " + rule.format(d="original", n=after_bytes, dscp=dscp),
        "    " + rule.format(d="reply", n=after_bytes, dscp=dscp),
        "  }",
        "}",
        ""])


def off_script() -> str:
    return f"table inet {TABLE}\ndelete table inet {TABLE}\n"


def _nft(script: str) -> None:
    nft = shutil.which("nft")
    if not nft:
        raise DemoteError("nft is not installed (Debian: apt-get install nftables; 'make install' does)")
    r = subprocess.run([nft, "-f", "-"], input=script, text=True, capture_output=True)
    if r.returncode:
        raise DemoteError(f"nft refused the rules: {r.stderr.strip() or r.returncode}")


def apply(after_bytes: int, dscp: int = 8) -> None:
    """Install (or replace) the rule in this network namespace, with connection accounting on."""
    script = ruleset(after_bytes, dscp)
    try:
        ACCT.write_text("1\n")
    except OSError as e:
        raise DemoteError(f"cannot turn on connection accounting ({ACCT}): {e.strerror or e}") from None
    _nft(script)


def remove() -> None:
    _nft(off_script())


def counted(listing: str | None = None) -> tuple[int, int]:
    """Packets and bytes the rule has demoted so far: from ``listing`` (``nft -j list table inet
    freeway_demote``'s output, read in another namespace), else read here; (0, 0) without the table."""
    import json

    if listing is None:
        nft = shutil.which("nft")
        r = subprocess.run([nft, *LIST_COMMAND.split()[1:]], text=True, capture_output=True) if nft else None
        listing = r.stdout if r is not None and r.returncode == 0 else ""
    try:
        items = json.loads(listing).get("nftables", []) if listing.strip() else []
    except ValueError:
        return 0, 0
    packets = nbytes = 0
    for item in items:
        for expr in item.get("rule", {}).get("expr", []) if isinstance(item, dict) else []:
            if isinstance(expr, dict) and "counter" in expr:
                packets += int(expr["counter"]["packets"])
                nbytes += int(expr["counter"]["bytes"])
    return packets, nbytes


def parse_bytes(text: str) -> int:
    """``--after``: bytes as ``freeway send --size`` reads them (1000000, 1M, 250k)."""
    from ryu_apps.host.agent import parse_size

    try:
        return parse_size(text)
    except ValueError:
        raise DemoteError(f"after: a number of bytes (e.g. 1000000 or 1M), got {text!r}") from None


def cmd_demote(args) -> int:
    try:
        if args.off:
            remove()
            return 0
        if args.after is None:
            raise DemoteError("after: required (or --off)")
        after = parse_bytes(args.after)
        if args.print:
            sys.stdout.write(ruleset(after, args.dscp))
            return 0
        apply(after, args.dscp)
    except DemoteError as e:
        print(f"freeway host-demote: error: {e}", file=sys.stderr)
        return 2
    return 0


def add_commands(sub) -> None:
    d = sub.add_parser("host-demote", help="on a host: mark its TCP connections with the elephant DSCP once it has "
                                           "sent a number of bytes on them (PIAS-like; nftables)")
    d.add_argument("--after", metavar="BYTES", help="bytes a connection sends before it is demoted (e.g. 1M)")
    d.add_argument("--dscp", type=int, default=8, help="the elephant DSCP (isolation's elephant_dscp: 8)")
    d.add_argument("--print", action="store_true", help="print the nftables rules, change nothing")
    d.add_argument("--off", action="store_true", help="remove the rules")
    d.set_defaults(func=cmd_demote)
