"""Who may speak on the controller's channels (pure): a switch's identity and one connection per datapath.

The OpenFlow channel (issue 40). A switch connects; with TLS its certificate was verified against the
switches' CA during the handshake; then it says which datapath it is (FEATURES_REPLY). Before the
controller sends it anything beyond HELLO and FEATURES_REQUEST, ``ChannelGuard.admit`` decides:

- *identity* (TLS with ``require_identity``): the certificate must name the datapath id the switch
  claims. Freeway's convention: a certificate names each datapath id it may claim as ``dpid:`` and 16
  hex digits, in its subject's common name or in a subjectAltName (``URI:urn:freeway:dpid:...`` or
  ``DNS:dpid-...``; see ``names``). A real switch's certificate names its one datapath; an Open vSwitch
  process hosting several bridges (the emulator) is one identity for all of them, and its certificate
  names them all. A certificate that names no datapath id at all is refused too.
- *the description*: a datapath the fabric's description does not have gets nothing either;
- *one connection per datapath id*: a second connection claiming a datapath that has a live connection
  is refused; the live one keeps its program, its links and its state. The refused switch retries as
  switches do; once the old connection is gone (closed, or three echo requests unanswered, 6 s), the
  next try is admitted.

Each refusal comes back with its reason and a counter name, for the log, the decision record and the
metrics; ``gone`` forgets a closed connection (only if it is the admitted one).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

DPID = re.compile(r"dpid[:\-]([0-9a-fA-F]{16})\b")
REFUSALS = ("tls-failed", "identity", "no-identity", "duplicate", "not-in-fabric", "malformed", "oversized",
            "unauthorized", "forbidden", "plain-write", "unknown-agent", "agent-not-source", "pre-admission-flood",
            "unadmitted-cap", "unadmitted-source-cap", "per-source-cap", "head-timeout")


def names(cert: dict | None) -> set[int]:
    """The datapath ids a verified peer certificate names (``ssl.SSLSocket.getpeercert()``'s dict): every
    ``dpid:XXXXXXXXXXXXXXXX`` (or ``dpid-``) in the subject's common names and subjectAltNames."""
    if not cert:
        return set()
    texts = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
    texts += [v for _, v in cert.get("subjectAltName", ()) if isinstance(v, str)]  # DirName values are tuples
    return {int(m, 16) for t in texts for m in DPID.findall(t)}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    counter: str = ""


ADMIT = Verdict(True)


class ChannelGuard:
    """The switches' connections: which one speaks for each datapath id, and what was refused."""

    def __init__(self, require_identity: bool = True, known: set[int] | None = None):
        self.require_identity = require_identity
        self.known = known  # the description's datapath ids (None: any)
        self.live: dict[int, object] = {}  # dpid -> the admitted connection
        self.refused: Counter[tuple[str, str]] = Counter()  # (channel, reason) -> count

    def count(self, channel: str, reason: str) -> None:
        self.refused[(channel, reason)] += 1

    def admit(self, conn, dpid: int, tls: bool, cert: dict | None, alive=lambda c: True) -> Verdict:
        """May ``conn``, which claims ``dpid`` (over TLS with the verified ``cert``, or not), be sent the
        switch's program? ``alive(other)`` says whether an earlier connection still stands."""
        if self.known is not None and dpid not in self.known:
            return self._refuse("not-in-fabric", f"datapath {dpid:016x} is not in the fabric description")
        if tls and self.require_identity:
            named = names(cert)
            if not named:
                return self._refuse("no-identity", f"its certificate names no datapath id (dpid:{dpid:016x} "
                                                   "expected in its CN or a subjectAltName)")
            if dpid not in named:
                shown = ", ".join(f"{d:016x}" for d in sorted(named)[:4]) + ("..." if len(named) > 4 else "")
                return self._refuse("identity", f"it claims datapath {dpid:016x} but its certificate names {shown}")
        other = self.live.get(dpid)
        if other is not None and other is not conn and alive(other):
            return self._refuse("duplicate", f"datapath {dpid:016x} already has a live connection; the new one is "
                                             "refused and the live one keeps the switch")
        self.live[dpid] = conn
        return ADMIT

    def _refuse(self, counter: str, reason: str) -> Verdict:
        self.count("openflow", counter)
        return Verdict(False, reason, counter)

    def gone(self, conn, dpid: int | None) -> None:
        if dpid is not None and self.live.get(dpid) is conn:
            del self.live[dpid]

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (channel, reason), n in sorted(self.refused.items()):
            out.setdefault(channel, {})[reason] = n
        return out
