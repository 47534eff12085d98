"""The controller app's switches: each one's connection, read-back and program (part of ``ControllerApp``).

A switch that connects is read back (its flows, groups and meters) and sent only the difference from its
program (``reconcile``); one that reconnects waits for its links' hold-down; read-backs are asked at most
``READBACK_WINDOW`` at a time; a switch that does not answer in time is programmed from scratch. The
os-ken handlers here are a few lines each: the decisions are ``reconcile``'s and the policy's.
"""

from __future__ import annotations

import gc
import logging
import time

from ryu_apps import ofchannel
from ryu_apps.openflow import ofmsg, reconcile
from ryu_apps.openflow.framework import DEAD_DISPATCHER, MAIN_DISPATCHER, ofp_event, ofproto, set_ev_cls
from ryu_apps.operators import opstate

LOG = logging.getLogger("freeway")
SYNC_TIMEOUT_S = 5.0  # a switch that does not answer the read-back in time is programmed from scratch
# (in time: a part of it within SYNC_TIMEOUT_S, unless other switches' read-backs are still flowing: at
# k=48 a restart's answers queued behind each other, and 11 ToRs were reprogrammed, ``ReadBack.late``)
SYNC_CAP_S = 30.0  # ... even while the controller is behind (``_behind``)
# read-backs asked at once, at most; the others wait their turn (the tick asks them, in the order the
# switches connected). A restart's whole fabric asked at once (k=32: 1,280 dumps of up to 664 entries)
# made the answers queue behind each other past SYNC_TIMEOUT_S, and those switches were reprogrammed
# (at k=48, 64 at once still left one ToR's 1,376-entry dump more than 5 s behind the emulator's others).
READBACK_WINDOW = 32


