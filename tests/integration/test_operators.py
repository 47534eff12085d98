"""Issue 14 on a real fabric: one 10 Mbit/s k=4 fat-tree under the real controller process, started from a
config file with the API, a write token and JSON logs (freeway mode, isolation on). Read by a real
Prometheus, a real headless Chromium, schemathesis and ``freeway status``."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from experiments.harness.browser import chromium
from experiments.harness.procs import ControllerProcess, free_port
from ryu_apps.openflow import pipeline
from topology.builder import FabricNet, ofctl
from topology.fabric import fattree
from topology.queues import IsolationConfig
from topology.sflow_agent import SFlowAgentConfig

PY = sys.executable
TOKEN = "operator-token-0123"
CLASS_COLOURS = {"lol": "rgb(31, 119, 180)", "draining": "rgb(148, 103, 189)", "hol": "rgb(255, 127, 14)",
                 "shared": "rgb(127, 127, 127)", "access": "rgb(176, 176, 176)", "down": "rgb(214, 39, 40)"}


class Ops:
    """The fabric, the controller and its API."""

    def __init__(self, fn, ctl, api, cfg_file, base_cfg):
        self.fn, self.ctl, self.api, self.cfg_file, self.base_cfg = fn, ctl, api, cfg_file, base_cfg

    def call(self, method, path, body=None, token=TOKEN):
        req = urllib.request.Request(self.api + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def get(self, path):
        code, body = self.call("GET", path, token=None)
        assert code == 200, (path, code, body)
        return body

    def metrics(self) -> str:
        return urllib.request.urlopen(self.api + "/metrics", timeout=10).read().decode()

    def decisions(self, types=None):
        q = "?since=0&limit=1000" + (f"&type={types}" if types else "")
        return self.get("/api/v1/decisions" + q)["decisions"]

    def announce(self, src, dst, sport, dport=5001, rate_bps=2e6):
        return self.call("POST", "/api/v1/elephants", {"flows": [{"src": self.fn.host(src).IP(),
                                                                  "dst": self.fn.host(dst).IP(), "sport": sport,
                                                                  "dport": dport}],
                                                       "size_bytes": 10**8, "rate_bps": rate_bps})

    def write_config(self, freeway=None, extra=""):
        text = self.base_cfg + "freeway:\n" + "".join(f"  {k}: {v}\n" for k, v in (freeway or {}).items()) + extra
        Path(self.cfg_file).write_text(text)

    def reload(self) -> dict:
        """SIGHUP, and the config decision it produced."""
        before = self.get("/api/v1/status")["decisions"]
        os.killpg(self.ctl.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while True:
            new = [d for d in self.decisions("config") if d["seq"] > before]
            if new:
                return new[-1]
            assert time.monotonic() < deadline, self.ctl.log_tail()
            time.sleep(0.1)


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    fabric = fattree(4, 10)
    fabric.save(d / "fabric.json")
    (d / "token").write_text(TOKEN + "\n")
    port = free_port()
    base = (f"controller:\n  isolation: true\n  api: 127.0.0.1:{port}\n  api_token_file: {d / 'token'}\n"
            "  log_format: json\n  sflow_workers: '1'\n")  # (one worker whatever the cores: the reload keeps it)
    (d / "freeway.yaml").write_text(base + "freeway:\n  host_elephants: 8\n")
    ctl = ControllerProcess(d / "fabric.json", mode="freeway", extra=["--config", str(d / "freeway.yaml")]).start()
    fn = FabricNet(fabric, ctl.address, sflow=SFlowAgentConfig.for_rate(10, target=ctl.sflow_target),
                   isolation=IsolationConfig())
    try:
        fn.start()
        fn.wait_reachable(60)
        yield Ops(fn, ctl, f"http://127.0.0.1:{port}", str(d / "freeway.yaml"), base)
    finally:
        fn.stop()
        ctl.stop()


def _mice_uplinks(fabric, tor):
    """The uplinks a ToR's mice groups send on, read from the switch."""
    ports = set()
    for line in ofctl("dump-groups", tor).splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if m and int(m.group(1)) >= pipeline.MICE_GROUPS.first:
            ports |= {int(p) for p in re.findall(r"output:(\d+)", line)}
    return {fabric.peer(tor, p)[0] for p in ports}


