"""How a developer tests a controller with Freeway's pytest plugin (docs/testing-your-controller.md): nothing is
imported from Freeway; the fixtures come with ``pip install freeway``.

Two controllers, each started as its users start it: os-ken's own ``simple_switch_13`` (a reactive learning
switch, under ``osken-manager``) and Freeway's controller. The switches are simulated at the message
level, each on its own OpenFlow connection: they parse what the controller sends and forward by it.
"""

import pytest

# a tree (one spine), as a learning switch needs: on a fabric with loops its floods would go round
TREE = pytest.mark.fabric("leafspine", spines=1, leaves=2, hosts_per_leaf=2)


@TREE
def test_simple_switch_13_learns_the_hosts_and_they_reach_each_other(controller, sim_fabric):
    app = controller.osken_sample("simple_switch_13")
    net = sim_fabric(app.address)
    first = net.send("h0_0", net.frame("h0_0", "h1_1"))  # h1_1 unknown yet: flooded, through the controller
    assert "h1_1" in first.hosts and first.packet_ins >= 1
    back = net.send("h1_1", net.frame("h1_1", "h0_0"))  # h0_0 learnt on the way in: straight to it
    assert back.hosts == ["h0_0"]
    again = net.send("h0_0", net.frame("h0_0", "h1_1"))  # both learnt: unicast, each switch adds its entry
    assert again.hosts == ["h1_1"]
    last = net.send("h0_0", net.frame("h0_0", "h1_1"))  # the entries carry it now, no controller on the way
    assert last.hosts == ["h1_1"] and last.packet_ins == 0 and last.path == ("l0", "s1", "l1")
    assert any(dict(f.match).get("eth_dst") == net.fabric.host("h1_1").mac for f in net.table("l0"))
    assert not net.errors  # nothing it sent did a switch refuse


@TREE
def test_a_cut_link_is_reported_to_simple_switch_13_and_nothing_crosses_it(controller, sim_fabric):
    app = controller.osken_sample("simple_switch_13")
    net = sim_fabric(app.address)
    net.send("h0_0", net.frame("h0_0", "h1_1"))
    net.send("h1_1", net.frame("h1_1", "h0_0"))
    net.cut("l0", "s1")
    cut = net.send("h0_0", net.frame("h0_0", "h1_1"))
    assert cut.hosts == [] and any("is down" in why for _, _, why in cut.drops)
    assert "port" in app.log().lower() or app.proc.poll() is None  # the app took the port status and lives on
    net.restore("l0", "s1")
    assert net.send("h0_0", net.frame("h0_0", "h1_1")).hosts == ["h1_1"]


@pytest.mark.fabric("fattree", k=4)
def test_freeway_installs_an_announced_elephants_path_on_every_switch_before_it_acks(controller, sim_fabric):
    ctl = controller.freeway("freeway")
    net = sim_fabric(ctl.address)
    walk, answer, acked = net.announce("h0_0_0", "h3_1_1", sport=41000, dport=5201, rate_kbps=2000)
    assert type(answer).__name__ == "Ack" and acked is not None, (walk, answer)
    src, dst = net.fabric.host("h0_0_0"), net.fabric.host("h3_1_1")
    data = net.send("h0_0_0", net.frame("h0_0_0", "h3_1_1", "tcp", 41000, 5201))
    assert data.hosts == ["h3_1_1"] and len(data.path) == 5
    flow = {"ipv4_src": src.ip, "ipv4_dst": dst.ip, "tcp_src": 41000, "tcp_dst": 5201}
    for sw in data.path:  # its 5-tuple entry on every switch of its path, each in before the ACK reached the host
        mods = [t for t, cmd, m in net.conns[sw].flow_mods if all(m.get(k) == v for k, v in flow.items())]
        assert mods and min(mods) <= acked, sw


@TREE
def test_my_apps_bug_is_refused_as_open_vswitch_refuses_it_and_the_app_hears_of_it(controller, sim_fabric):
    """``my_app.py`` sends a flow to a group it never made: the switch answers OFPET_BAD_ACTION /
    OFPBAC_BAD_OUT_GROUP (as Open vSwitch does), which the test sees, and so does the app."""
    from pathlib import Path

    app = controller.osken(str(Path(__file__).with_name("my_app.py")))
    net = sim_fabric(app.address)
    walk = net.send("h0_0", net.frame("h0_0", "h1_1"))
    assert "h1_1" in walk.hosts  # flooded by the packet-out all the same
    bad = [(sw, t, c) for sw, t, c, _ in net.errors]
    assert ("l0", 2, 9) in bad  # OFPET_BAD_ACTION (2), OFPBAC_BAD_OUT_GROUP (9)
    assert "refused a message: error type 2 code 9" in app.log()
