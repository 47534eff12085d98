"""LLDP probes and the check of the fabric's links against its description (pure).

The controller sends an LLDP frame out of every switch port it knows of and
the switch at the other end punts it back (``pipeline`` band ``lldp``). A
frame names the switch and port it left by (chassis and port TLVs, as any
LLDP tool reads them) and carries a keyed hash of both under the
controller's own secret, so that a frame a host forges or replays, or one
sent by a switch's own LLDP agent or another controller, is told apart and
never taken for a link.

``LinkCheck`` holds what arrived where and says, for every link of the
description, whether it is verified (heard both ways), still waiting (not
heard yet, within its grace), missing (not heard within the timeout) or
miswired (a port heard a different peer than the description gives), and
lists what was heard that the description does not have. Missing and
miswired links are faults: the liveness model takes them down, so that no
policy uses them. ``LinkWatch`` is the whole check as the controller runs it:
when a round of probes is due, a judgement twice a second, a breaker that
refuses to apply more than half the links at once (a fault on the
controller's side), and the changes reported as decision records. Nothing
here touches a socket or the clock.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import struct
from collections import Counter, deque
from dataclasses import dataclass

from topology.fabric import Fabric

ETH_LLDP = 0x88CC
LLDP_DST = bytes.fromhex("0180c200000e")  # nearest bridge: no bridge forwards it
_OUI = bytes.fromhex("02fee1")  # the organisationally specific TLV that carries Freeway's proof
_SUBTYPE = 1
_MAC_LEN = 16
TTL_S = 120

PortRef = tuple[str, int]  # (switch name, port number)
LOG = logging.getLogger("freeway")
JUDGE_S = 0.5  # how often the links are judged (at most: a quarter of a round, when rounds are longer)
# links judged per call of ``judge`` (the controller calls it every tick): at k=48 judging all 55,296 links
# at once held the event loop ~60 ms (and the adjacencies heard ~105 ms more), every quarter round
JUDGE_CHUNK = 2048
BUDGET_PPS = 1000.0  # probes per second at most (``lldp_budget_pps``); a fabric with more ports probes less often


class LldpError(ValueError):
    """A frame that is not LLDP, is malformed, or was not sent by this controller (``reason`` says which)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def _tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", (kind << 9) | len(value)) + value


def _proof(secret: bytes, dpid: int, port: int) -> bytes:
    return hmac.new(secret, struct.pack("!QI", dpid, port), hashlib.sha256).digest()[:_MAC_LEN]


def probe(secret: bytes, dpid: int, port: int, port_mac: bytes | None = None) -> bytes:
    """The LLDP frame that leaves switch ``dpid`` by ``port``."""
    src = port_mac or bytes([0x02]) + dpid.to_bytes(8, "big")[-5:]
    body = (_tlv(1, b"\x07" + f"dpid:{dpid:016x}".encode())  # chassis id, locally assigned
            + _tlv(2, b"\x07" + str(port).encode())  # port id, locally assigned
            + _tlv(3, struct.pack("!H", TTL_S))
            + _tlv(127, _OUI + bytes([_SUBTYPE]) + struct.pack("!QI", dpid, port) + _proof(secret, dpid, port))
            + _tlv(0, b""))
    return LLDP_DST + src + struct.pack("!H", ETH_LLDP) + body


def is_lldp(data: bytes) -> bool:
    return len(data) >= 14 and data[12:14] == b"\x88\xcc"


