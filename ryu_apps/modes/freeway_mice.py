"""Part of ``FreewayState``: the mice program. Every switch's fixed entries, its mice select groups (one per
destination ToR or pod, over its low-latency next hops, weighted toward the less loaded links) and the
entries into them; the updates each period brings; and the cookies that let a restarted controller read
the partition back from the switches.

``MiceProgram`` is a mixin: it reads the partition, the loads (``Loads``) and the tables
``FreewayState.__init__`` sets.
"""

from __future__ import annotations

from itertools import repeat

from ryu_apps.host import handshake as hs
from ryu_apps.openflow import pipeline
from ryu_apps.openflow.intents import Bucket, DeleteFlows, Flow, Group, Output, ToController, ToGroup, match
from ryu_apps.programs.forwarding import ETH_IPV4, base_program, punt_meters
from ryu_apps.programs.mice_table import DST_BITS, Key, MiceTable, Pods, buckets_moved

Link = tuple[str, str]
PRIO_MICE = pipeline.prio("mice")  # above ECMP, below downward prefixes
PRIO_MICE_POD = pipeline.prio("mice-pod")  # a pod's prefix, below its ToRs' own mice entries
PRIO_SERVICE_DROP = pipeline.prio("service-drop")
PRIO_HANDSHAKE = pipeline.prio("handshake")
ENTRY_MEMO_MAX = 200_000  # mice entries kept built (cleared beyond)


def mice_cookie(tor_index: int, n_lol: int = 0) -> int:
    """Mice entries toward one destination ToR; at a source ToR they also carry the pair's number of
    low-latency paths (so that a restarted controller reads the partition back from the switches)."""
    return pipeline.cookie(pipeline.FREEWAY_MICE, (n_lol & 0xFFFF) << 32 | tor_index)


MICE_COOKIE_MASK = pipeline.cookie(pipeline.FREEWAY_MICE, 0xFFFFFFFF) | (0xFF << pipeline.OWNER_SHIFT)


def mice_fields(cookie: int) -> tuple[int, int]:
    """(destination ToR index, low-latency path count) of a mice entry's cookie (a pod's entry:
    ``POD_BIT`` | the pod's number)."""
    return cookie & 0xFFFFFFFF, (cookie >> 32) & 0xFFFF


POD_BIT = 1 << 31  # in a mice cookie's destination field: the entry is a pod's


def mice_pod_cookie(pod: int, n_lol: int = 0) -> int:
    """A pod's mice entry (``mice_cookie`` with ``POD_BIT`` and the pod's number for the ToR's index)."""
    return mice_cookie(POD_BIT | pod, n_lol)