def test_the_api_shows_the_fabric_and_the_partition_the_switches_hold(ops):
    fabric = ops.fn.fabric
    doc = ops.get("/api/v1/fabric")
    assert [s["state"] for s in doc["switches"]] == ["connected"] * 20
    assert {s["dpid"] for s in doc["switches"]} == {f"{s.dpid:016x}" for s in fabric.switches.values()}
    links = {(ln["src"], ln["dst"]): ln for ln in doc["links"]}
    assert len(links) == 2 * 32 + 2 * 16 and all(ln["up"] for ln in links.values())
    for tor in fabric.tors():  # mice go up every uplink (mice_paths: all); the API's LOL ones are a part
        lol = {b for (a, b), ln in links.items() if a == tor and ln["class"] == "lol"}
        assert lol and lol < set(fabric.up_neighbors(tor)) == _mice_uplinks(fabric, tor), tor
    part = ops.get("/api/v1/partition")
    assert part["partitioned"] and part["lol_min"] == 2 and part["lol_links"] + part["hol_links"] == 64
    status = ops.get("/api/v1/status")
    assert status["mode"] == "freeway" and status["isolation"] and status["writable"]
    assert status["config_file"] == ops.cfg_file


def test_an_elephant_announced_through_the_api_is_installed_listed_and_withdrawn(ops):
    code, ack = ops.announce("h0_0_0", "h2_1_1", 43001, rate_bps=3e6)
    assert code == 201 and ack["verdict"] == "ack" and ack["allocation_bps"] == 3_000_000, ack
    el = ack["elephant"]
    cookie = int(el["cookie"], 16)
    path = el["paths"][0]
    for sw in path:  # every hop already holds the entry when the API answers
        assert f"cookie={hex(cookie)}" in ofctl("dump-flows", sw), sw
    assert f"meter={el['meter']}" in ofctl("dump-meters", path[0])
    listed = {e["id"]: e for e in ops.get("/api/v1/elephants")["elephants"]}
    assert listed[el["id"]]["how"] == "announced" and listed[el["id"]]["paths"] == [path]
    assert [d.get("via") for d in ops.decisions("placement") if d.get("elephant") == int(el["id"])] == ["api"]
    code, body = ops.call("DELETE", f"/api/v1/elephants/{el['id']}")
    assert code == 200 and body == {"withdrawn": el["id"]}
    time.sleep(0.5)
    assert all(f"cookie={hex(cookie)}" not in ofctl("dump-flows", sw) for sw in path)
    assert f"meter={el['meter']}" not in ofctl("dump-meters", path[0])
    assert el["id"] not in {e["id"] for e in ops.get("/api/v1/elephants")["elephants"]}
    code, body = ops.call("DELETE", f"/api/v1/elephants/{el['id']}")
    assert code == 404
    code, body = ops.call("DELETE", f"/api/v1/elephants/{el['id']}", token="not-the-token")
    assert code == 401
    code, nack = ops.announce("h0_0_0", "h2_1_1", 43002, rate_bps=50e6)
    assert code == 409 and nack["cause"] == "invalid" and "above the host's link rate" in nack["reason"]


