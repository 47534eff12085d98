"""Equal-cost paths between ToR pairs, in Freeway's order.

A path is a tuple of switch names from the source ToR to the destination ToR.
Paths go up to the lowest tier where the two ToRs share ancestors and come
back down. They are sorted by the top switch: by core number for inter-pod
fat-tree pairs (k^2/4 paths), by aggregation switch inside a pod (k/2), by
spine on a leaf-spine. That order is what the Freeway partition relies on.
"""

from __future__ import annotations

from topology.fabric import Fabric

Path = tuple[str, ...]


def _up_chains(fabric: Fabric, tor: str) -> dict[str, list[Path]]:
    """Every upward chain from ``tor``, keyed by the switch where it ends."""
    chains: dict[str, list[Path]] = {tor: [(tor,)]}
    frontier = [(tor,)]
    while frontier:
        nxt = []
        for chain in frontier:
            for up in fabric.up_neighbors(chain[-1]):
                c = chain + (up,)
                chains.setdefault(up, []).append(c)
                nxt.append(c)
        frontier = nxt
    return chains


def tor_paths(fabric: Fabric, src: str, dst: str) -> list[Path]:
    """All shortest up-down paths from ToR ``src`` to ToR ``dst``, sorted by top switch."""
    for t in (src, dst):
        if t not in fabric.switches or not fabric.switches[t].is_tor:
            raise ValueError(f"{t!r} is not a ToR switch of this fabric")
    if src == dst:
        return [(src,)]
    up_src = _up_chains(fabric, src)
    up_dst = _up_chains(fabric, dst)
    common = set(up_src) & set(up_dst)
    if not common:
        return []
    level = min(fabric.switches[t].level for t in common)
    tops = sorted((t for t in common if fabric.switches[t].level == level), key=fabric._order)
    paths: list[Path] = []
    for top in tops:
        for a in up_src[top]:
            for b in up_dst[top]:
                paths.append(a + tuple(reversed(b[:-1])))
    return paths


def path_top(path: Path) -> str:
    """The highest switch of an up-down path (core, aggregation or spine)."""
    return path[len(path) // 2]


def path_links(path: Path) -> list[tuple[str, str]]:
    """Directed links along a path."""
    return list(zip(path, path[1:], strict=False))


def path_ports(fabric: Fabric, path: Path) -> list[tuple[str, int]]:
    """(switch, output port) for every hop but the last along a path."""
    return [(a, fabric.port_to(a, b)) for a, b in path_links(path)]


def tors_below(fabric: Fabric) -> dict[str, frozenset[str]]:
    """For every switch, the ToRs below it (a ToR: itself)."""
    out: dict[str, frozenset[str]] = {}

    def below(sw: str) -> frozenset[str]:
        if sw not in out:
            if fabric.switches[sw].is_tor:
                out[sw] = frozenset((sw,))
            else:
                out[sw] = frozenset().union(*(below(n) for n in fabric.down_neighbors(sw)))
        return out[sw]

    for sw in fabric.switches:
        below(sw)
    return out


class Reachability:
    """Which neighbors lead from a switch to a destination ToR over usable links only.

    Routes are valley-free, as in a Clos: a switch with the destination below it
    goes down (the one child above it), any other goes up. ``usable(link)`` says
    whether a directed link may be used (live, or LOL for mice). Answers are
    memoised: make a new object when what is usable changes."""

    def __init__(self, fabric: Fabric, usable=lambda link: True, below: dict[str, frozenset[str]] | None = None):
        self.fabric = fabric
        self.usable = usable
        self.below = below if below is not None else tors_below(fabric)
        self._memo: dict[tuple[str, str], bool] = {}
        self._down_memo: dict[str, frozenset[str]] = {}
        self._unreached: dict[str, frozenset[str]] = {}
        self._ups_memo: dict[str, list[str]] = {}

    def reaches(self, node: str, dst: str) -> bool:
        key = (node, dst)
        got = self._memo.get(key)
        if got is None:
            self._memo[key] = False  # (no cycles in a Clos; this only guards a malformed description)
            got = self._memo[key] = self._compute(node, dst)
        return got

    def _compute(self, node: str, dst: str) -> bool:
        if node == dst:
            return True
        if dst in self.below[node]:
            return any(self.usable((node, n)) and self.reaches(n, dst)
                       for n in self._downs(node) if dst in self.below[n])
        return any(self.reaches(n, dst) for n in self._ups(node))

    def _ups(self, switch: str):
        """The up-neighbors of ``switch`` over usable links, in the fabric's order (once per switch: a
        connecting k=48 ToR asks ``next_hops`` for 1,151 destinations)."""
        got = self._ups_memo.get(switch)
        if got is None:
            got = self._ups_memo[switch] = [n for n in self.fabric.up_neighbors(switch) if self.usable((switch, n))]
        return got

    def _downs(self, switch: str):
        return self.fabric.down_neighbors(switch)

    def unreached(self, node: str) -> frozenset[str]:
        """Every ToR ``node`` does not reach (``reaches`` for all ToRs at once, as a set: empty for
        almost every switch when few links are usable-not, so a question about every switch and ToR
        costs what the unusable links touch, not switches x ToRs: 1.5 million at k=32)."""
        got = self._unreached.get(node)
        if got is None:
            ups = self._ups(node)
            if ups:
                up = frozenset.intersection(*(self.unreached(n) for n in ups)) - self.below[node]
            else:
                up = frozenset(self.fabric.tors()) - self.below[node]
            got = self._unreached[node] = up | self._down_unreached(node)
        return got

    def _down_unreached(self, node: str) -> frozenset[str]:
        """The ToRs below ``node`` that it does not reach going down."""
        got = self._down_memo.get(node)
        if got is None:
            downs = self._downs(node)
            live = [n for n in downs if self.usable((node, n))]
            lost: set[str] = set()
            for n in downs:
                lost |= self._down_unreached(n) if n in live else self.below[n]
            got = self._down_memo[node] = frozenset(
                t for t in lost if not any(t in self.below[n] and t not in self._down_unreached(n) for n in live))
        return got

    def next_hops(self, switch: str, dst: str) -> list[str]:
        """Up-neighbors of ``switch`` through which ``dst`` is reached ([] when ``dst`` is below:
        going down follows the prefix routes)."""
        if dst in self.below[switch]:
            return []
        return [n for n in self._ups(switch) if self.reaches(n, dst)]
