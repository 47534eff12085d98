"""Part of ``FreewayState``: after a controller restart, the elephants and the partition read back from
the switches' entries, meters and groups (nothing is lost with the controller's memory).

``Recovery`` is a mixin over the state ``FreewayState.__init__`` sets.
"""

from __future__ import annotations

import math

from ryu_apps.algorithms.binpack import Placement
from ryu_apps.host import handshake as hs
from ryu_apps.modes.freeway_elephant import ADOPTED_BIT, GEN_MASK, RATELESS_BIT, Elephant, eid_of
from ryu_apps.modes.freeway_mice import POD_BIT, PRIO_MICE, PRIO_MICE_POD, mice_fields
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import Flow, ToGroup
from ryu_apps.programs.mice_table import MiceTable

Link = tuple[str, str]

RECOVER_S = 10.0  # after a restart, the longest the partition waits for the ToRs to be read back


class Recovery:
    """Reading the state back after a restart (see the module's docstring)."""

    def recover(self, now: float, switch: str, flows, meters, groups=()) -> list[Elephant]:
        """Rebuild what Freeway placed from what the switches hold, after a restart.

        - Elephants: entries whose cookie is an elephant's (owner, id and generation), followed hop by
          hop from the source ToR to the destination host; the allocation is the ingress meter's rate
          without its headroom (no meter: the handshake's default for a rate-less announce). Entries of
          an elephant whose path is not complete yet wait for the other switches.
        - The partition: a source ToR's mice entries carry its pairs' low-latency path counts.
        - Mice groups whose weights are within the step stay as they are.
        Returns the elephants completed by this switch's entries."""
        if self._recover_until is None:
            self._recover_until, self._recovery_open = now + RECOVER_S, True
        self._recheck.add(switch)  # what it holds was read back: the next update looks at all of its groups
        t = self.mice[switch] = MiceTable(pipeline.MICE_GROUPS.first, pipeline.MICE_GROUPS.last,
                                          pods=self._pods(switch))
        for g in groups:
            if pipeline.MICE_GROUPS.first <= g.group_id <= pipeline.MICE_GROUPS.last:
                t.hold(g)
        for m in meters:
            if m.meter_id >= pipeline.ELEPHANT_METERS.first:
                self._held_meters[(switch, m.meter_id)] = m
        for f in _held_mice(flows):  # which group each destination's entries point at (pods' entries first: a ToR's own win)
            if f.actions and isinstance(f.actions[0], ToGroup) and f.actions[0].group_id in t.groups:
                idx = mice_fields(f.cookie)[0]
                if f.priority == PRIO_MICE_POD:
                    if idx & POD_BIT and t.pods is not None and idx & ~POD_BIT in t.pods.members:
                        t.hold_pod(idx & ~POD_BIT, f.actions[0].group_id, f.cookie)
                elif idx < len(self._tors):  # (an index past the fabric's ToRs: not wanted, deleted)
                    t.hold_own(idx, f.actions[0].group_id, f.cookie)
        for f in flows:  # a new elephant never takes the id of one whose path is not read back yet
            if eid_of(f.cookie) is not None:
                self._next_eid = max(self._next_eid, eid_of(f.cookie) + 1)
        for m in meters:
            if m.meter_id >= pipeline.ELEPHANT_METERS.first:
                self._next_eid = max(self._next_eid, m.meter_id - pipeline.ELEPHANT_METERS.first + 1)
        self._recover_partition(now, switch, flows)
        done = []
        known = {el.cookie for el in self.elephants.values()}
        for cookie, (paths, _) in self._held.add(switch, flows,
                                                 lambda c: c in known or eid_of(c) in self.elephants).items():
            done.append(self._rebuild(now, cookie, paths))
        return done

    def recovering(self, now: float) -> bool:
        """Whether the partition is still being read back: from the first switch's read-back until every
        ToR's is in, or ``RECOVER_S`` at the latest. Until then mice groups are left as the switches
        hold them and the partition does not step (a switch read back before the ToRs would otherwise
        be sent the default partition's groups, then the recovered one's)."""
        if self._recovery_open and (now >= self._recover_until or self._tors_read >= set(self.fabric.tors())):
            self._recovery_open = False
        return self._recovery_open

    def _recover_partition(self, now: float, switch: str, flows) -> None:
        if not self.fabric.switches[switch].is_tor:
            return
        self._tors_read.add(switch)
        tors = self._tors
        counts = {}
        pods = self._pods(switch)
        for f in _held_mice(flows):  # (a pod's entry: each of its ToRs; a ToR's own entry, after, wins)
            idx, n = mice_fields(f.cookie)
            if not n:
                continue
            if f.priority == PRIO_MICE_POD and idx & POD_BIT:
                for j in pods.members.get(idx & ~POD_BIT, ()) if pods is not None else ():
                    counts[(switch, tors[j])] = n
            elif f.priority == PRIO_MICE and idx < len(tors):
                counts[(switch, tors[idx])] = n
        res = self.partition.restore(now, counts)
        self.counters["partition-pairs-recovered"] += len(counts)
        return res

    def _rate_of_meter(self, kbps: int) -> float:
        """The allocation behind an elephant meter: a rate the meter recomputes to the same ``kbps``
        from, a whole kbit/s when one fits (announced rates are whole kbit/s)."""
        from ryu_apps.programs.isolation import elephant_meter

        mid = (kbps + 0.5) * 1000 / self.iso.meter_headroom
        for whole in (math.floor(mid / 1000) * 1000, math.ceil(mid / 1000) * 1000):  # (headroom 1: mid is k+0.5)
            if elephant_meter(1, whole, self.iso).rate == kbps:
                return float(whole)
        return mid

    def _rebuild(self, now: float, cookie: int, paths: dict) -> Elephant:
        subs = sorted((hs.Subflow(*ft) for ft in paths), key=str)
        src, dst = self.fabric.host_by_ip(subs[0].src), self.fabric.host_by_ip(subs[0].dst)
        eid, gen, adopted = eid_of(cookie), cookie & GEN_MASK, bool(cookie & ADOPTED_BIT)
        meter = self._held_meters.get((src.switch, pipeline.ELEPHANT_METERS.id(eid)))
        rec = self.records.get(eid)
        if rec is not None and sorted(map(tuple, rec.get("subflows", []))) != sorted(
                (s.src, s.dst, s.proto, s.sport, s.dport) for s in subs):
            rec = None  # a record of another elephant that had this id: the switches win
        if rec is not None:  # what the cluster store kept of it: exactly what it was given
            rate = float(rec["rate_bps"])
        elif meter is not None and self.iso is not None:
            rate = self._rate_of_meter(meter.rate)
        else:
            rate = 0.1 * self.capacity_bps((src.name, src.switch)) * len(subs)
        shares = {tuple(ft): float(r) for ft, r in zip(rec["subflows"], rec.get("subflow_rates_bps") or [],
                                                        strict=False)} if rec else {}
        if len(shares) != len(subs) or abs(sum(shares.values()) - rate) > 1e-6 * max(1.0, rate):
            shares = {}  # the switches hold only the total: equal shares of it (a split is not known)
        placements = [Placement(paths[key], shares.get(key, rate / len(subs)), 0.0)
                      for key in ((s.src, s.dst, s.proto, s.sport, s.dport) for s in subs)]
        rateless = bool(cookie & RATELESS_BIT)
        asked = float(rec.get("asked_bps", rate)) if rec else (0.0 if rateless or adopted else rate)
        el = Elephant(eid, gen, src, dst, int(rec["nonce"]) if rec else 0, int(rec["size"]) if rec else 0, rate,
                      tuple(subs), placements, now, adopted, rateless=rateless, asked_bps=asked)
        self.elephants[eid] = el
        for sub in el.subflows:
            self.by_subflow[sub] = eid
        self.alloc.add(eid, placements)
        self._next_eid = max(self._next_eid, eid + 1)
        self.counters["elephant-recovered"] += 1
        return el


def _held_mice(flows) -> list[Flow]:
    """A switch's mice entries as read back, pods' first."""
    return sorted((f for f in flows if f.priority in (PRIO_MICE_POD, PRIO_MICE)
                   and pipeline.owner_of(f.cookie) is pipeline.FREEWAY_MICE), key=lambda f: f.priority)
