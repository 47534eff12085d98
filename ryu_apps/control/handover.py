"""What a cluster member does when its role changes, and which records it keeps in the store (pure).

The election itself is ``cluster.Elector``; this is what follows from it. Events in (the elector's
``("leader", generation)``, ``("follower", leader, generation)``, ``("store", ok, reason)``, and a switch
refusing us as master), plans out (``Step``): the decision record, whether to take over the switches
(read the records back, start programming every connected switch), to stop programming them, to tell
them their role again, and why new announces are refused. ``writes`` says which elephant records to put
and delete so that the store holds what the mode's ``Policy.records`` says. Nothing here calls etcd, a
switch or the clock: the app does what a ``Step`` says.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

LOG = logging.getLogger("freeway")
RECORDS = "elephants/"  # the store's prefix of the elephant records


@dataclass
class Step:
    """What the app does after one cluster event."""

    records: list[dict] = field(default_factory=list)  # decision records
    take_over: bool = False  # read the records back, then program every connected switch
    stop: str = ""  # stop programming the switches, and why
    roles: bool = False  # tell every connected switch its role again
    refusing: str | None = None  # why new announces are refused from now ('' = they are not); None: unchanged


class Handover:
    """One member's side of the handover, on the elector's ``ClusterState``."""

    def __init__(self, state, name: str):
        self.state = state
        self.name = name
        self.stored: dict[int, dict] = {}  # the elephant records this leader knows its store holds

    def leads(self) -> bool:
        return self.state.role == "leader"

    def role(self) -> tuple[bool, int] | None:
        """(master?, generation id) to send a switch; None while no leader is known (nothing to claim:
        the switch keeps its default role)."""
        st = self.state
        if st.role == "candidate" and not st.generation:
            return None
        return self.leads(), st.generation

    def event(self, ev: tuple, programming: bool) -> Step:
        """One of the elector's events; ``programming``: this member is programming switches now."""
        st = self.state
        if ev[0] == "leader":
            LOG.warning("cluster: %s is the leader (generation %d)", st.node, ev[1])
            rec = {"type": "cluster", "event": "leader", "node": st.node, "generation": ev[1]}
            # still programming (elected again after the store was away): only the roles are told again
            return Step([rec], take_over=not programming, roles=programming)
        if ev[0] == "follower":
            leader, generation = ev[1], ev[2]
            LOG.info("cluster: %s follows %s (generation %d)", st.node, leader, generation)
            rec = {"type": "cluster", "event": "follower", "node": st.node, "leader": leader, "generation": generation}
            return Step([rec], stop=f"{leader} leads now" if programming else "", roles=True)
        if ev[0] == "store":
            ok, reason = ev[1], ev[2]
            (LOG.info if ok else LOG.error)("cluster: the store is %s%s", "back" if ok else "unreachable",
                                            "" if ok else f" ({reason}); new announces are refused")
            refusing = "" if ok else f"the cluster store (etcd) is unreachable, nothing new is placed: {reason}"[:190]
            return Step([{"type": "cluster", "event": "store", "ok": ok, "reason": reason, "node": st.node}],
                        refusing=refusing)
        raise ValueError(f"unknown cluster event {ev!r}")

    def refused(self, why: str, programming: bool) -> Step:
        """A switch says another controller is master with a newer generation: stop at once (the
        election catches up at its next step)."""
        if not programming:
            return Step()
        self.state.role = "candidate"
        return Step(stop=why)

    def taken_over(self, held: dict[str, dict]) -> dict[int, dict]:
        """The records read back at a take-over (key -> value): by elephant id, and known to be stored."""
        records = {int(k.rpartition("/")[2]): v for k, v in held.items() if k.rpartition("/")[2].isdigit()}
        self.stored = dict(records)
        return records

    def writes(self, want: tuple[dict[int, dict], set[int]] | None) -> tuple[dict[int, dict], list[int]]:
        """(records to put, ids to delete) so that the store holds ``want`` (``Policy.records``: the
        records, and the ids still unconfirmed, neither written nor deleted). Nothing while the mode is
        rebuilding them (None)."""
        if want is None:
            return {}, []
        records, pending = want
        puts = {eid: rec for eid, rec in records.items() if self.stored.get(eid) != rec}
        gone = [eid for eid in self.stored if eid not in records and eid not in pending]
        return puts, gone

    def written(self, puts: dict[int, dict], gone=()) -> None:
        """What the store took."""
        self.stored.update(puts)
        for eid in gone:
            self.stored.pop(eid, None)

    @staticmethod
    def key(eid: int) -> str:
        return f"{RECORDS}{eid}"

    def doc(self) -> dict:
        st = self.state
        return {"node": st.node, "role": st.role, "leader": st.leader, "generation": st.generation,
                "since": round(st.since, 3) if st.since else None, "store_ok": st.store_ok,
                "store_error": st.store_error or None, "name": self.name}
