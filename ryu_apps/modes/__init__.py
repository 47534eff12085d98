"""modes/: one file per mode, each a ``Policy`` (``policy.py``): plain values in, a ``Reaction`` out.

Rule: a mode decides with algorithms/ and says it with programs/ and openflow/ intents; it never
touches a datapath, a socket or the clock. Nothing outside this folder reaches into a policy's
private state: what the app, the cluster and the operator need is a ``Policy`` method every mode answers.
"""

from __future__ import annotations

from ryu_apps.modes.efm import EFMPolicy
from ryu_apps.modes.freeway import FreewayPolicy
from ryu_apps.modes.hedera import HederaPolicy
from ryu_apps.modes.policy import Policy, Reaction
from topology.fabric import Fabric

__all__ = ["EFMPolicy", "FreewayPolicy", "HederaPolicy", "Policy", "Reaction", "make"]


def make(cfg, fabric: Fabric) -> Policy:
    """The policy for a controller Config (a plug-in mode's class built with its settings)."""
    from ryu_apps.modes import registry

    iso = cfg.isolation_config()
    plug = registry.plugin(cfg.mode)
    if plug is not None:
        return plug.cls(fabric, iso, cfg.plugin_settings())
    if cfg.mode == "freeway":
        return FreewayPolicy(fabric, iso, cfg.freeway_config(), cfg.efm_config())
    if cfg.mode == "hedera":
        return HederaPolicy(fabric, iso, cfg.hedera_poll_s)
    if cfg.mode.startswith("efm-"):
        return EFMPolicy(fabric, iso, cfg.efm_config())
    return Policy(fabric, iso)