def test_a_host_handshake_is_a_decision_in_the_api_the_metrics_and_the_json_log(ops):
    fn = ops.fn
    out = fn.host("h1_0_0").cmd(f"{PY} -m ryu_apps.cli send --to {fn.host('h3_0_0').IP()} --port 5001 --json "
                                "--size 50M --rate 2 --announce-only")
    (rep,) = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert rep["answer"] == "ack"
    (dec,) = [d for d in ops.decisions("placement") if d.get("via") == "handshake" and d["host"] == fn.host("h1_0_0").IP()]
    assert dec["paths"][0][0] == "e1_0" and 0 < dec["latency_s"] < 1
    metrics = ops.metrics()
    assert re.search(r'freeway_handshakes_total\{cause="none",outcome="ack",via="handshake"\} [1-9]', metrics)
    assert re.search(r"freeway_handshake_latency_seconds_count [1-9]", metrics)
    confirm = re.search(r"^freeway_install_confirm_seconds_sum (\S+)$", metrics, re.M)
    assert 0 < float(confirm.group(1)) and re.search(r"^freeway_install_confirm_seconds_count [1-9]", metrics, re.M)
    # what waited in the app's queue is timed; barrier replies and the handshake's packet-in did not wait there
    assert re.search(r'^freeway_event_wait_seconds_count\{kind="other"\} [1-9]', metrics, re.M)
    assert not re.search(r'^freeway_event_wait_seconds_count\{kind="(barrier_reply|handshake)"\}', metrics, re.M)
    # the full collection the launcher makes once the apps started is observed (the app registered first)
    assert re.search(r'^freeway_gc_pause_seconds_count\{generation="2"\} [1-9]', metrics, re.M)
    lines = [json.loads(x) for x in ops.ctl.log_text().splitlines() if x.startswith("{")]
    assert len(lines) >= 20 and all({"time", "level", "logger", "message"} <= set(x) for x in lines)
    (logged,) = [x for x in lines if x.get("seq") == dec["seq"]]
    assert {k: logged[k] for k in dec if k != "time"} == {k: v for k, v in dec.items() if k != "time"}
    assert logged["wall"] == dec["time"] and logged["logger"] == "freeway.decisions"
    text = [x for x in ops.ctl.log_text().splitlines() if x.strip() and not x.startswith("{")]
    assert not [x for x in text if "freeway" in x], text[:5]  # nothing of ours is written as plain text


@pytest.fixture(scope="module")
def prometheus(ops, tmp_path_factory):
    from tests.prometheus import Prometheus

    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed: run 'make test' (it installs Debian's prometheus)")
    prom = Prometheus(ops.api.removeprefix("http://"), tmp_path_factory.mktemp("prom")).start()
    try:
        deadline = time.monotonic() + 15
        while not prom.targets_up():
            assert time.monotonic() < deadline, "prometheus never scraped the controller"
            time.sleep(0.5)
        yield prom
    finally:
        prom.stop()


def test_a_real_prometheus_scrape_follows_the_traffic(ops, prometheus):
    """An unannounced iperf3 from h0_1_0 to h3_1_0: the scraped load of its access link and of the ToR
    uplinks rises with it and falls after it, monitoring's datagram counter grows, and the controller
    lists it as an elephant while it runs."""
    fn, prom = ops.fn, prometheus
    access = 'freeway_link_load_bytes_per_second{src="h0_1_0",dst="e0_1"}'
    up = 'sum(freeway_link_load_bytes_per_second{src="e0_1",dst=~"a0_.*"})'
    time.sleep(3)
    idle = prom.value(access) or 0.0
    datagrams0 = prom.value("freeway_sflow_datagrams_total")
    dst = fn.host("h3_1_0")
    fn.iperf_server(dst.name, 5801)
    fn.host("h0_1_0").sendCmd(f"iperf3 -c {dst.IP()} -p 5801 --cport 47001 -t 12")
    seen = {"access": 0.0, "up": 0.0, "elephants": 0.0}
    deadline = time.monotonic() + 11
    while time.monotonic() < deadline:
        time.sleep(1)
        seen["access"] = max(seen["access"], prom.value(access) or 0.0)
        seen["up"] = max(seen["up"], prom.value(up) or 0.0)
        seen["elephants"] = max(seen["elephants"], prom.value('sum(freeway_elephants{how=~"adopted|efm|detected"})') or 0)
    fn.host("h0_1_0").waitOutput()
    assert idle < 50_000 and seen["access"] > 600_000, (idle, seen)  # > 4.8 Mbit/s on a 10 Mbit/s link
    assert seen["up"] > 600_000 and seen["elephants"] >= 1, seen
    assert prom.value("freeway_sflow_datagrams_total") > datagrams0
    time.sleep(5)
    assert (prom.value(access) or 0.0) < 100_000  # back down once the transfer is over
    assert prom.value("freeway_switches_connected") == 20
    assert prom.value('count(freeway_link_up == 1)') == 96
    lint = subprocess.run(["promtool", "check", "metrics"], input=ops.metrics(), capture_output=True, text=True)
    assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), lint.stdout + lint.stderr