class SwitchesMixin:
    """Part of ``ControllerApp`` (see the module's docstring)."""

    def _state(self, sw: str, state: str) -> None:
        """A switch's connection as the operator sees it: never, syncing, connected, standby, disconnected."""
        self.switch_states[sw] = opstate.SwitchState(state, time.time())
        self.switch_changes += 1

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state(self, ev):
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self.switch_up(dp)
        else:
            self.switch_down(dp)

    def switch_up(self, dp) -> None:
        """A switch connected and described its ports: its links' state goes to the liveness model, and
        its tables are read back so that it is sent only the difference (no delete-all). A member of a
        cluster first tells the switch its role; a follower only watches."""
        sw = self._switch(dp.id, "unknown-datapath")
        if sw is None:
            LOG.warning("datapath %016x is not in the fabric description: ignored", dp.id)
            return
        self.watching[sw] = dp
        if self.handover is not None:
            self._send_role(dp)
            if not self.master():
                now = time.monotonic()
                self._state(sw, "standby")
                self.links_changed(now, self.liveness.switch(now, sw, True))
                for port in getattr(dp, "ports", {}).values():
                    self.port_changed(now, sw, port)
                return
        self._adopt(sw, dp)

    def _adopt(self, sw: str, dp) -> None:
        """Start programming a connected switch: read it back, then send the difference."""
        now = time.monotonic()
        self._state(sw, "syncing")
        sync = reconcile.ReadBack(dp, now, reconnect=sw in self.liveness.switch_down)
        self.links_changed(now, self.liveness.switch(now, sw, True))
        for port in getattr(dp, "ports", {}).values():
            self.port_changed(now, sw, port)
        self.asking.discard(sw)  # (a read-back of an earlier connection no longer holds a place)
        self.syncs[sw] = sync
        self._read_back_when_settled(sw, now)

    def _read_back_when_settled(self, sw: str, now: float) -> None:
        """Ask a connecting switch for its tables; one that reconnects, once none of its links is in its
        hold-down (its links are re-admitted first, so that what it is sent is computed with them: until
        then it keeps forwarding with what it holds, and the others avoid it). A switch seen for the first
        time is asked at once (its ports coming up as the fabric starts must not delay its program),
        unless ``READBACK_WINDOW`` read-backs are out: then at a later tick, in turn."""
        sync = self.syncs[sw]
        if sync.requested or (sync.reconnect and self.liveness.settling(sw)) or len(self.asking) >= READBACK_WINDOW:
            return
        self.asking.add(sw)
        reqs = ofmsg.bind(ofmsg.state_requests(), sync.dp)
        for r in reqs:
            sync.dp.set_xid(r)
        sync.asked([r.xid for r in reqs], now)
        for r in reqs:
            sync.dp.send_msg(r)

    def synced(self, sw: str, sync: reconcile.ReadBack, complete: bool = True) -> None:
        """The read-back is in (or timed out): recover what the mode placed, send the difference."""
        del self.syncs[sw]
        self.asking.discard(sw)
        dp = sync.dp
        if complete:
            tor = self.fabric.switches[sw].is_tor
            self.policy.recover(time.monotonic(), sw, reconcile.rehome(sync.flows, tor, self.policy.owned),
                                sync.meters, sync.groups)
            ops = reconcile.connect_ops(sync.held(), self.policy.program(sw), self.policy.owned, tor)
            msgs, how = ofmsg.messages(ops) + [ofmsg.barrier()], sync.summary(ops)
        else:
            program = self.policy.program(sw)
            msgs = ofmsg.program(program)
            how = f"no read-back within {SYNC_TIMEOUT_S:.0f} s: reprogrammed from scratch ({len(program)} entries)"
            self.counters["switch-reprogrammed"] += 1
        for m in ofmsg.bind(msgs, dp):
            dp.send_msg(m)
        self.datapaths[dp.id] = dp
        self.linkwatch.check.watch(time.monotonic(), sw)  # its links are judged from now (it punts probes now)
        self.queues.connected(time.monotonic())  # a switch's queues: soon after it connects
        self._state(sw, "connected")
        self.counters["switch-connects"] += 1
        LOG.info("switch %s (%016x) connected: %s", sw, dp.id, how)
        self.react(self.policy.on_switch(sw, True))
        if not self.syncs:
            self.settle_heap()

    def settle_heap(self) -> None:
        """No read-back is pending: what programming the switches built (at k=48 some 1.2 million objects:
        the mice tables, the partition, what each switch holds) lives on, so the cyclic collector stops
        walking it (``gc.freeze``, after collecting what is garbage now). The heap was frozen at launch only,
        before any switch came, so all of that stayed in the collector's oldest generation, and each
        collection of it would hold the loop (this one took 0.61 s at k=48). Cheap when little was built
        since the last time. What is frozen is never collected as a cycle: an object alive now that later
        becomes cyclic garbage stays (freed objects without cycles go as usual)."""
        t = time.monotonic()
        gc.collect()
        gc.freeze()
        self.collector.frozen()
        self.counters["heap-frozen"] += 1
        LOG.info("no read-back pending: the heap frozen (%d objects) in %.2f s", gc.get_freeze_count(),
                 time.monotonic() - t)

    def switch_down(self, dp) -> None:
        sw = self._switch(dp.id) if dp.id is not None else None
        if sw is not None and self.watching.get(sw) is dp:
            self.linkwatch.check.forget(sw)
        if sw is not None and self.watching.get(sw) is dp:
            del self.watching[sw]
            if not self.master():  # a follower only watched it
                now = time.monotonic()
                self._state(sw, "disconnected")
                self.links_changed(now, self.liveness.switch(now, sw, False))
                return
        if sw is not None and sw in self.syncs and self.syncs[sw].dp is dp:
            del self.syncs[sw]
            self.asking.discard(sw)
            self._state(sw, "disconnected")
        if dp.id is None or self.datapaths.get(dp.id) is not dp:
            return  # never programmed, or an old connection of a switch that has reconnected
        del self.datapaths[dp.id]
        self._state(sw, "disconnected")
        LOG.warning("switch %s (%016x) disconnected", sw, dp.id)
        now = time.monotonic()
        self.executor.switch_down(sw)
        self.react(self.policy.on_switch(sw, False))
        self.links_changed(now, self.liveness.switch(now, sw, False))

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def on_group_desc(self, ev):
        self._read_back(ev.msg, "groups", ofmsg.parse_group)

    @set_ev_cls(ofp_event.EventOFPMeterConfigStatsReply, MAIN_DISPATCHER)
    def on_meter_config(self, ev):
        self._read_back(ev.msg, "meters", ofmsg.parse_meter)

    def _read_back(self, msg, what: str, parse) -> bool:
        """One reply of a connecting switch's read-back; False if it is not one."""
        sw = self._switch(msg.datapath.id)
        sync = self.syncs.get(sw) if sw is not None else None
        if sync is None or msg.xid not in sync.waiting:
            return False
        self.readback_seen = now = time.monotonic()
        if sync.take(msg.xid, what, msg.body, parse, bool(msg.flags & ofproto.OFPMPF_REPLY_MORE), now):
            self.synced(sw, sync)
        return True

    def _readback_tick(self, now: float) -> None:
        """Read-backs waiting their turn are asked; those that never completed are given up on."""
        for sw, sync in list(self.syncs.items()):
            if self.syncs.get(sw) is not sync:  # finished (or replaced) by what this loop did before
                continue
            if not sync.requested:
                self._read_back_when_settled(sw, now)
            elif sync.late(now, self.readback_seen, SYNC_TIMEOUT_S, SYNC_CAP_S) and (
                    now - sync.started > SYNC_CAP_S or not self._behind(sync.dp)):
                self.synced(sw, sync, complete=False)

    def _behind(self, dp) -> bool:
        """Whether what a switch sent may still wait on this side: events not yet handled, or its bytes
        unread. A read-back is then not late (at k=32 a restart's 1,280 read-backs come back faster than
        they are handled); it is reprogrammed from scratch only once the controller has caught up, or
        after ``SYNC_CAP_S``."""
        return not self.events.empty() or bool(ofchannel.unread(getattr(dp, "socket", None)))
