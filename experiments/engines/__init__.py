"""engines/: where a workload runs: ``runner`` on Mininet and Open vSwitch under the real controller
process, ``ns3/`` on ns-3's packet-level models with the same policies and messages; ``fluid``, a bound
rather than a carrier of modes: link sharing alone (max-min between events), under idealized placements,
running no policy.

Rule: an engine takes a fabric, a flow list and modes and returns per-flow results; it decides nothing a
policy decides (``ryu_apps.modes`` does, through the one message builder).
"""
