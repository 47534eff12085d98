"""Spreading a fabric over several Open vSwitch processes (topology.ovsproc): the pure parts."""

import os
import time

import pytest

from experiments.harness.procs import SwitchCpu, SwitchesCpu
from topology.fabric import fattree
from topology.ovsproc import ProcessError, SwitchProcesses, assign, check_count


def test_switches_are_dealt_evenly_and_the_same_way_every_time():
    f = fattree(8, 10)
    where = assign(list(f.switches), 3)
    assert set(where) == set(f.switches) and set(where.values()) == {0, 1, 2}
    counts = [list(where.values()).count(i) for i in range(3)]
    assert max(counts) - min(counts) <= 1, counts
    ports = [sum(len(f.neighbors(sw)) + len(f.hosts_on(sw)) for sw, i in where.items() if i == n) for n in range(3)]
    assert max(ports) <= 1.2 * min(ports), ports  # the cost follows the ports
    assert assign(list(f.switches), 3) == where
    assert set(assign(list(f.switches), 1).values()) == {0}


@pytest.mark.parametrize("bad", [0, 9, -1, 2.0, True, "2"])
def test_a_bad_process_count_is_refused_naming_the_option(bad):
    with pytest.raises(ProcessError, match=rf"switch-processes: must be a whole number from 1 to 8, got {bad!r}"):
        check_count(bad)


def test_each_process_has_its_own_database_and_the_controller_is_given_all():
    one, three = SwitchProcesses(1), SwitchProcesses(3)
    assert one.dbs == [None] and one.ovsdb_setting == ""  # the local default, as before
    assert three.dbs == [None, "unix:/var/run/openvswitch/freeway-db-1.sock",
                         "unix:/var/run/openvswitch/freeway-db-2.sock"]
    assert three.ovsdb_setting == ("unix:/var/run/openvswitch/db.sock,unix:/var/run/openvswitch/freeway-db-1.sock,"
                                   "unix:/var/run/openvswitch/freeway-db-2.sock")
    p = three.extra[0]
    assert len({p.pidfile("vswitchd"), p.pidfile("ovsdb"), p.ctl("vswitchd"), p.ctl("ovsdb")}) == 4


def test_several_processes_report_the_busiest_forwarding_thread():
    me = os.getpid()
    cpu = SwitchCpu.of([me, None])
    assert isinstance(cpu, SwitchesCpu)
    start = time.thread_time()
    while time.thread_time() - start < 0.05:  # some CPU for this thread: 5 clock ticks (a fixed loop read 0 once)
        sum(i * i for i in range(10_000))
    busy = cpu.busy()
    assert busy is not None and busy > 0
    assert cpu.last_each[1] == (None, None) and cpu.last_each[0][0] == busy
    assert isinstance(SwitchCpu.of([me]), SwitchCpu) and not isinstance(SwitchCpu.of([me]), SwitchesCpu)
    assert SwitchesCpu([None]).busy() is None


def test_free_port_never_gives_one_process_the_same_port_twice():
    """Ports are picked before the processes that bind them start: a port given twice made a cluster test's
    second controller fail to listen on its first one's API port (2026-12-04). 2,000 picks from the ~28,000
    ephemeral ports would repeat one about 70 times were they not remembered."""
    from experiments.harness.procs import free_port

    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
