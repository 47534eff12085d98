"""The sFlow-RT backend against a local stand-in server with sFlow-RT's documented JSON shapes."""

from monitoring.estimator import Estimator
from monitoring.events import ElephantStart
from monitoring.sflow import FiveTuple
from monitoring.sflowrt import SFlowRT
from tests.sflowrt_standin import StandIn
from topology.fabric import fattree

F = fattree(4, 10)


def _backend(url):
    est = Estimator(F)
    est.set_ifmap({911: ("e0_0", 3), 912: ("e0_0", 1)})
    return SFlowRT(url, est, timeout=1.0), est


def test_defines_flow_and_threshold_then_reads_flows_and_utilisation():
    with StandIn() as s:
        s.flows = [{"agent": "127.0.0.1", "dataSource": "912", "flowN": 2, "key": "10.0.0.2,10.3.1.3,54404,5001",
                    "value": 400000.0}]
        s.util = [[{"agent": "127.0.0.1", "dataSource": "911", "metricName": "ifoututilization",
                    "metricValue": 72.5, "lastUpdate": 816}]]
        rt, est = _backend(s.url)
        loads = rt.poll(10.0)
        assert s.puts["/flow/freeway/json"] == {"keys": "ipsource,ipdestination,tcpsourceport,tcpdestinationport",
                                                "value": "bytes", "t": 2}
        assert s.puts["/threshold/freeway-elephant/json"] == {"metric": "freeway", "value": 125000.0}
        (ld,) = loads
        assert ld.link == ("e0_0", "a0_0") and abs(ld.utilisation - 0.725) < 1e-9
        (ev,) = est.tick(10.1)
        assert isinstance(ev, ElephantStart) and ev.flow == FiveTuple("10.0.0.2", "10.3.1.3", 6, 54404, 5001)
        assert ev.rate_bps == 3.2e6 and (ev.switch, ev.port) == ("e0_0", 1)


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
        assert rt.stats == {"polls": 3, "errors": 2, "bad_entries": 2}
    rt.url = s.url  # server now gone
    assert rt.poll(4.0) == [] and rt.stats["errors"] == 3
    assert any("will retry" in r.message for r in caplog.records)