def _browser():
    return chromium()


def _page_links(driver) -> dict:
    return driver.execute_script(
        "const out = {}; for (const l of document.querySelectorAll('line.link')) {"
        " out[l.dataset.src + '>' + l.dataset.dst] = [l.dataset.class, getComputedStyle(l).stroke,"
        " l.classList.contains('hl')]; } return out;")


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(0.25)


def test_the_fabric_view_in_a_real_browser_matches_the_api_and_shows_elephants_and_failures(ops, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver = _browser()
    try:
        driver.get(ops.api + "/")
        _wait(lambda: int(driver.execute_script("return document.body.dataset.updates || 0")) >= 1, 15,
              "the page never loaded the fabric")

        def matches():
            api = {f"{ln['src']}>{ln['dst']}": ln["class"] for ln in ops.get("/api/v1/fabric")["links"]}
            page = _page_links(driver)
            return page if {k: v[0] for k, v in page.items()} == api else None
        page = _wait(matches, 10, "the page's link classes never matched the API's")
        assert len(page) == 96 and all(stroke == CLASS_COLOURS[cls] for cls, stroke, _ in page.values()), page
        assert "20/20 switches connected" in driver.find_element(By.ID, "status").text
        assert driver.find_elements(By.CSS_SELECTOR, "g.node.switch.connected").__len__() == 20

        dst = ops.fn.host("h3_1_1")
        ops.fn.iperf_server(dst.name, 5002)
        code, ack = ops.announce("h0_0_1", "h3_1_1", 44001, dport=5002, rate_bps=4e6)
        assert code == 201, ack
        eid = ack["elephant"]["id"]
        ops.fn.host("h0_0_1").sendCmd(f"iperf3 -c {dst.IP()} -p 5002 --cport 44001 -b 4M -t 8")  # load to draw
        row = _wait(lambda: driver.find_elements(By.CSS_SELECTOR, f'#elephants tr[data-id="{eid}"]'), 5,
                    "the placed elephant never showed in the page's table")[0]
        assert "announced" in row.text and "4.00" in row.text
        time.sleep(4)  # its measured rate and its links' loads reach the page
        row = driver.find_element(By.CSS_SELECTOR, f'#elephants tr[data-id="{eid}"]')
        ActionChains(driver).move_to_element(row).perform()
        want = {f"{a}>{b}" for a, b in ack["elephant"]["links"]}
        lit = _wait(lambda: {k for k, v in _page_links(driver).items() if v[2]} or None, 3, "hover lit nothing")
        assert lit == want, (lit, want)
        assert all(v[1] == "rgb(44, 160, 44)" for k, v in _page_links(driver).items() if k in want)
        shot = Path(os.environ.get("FREEWAY_SCREENSHOT") or tmp_path / "fabric-view.png")
        shot.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        ActionChains(driver).move_by_offset(0, 400).perform()
        ops.fn.host("h0_0_1").waitOutput()

        ops.fn.net.configLinkStatus("a1_0", "c1", "down")  # a failure turns its two lines red and dashed
        try:
            _wait(lambda: all(_page_links(driver)[k][0] == "down" for k in ("a1_0>c1", "c1>a1_0")), 8,
                  "the cut link never turned down on the page")
            assert _page_links(driver)["a1_0>c1"][1] == CLASS_COLOURS["down"]
            assert "1 links down" in driver.find_element(By.ID, "status").text
        finally:
            ops.fn.net.configLinkStatus("a1_0", "c1", "up")
        _wait(lambda: _page_links(driver)["a1_0>c1"][0] != "down", 10, "the link never came back on the page")
        ops.call("DELETE", f"/api/v1/elephants/{eid}")
        _wait(lambda: not driver.find_elements(By.CSS_SELECTOR, f'#elephants tr[data-id="{eid}"]'), 5,
              "the withdrawn elephant stayed in the table")
    finally:
        driver.quit()


def test_the_fabric_view_of_a_large_fabric_starts_from_its_groups_and_opens_one(ops):
    """Issue 41: past 400 switches (here forced with #level=groups) the page draws one tile per pod from
    /api/v1/fabric?level=groups, a cut link marks its pod's tile, and a tile opens its pod alone."""
    from selenium.webdriver.common.by import By

    driver = _browser()
    try:
        driver.get(ops.api + "/#level=groups")
        tiles = lambda: {t.get_attribute("data-group"): t for t in driver.find_elements(By.CSS_SELECTOR, "button.group")}  # noqa: E731
        _wait(lambda: len(tiles()) == 4, 15, "the page never drew the pods")
        assert sorted(tiles()) == ["pod0", "pod1", "pod2", "pod3"]
        assert driver.find_element(By.CSS_SELECTOR, "svg#fabric").value_of_css_property("display") == "none"
        assert "top tier: 4/4 switches connected" in driver.find_element(By.CSS_SELECTOR, ".group.top").text
        rows = {r["group"]: r for r in ops.get("/api/v1/fabric?level=groups")["groups"]}
        assert f"0 of {rows['pod2']['links']} links down" in tiles()["pod2"].text and "4/4 switches" in tiles()["pod2"].text
        ops.fn.net.configLinkStatus("a1_0", "c1", "down")
        try:
            _wait(lambda: tiles()["pod1"].get_attribute("data-links-down") == "2", 8, "the cut never showed on pod1")
            assert "bad" in tiles()["pod1"].get_attribute("class") and "bad" not in tiles()["pod2"].get_attribute("class")
        finally:
            ops.fn.net.configLinkStatus("a1_0", "c1", "up")
        _wait(lambda: tiles()["pod1"].get_attribute("data-links-down") == "0", 10, "pod1 never came back")
        tiles()["pod1"].click()

        def matches():
            api = {f"{ln['src']}>{ln['dst']}": ln["class"] for ln in ops.get("/api/v1/fabric?group=pod1")["links"]}
            page = _page_links(driver)
            return page if {k: v[0] for k, v in page.items()} == api else None
        page = _wait(matches, 10, "the opened pod's links never matched the API's")
        assert len(page) == 24 and all("1_" in k for k in page)  # its own links only, uplinks to the cores
        names = {g.get_attribute("data-name") for g in driver.find_elements(By.CSS_SELECTOR, "g.node")}
        assert names == {"c1", "c2", "c3", "c4", "a1_0", "a1_1", "e1_0", "e1_1", "h1_0_0", "h1_0_1", "h1_1_0", "h1_1_1"}
        assert "group=pod1" in driver.current_url and driver.find_element(By.ID, "where").text == "group pod1"
        driver.find_element(By.ID, "back").click()
        _wait(lambda: driver.find_element(By.ID, "groups").is_displayed() and len(tiles()) == 4, 5, "back never returned")
    finally:
        driver.quit()


def test_schemathesis_finds_nothing_wrong_with_the_running_controller(ops, tmp_path):
    """Every operation of /openapi.json, positive and negative data, every check, against the real process."""
    before = {e["id"] for e in ops.get("/api/v1/elephants")["elephants"]}
    exe = Path(sys.executable).with_name("schemathesis")
    r = subprocess.run([str(exe), "run", ops.api + "/openapi.json", "--checks", "all", "-H",
                        f"Authorization: Bearer {TOKEN}", "--max-examples", "40", "-w", "1", "--no-color",
                        "--generation-database", "none", "--request-timeout", "10", "--seed", "14"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-6000:]
    assert re.search(r"(\d+) generated, \1 passed", r.stdout), r.stdout[-2000:]
    for e in ops.get("/api/v1/elephants")["elephants"]:  # anything it managed to place goes
        if e["id"] not in before and e["how"] == "announced":
            ops.call("DELETE", f"/api/v1/elephants/{e['id']}")
    assert "Traceback" not in ops.ctl.log_text()


def test_sighup_applies_live_settings_names_the_others_and_an_invalid_file_changes_nothing(ops):
    workers = ops.get("/api/v1/status")["sflow_workers"]  # (one, as the fixture asks)
    ops.write_config({"host_elephants": 1, "punt_pps": 150})
    dec = ops.reload()  # (SIGHUP to the controller's process group, which killed the sFlow workers until 2026-11-29)
    assert dec["result"] == "applied" and dec["changed"] == {"freeway.host_elephants": 1}
    assert dec["restart_needed"] == ["freeway.punt_pps"]
    cfg = ops.get("/api/v1/config")
    assert cfg["settings"]["freeway"]["host_elephants"] == 1 and cfg["settings"]["freeway"]["punt_pps"] == 200
    assert cfg["restart_needed"] == [{"key": "freeway.punt_pps", "running": 200, "file": 150}]
    assert "freeway.punt_pps changed in the file (200 -> 150) but needs a restart" in ops.ctl.log_text()
    time.sleep(1.2)  # the next period
    first = ops.announce("h2_0_0", "h0_1_1", 45001)
    second = ops.announce("h2_0_0", "h0_1_1", 45002)
    assert first[0] == 201 and second[0] == 409 and second[1]["cause"] == "host-cap", second
    assert "host_elephants=1" in second[1]["reason"]
    after = ops.get("/api/v1/status")["sflow_workers"]
    assert workers["workers"] == 1 and after["restarts"] == workers["restarts"] == 0, (workers, after)
    assert after["pids"] == workers["pids"] and all(after["pids"]), (workers, after)
    ops.call("DELETE", f"/api/v1/elephants/{first[1]['elephant']['id']}")

    ops.write_config({"host_elephnts": 8})
    dec = ops.reload()
    assert dec["result"] == "refused" and "freeway.host_elephnts: unknown setting; did you mean host_elephants?" \
        == dec["error"]
    assert ops.get("/api/v1/config")["settings"]["freeway"]["host_elephants"] == 1  # unchanged
    assert "config reload refused, nothing changed" in ops.ctl.log_text()
    ops.write_config({"host_elephants": 8})
    assert ops.reload()["changed"] == {"freeway.host_elephants": 8}
    assert re.search(r'freeway_config_reloads_total\{result="refused"\} 1', ops.metrics())


def _hsload(fn, n_per_s, seconds, first_port):
    out = fn.host("h3_0_0").cmd(f"{PY} -m experiments.hosts.hsload --to {fn.host('h1_1_1').IP()} --rate {n_per_s} "
                                f"--duration {seconds} --first-port {first_port}")
    return json.loads(out.strip().splitlines()[-1])


def test_polling_the_api_every_100_ms_does_not_stall_the_handshakes(ops):
    fn = ops.fn
    ops.write_config({"host_elephants": 1000})  # each announce is a new elephant: lift the per-host cap
    assert ops.reload()["changed"] == {"freeway.host_elephants": 1000}
    quiet = _hsload(fn, 20, 4, 30000)
    stop, polls = threading.Event(), []

    def poll():
        while not stop.is_set():
            t = time.monotonic()
            for path in ("/api/v1/fabric", "/api/v1/elephants", "/api/v1/decisions?since=-1&limit=50"):
                ops.get(path)
            ops.metrics()
            polls.append(time.monotonic() - t)
            stop.wait(max(0.0, 0.1 - (time.monotonic() - t)))
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        busy = _hsload(fn, 20, 4, 31000)
    finally:
        stop.set()
        th.join()
    p = lambda xs, q: sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    assert quiet["acks"] == quiet["sent"] == busy["acks"] == busy["sent"] == 80, (quiet, busy)
    assert len(polls) >= 25
    q50, b50 = p(quiet["latency_ms"], 0.5), p(busy["latency_ms"], 0.5)
    print(f"handshake p50/p99 ms: quiet {q50:.1f}/{p(quiet['latency_ms'], 0.99):.1f}, polled "
          f"{b50:.1f}/{p(busy['latency_ms'], 0.99):.1f}; {len(polls)} polls, p50 {1000 * p(polls, 0.5):.1f} ms")
    assert b50 <= 3 * q50 + 10, (q50, b50)
    ops.write_config({"host_elephants": 8})
    ops.reload()


def test_freeway_status_prints_the_running_controller(ops):
    code, ack = ops.announce("h1_1_0", "h2_0_1", 46001, rate_bps=1e6)
    assert code == 201
    r = subprocess.run([PY, "-m", "ryu_apps.cli", "status", "--api", ops.api], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert "mode freeway + isolation" in r.stdout and "switches: 20/20 connected" in r.stdout
    row = next(x for x in r.stdout.splitlines() if x.split()[:2] == [ack["elephant"]["id"], "announced"])
    assert "10.1.1.2:46001->10.2.0.3:5001/tcp" in row and "1.00" in row and "-".join(ack["elephant"]["paths"][0]) in row
    assert "latest 10 decisions:" in r.stdout
    down = subprocess.run([PY, "-m", "ryu_apps.cli", "status", "--api", "http://127.0.0.1:9"], capture_output=True,
                          text=True, timeout=30)
    assert down.returncode == 2 and "cannot reach the controller's API" in down.stderr
    ops.call("DELETE", f"/api/v1/elephants/{ack['elephant']['id']}")


def test_a_switch_that_goes_away_shows_as_disconnected_in_the_api_and_the_metrics_and_comes_back(ops):
    sw = "a2_1"
    target = subprocess.run(["ovs-vsctl", "get-controller", sw], capture_output=True, text=True,
                            check=True).stdout.split()
    subprocess.run(["ovs-vsctl", "set-controller", sw, "tcp:127.0.0.1:9"], check=True)  # a port nobody serves
    try:
        state = lambda: {s["name"]: s["state"] for s in ops.get("/api/v1/fabric")["switches"]}[sw]  # noqa: E731
        _wait(lambda: state() == "disconnected", 10, "the API never said the switch went away")
        assert ops.get("/api/v1/status")["switches_connected"] == 19
        metrics = ops.metrics()
        assert 'freeway_switch_connected{switch="a2_1"} 0.0' in metrics
        assert 'freeway_switches{state="disconnected"} 1.0' in metrics
        links = {(ln["src"], ln["dst"]): ln for ln in ops.get("/api/v1/fabric")["links"]}
        assert all(links[(sw, n)]["class"] == "down" for n in ("e2_0", "e2_1", "c3", "c4")), links
    finally:
        subprocess.run(["ovs-vsctl", "set-controller", sw, *target], check=True)
    _wait(lambda: state() == "connected", 15, "the API never said the switch came back")
    assert any(d["type"] == "liveness" for d in ops.decisions("liveness"))


def test_after_a_controller_crash_the_api_shows_what_was_recovered_from_the_switches(ops):
    fn = ops.fn
    dst = fn.host("h3_1_1")
    fn.iperf_server(dst.name, 5901)
    code, ack = ops.announce("h0_0_1", "h3_1_1", 48001, dport=5901, rate_bps=3e6)
    assert code == 201
    fn.host("h0_0_1").sendCmd(f"iperf3 -c {dst.IP()} -p 5901 --cport 48001 -b 3M -t 14")
    time.sleep(2)
    ops.ctl.kill()
    ops.ctl.start()
    deadline = time.monotonic() + 15
    while True:
        try:
            listed = {e["id"]: e for e in ops.get("/api/v1/elephants")["elephants"]}
            if ack["elephant"]["id"] in listed and ops.get("/api/v1/status")["switches_connected"] == 20:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, ops.ctl.log_tail()
        time.sleep(0.3)
    el = listed[ack["elephant"]["id"]]
    assert el["how"] == "announced" and el["allocation_bps"] == 3_000_000 and el["paths"] == ack["elephant"]["paths"]
    assert el["cookie"] == ack["elephant"]["cookie"] and el["meter"] == ack["elephant"]["meter"]
    fn.host("h0_0_1").waitOutput()
