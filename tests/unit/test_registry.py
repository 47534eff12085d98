"""Modes as plug-ins (issue 62): the registry lists the built-in modes and every usable plug-in declared in
the ``freeway.modes`` entry-point group; one that does not import, is not a Policy, or takes a built-in
mode's name is listed as unusable with why, and the built-in modes work whatever plug-ins are there. A
plug-in's own settings are checked like the built-in ones, in a config file section named after it."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from ryu_apps import config
from ryu_apps.modes import registry
from topology.fabric import fattree


@pytest.fixture
def fake_plugins(monkeypatch):
    eps = [EntryPoint("ecmp", "ryu_apps.modes.policy:Policy", registry.GROUP),
           EntryPoint("broken", "no_such_module_here:Policy", registry.GROUP),
           EntryPoint("not-a-policy", "os.path:join", registry.GROUP),
           EntryPoint("least-loaded", "freeway_least_loaded:LeastLoadedPolicy", registry.GROUP)]
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [e for e in eps if e.group == group])
    registry.plugins.cache_clear()
    yield
    registry.plugins.cache_clear()


def test_unusable_plugins_are_listed_with_why_and_the_built_in_modes_work(fake_plugins):
    assert registry.modes() == (*registry.BUILTIN, "least-loaded")
    bad = registry.unusable()
    assert bad["ecmp"].startswith("its name clashes with the built-in mode")
    assert bad["broken"].startswith("it does not import: ModuleNotFoundError")
    assert "is not a Policy subclass" in bad["not-a-policy"]
    text = registry.describe()
    assert "plug-in modes: least-loaded" in text and "unusable plug-ins: broken:" in text


def test_the_example_plugin_is_made_with_its_settings_checked_like_the_built_in_ones(tmp_path):
    registry.plugins.cache_clear()
    if registry.plugin("least-loaded") is None:
        pytest.skip("the example mode (examples/least-loaded) is not installed: make install installs it")
    from ryu_apps import modes

    fattree(4).save(tmp_path / "f.json")
    cfg = config.Config.from_mapping({"fabric": str(tmp_path / "f.json"), "mode": "least-loaded",
                                      "mode_settings": (("idle_s", 9),)})
    pol = modes.make(cfg, fattree(4))
    assert pol.mode == "least-loaded" and pol.cfg.idle_s == 9
    (tmp_path / "c.yaml").write_text("least-loaded:\n  idle_s: 0\n")
    with pytest.raises(config.ConfigError, match="least-loaded.idle_s"):
        config.load_file(str(tmp_path / "c.yaml"))
    (tmp_path / "c.yaml").write_text("least-loaded:\n  idel_s: 3\n")
    with pytest.raises(config.ConfigError, match="idel_s"):
        config.load_file(str(tmp_path / "c.yaml"))
    with pytest.raises(config.ConfigError, match="takes no settings of its own"):
        config.Config.from_mapping({"fabric": "x", "mode": "ecmp", "mode_settings": (("idle_s", 3),)})
