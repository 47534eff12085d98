"""The sFlow-RT backend against a local stand-in server with sFlow-RT's documented JSON shapes."""

import pytest

from monitoring.estimator import Estimator
from monitoring.events import ElephantStart
from monitoring.sflow import FiveTuple
from monitoring.sflowrt import DUMP, TABLE, SFlowRT
from tests.sflowrt_standin import StandIn
from topology.fabric import fattree

F = fattree(4, 10)


def _backend(url):
    est = Estimator(F)
    est.set_ifmap({911: ("e0_0", 3), 912: ("e0_0", 1)})
    return SFlowRT(url, est, timeout=1.0), est


FLOW = {"agent": "127.0.0.1", "dataSource": "912", "flowN": 2, "key": "10.0.0.2,10.3.1.3,54404,5001",
        "value": 400000.0}
UTIL = {"agent": "127.0.0.1", "dataSource": "911", "metricName": "ifoutoctets", "metricValue": 906250.0,
        "lastUpdate": 816}


@pytest.mark.parametrize("version", ["1.60", "3"])
def test_defines_flow_and_threshold_then_reads_flows_and_utilisation(version):
    with StandIn() as s:
        s.version = version
        s.flows, s.util = [FLOW], [UTIL]
        rt, est = _backend(s.url)
        loads = rt.poll(10.0)
        assert s.puts["/flow/freeway/json"] == {"keys": "ipsource,ipdestination,tcpsourceport,tcpdestinationport",
                                                "value": "bytes", "t": 2}
        assert s.puts["/threshold/freeway-elephant/json"] == {"metric": "freeway", "value": 125000.0}
        (ld,) = loads
        assert ld.link == ("e0_0", "a0_0") and abs(ld.utilisation - 0.725) < 1e-9
        # its rate is over the agent's last counter interval, fetched up to a poll later: dated 2 s back
        assert est.view(10.0).fresh_readings()[("e0_0", "a0_0")] == (7.25e6, 8.0)
        (ev,) = est.tick(10.1)
        assert isinstance(ev, ElephantStart) and ev.flow == FiveTuple("10.0.0.2", "10.3.1.3", 6, 54404, 5001)
        assert ev.rate_bps == 3.2e6 and (ev.switch, ev.port) == ("e0_0", 1)
        # 1.60 has no table API: it is asked once, then the dump is used; later versions keep the table
        rt.poll(11.0)
        util_gets = [g for g in s.gets if "ifoutoctets" in g]
        if version == "1.60":
            assert util_gets == [TABLE, DUMP, DUMP] and rt.util_path == DUMP
        else:
            assert util_gets == [TABLE, TABLE] and rt.util_path == TABLE


def test_flows_survive_a_failing_utilisation_request_and_the_definition_is_kept():
    """Issue 13 item 13: one failing request no longer throws the other's answer away, and only a 404 on
    the flows means the flow definition is missing."""
    with StandIn() as s:
        s.flows, s.util, s.util_mode = [FLOW], [UTIL], "500"
        rt, est = _backend(s.url)
        assert rt.poll(10.0) == [] and "HTTP 500" in rt.last_error
        (ev,) = est.tick(10.1)
        assert isinstance(ev, ElephantStart)  # the flows' answer was used
        rt.poll(11.0)
        assert rt.defined and len([g for g in s.gets if g.startswith("/activeflows")]) == 2
        s.util_mode = "ok"
        (ld,) = rt.poll(12.0)
        assert ld.link == ("e0_0", "a0_0") and rt.last_error == ""


def test_server_errors_are_logged_and_retried_not_fatal(caplog):
    with StandIn() as s:
        rt, est = _backend(s.url)
        s.mode = "500"
        assert rt.poll(1.0) == [] and "HTTP 500" in rt.last_error
        s.mode = "badjson"
        assert rt.poll(2.0) == [] and "not JSON" in rt.last_error
        s.mode = "ok"
        s.flows = [{"key": "garbage", "value": 1}, {"key": "10.0.0.2,10.3.1.3,1,2", "value": "x"}]
        assert rt.poll(3.0) == [] and rt.last_error == ""
        assert rt.stats == {"polls": 3, "errors": 4, "bad_entries": 2}  # two requests per failing poll
    rt.url = s.url  # server now gone
    assert rt.poll(4.0) == [] and rt.stats["errors"] == 6
    assert any("will retry" in r.message for r in caplog.records)
