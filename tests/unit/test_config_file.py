"""The controller's config file (issue 14): every setting nested by section, checked against the one
declaration of each; flags override it; ``freeway config --defaults`` writes a complete commented file."""

from dataclasses import fields

import pytest

from ryu_apps import cli
from ryu_apps.algorithms.efm_rounds import EFMConfig
from ryu_apps.config import SECTIONS, Config, ConfigError, defaults_file, load_file
from ryu_apps.modes.freeway_state import FreewayConfig
from topology.fabric import fattree


def _file(tmp_path, text):
    p = tmp_path / "freeway.yaml"
    p.write_text(text)
    return str(p)


def _config(argv):
    return cli.controller_config(cli.build_parser().parse_args(["controller", *argv]))


def test_the_defaults_file_has_every_setting_with_its_help_and_loads_back_to_the_defaults(tmp_path):
    text = defaults_file()
    for f in fields(Config):
        if f.name not in SECTIONS and f.name != "mode_settings":  # (a plug-in's: a section under its own name)
            assert f"\n  {f.name}: " in text
    for cls, name, _ in SECTIONS.values():
        assert f"\n{name}:" in text
        for f in fields(cls):
            if f.name != "pick":
                assert f"\n  {f.name}: " in text, (name, f.name)
    assert "# a low-latency path whose average link load is above this is congested" in text
    assert "[float; s; > 0; reloads live]" in text  # type, unit, range and whether a reload changes it
    assert "[int; packets/s; >= 1]\n  punt_pps: 200" in text  # not live: a reload names it and keeps it
    cfg = Config.from_mapping({**load_file(_file(tmp_path, text)), "fabric": "f.json"})
    assert cfg == Config(fabric="f.json", **{k: cfg.__dict__[k] for k in SECTIONS})
    assert cfg.freeway_config() == FreewayConfig() and cfg.efm_config() == EFMConfig()
    assert cfg.monitor_config() == Config(fabric="x").monitor_config()


def test_a_file_sets_every_section_and_flags_override_it(tmp_path):
    path = _file(tmp_path, "controller:\n  fabric: f.json\n  mode: hedera\n  isolation: true\n"
                           "freeway:\n  lol_high: 0.4\n  punt_pps: 300\nefm:\n  threshold: 0.6\n")
    cfg = _config(["--config", path])
    assert (cfg.mode, cfg.isolation) == ("hedera", True)
    assert cfg.freeway_config().lol_high == 0.4 and cfg.freeway_config().punt_pps == 300
    assert cfg.efm_config().threshold == 0.6
    cfg = _config(["--config", path, "--mode", "freeway", "--isolation", "off", "--freeway-set", "lol_high=0.35",
                   "--efm-threshold", "0.8"])
    assert (cfg.mode, cfg.isolation) == ("freeway", False)
    assert cfg.freeway_config().lol_high == 0.35 and cfg.freeway_config().punt_pps == 300  # the rest stays
    assert cfg.efm_config().threshold == 0.8


@pytest.mark.parametrize("text, error", [
    ("freeway:\n  lol_hgh: 0.4\n", "freeway.lol_hgh: unknown setting; did you mean lol_high?"),
    ("freway:\n  lol_high: 0.4\n", "freway: unknown section; did you mean freeway?"),
    ("controller:\n  mdoe: freeway\n", "controller.mdoe: unknown setting; did you mean mode?"),
    ("freeway:\n  lol_high: lots\n", "freeway.lol_high: expected a number, got 'lots'"),
    ("freeway:\n  punt_pps: 0\n", "freeway.punt_pps: must be a whole number of at least 1, got 0"),
    ("efm:\n  threshold: [1, 2]\n", "efm.threshold: must be a positive number (at most 1), got [1, 2]"),
    ("controller:\n  mode: fastest\n", "mode: must be one of ecmp, hedera, efm-biggest, efm-smallest, freeway"),
    ("controller:\n  isolation: maybe\n", "controller.isolation: expected on or off, got 'maybe'"),
    ("controller: [mode]\n", "controller: expected KEY: VALUE lines, got list"),
    ("- just\n- a list\n", "expected sections (controller, monitor, freeway, isolation, efm), got list"),
    ("freeway:\n  lol_high: [0.4\n", "not YAML"),
])
def test_a_wrong_file_names_the_key_and_the_problem_and_nothing_starts(tmp_path, text, error):
    with pytest.raises(ConfigError) as e:
        _config(["--config", _file(tmp_path, "controller:\n  fabric: f.json\n" + text
                                   if not text.startswith(("controller", "-")) else text), "--fabric", "f.json"])
    assert error in str(e.value)


def test_no_fabric_in_the_file_or_on_the_command_line_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="fabric: a path to the fabric description is required"):
        _config(["--config", _file(tmp_path, "controller:\n  mode: freeway\n")])
    with pytest.raises(ConfigError, match="cannot read"):
        _config(["--config", str(tmp_path / "missing.yaml"), "--fabric", "f.json"])


def test_freeway_config_defaults_writes_the_file(tmp_path, capsys):
    out = tmp_path / "defaults.yaml"
    assert cli.main(["config", "--defaults", "--out", str(out)]) == 0
    assert out.read_text() == defaults_file()
    assert cli.main(["config", "--defaults"]) == 0
    assert capsys.readouterr().out.endswith(defaults_file())


def test_ovsdb_endpoints_are_spoken_to_as_safely_as_openflow(tmp_path):
    """Issue 60 item 3: ``ovs-vsctl --db=`` ran without a key or certificate, so an ssl: endpoint could not
    work and the docs told operators to open tcp:HOST:6640, through which anyone can set-controller. ssl:
    takes the controller's own PKI; tcp: off loopback is refused unless ``ovsdb_plain`` says so."""
    from topology import ovsdb
    from topology.ovsdb import EndpointError, base_args, check_endpoints

    check_endpoints([None, "unix:/run/openvswitch/db.sock", "tcp:127.0.0.1:6640", "tcp:[::1]:6640"], False, False)
    with pytest.raises(EndpointError, match="set-controller"):
        check_endpoints(["tcp:192.0.2.1:6640"], True, False)
    check_endpoints(["tcp:192.0.2.1:6640"], False, True)
    with pytest.raises(EndpointError, match="needs the controller's PKI"):
        check_endpoints(["ssl:192.0.2.1:6640"], False, False)
    with pytest.raises(EndpointError, match="unknown endpoint"):
        check_endpoints(["http:192.0.2.1:6640"], False, False)
    ovsdb.use_tls("k.pem", "c.pem", "ca.pem")
    try:
        assert base_args("ssl:192.0.2.1:6640", 5)[-3:] == ["--private-key=k.pem", "--certificate=c.pem",
                                                           "--ca-cert=ca.pem"]
        assert base_args("tcp:127.0.0.1:6640", 5) == ["ovs-vsctl", "--timeout=5", "--db=tcp:127.0.0.1:6640"]
        ovsdb.use_tls("", "", "")
        with pytest.raises(RuntimeError, match="no key"):
            base_args("ssl:192.0.2.1:6640", 5)
    finally:
        ovsdb.use_tls("", "", "")
    fabric = tmp_path / "f.json"
    fattree(4).save(fabric)
    with pytest.raises(ConfigError, match="ovsdb: tcp:192.0.2.1:6640: OVSDB in clear text"):
        Config(fabric=str(fabric), ovsdb="tcp:192.0.2.1:6640")
    assert Config(fabric=str(fabric), ovsdb="tcp:192.0.2.1:6640", ovsdb_plain=True).ovsdb_plain