class MiceProgram:
    """The switch programs of ``FreewayState`` (see the module's docstring)."""

    def fresh_mice(self, switch: str, dsts=None) -> dict[str, tuple[Bucket, ...]]:
        """Per destination ToR (all, or ``dsts``), computed afresh: the buckets of the select group its
        mice follow, over this switch's LOL next hops in port order, weighted toward the less loaded
        links (weights 1..10, so small load changes change nothing)."""
        buckets_of = self._buckets_of(switch)
        return {dst: buckets_of(key) for dst, key in self._fresh_keys(switch, dsts).items()}

    def _fresh_keys(self, switch: str, dsts=None) -> dict[str, Key]:
        """Per destination ToR with a LOL next hop from ``switch``: its group's key (the ports, sorted)."""
        out, keys = {}, {}
        every = self.partition.mice_next_hops_all(switch) if dsts is None else None  # (by sets of ToRs)
        for dst in self._tors if dsts is None else dsts:
            hops = tuple(every.get(dst, ()) if every is not None else self.partition.mice_next_hops(switch, dst))
            if hops:
                key = keys.get(hops)
                if key is None:
                    key = keys[hops] = tuple(sorted(self.fabric.port_to(switch, n) for n in hops))
                out[dst] = key
        return out

    def _buckets_of(self, switch: str):
        """key -> a group's buckets now, at ``switch`` (each key's once per call of this)."""
        peers = self._up_port_peer.get(switch)
        if peers is None:
            peers = self._up_port_peer[switch] = {self.fabric.port_to(switch, n): n
                                                  for n in self.fabric.up_neighbors(switch)}
        weight, memo = self._weight, {}

        def buckets_of(key: Key) -> tuple[Bucket, ...]:
            got = memo.get(key)
            if got is None:  # (a port that is no up link, read back from a switch: its group is not wanted)
                got = memo[key] = tuple(Bucket((Output(p),), weight((switch, peers[p])) if p in peers else 1)
                                        for p in key)
            return got
        return buckets_of

    def _table(self, switch: str) -> MiceTable:
        t = self.mice.get(switch)
        if t is None:
            t = self.mice[switch] = MiceTable(pipeline.MICE_GROUPS.first, pipeline.MICE_GROUPS.last,
                                              pods=self._pods(switch))
        return t

    def _pods(self, switch: str) -> Pods | None:
        """The pods whose mice entries ``switch`` may hold as one (``mice_prefixes`` pod; a fat-tree):
        each pod's ToRs but those below the switch, which mice reach by the prefix routes."""
        if not self._pod_js:
            return None
        got = self._pods_at.get(switch)
        if got is None:
            below, tors = self._below[switch], self._tors
            got = self._pods_at[switch] = Pods({p: [j for j in js if tors[j] not in below]
                                                for p, js in self._pod_js.items()})
        return got

    def mice_dsts(self, switch: str, cookie: int) -> tuple[int, ...]:
        """The destination ToRs (indices) a mice entry of ``switch`` covers: its own, or a pod's that
        the switch may cover as one (an entry of a ToR of its own pod wins over the pod's)."""
        idx = mice_fields(cookie)[0]
        if not idx & POD_BIT:
            return (idx,)
        pods = self._pods(switch)
        return pods.members.get(idx & ~POD_BIT, ()) if pods is not None else ()

    def _pod_ops(self, switch: str):
        """(pod, gid, a member's cookie) -> the pod's entries; pod -> the op that removes them."""
        table = pipeline.table_for(PRIO_MICE_POD, self.fabric.switches[switch].is_tor)
        matches, memo = self._pod_match, self._entry_memo

        def entries(p: int, gid: int, cookie: int) -> tuple[Flow, ...]:
            cookie = (cookie & ~DST_BITS) | POD_BIT | p
            key = (table, -1 - p, gid, cookie)
            got = memo.get(key)
            if got is None:
                got = memo[key] = tuple(Flow(PRIO_MICE_POD, m, (ToGroup(gid),), table_id=table, cookie=cookie)
                                        for m in matches[p])
            return got

        def delete(p: int) -> DeleteFlows:
            return DeleteFlows(mice_pod_cookie(p), MICE_COOKIE_MASK)
        return entries, delete

    def _mice_entries(self, switch: str):
        """(destination index, gid, cookie) -> the entries sending mice for that ToR to the group, in the
        mice band's table."""
        table = pipeline.table_for(PRIO_MICE, self.fabric.switches[switch].is_tor)
        tors, matches, memo = self._tors, self._tor_match, self._entry_memo
        if len(memo) > ENTRY_MEMO_MAX:
            memo.clear()

        def entries(j: int, gid: int, cookie: int) -> tuple[Flow, ...]:
            # (the same entries recur at every switch: group ids are given out in the same order, and most
            # pairs have the same path count; a restart at k=48 builds 1.3 million of them)
            key = (table, j, gid, cookie)
            got = memo.get(key)
            if got is None:
                got = memo[key] = tuple(Flow(PRIO_MICE, m, (ToGroup(gid),), table_id=table, cookie=cookie)
                                        for m in matches[tors[j]])
            return got
        return entries

    @staticmethod
    def _mice_delete(j: int) -> DeleteFlows:
        return DeleteFlows(mice_cookie(j), MICE_COOKIE_MASK)

    def _weight(self, link: Link) -> int:
        """A mice bucket's weight on an up link: 10 idle, down to 1 at 90% busy or more."""
        return max(1, round(10 * (1 - min(0.9, self.link_util.get(link, 0.0)))))

    def switch_program(self, switch: str) -> tuple[list[Group], list[Flow], list]:
        """Freeway's part of what a switch holds, with no link down, in one table (for tests of the core
        alone: the policy places a ToR's entries in its tables, ``forwarding.tor_tables``)."""
        groups, flows = base_program(self.fabric, switch)
        dyn = self.dynamic_program(switch)
        groups += [i for i in dyn if isinstance(i, Group)]
        flows += [i for i in dyn if isinstance(i, Flow)]
        fixed = self.fixed_entries(switch)
        flows += [i for i in fixed if isinstance(i, Flow)]
        extra = punt_meters(self.fabric, switch, self.cfg.punt_pps, self.cfg.punt_burst) + [
            i for i in fixed + dyn if not isinstance(i, (Group, Flow))]
        return groups, flows, extra

    def fixed_entries(self, switch: str) -> list:
        """What Freeway adds to base forwarding whatever the traffic: at a ToR, each host's handshakes
        punted through its port's punt meter (``forwarding.punt_meters``), and a drop for anything else
        sent to the service address."""
        if not self.fabric.switches[switch].is_tor:
            return []
        return [Flow(PRIO_HANDSHAKE, match(eth_type=ETH_IPV4, ip_proto=17, ipv4_dst=hs.SERVICE_IP,
                                           udp_dst=hs.SERVICE_PORT, in_port=h.port), (ToController(),),
                     meter_id=pipeline.host_punt_meter(self.fabric.host_slot(h))) for h in self.fabric.hosts_on(switch)] + [
            Flow(PRIO_SERVICE_DROP, match(eth_type=ETH_IPV4, ipv4_dst=hs.SERVICE_IP))]

    def dynamic_program(self, switch: str) -> list:
        """What the traffic put on a switch: its mice groups and entries, and the placed elephants'
        meters and entries. The switch is (re)programmed with these: they are what it holds now."""
        out: list = []
        self._recheck.add(switch)  # its groups are written here: the next update looks at all of them
        held = self.mice.pop(switch, None)  # what it holds: a group is kept where one has the same next hops
        t = self.mice[switch] = MiceTable(pipeline.MICE_GROUPS.first, pipeline.MICE_GROUPS.last,
                                          avoid=held.groups if held is not None else (), pods=self._pods(switch))
        buckets_of, entries = self._buckets_of(switch), self._mice_entries(switch)
        for dst, key in self._fresh_keys(switch).items():
            j = self._tor_index[dst]
            gid = t.by_key.get(key)
            hid = held.gid_of.get(j) if self._recovery_open and held is not None else None
            if hid is not None and hid in held.groups:
                # the partition read back so far lacks the ToRs not read back yet: the destination keeps
                # the group it points at, whatever its next hops (the first full look moves it)
                gid = hid
                if gid not in t.groups:
                    t.hold(held.groups[gid])
                    out.append(held.groups[gid])
            elif gid is None:
                same = held.by_key.get(key) if held is not None else None  # a held group with these next hops
                g = held.groups[same] if same is not None else None
                if g is None:
                    g = Group(t.alloc(), buckets_of(key))
                elif not self._recovery_open and buckets_moved(g.buckets, buckets_of(key), self.cfg.mice_weight_step):
                    g = Group(same, buckets_of(key))  # (what it holds is kept if close enough, or while the
                t.hold(g)  # partition is still being read back)
                out.append(g)
                gid = g.group_id
            t.point(j, gid, self._mice_cookie(switch, dst))
        if self._recovery_open and held is not None:  # what the partition read back so far does not want
            for j, gid in sorted(held.gid_of.items()):  # yet: kept as held
                if j in t.gid_of or gid not in held.groups:
                    continue
                if gid not in t.groups:
                    t.hold(held.groups[gid])
                    out.append(held.groups[gid])
                t.point(j, gid, held.cookie[j])
        out += t.render_all(entries, self._pod_ops(switch)[0])
        for el in self.elephants.values():
            meter = self.meter_of(el)
            if meter is not None and el.src.switch == switch:
                out.append(meter)
            for pl, sub in zip(el.placements, el.subflows, strict=True):
                for sw, intent in self._entries(el, pl.path, sub):
                    if sw == switch:
                        out.append(intent)
        return out

    def _mice_cookie(self, switch: str, dst: str) -> int:
        pair = (switch, dst)
        n = self.partition.n_lol(pair) if self.fabric.switches[switch].is_tor and self.partition.is_partitioned(
            pair) else 0
        return mice_cookie(self._tor_index[dst], n)

    def mice_updates(self) -> dict[str, list]:
        """What the switches need for their mice groups to match the partition (``MiceTable.update``:
        one group per distinct set of low-latency next hops at each switch, modified in place when all
        its destinations move together, and each destination ToR's entries pointing at the group of its
        set; the entries go where a switch lost its last next hop toward a ToR).

        Only what may have changed is looked at: the (switch, ToR) whose next hops may differ since the
        last call (``MiceRoutes.changed``), the pairs whose path count changed, and the groups using an
        up link whose weight moved by ``mice_weight_step`` since that switch's groups last followed it,
        and every group of a switch programmed or read back outside these updates (once no read-back
        is open). The first call, and the first after the step changed, look at everything."""
        touched, pairs = self.partition.take_changes()
        recheck: dict[str, set[int]] = {}
        routed: dict[str, int] = {}  # switch -> ToRs (bits) whose next hops differ
        if self._routes is None or self._step_seen != self.cfg.mice_weight_step:
            self._routes = self.partition.mice_routes()
            self._step_seen = self.cfg.mice_weight_step
            dirty: dict = dict.fromkeys(self.fabric.switches)
            for ln in self._up_links:
                self._follow_weight(ln)
        else:
            routed = self._routes.changed(touched)
            dirty = {}
            for s, d in pairs:
                dirty.setdefault(s, set()).add(d)
            recheck = self._weight_moves()
            for sw in recheck:
                dirty.setdefault(sw, set())
            if not self._recovery_open:  # (while switches are read back, they are kept as held)
                for sw in self._recheck & set(self.fabric.switches):
                    dirty[sw] = None
                    for n in self._routes.up[sw]:
                        self._follow_weight((sw, n))
                self._recheck.clear()
        out: dict[str, list] = {}
        for sw in self.fabric.switches:  # in the fabric's order, each switch's ToRs in theirs
            if sw in dirty or sw in routed:
                ops = self._mice_ops(sw, dirty.get(sw, set()), recheck.get(sw, ()), routed.get(sw, 0))
                if ops:
                    out[sw] = ops
        return out

    def _follow_weight(self, link: Link) -> None:
        """The link's groups now follow its current weight (the reference a later move is measured from)."""
        w = self._weight(link)
        if w == 10:
            self._wref.pop(link, None)
        else:
            self._wref[link] = w
        if self._wref_arr is not None and link in self._up_pos:
            self._wref_arr[self._up_pos[link]] = w

    def _weights_moved(self, step: int) -> list[Link]:
        """The up links whose ``_weight`` is ``step`` or more away from the one their groups follow: every
        up link each period (55,296 at k=48), so in arrays, with ``_weight``'s arithmetic (the same float
        operations, round half to even)."""
        import numpy as np

        up, n = self._up_links, len(self._up_links)
        loads = self.partition.loads_array(self.link_util)  # read once this period, shared with the step
        if loads is not None:
            if self._up_in_loads is None:
                self._up_in_loads = np.array([loads[1][ln] for ln in up], dtype=np.int64)
            u = loads[0][self._up_in_loads]
        else:
            u = np.fromiter(map(self.link_util.get, up, repeat(0.0)), dtype=np.float64, count=n)
        if self._wref_arr is None:
            self._wref_arr = np.fromiter(map(self._wref.get, up, repeat(10)), dtype=np.float64, count=n)
        w = np.maximum(np.rint(10 * (1 - np.where(u < 0.9, u, 0.9))), 1)
        return [up[i] for i in np.flatnonzero(np.abs(w - self._wref_arr) >= step).tolist()]

    def _weight_moves(self) -> dict[str, set[int]]:
        """Switch -> its mice groups that use an up link whose weight moved by the step."""
        moved: dict[str, set[int]] = {}
        if self.link_util is not self._weights_seen:  # (the same measurements as last time: nothing moved)
            for ln in self._weights_moved(self.cfg.mice_weight_step):
                self._follow_weight(ln)
                moved.setdefault(ln[0], set()).add(self.fabric.port_to(*ln))
            self._weights_seen = self.link_util
        out: dict[str, set[int]] = {}
        for sw, ports in moved.items():
            t = self.mice.get(sw)
            gids = {gid for gid, key in t.keys.items() if not ports.isdisjoint(key)} if t is not None else ()
            if gids:
                out[sw] = gids
        return out

    def _mice_ops(self, sw: str, dsts, recheck=(), routed: int = 0) -> list:
        """The mice ops of one switch toward ``dsts`` (None: every ToR, and every group's weights) and the
        ToRs of ``routed`` (bits: their next hops changed, their path counts did not), and for the groups
        in ``recheck``. ``dsts`` are looked at one by one (a busy k=48 period: some 30,000 (switch, ToR),
        so the keys and cookies are built inline); ``routed`` by the sets of ToRs that share their next
        hops (a link cut at k=48: every ToR's 1,151 destinations gain a next hop, one group each)."""
        index = self._tor_index  # (the positions in ``fabric.tors()``, as the routes number them)
        routes, port_to = self._routes, self.fabric.port_to
        if dsts is None:
            js, routed = list(range(len(self._tors))), 0
        else:
            js = sorted(index[d] for d in dsts)
            if routed and js:
                routed &= ~routes.bits(js)
        memo: dict[tuple, Key] = {}  # next hops -> key (many destinations share their next hops)
        hops_of = routes.next_hops_all(sw) if dsts is None else routes.next_hops_many(sw, js)
        keys = [(memo[h] if h in memo else memo.setdefault(h, tuple(sorted(port_to(sw, n) for n in h))))
                if h else None for h in hops_of]
        cookie_of = self._cookies_of(sw)
        wants = zip(js, keys, cookie_of(js), strict=True)
        bulk = []
        if routed:
            for hops, bits in routes.classes(sw, routed):
                bulk.append((tuple(sorted(port_to(sw, n) for n in hops)) if hops else None,
                             set(routes.indices(bits))))
        t = self._table(sw)
        return t.update(wants, self._buckets_of(sw), self._mice_entries(sw), self._mice_delete,
                        self.cfg.mice_weight_step, None if dsts is None else recheck,
                        self._pod_ops(sw) if t.pods is not None else None, bulk, cookie_of)

    def _cookies_of(self, sw: str):
        """A function giving the mice cookies of ``sw``'s entries toward ToR positions ``js`` (a ToR's
        carry the pair's path count: n_min but for a few)."""
        base = mice_cookie(0)
        if not self.fabric.switches[sw].is_tor:
            return lambda js: [base | j for j in js]
        part, grp, index = self.partition, self._group_of_j, self._tor_index
        mine, gs, n_min = part.n_from.get(sw), grp[index[sw]], (part.n_min & 0xFFFF) << 32

        def cookies(js) -> list[int]:
            out = [base | j if grp[j] == gs else base | j | n_min for j in js]
            if mine:
                at = {j: i for i, j in enumerate(js)}
                for d, n in mine.items():
                    i = at.get(index[d])
                    if i is not None and part.is_partitioned((sw, d)):
                        out[i] = base | index[d] | (n & 0xFFFF) << 32
            return out
        return cookies