def read(secret: bytes, data: bytes) -> tuple[int, int]:
    """(datapath id, port) a probe of ours left by; ``LldpError`` for anything else."""
    if not is_lldp(data):
        raise LldpError("not-lldp")
    pos, end = 14, len(data)
    while pos + 2 <= end:
        (head,) = struct.unpack_from("!H", data, pos)
        kind, length = head >> 9, head & 0x1FF
        pos += 2
        if pos + length > end:
            raise LldpError("malformed", f"TLV type {kind} runs past the frame")
        value = data[pos:pos + length]
        pos += length
        if kind == 0:
            break
        if kind == 127 and value[:3] == _OUI and len(value) == 4 + 12 + _MAC_LEN and value[3] == _SUBTYPE:
            dpid, port = struct.unpack_from("!QI", value, 4)
            if not hmac.compare_digest(value[16:], _proof(secret, dpid, port)):
                raise LldpError("not-ours", f"a probe for {dpid:016x} port {port} with a wrong proof")
            return dpid, port
    raise LldpError("not-ours", "no Freeway proof (another LLDP agent)")


# ----- the check --------------------------------------------------------------------------
VERIFIED, WAITING, MISSING, MISWIRED = "verified", "waiting", "missing", "miswired"
_RANK = {MISWIRED: 0, MISSING: 1, WAITING: 2, VERIFIED: 3}  # a link is as bad as its worse direction


def _pack(dpid: int, port: int) -> int:
    """A probe's origin (datapath id, port) as one number: what the check keeps of each probe heard."""
    return dpid << 32 | port


def _unpack(peer: int) -> tuple[int, int]:
    return peer >> 32, peer & 0xFFFFFFFF


