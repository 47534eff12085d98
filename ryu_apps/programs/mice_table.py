"""What one switch holds of Freeway's mice forwarding, and the ops that change it (pure).

Mice toward a destination ToR follow a select group over the switch's low-latency next hops toward
that ToR. Most destinations share their next hops: on a k=48 fat-tree a switch's 1,151 remote ToRs
have one or two sets between them. So a switch holds one group per distinct set of next hops (its
*key*: the output ports, sorted), as fabrics' ECMP next-hop groups do, and each destination's
entries point at the group of its set.

When next hops change, what is sent follows from which destinations move:

- every destination of a group moves to one set no other group has: the group is modified in place
  (one message, whatever the number of destinations; the usual change when a link turns low-latency);
- some move: they are pointed at the group of their new set, added first if no group has it;
- a group no destination points at any more is deleted, after the entries that pointed at it
  (deleting a group deletes the entries that use it).

Ops come in that order: groups added or modified, then entries, then groups deleted.

Entries per pod (``Pods``): on a fat-tree most of a switch's destinations in one pod point at the same
group with the same cookie but for the destination's index (a k=48 ToR's 1,151 destinations are 47
pods of 24 and its own pod's 23). Where every destination of a pod that the switch can point
anywhere points somewhere, and more than half of them at one group with one cookie, the switch holds
one entry for the pod's prefix, a band below the destinations' own, and own entries only for the
destinations that differ; otherwise one per destination, as without pods (a destination without a
group must fall through to the bands below, which a pod's entry would hide). The logic above
(groups, which destination points where) is the same either way: a second step renders the
destinations that changed into entries, pod by pod, without a gap: own entries that are needed
first, then the pod's entry (written again, the same match and priority, when its group or cookie
changes: one message for the whole pod), then the own entries the pod's now covers, or the pod's
when it has none left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ryu_apps.openflow.intents import Bucket, DeleteGroup, Group, GroupModify

Key = tuple[int, ...]  # a group's output ports, sorted
DST_BITS = 0xFFFFFFFF  # a mice cookie's low 32 bits name the destination (or the pod); the rest must agree


class Pods:
    """Which destinations a switch may cover with one entry per pod: ``members`` is each pod's
    destinations that the switch can point anywhere (those below it never are), in order; pods with
    fewer than two such destinations are left out (one entry either way)."""

    __slots__ = ("members", "pod_of")

    def __init__(self, members: dict[int, Sequence[int]]):
        self.members = {p: tuple(m) for p, m in members.items() if len(m) >= 2}
        self.pod_of = {j: p for p, m in self.members.items() for j in m}


def key_of(group: Group) -> Key:
    """The sorted output ports of a mice group's buckets."""
    return tuple(sorted(b.actions[0].port for b in group.buckets if b.actions))


def buckets_moved(held: tuple[Bucket, ...], want: tuple[Bucket, ...], step: int) -> bool:
    """Whether a group must be modified: its buckets' actions differ, or a weight moved by ``step``.
    Weights follow the measured link load, which jitters every second; rewriting every group on every
    jitter made switches re-validate their whole flow tables all the time (on k=8, about 100 links
    changed weight every second, each used by some 30 groups)."""
    if held is want:
        return False
    if len(held) != len(want) or [b.actions for b in held] != [b.actions for b in want]:
        return True
    return any(abs(a.weight - b.weight) >= step for a, b in zip(held, want, strict=True))


