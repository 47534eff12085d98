"""Which fabric links are up: one model fed by every source the controller has (pure).

Inputs: port status messages, the port description a switch sends when it
connects (ports that are already down), a switch disconnecting (all its
links down), sFlow's interface status, and LLDP (a link not heard, or
heard wired elsewhere, is down). A directed link ``(a, b)`` is up
when both ends' ports are up and both switches are connected; a link is down
in both directions as soon as either end says so.

Only authenticated sources take a link down: OpenFlow (the switch itself, on
its TLS channel) and the LLDP check (its probes carry an HMAC). sFlow is
unauthenticated telemetry that anyone who reaches the collector can forge
(issue 60: forged "down" counters cut 30 of 192 host pairs apart): a port it
says is down is only a suspect (``Change.verify``), whose state the app then
asks of its switch over OpenFlow; the answer decides.

Going down takes effect at once. Coming back does not: a link is re-admitted
only after it has stayed up for ``hold_down_s`` (a flapping cable must not
churn the fabric). Before a switch has ever connected its links are taken as
up, so a controller that starts against a running fabric does not tear its
forwarding down while the switches connect one by one.

``dead()`` is what every policy reads; ``version`` changes whenever it does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topology.fabric import Fabric

Link = tuple[str, str]


@dataclass
class Change:
    """What changed in one call: links (both directions) that went down or were re-admitted."""

    down: set[Link] = field(default_factory=set)
    up: set[Link] = field(default_factory=set)
    verify: set[tuple[str, int]] = field(default_factory=set)  # ports to ask their switch about (sFlow's suspects)

    def __bool__(self) -> bool:
        return bool(self.down or self.up)


class Liveness:
    def __init__(self, fabric: Fabric, hold_down_s: float = 2.0):
        self.fabric = fabric
        self.hold_down_s = hold_down_s
        self._ends: dict[tuple[str, int], Link] = {}  # (switch, port) -> the fabric link it is one end of
        for a in fabric.switches:
            for b in fabric.neighbors(a):
                if b in fabric.switches:
                    self._ends[(a, fabric.port_to(a, b))] = (a, b)
        self.port_down: set[tuple[str, int]] = set()  # ports OpenFlow reports down
        self.sflow_down: set[tuple[str, int]] = set()  # ports sFlow reports down: suspects, not faults
        self.switch_down: set[str] = set()
        self.lldp_down: set[Link] = set()  # links LLDP finds missing or miswired (both directions)
        self._dead: set[Link] = set()  # both directions of every link the policies must avoid
        self._pending: dict[Link, float] = {}  # link (a < b) -> when it was last seen coming up
        self.version = 0

    # ----- inputs -------------------------------------------------------------
    def port(self, now: float, switch: str, port: int, up: bool, source: str = "openflow") -> Change:
        """A port's state from OpenFlow (port status, port description) or from ``source="sflow"`` (a change
        of ifOperStatus). OpenFlow decides; sFlow saying down makes the port a suspect to verify over
        OpenFlow (``Change.verify``), never takes the link down itself."""
        if (switch, port) not in self._ends:
            return Change()  # a host port or a port the description does not know
        if source not in ("openflow", "sflow"):
            raise ValueError(f"unknown liveness source {source!r}")
        if source == "sflow":
            if up:
                self.sflow_down.discard((switch, port))
                return Change()
            self.sflow_down.add((switch, port))
            return Change(verify={(switch, port)})
        if up:
            self.port_down.discard((switch, port))
            self.sflow_down.discard((switch, port))
        else:
            self.port_down.add((switch, port))
        return self._settle(now, self._ends[(switch, port)])

    def switch(self, now: float, switch: str, up: bool) -> Change:
        """A switch connected (its ports are then reported by ``port``) or disconnected."""
        if up:
            self.switch_down.discard(switch)
        else:
            self.switch_down.add(switch)
        out = Change()
        for n in self.fabric.neighbors(switch):
            if n in self.fabric.switches:
                c = self._settle(now, (switch, n))
                out.down |= c.down
                out.up |= c.up
        return out

    def lldp(self, now: float, faults: set[Link]) -> Change:
        """The links LLDP finds missing or miswired (``lldp.LinkCheck.faults``): down while they are."""
        changed = (faults ^ self.lldp_down)
        self.lldp_down = set(faults)
        out = Change()
        for key in {tuple(sorted(ln)) for ln in changed}:
            c = self._settle(now, key)
            out.down |= c.down
            out.up |= c.up
        return out

    def tick(self, now: float) -> Change:
        """Re-admit links that have stayed up through their hold-down."""
        out = Change()
        for key, since in list(self._pending.items()):
            if now - since >= self.hold_down_s:
                del self._pending[key]
                out.up |= self._set(key, True)
        return out

    # ----- reading --------------------------------------------------------------
    def dead(self) -> frozenset[Link]:
        return frozenset(self._dead)

    def is_up(self, link: Link) -> bool:
        return link not in self._dead

    def settling(self, switch: str) -> bool:
        """Whether one of the switch's links is up again but still in its hold-down."""
        return any(switch in key for key in self._pending)

    # ----- internals ----------------------------------------------------------------
    def _physically_up(self, a: str, b: str) -> bool:
        f = self.fabric
        ends = ((a, f.port_to(a, b)), (b, f.port_to(b, a)))
        return (a not in self.switch_down and b not in self.switch_down and (a, b) not in self.lldp_down
                and not any(e in self.port_down for e in ends))

    def _settle(self, now: float, link: Link) -> Change:
        key = tuple(sorted(link))
        if not self._physically_up(*key):
            self._pending.pop(key, None)
            return Change(down=self._set(key, False))
        if key in self._dead and key not in self._pending:
            self._pending[key] = now  # up again: wait out the hold-down
        return Change()

    def _set(self, key: Link, up: bool) -> set[Link]:
        a, b = key
        both = {(a, b), (b, a)}
        if up == (key not in self._dead):
            return set()
        if up:
            self._dead -= both
        else:
            self._dead |= both
        self.version += 1
        return both