class LinkCheck:
    """What LLDP says of each described link. ``watch`` starts a port's grace (its switch connected,
    or it came up); ``sent`` records a round of probes; ``heard`` records a probe; ``faults`` are the
    links to take down.

    It fails open, not closed: a direction is missing only when, since it was last heard (or its
    grace began), at least ``MISSES`` rounds of probes were sent and ``timeout_s`` passed; and only
    once the receiving switch has delivered some probe since it connected (until its LLDP entry is
    installed, or if it consumes LLDP itself, its links are not judged). A controller that stalls
    sends no rounds, so it takes nothing down; and once its loop was held (``held``), silence is not
    judged until it has run freely for a whole timeout again."""

    MISSES = 2  # probe rounds that must have gone unheard
    SETTLE_S = 0.5  # a round counts once it is this old (its probes have had time to come back)
    HELD_S = SETTLE_S  # the controller's loop held this long: probes that came back may sit unread

    def __init__(self, fabric: Fabric, timeout_s: float):
        self.fabric = fabric
        self.timeout_s = timeout_s
        self.rounds: list[float] = []  # when probes were sent (the latest few)
        self.delivering: dict[str, float] = {}  # switch -> when it first punted a probe since it connected
        self.expect: dict[PortRef, PortRef] = {}
        self.ports_of: dict[str, list[PortRef]] = {}  # each switch's described fabric ports
        for ln in fabric.links:
            self.expect[(ln.a, ln.a_port)] = (ln.b, ln.b_port)
            self.expect[(ln.b, ln.b_port)] = (ln.a, ln.a_port)
            self.ports_of.setdefault(ln.a, []).append((ln.a, ln.a_port))
            self.ports_of.setdefault(ln.b, []).append((ln.b, ln.b_port))
        # each link's ends and key, and each described port's (datapath id, port) as a probe from it names
        # it: judging 55,296 links at k=48 (every quarter round, the loop held meanwhile) compares these
        self._links = [((ln.a, ln.a_port), (ln.b, ln.b_port), tuple(sorted((ln.a, ln.b)))) for ln in fabric.links]
        self._raw = {p: _pack(fabric.switches[p[0]].dpid, p[1]) for p in self.expect}
        self._expected_raw = {p: self._raw[q] for p, q in self.expect.items()}  # what a port should hear
        # ports whose latest probe heard is not from the described peer (or that the description lacks), kept
        # as probes come, so that listing them does not go through every port heard (110,592 at k=48)
        self._odd: set[PortRef] = set()
        # the latest probe heard at each port: where it left from (``_pack``) and when. Numbers in two maps, not
        # an object per probe: at k=48 a thousand probes a second replaced records that lived a round (110 s),
        # each one more object for the cyclic collector to walk until then (docs/lab/benchmarks-history.md, item 38)
        self.heard_peer: dict[PortRef, int] = {}
        self.heard_time: dict[PortRef, float] = {}
        self.since: dict[PortRef, float] = {}
        self._extra: dict[str, set[PortRef]] = {}  # ports the description does not have, seen per switch
        self.quiet_until = float("-inf")  # nothing is judged missing before this (``held``)

    def watch(self, now: float, switch: str, port: int | None = None) -> None:
        """A switch connected (every port of it), or one port came up: judged only after the timeout."""
        ports = self.ports_of.get(switch, []) if port is None else [(switch, port)]
        if port is None:
            self.delivering.pop(switch, None)
        for p in ports:
            self.since[p] = now
            self.heard_peer.pop(p, None)
            self.heard_time.pop(p, None)
            self._odd.discard(p)
            if p not in self.expect:
                self._extra.setdefault(switch, set()).add(p)

    def forget(self, switch: str) -> None:
        """A switch went away: nothing is judged about its links until it connects again."""
        for p in [*self.ports_of.get(switch, []), *self._extra.pop(switch, ())]:
            self.since.pop(p, None)
            self.heard_peer.pop(p, None)
            self.heard_time.pop(p, None)
            self._odd.discard(p)
        self.delivering.pop(switch, None)

    def sent(self, now: float) -> None:
        """A round of probes went out."""
        self.rounds = self.rounds[-(4 * self.MISSES):] + [now]

    def held(self, now: float, seconds: float) -> bool:
        """The controller's event loop was held for ``seconds`` until ``now`` (a long handler, a burst
        of messages): the probes that came back meanwhile may still be unread, so silence is not
        judged until the loop has run freely for a whole timeout again (it fails open). True if
        judging is paused by it."""
        if seconds >= self.HELD_S:
            self.quiet_until = max(self.quiet_until, now + self.timeout_s)
            return True
        return False

    def paused(self, now: float) -> bool:
        """Whether silence is not judged now (``held``)."""
        return now < self.quiet_until

    def heard(self, now: float, switch: str, port: int, peer: tuple[int, int]) -> None:
        p = (switch, port)
        raw = self.heard_peer[p] = _pack(*peer)
        self.heard_time[p] = now
        if self._expected_raw.get(p) == raw:
            self._odd.discard(p)
        else:
            self._odd.add(p)
        if p not in self.expect:
            self._extra.setdefault(switch, set()).add(p)
        self.delivering.setdefault(switch, now)

    def _name(self, peer: int) -> PortRef | None:
        dpid, port = _unpack(peer)
        sw = self.fabric.switch_by_dpid(dpid)
        return (sw.name, port) if sw is not None else None

    def _direction(self, now: float, src: PortRef, dst: PortRef) -> str:
        """What the probes arriving at ``dst`` say of the direction src -> dst."""
        at = self.heard_time.get(dst)
        if at is not None and now - at <= self.timeout_s:
            raw, peer = self._raw.get(src), self.heard_peer[dst]
            same = peer == raw if raw is not None else self._name(peer) == src
            return VERIFIED if same else MISWIRED
        if dst not in self.since or src not in self.since or dst[0] not in self.delivering:
            return WAITING  # an end not connected (the liveness model knows), or no probe punted there yet
        start = max(self.since[dst], self.since[src], self.delivering[dst[0]], at if at is not None else 0.0)
        unheard = sum(1 for r in self.rounds if start < r <= now - self.SETTLE_S)
        missing = now - start > self.timeout_s and unheard >= self.MISSES and not self.paused(now)
        return MISSING if missing else WAITING

    def links(self, now: float, start: int = 0, stop: int | None = None) -> dict[tuple[str, str], str]:
        """Every described link (a < b) and its state (``start``:``stop``: those of the description's links)."""
        out = {}
        direction, rank = self._direction, _RANK
        for a, b, key in self._links[start:stop]:
            one, two = direction(now, a, b), direction(now, b, a)
            out[key] = one if rank[one] <= rank[two] else two  # the worse of the two directions
        return out

    def faults(self, now: float) -> set[tuple[str, str]]:
        """Both directions of every missing or miswired link."""
        return faults_of(self.links(now))

    def unexpected(self, now: float) -> list[dict]:
        """Probes heard (within the timeout) where the description has no such link: a port it does
        not know, a host's port, or a different peer. Reported, never used."""
        out = []
        for sw, port in sorted(self._odd):  # (the ports whose latest probe is not the described peer's)
            if now - self.heard_time[(sw, port)] > self.timeout_s:
                continue
            raw = self.heard_peer[(sw, port)]
            peer = self._name(raw)
            if self.expect.get((sw, port)) == peer and peer is not None:
                continue
            out.append({"switch": sw, "port": port, "described": _ref(self.expect.get((sw, port))
                                                                     or self.fabric.peer(sw, port)),
                        "heard": _ref(peer) if peer else "%016x:%d" % _unpack(raw)})
        return out


