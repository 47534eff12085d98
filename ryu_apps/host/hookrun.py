"""``freeway run``: run an unmodified program with the connect() hook, so its elephants announce themselves.

    freeway run [--rules FILE | --rule RULE ...] [--service IP:PORT] [--timeout-ms 300] [--stats] -- COMMAND ...

The hook (``hook/freeway_hook.c``, built by ``make install`` into the virtual
environment) is loaded with LD_PRELOAD; its rules, service address, timeout
and statistics are passed in the environment (``FREEWAY_RULES_FILE``,
``FREEWAY_RULES``, ``FREEWAY_SERVICE``, ``FREEWAY_TIMEOUT_MS``,
``FREEWAY_STATS``). The rules are read by the hook itself, so a typo is
reported once by it and the program runs unhooked, exactly as without.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

LIB_NAME = "libfreeway_hook.so"


class HookError(RuntimeError):
    pass


def library() -> Path:
    """The built hook: $FREEWAY_HOOK_LIB, else the one ``make install`` put in the virtual environment."""
    given = os.environ.get("FREEWAY_HOOK_LIB")
    candidates = [Path(given)] if given else [Path(sys.prefix) / "lib" / "freeway" / LIB_NAME,
                                              Path("/usr/local/lib/freeway") / LIB_NAME]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise HookError(f"the connect() hook is not built ({candidates[0]} is missing): "
                    "run 'make install' (it compiles hook/freeway_hook.c with the system's C compiler)")


def environment(rules_file: str | None, rules: list[str], service: str | None, timeout_ms: int | None,
                stats: bool, base: dict | None = None) -> dict:
    """The environment that loads the hook with these settings (LD_PRELOAD keeps what was there)."""
    env = dict(os.environ if base is None else base)
    lib = str(library())
    env["LD_PRELOAD"] = lib + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    if rules:
        env["FREEWAY_RULES"] = "\n".join(rules)  # one line each: an error names its rule's line
    elif rules_file:
        if not Path(rules_file).is_file():
            raise HookError(f"--rules: no such file: {rules_file}")
        env["FREEWAY_RULES_FILE"] = str(Path(rules_file).resolve())
        env.pop("FREEWAY_RULES", None)
    if service:
        env["FREEWAY_SERVICE"] = service
    if timeout_ms is not None:
        env["FREEWAY_TIMEOUT_MS"] = str(timeout_ms)
    if stats:
        env["FREEWAY_STATS"] = "1"
    return env


def cmd_run(args) -> int:
    command = args.trailing
    if not command:
        print("freeway run: error: give the command after --, e.g. freeway run --rule 'port=5201' -- iperf3 -c HOST",
              file=sys.stderr)
        return 2
    try:
        env = environment(args.rules, args.rule, args.service, args.timeout_ms, args.stats)
    except HookError as e:
        print(f"freeway run: error: {e}", file=sys.stderr)
        return 2
    exe = shutil.which(command[0], path=env.get("PATH"))
    if exe is None:
        print(f"freeway run: error: {command[0]}: command not found", file=sys.stderr)
        return 127
    sys.stdout.flush()
    os.execve(exe, command, env)
    return 0  # not reached


def add_commands(sub) -> None:
    r = sub.add_parser("run", help="run a program with the connect() hook: its matching TCP connections "
                                   "announce themselves as elephants")
    r.add_argument("--rules", metavar="FILE", help="a file of rules, one per line (see docs/hook.md)")
    r.add_argument("--rule", action="append", default=[], metavar="RULE",
                   help="a rule, e.g. 'port=5201 size=1G rate=5M' (repeatable; instead of --rules)")
    r.add_argument("--service", metavar="IP:PORT", help="the handshake service (10.255.255.254:7070)")
    r.add_argument("--timeout-ms", type=int, help="the longest a connect waits for the answer (300)")
    r.add_argument("--stats", action="store_true", help="print the hook's statistics at exit (stderr)")
    r.set_defaults(func=cmd_run)