class MiceTable:
    """One switch's mice groups and, per destination ToR (by its index), the group its entries point
    at and their cookie. Group ids come from ``first``..``last``."""

    __slots__ = ("groups", "keys", "by_key", "members", "gid_of", "cookie", "_first", "_last", "_next", "_free",
                 "_avoid", "pods", "pod_held", "own")

    def __init__(self, first: int, last: int, avoid: Iterable[int] = (), pods: Pods | None = None):
        self.groups: dict[int, Group] = {}  # gid -> the group as the switch holds it
        self.keys: dict[int, Key] = {}  # gid -> its key
        self.by_key: dict[Key, int] = {}  # key -> the gid new destinations with that key point at
        self.members: dict[int, set[int]] = {}  # gid -> destinations whose entries point at it
        self.gid_of: dict[int, int] = {}  # destination -> gid
        self.cookie: dict[int, int] = {}  # destination -> its entries' cookie
        self._first, self._last, self._next = first, last, first
        self._free: list[int] = []
        self._avoid = set(avoid)  # ids the switch may still hold for something else: never given out
        self.pods = pods  # None: one entry per destination, always
        self.pod_held: dict[int, tuple[int, int]] = {}  # pod -> (gid, cookie) of the pod's entry the switch holds
        self.own: set[int] = set()  # (with pods) destinations whose own entries the switch holds

    # ----- building --------------------------------------------------------------------
    def hold(self, group: Group) -> None:
        """Note a group the switch holds (read back, or sent)."""
        gid = group.group_id
        self.groups[gid] = group
        self.members.setdefault(gid, set())
        k = self.keys[gid] = key_of(group)
        self.by_key.setdefault(k, gid)

    def point(self, dst: int, gid: int, cookie: int) -> None:
        """Note that ``dst``'s entries point at ``gid`` with ``cookie``."""
        old = self.gid_of.get(dst)
        if old is not None:
            self.members[old].discard(dst)
        self.gid_of[dst] = gid
        self.cookie[dst] = cookie
        self.members.setdefault(gid, set()).add(dst)

    def hold_pod(self, pod: int, gid: int, cookie: int) -> None:
        """Note that the switch holds ``pod``'s entry (read back): its destinations point at ``gid``, each
        with the pod's cookie for its own index (an own entry read back after it wins)."""
        self.pod_held[pod] = (gid, cookie & ~DST_BITS)
        members = self.pods.members.get(pod, ()) if self.pods is not None else ()
        for j in members:
            if j not in self.own:
                self.point(j, gid, (cookie & ~DST_BITS) | j)

    def hold_own(self, dst: int, gid: int, cookie: int) -> None:
        """Note that the switch holds ``dst``'s own entries (read back)."""
        self.point(dst, gid, cookie)
        self.own.add(dst)

    def _unkey(self, gid: int) -> None:
        k = self.keys[gid]
        if self.by_key.get(k) == gid:
            del self.by_key[k]
            for other, ok in self.keys.items():  # another group with the same key takes its place
                if ok == k and other != gid:
                    self.by_key[k] = other
                    break

    def drop(self, gid: int) -> None:
        """Forget a group (it was deleted on the switch, or is about to be)."""
        self._unkey(gid)
        del self.keys[gid], self.groups[gid]
        self.members.pop(gid, None)
        self._free.append(gid)

    def alloc(self) -> int:
        while self._free:
            gid = self._free.pop()
            if gid not in self.groups and gid not in self._avoid:
                return gid
        while self._next in self.groups or self._next in self._avoid:
            self._next += 1
        if self._next > self._last:
            raise RuntimeError(f"mice groups: no group id left in {self._first}..{self._last}")
        self._next += 1
        return self._next - 1

    # ----- changes ---------------------------------------------------------------------
    def update(self, wants, buckets_of: Callable[[Key], tuple[Bucket, ...]],
               entries: Callable[[int, int, int], Sequence], delete: Callable[[int], object], step: int,
               recheck: Iterable[int] = (), pod_ops: tuple[Callable, Callable] | None = None,
               bulk: Sequence[tuple[Key | None, set[int]]] = (),
               cookie_of: Callable[[list[int]], list[int]] | None = None) -> list:
        """The ops that bring the switch to ``wants``: (destination, key or None for no next hop, cookie)
        for each destination looked at; the others stay as they are. ``bulk`` is more destinations
        looked at, as (key, destinations) with no destination in ``wants``, whose cookies are as the
        switch holds them where they have one (``cookie_of(dsts)`` gives the others'): they are taken a
        group at a time, so a group all of whose destinations gain a next hop costs one look, not one
        per destination. Groups in ``recheck`` (all that the switch holds, if it is None) are modified if
        a weight moved by ``step``.
        ``buckets_of(key)`` gives a key's buckets now, ``entries(dst, gid, cookie)`` a destination's
        entries, ``delete(dst)`` the op that removes them; with pods, ``pod_ops`` is
        (``pod_entries(pod, gid, cookie)``, ``pod_delete(pod)``), the cookie a member's."""
        groups, keys, by_key, members, gid_of, cookies = (self.groups, self.keys, self.by_key, self.members,
                                                          self.gid_of, self.cookie)
        heads: list = []  # groups added or modified
        flows: list = []
        pod_of = self.pods.pod_of if self.pods is not None else {}
        touched: set[int] = set()  # (with pods) destinations of pods whose entries are rendered below
        own = self.own

        def put(dst: int, gid: int, cookie: int) -> None:
            if dst in pod_of:
                touched.add(dst)
            else:
                flows.extend(entries(dst, gid, cookie))
                own.add(dst)

        def remove(dst: int) -> None:
            if dst in pod_of:
                touched.add(dst)
            else:
                flows.append(delete(dst))
                own.discard(dst)
        # old group -> new key -> [(destination, cookie)], and destinations of ``bulk`` (cookies as held)
        moving: dict[int | None, dict[Key | None, list]] = {}
        for key, dsts in bulk:
            new = dsts.difference(gid_of)
            if new and key is not None:
                new_list = sorted(new)
                moving.setdefault(None, {})[key] = [list(zip(new_list, cookie_of(new_list), strict=True)), set()]
            if len(new) == len(dsts):
                continue
            for gid, mem in members.items():
                if keys[gid] == key or not mem:
                    continue
                inter = mem & dsts
                if inter:
                    moving.setdefault(gid, {})[key] = [[], inter]
        full = recheck is None  # (a full look also gathers destinations from groups that share a key)
        for dst, key, cookie in wants:
            gid = gid_of.get(dst)
            if gid is not None and keys[gid] == key and (not full or by_key[key] == gid):
                # same next hops: its entries change only with the cookie
                if cookies[dst] != cookie:
                    cookies[dst] = cookie
                    put(dst, gid, cookie)
                continue
            if gid is None and key is None:
                continue
            by = moving.get(gid)
            if by is None:
                by = moving[gid] = {}
            got = by.get(key)
            if got is None:
                by[key] = [[(dst, cookie)], ()]
            else:
                got[0].append((dst, cookie))
        fresh: set[int] = set()  # groups sent with their weights as of now
        if None in moving:  # destinations without a group last: a group changed in place may take them
            moving[None] = moving.pop(None)
        for old, by in moving.items():
            for key, (listed, held) in by.items():
                gid = by_key.get(key) if key is not None else None
                if (key is not None and gid is None and old is not None and len(by) == 1
                        and len(listed) + len(held) == len(members[old])):
                    # every destination of the group moves to a set no group has: the group changes in place
                    self._unkey(old)
                    keys[old], by_key[key] = key, old
                    g = groups[old] = Group(old, buckets_of(key))
                    heads.append(GroupModify(g))
                    fresh.add(old)
                    for dst, cookie in listed:
                        if cookies[dst] != cookie:
                            cookies[dst] = cookie
                            put(dst, old, cookie)
                    continue
                dsts = listed + [(dst, cookies[dst]) for dst in sorted(held)] if held else listed
                if key is None:  # no next hop left: the entries go
                    for dst, _ in dsts:
                        remove(dst)
                        members[old].discard(dst)
                        del gid_of[dst], cookies[dst]
                    continue
                if gid is None:
                    gid = self.alloc()
                    g = groups[gid] = Group(gid, buckets_of(key))
                    keys[gid], by_key[key], members[gid] = key, gid, set()
                    heads.append(g)
                    fresh.add(gid)
                into = members[gid]
                for dst, cookie in dsts:
                    if old is not None:
                        members[old].discard(dst)
                    into.add(dst)
                    gid_of[dst], cookies[dst] = gid, cookie
                    put(dst, gid, cookie)
        if self.pods is not None and (touched or full):
            flows += self.render(touched, entries, delete, *pod_ops, every=full)
        gone = []
        if recheck is None:  # a full look: groups no destination points at go too
            freed = [gid for gid in sorted(groups) if not members[gid]]
        else:  # (judged after every move: a group emptied early may have been filled again)
            freed = [old for old in moving if old is not None and not members[old]]
        for old in freed:
            gone.append(DeleteGroup(old))
            self.drop(old)
        for gid in sorted(groups) if recheck is None else sorted(set(recheck)):
            if gid in groups and gid not in fresh:
                want = buckets_of(keys[gid])
                if buckets_moved(groups[gid].buckets, want, step):
                    g = groups[gid] = Group(gid, want)
                    heads.append(GroupModify(g))
        return heads + flows + gone

    def render(self, touched: set[int], entries, delete, pod_entries, pod_delete, every: bool = False) -> list:
        """(With pods) the entries of the pods of ``touched`` (of every pod if ``every``) as their
        destinations point now. A pod whose destinations all point somewhere, more than half of them at
        one group with one cookie (but for their index), gets one entry for that; the others keep their
        own. Otherwise every destination has its own (one without a group, none). A destination's own
        entries are written when it changed (``touched``) or the switch does not hold them; what replaces
        an entry is written before it goes."""
        pods, gid_of, cookies, own, held = self.pods, self.gid_of, self.cookie, self.own, self.pod_held
        if every:
            which = list(pods.members)
        else:
            which = sorted({pods.pod_of[j] for j in touched if j in pods.pod_of})
        out: list = []
        for p in which:
            mem = pods.members[p]
            vals = [(gid_of[j], cookies[j] & ~DST_BITS) if j in gid_of else None for j in mem]
            want = None
            if None not in vals:
                had = held.get(p)
                if had is not None and 2 * vals.count(had) > len(mem):  # (usually: the pod's stays)
                    want = had
                else:
                    counts: dict[tuple[int, int], int] = {}
                    for v in vals:
                        counts[v] = counts.get(v, 0) + 1
                    top = max(counts, key=counts.__getitem__)
                    if 2 * counts[top] > len(mem):
                        want = top
            for j, v in zip(mem, vals, strict=True):  # own entries first
                if v is not None and v != want and (j not in own or j in touched):
                    out.extend(entries(j, v[0], cookies[j]))
                    own.add(j)
            had = held.get(p)
            if want is not None and had != want:  # then the pod's
                out.extend(pod_entries(p, want[0], want[1]))
                held[p] = want
            for j, v in zip(mem, vals, strict=True):  # then what they replace
                if j in own and (v is None or v == want):
                    out.append(delete(j))
                    own.discard(j)
            if want is None and had is not None:
                out.append(pod_delete(p))
                del held[p]
        return out

    def render_all(self, entries, pod_entries) -> list:
        """A fresh table's entries (nothing held yet): every destination's, by pod where they agree."""
        out: list = []
        pod_of = self.pods.pod_of if self.pods is not None else {}
        for j in sorted(self.gid_of):
            if j not in pod_of:
                out.extend(entries(j, self.gid_of[j], self.cookie[j]))
                self.own.add(j)
        if self.pods is not None:
            out += self.render(set(), entries, lambda j: None, pod_entries, lambda p: None, every=True)
        return out
