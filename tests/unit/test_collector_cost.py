"""``freeway bench scale``'s measure of the sFlow collector: every port's counters, packed as the
fabric-scale agents pack them, reach every directed link of the fabric."""

from experiments.benches.controller import collector_cost
from experiments.benches.sflowload import MAX_DATAGRAM
from topology.fabric import fattree


def test_the_collectors_cost_is_measured_over_every_port_and_every_link_is_measured():
    fab = fattree(4, 100)
    r = collector_cost(fab, rounds=2)
    ports = 2 * len(fab.links) + len(fab.hosts)  # both ends of a switch link, a ToR's host port
    assert r["ports"] == ports
    assert r["stats"]["decode_errors"] == 0 and r["stats"]["counter_samples"] == 3 * ports
    assert r["links_measured"] == 2 * (len(fab.links) + len(fab.hosts))  # a host port measures both ways
    assert 1 < r["samples_per_datagram"] <= (MAX_DATAGRAM - 28) // 100  # packed, each sample over 100 bytes
    assert 0 < r["decode_us_per_sample"] < r["collector_us_per_sample"]
