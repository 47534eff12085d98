"""The controller app in a cluster of controllers (part of ``ControllerApp``).

The election and the roles are ``control.handover``'s and ``control.cluster``'s; this carries out what
they decide: the switches' roles, taking over (the store's records, then every switch read back), standing
down, and writing a confirmed install's record before its answer.
"""

from __future__ import annotations

import logging
import time

from ryu_apps import modes
from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import hub
from ryu_apps.openflow.txn import Failure, Outcome, Tracker

LOG = logging.getLogger("freeway")
FOLLOWER_LOOK_S = 0.25  # how often a cluster's follower looks for a lapsed leader


class ClusterMixin:
    """Part of ``ControllerApp`` (see the module's docstring)."""

    def _resign(self) -> None:
        """A clean stop (SIGTERM) hands the leadership on at once (a crash: after the lease)."""
        if self.master():
            LOG.info("cluster: %s resigns", self.handover.state.node)
            self.member.elector.resign()

    def master(self) -> bool:
        """Whether this controller programs the switches: a lone one always, a cluster's leader only."""
        return self.handover is None or self.handover.leads()

    def _programming(self) -> bool:
        return bool(self.datapaths or self.syncs)

    def _send_role(self, dp) -> None:
        role = self.handover.role()
        if role is not None:
            dp.send_msg(ofmsg.bind([ofmsg.role_request(*role)], dp)[0])

    def _cluster_loop(self):
        """The election (etcd is called in an OS thread); what changed is carried out here."""
        while self.is_active:
            try:
                for step in self.member.step(time.monotonic(), time.time(), self._programming()):
                    self.carry_out(step)
                if self.master():
                    self.member.sync(self.policy.records(time.monotonic()))
            except Exception:  # a bug here must not stop the election
                LOG.exception("cluster loop failed")
            hub.sleep(self.member.pause(FOLLOWER_LOOK_S))

    def carry_out(self, step) -> None:
        """What a ``handover.Step`` says: records, refusals, stopping, taking over, the switches' roles."""
        for rec in step.records:
            self.record(rec)
        if step.refusing is not None:
            self.policy.refusing = step.refusing
        if step.stop:
            self._stop_programming(step.stop)
        if step.take_over:
            self._take_over()
        elif step.roles:
            for dp in self.watching.values():
                self._send_role(dp)

    def _fresh_policy(self) -> None:
        refusing = self.policy.refusing
        self.policy = modes.make(self.cfg, self.fabric)
        self.policy.refusing = refusing
        self.executor.tracker = Tracker(self.executor.tracker.timeout_s)  # (the open ones are dropped)
        self.surface.forget()

    def _take_over(self) -> None:
        """Elected: what the switches cannot tell comes from the store; then every connected switch is read
        back and sent only the difference."""
        records = self.member.read_records()
        self._fresh_policy()
        self.reset_linkcheck(time.monotonic())
        self.policy.take_records(records)
        for sw, dp in list(self.watching.items()):
            self._send_role(dp)
            self._adopt(sw, dp)
        LOG.info("cluster: taking over %d connected switches (%d elephant records)", len(self.watching),
                 len(records))

    def _stale(self, why: str) -> None:
        self.carry_out(self.handover.refused(why, self._programming()))

    def _stop_programming(self, why: str) -> None:
        LOG.warning("cluster: %s stops programming the switches: %s", self.handover.state.node, why)
        self.datapaths.clear()
        self.syncs.clear()
        self._fresh_policy()
        self.reset_linkcheck(time.monotonic())
        for sw in self.watching:
            self._state(sw, "standby")

    def _store_then_done(self, o: Outcome) -> None:
        """Write what a confirmed install's answer relies on, then answer; a store that does not take it
        undoes the install (the answer becomes a NACK that says why)."""
        why = self.member.put_first(o.txn.store)
        if why:
            LOG.error("%s: the cluster store did not take its record: %s", o.txn.name, why)
            self.executor.undo(o, Failure(f"cluster store (etcd) unreachable, not placed: {why}"[:180]))
            return
        self.executor.done(o)