def faults_of(states: dict[tuple[str, str], str]) -> set[tuple[str, str]]:
    out = set()
    for (a, b), state in states.items():
        if state in (MISSING, MISWIRED):
            out |= {(a, b), (b, a)}
    return out


def implausible(states: dict[tuple[str, str], str]) -> bool:
    """More than half the links (and more than 4) missing or miswired at once: a fault on the
    controller's side (a stall, a switch eating LLDP), not the fabric's; not to be applied."""
    return len(faults_of(states)) // 2 > max(4, len(states) // 2)


def probe_ports(fabric: Fabric, switch: str, reported, host_ports) -> list[int]:
    """The ports to probe: every fabric port of the description and every other port the switch
    reports (a cable the description does not have is found), but not a described host's port (a
    host is not sent the controller's probes, so it cannot replay one)."""
    ports = {fabric.port_to(switch, n) for n in fabric.neighbors(switch)}
    ports |= {int(p) for p in reported if 0 < int(p) <= 0xFFFFFF00}
    return sorted(ports - set(host_ports))


def _ref(p) -> str | None:
    return None if p is None else (f"{p[0]}:{p[1]}" if p[1] else p[0])


@dataclass
class Judgement:
    """One look at the links: ``faults`` to apply (None: the breaker holds, nothing is applied) and the
    decision records of what changed."""

    faults: set[tuple[str, str]] | None
    records: list[dict]


