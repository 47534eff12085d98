"""The real controller process with --monitor sflow-rt, against the local stand-in of sFlow-RT's REST API."""

import time

from experiments.harness.procs import ControllerProcess
from tests.sflowrt_standin import StandIn
from topology.fabric import fattree


def test_controller_reports_elephants_from_sflowrt_and_survives_its_errors(tmp_path):
    fattree(4, 10).save(tmp_path / "f.json")
    with StandIn() as s:
        s.mode = "500"
        with ControllerProcess(tmp_path / "f.json", extra=["--monitor", "sflow-rt", "--sflow-rt", s.url]) as ctl:
            time.sleep(2.5)
            assert ctl.proc.poll() is None and "HTTP 500" in ctl.log_text()
            s.mode = "ok"
            s.flows = [{"agent": "127.0.0.1", "dataSource": "912", "flowN": 2,
                        "key": "10.1.0.2,10.2.0.3,40404,5001", "value": 500000.0}]
            deadline = time.monotonic() + 10
            while not ctl.events(("elephant_start",)):
                assert time.monotonic() < deadline, ctl.log_tail()
                time.sleep(0.2)
            (ev,) = ctl.events(("elephant_start",))
            assert ev["flow"]["sport"] == 40404 and ev["rate_bps"] == 4e6 and ev["switch"] == "e1_0"
            s.flows = []  # the flow goes away: idle end
            deadline = time.monotonic() + 10
            while not ctl.events(("elephant_end",)):
                assert time.monotonic() < deadline, ctl.log_tail()
                time.sleep(0.2)
            assert s.puts["/threshold/freeway-elephant/json"]["value"] == 125000.0
