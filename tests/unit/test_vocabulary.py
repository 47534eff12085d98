"""One vocabulary across every command (issue 61): the page lists what the parsers accept, and the shared
words mean one thing everywhere."""

import argparse
import re
from pathlib import Path

import pytest

from experiments import cli
from experiments.sweep import cli as sweep_cli
from ryu_apps import cli as ryu_cli

ROOT = Path(__file__).resolve().parents[2]


def _leaves():
    def walk(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield " ".join(path), parser
        for a in subs:
            for name, sp in a.choices.items():
                yield from walk(sp, path + [name])

    yield from walk(ryu_cli.build_parser((cli, sweep_cli)), [])


def test_the_commands_page_lists_every_option_the_parsers_accept():
    page = (ROOT / "docs" / "commands.md").read_text()
    block = re.search(r"<!-- options: generated -->\n(.*?)<!-- /options -->", page, re.S)
    assert block, "docs/commands.md has no generated options table"
    assert block.group(1) == cli.options_table(), "regenerate it: python -c 'from experiments.cli import " \
                                                  "options_table; print(options_table())'"


def test_shared_words_mean_one_thing():
    for path, parser in _leaves():
        shown = {o: a for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}
        assert "--seconds" not in shown, f"freeway {path}: --duration is the word for seconds"
        if "--rate" in shown:
            assert path == "send", f"freeway {path}: --rate is a flow's rate (send); a link's is --link-mbps"
        if "--link-mbps" in shown:
            assert shown["--link-mbps"].type is float, path
        if "--ks" in shown:
            assert shown["--k"].dest == "ks", f"freeway {path}: --k and --ks fill one list"
        elif "--k" in shown:
            assert shown["--k"].type is int, f"freeway {path}: --k is one arity (--ks for several)"


@pytest.mark.parametrize("old,new,argv,dest,value", [
    ("--rate", "--link-mbps", ["fabric", "--rate", "100"], "link_mbps", 100.0),
    ("--seconds", "--duration", ["bench", "isolation", "--seconds", "3"], "duration", 3.0),
    ("--rates", "--announces-per-s", ["bench", "handshake", "--rates", "10,20"], "announces_per_s", "10,20"),
    ("--k", "--ks", ["bench", "startup", "--k", "4,8"], "ks", [4, 8]),
])
def test_an_old_name_still_works_one_release_and_says_the_new_one(old, new, argv, dest, value, capsys):
    args = ryu_cli.build_parser((cli, sweep_cli)).parse_args(argv)
    assert getattr(args, dest) == value
    assert new in capsys.readouterr().err


def test_one_arity_and_several():
    p = ryu_cli.build_parser((cli, sweep_cli))
    assert p.parse_args(["bench", "fabric-scale", "--k", "48"]).ks == [48]
    assert p.parse_args(["bench", "fabric-scale", "--ks", "16,32"]).ks == [16, 32]
    assert p.parse_args(["bench", "fabric-scale"]).ks == [8]
    with pytest.raises(SystemExit):
        p.parse_args(["bench", "fabric-scale", "--ks", "16,x"])
    with pytest.raises(SystemExit):
        p.parse_args(["bench", "fabric-scale", "--k", "8", "--ks", "16"])


@pytest.mark.parametrize("argv", [
    ["experiment", "paper", "--seed", "3"],  # paper takes --seeds; --seed was ignored
    ["experiment", "many-to-one", "--queues", "cq"],  # it ran and reported what fifo does
    ["experiment", "cut-in", "--modes", "freeway"],
    ["experiment", "fct", "--repeat", "2"],
])
def test_a_scenario_refuses_an_option_that_does_not_apply_to_it(argv, capsys):
    parser = ryu_cli.build_parser((cli, sweep_cli))
    with pytest.raises(SystemExit) as e:
        parser.parse_args(argv)
    assert e.value.code == 2 and "unrecognized arguments: " + argv[2] in capsys.readouterr().err


def test_a_scenario_reads_the_defaults_of_the_options_it_does_not_take():
    args = ryu_cli.build_parser((cli, sweep_cli)).parse_args(["experiment", "cut-in", "--rates", "100"])
    assert (args.scenario, args.rates, args.modes, args.k, args.repeat, args.static_arp) == \
        ("cut-in", "100", None, None, 1, False)