class LinkWatch:
    """The LLDP link check as the controller runs it: probe rounds every ``interval_s`` (0: off), the
    links judged every ``JUDGE_S``, a breaker, and each change reported once. Pure: ``now`` comes in,
    what to probe and what to apply go out; ``counters`` counts what was heard and what was refused."""

    def __init__(self, fabric: Fabric, interval_s: float, timeout_s: float, secret: bytes,
                 budget_pps: float = BUDGET_PPS):
        self.fabric = fabric
        self.secret = secret  # a probe that does not carry our proof is not one of ours
        self.counters: Counter[str] = Counter()
        self.cost = {sw: len(fabric.neighbors(sw)) for sw in fabric.switches}  # a switch's probes per round
        self.configure(interval_s, timeout_s, budget_pps)
        self.reset()

    def configure(self, interval_s: float, timeout_s: float, budget_pps: float = BUDGET_PPS) -> None:
        """The configured interval and timeout, and the budget that bounds them: a round probes every
        fabric port (2 per link: 110,592 at k=48), so the rounds are no more frequent than the budget
        of probes per second allows, and the timeout grows with them (a reload applies the interval
        from the next round; the timeout to a fresh check)."""
        self.interval_s, self.timeout_s, self.budget_pps = interval_s, timeout_s, budget_pps
        probes = sum(self.cost.values())
        self.round_s = max(interval_s, probes / budget_pps) if interval_s else 0.0
        self.wait_s = timeout_s * self.round_s / interval_s if interval_s else timeout_s
        self.judge_s = max(JUDGE_S, self.round_s / 4)
        self._pass = None  # a judgement under way was taken with the settings before: it is dropped

    def reset(self) -> None:
        """Judge links afresh (a member that starts or stops leading): nothing seen before counts."""
        self.check = LinkCheck(self.fabric, self.wait_s)
        self._next = self._judge = 0.0
        self._queue: deque[str] = deque()  # the switches the round under way still has to probe
        self._credit, self._paced_at = 0.0, None
        self._states: dict = {}  # each described link's last reported state
        self._unexpected: list[dict] = []  # and the adjacencies heard that the description lacks
        self._judged_at: float | None = None
        self._pass: tuple | None = None  # a judgement under way: (when it began, next link, states, records)
        self.breaker = False  # too many links at once: not applied
        self._reported: set = set()  # unexpected adjacencies already logged

    def heard(self, now: float, switch: str, port: int, data: bytes) -> None:
        """An LLDP frame a switch punted: one of our probes, or counted and dropped (another agent's
        LLDP, a forgery, garbage: never a link)."""
        try:
            peer = read(self.secret, data)
        except LldpError as e:
            self.counters[f"lldp-{e.reason}"] += 1
            return
        self.counters["lldp-heard"] += 1
        self.check.heard(now, switch, port, peer)

    def loop_held(self, now: float, lag: float) -> None:
        """The controller's event loop was held ``lag`` seconds: late probes are not silence, so LLDP
        judges nothing missing for a while (``LinkCheck.held``)."""
        was_paused = self.check.paused(now)
        if self.check.held(now, lag):
            self.counters["lldp-paused"] += 1
            if not was_paused and self.interval_s:
                LOG.info("LLDP: no link judged missing for %.1f s: the event loop was held %.2f s", self.wait_s, lag)

    def probes(self, dpid: int, switch: str, reported_ports) -> list[tuple[int, bytes]]:
        """(port, frame) of every probe a switch sends in one round."""
        hosts = {h.port for h in self.fabric.hosts_on(switch)}
        out = [(port, probe(self.secret, dpid, port)) for port in probe_ports(self.fabric, switch, reported_ports, hosts)]
        self.counters["lldp-sent"] += len(out)
        return out

    def round_due(self, now: float, switches=None) -> bool:
        """Whether a round of probes starts now; it counts as sent. With ``switches`` (those to probe),
        they are queued and go out paced to the budget (``to_probe``); a round starts only once the
        last one's queue is empty."""
        if not self.round_s or now < self._next or self._queue:
            return False
        self._next = now + self.round_s
        self.check.sent(now)
        if switches is not None:  # (a list, or what gives it: asked only when a round starts)
            self._queue.extend(switches() if callable(switches) else switches)
        return True

    def to_probe(self, now: float) -> list[str]:
        """The queued switches whose probes go out now: as many as the budget has credit for since the
        last call (a burst of at most a fifth of a second's budget, or one switch), so that a round at
        k=32 (32,768 probes) is spread over the round, not one hold of the event loop."""
        burst = max(self.budget_pps * 0.2, max(self.cost.values(), default=1))
        since = burst if self._paced_at is None else (now - self._paced_at) * self.budget_pps
        self._credit, self._paced_at = min(burst, self._credit + since), now
        out = []
        while self._queue and self._credit > 0:
            sw = self._queue.popleft()
            self._credit -= self.cost.get(sw, 1)
            out.append(sw)
        return out

    def judge(self, now: float) -> Judgement | None:
        """Every ``JUDGE_S``: the links LLDP finds missing or miswired, to go down in the liveness model
        (and come back, after the hold-down, once heard). More than half the links at once (and more
        than 4) is taken for a fault on this side (a stalled controller, a switch eating LLDP): logged,
        and not applied. None between judgements. A judgement takes ``JUDGE_CHUNK`` links per call (one
        call at k=16, 27 at k=48, each a few milliseconds of the loop), None until its last: with the
        controller's tick (0.1 s) a k=48 judgement spans 2.7 s, so judgements come no more often than
        that whatever ``judge_s``. What it found is applied, and shown (``doc``, ``unverified``), only
        once it has judged every link; a judgement older than the timeout (its calls stopped coming, the
        check was turned off meanwhile) is dropped and begun again."""
        if not self.interval_s:
            self._pass = None
            return None
        if self._pass is not None and now - self._pass[0] > self.wait_s:
            self._pass = None
        if self._pass is None:
            if now < self._judge:
                return None
            self._judge = now + self.judge_s
            self._pass = (now, 0, {}, [])
        began, start, states, records = self._pass
        stop = min(start + JUDGE_CHUNK, len(self.check._links))
        part = self.check.links(now, start, stop)
        states.update(part)
        records += self._report_links(part)
        if stop < len(self.check._links):
            self._pass = (began, stop, states, records)
            return None
        self._pass = None
        self._states.update(states)
        self._judged_at = now
        faults = faults_of(states)
        broken = implausible(states)
        if broken != self.breaker:
            self.breaker = broken
            if broken:
                LOG.critical("LLDP: %d of %d links unheard at once: taken for a fault on this side, not applied",
                             len(faults) // 2, len(states))
                self.counters["lldp-breaker"] += 1
        return Judgement(None if broken else faults, records + self._report_unexpected(now))

    def _report_links(self, states: dict) -> list[dict]:
        """A link going missing or miswired, or heard again, is a decision (against the last judgement's
        states: the judgement under way's are kept apart until it ends)."""
        out = []
        for (a, b), state in states.items():
            before = self._states.get((a, b), WAITING)
            if state == before or (state == WAITING) or (state == VERIFIED and before == WAITING):
                continue
            (LOG.info if state == VERIFIED else LOG.warning)("link %s-%s: LLDP: %s", a, b, state)
            out.append({"type": "liveness", "event": f"lldp-{state}", "link": f"{a}-{b}"})
        return out

    def _report_unexpected(self, now: float) -> list[dict]:
        """An adjacency the description does not have is reported once (never used)."""
        out = []
        self._unexpected = self.check.unexpected(now)
        for u in self._unexpected:
            key = (u["switch"], u["port"], u["heard"])
            if key not in self._reported:
                self._reported.add(key)
                LOG.warning("LLDP: %s port %d hears %s, the description has %s there: not used", u["switch"],
                            u["port"], u["heard"], u["described"] or "nothing")
                out.append({"type": "liveness", "event": "lldp-unexpected", **u})
                self.counters["lldp-unexpected"] += 1
        return out

    def unverified(self, on: bool) -> int:
        """Links not verified at the last judgement (0 when the check is off, or this member does not
        lead): kept from the judgement, so that a status read does not judge 55,296 links at k=48."""
        if not (on and self.interval_s):
            return 0
        return len(self.fabric.links) - sum(1 for st in self._states.values() if st == VERIFIED)

    def doc(self, now: float, on: bool) -> dict:
        """What LLDP says (nothing when ``on`` is false: no probes, or this member does not lead): as of the
        last judgement (``judged_s_ago``; every half second, or a quarter round), so that a read (the
        API, every /metrics scrape) does not judge every link again (at k=48 that made a scrape 2.9 s)."""
        on = on and bool(self.interval_s)
        judged = on and self._judged_at is not None and len(self._states) == len(self.fabric.links)
        states = (self._states if judged else self.check.links(now)) if on else {}
        return {"interval_s": self.interval_s, "timeout_s": self.timeout_s, "budget_pps": self.budget_pps,
                "round_s": round(self.round_s, 3), "missing_after_s": round(self.wait_s, 3),
                "judged_s_ago": round(now - self._judged_at, 3) if judged else 0.0,
                "links": {f"{a}-{b}": st for (a, b), st in sorted(states.items())} if on else None,
                "unexpected": (self._unexpected if judged else self.check.unexpected(now)) if on else []}
