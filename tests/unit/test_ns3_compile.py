"""The program a switch holds, compiled for the ns-3 engine (pure): what ``fw::Switch::Apply`` reads."""

from experiments.engines.ns3.compile import F_NEVER, Mirror, entry_line, group_line, match_fields
from ryu_apps.openflow import intents as it
from ryu_apps.simswitch.tables import SwitchTables


def test_an_entry_is_one_line_of_numbers():
    f = it.Flow(20, it.match(eth_type=0x0800, ipv4_dst=("10.1.0.0", "255.255.0.0"), in_port=3),
                (it.SetField("ip_dscp", 46), it.SetQueue(0), it.ToGroup(1001)), table_id=2, cookie=7, meter_id=9,
                goto=None)
    assert entry_line(5, f) == ("E 5 2 20 7 0 0 9 -1 3 2 2048 65535 1 3 4294967295 7 167837696 4294901760 "
                                "3 4 46 5 0 2 1001")


def test_a_match_no_ipv4_packet_carries_never_matches():
    assert match_fields(it.match(eth_type=0x0806, arp_spa="10.0.0.2")) == [(F_NEVER, 0, 0)]
    assert match_fields(it.match(eth_src="02:00:00:00:00:01"))[0][1:] == (0x020000000001, 0xFFFFFFFFFFFF)


def test_a_group_carries_each_buckets_weight_and_watch_port():
    g = it.Group(1, (it.Bucket((it.Output(3),), 4), it.Bucket((it.Output(4),), 10)))
    assert group_line(g, (3, 4)) == "G 1 1 2 4 3 1 1 3 10 4 1 1 4"


def test_the_mirror_follows_every_change_of_the_tables():
    t = SwitchTables("s1")
    m = t.listener = Mirror()
    g = it.Group(1, (it.Bucket((it.Output(3),)),))
    a = it.Flow(10, it.match(eth_type=0x0800), (it.ToGroup(1),), table_id=2, cookie=1)
    t.add_group(g)
    t.add_flow(a)
    t.add_flow(it.Flow(10, it.match(eth_type=0x0800), (it.Output(4),), table_id=2, cookie=2))  # replaces a
    assert m.take().splitlines() == [group_line(g, (3,)), entry_line(1, a), "DE 1", entry_line(
        2, it.Flow(10, it.match(eth_type=0x0800), (it.Output(4),), table_id=2, cookie=2))]
    t.add_flow(a)
    t.delete_group(1)  # its entries go with it, then the group
    assert m.take().splitlines() == ["DE 2", entry_line(3, a), "DE 3", "DG 1"]
    assert m.expired(99) is None and m.entries == {}


def test_a_run_written_before_a_setting_existed_is_kept_while_the_setting_is_at_its_default(tmp_path):
    import json
    from dataclasses import asdict, replace

    from experiments.engines.ns3.engine import Settings, written

    old = asdict(Settings())
    del old["first_flight_bytes"]  # a run.json written before the setting was added
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "spec.json").write_text(json.dumps({"label": "r", "settings": old}))
    (tmp_path / "r" / "run.json").write_text(json.dumps({"label": "r", "done": 1}))
    assert written(tmp_path, {"label": "r", "settings": asdict(Settings())}) == {"label": "r", "done": 1}
    assert written(tmp_path, {"label": "r", "settings": asdict(replace(Settings(), first_flight_bytes=35_840))}) is None
    assert written(tmp_path, {"label": "r", "settings": asdict(replace(Settings(), seed=2))}) is None
