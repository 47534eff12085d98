"""Max-min fair shares by progressive filling (pure).

Rate-less elephants (announced without a rate: "as fast as the path allows")
share what the links they cross have left once the elephants with explicit
rates are served: every flow's rate rises at the same pace until a link it
crosses is full, then it stops there and the others go on (Bertsekas and
Gallager's progressive filling). The result is the max-min fair allocation:
no flow can get more without taking from one that has no more than it.
"""

from __future__ import annotations

Link = tuple[str, str]


def max_min(flows: dict[object, list[Link]], room: dict[Link, float], cap: dict[object, float] | None = None
            ) -> dict[object, float]:
    """Each flow's fair share (bit/s) of ``room`` (what each link has for these flows), over the links it
    crosses; ``cap`` optionally bounds a flow by itself. A link missing from ``room`` has no room."""
    cap = cap or {}
    rate = dict.fromkeys(flows, 0.0)
    left = {ln: max(0.0, room.get(ln, 0.0)) for f in flows for ln in flows[f]}
    active = {f for f in flows if flows[f] and cap.get(f, float("inf")) > 0}
    for f in flows:
        if not flows[f]:
            rate[f] = cap.get(f, 0.0)  # crosses no shared link: only its own bound
    while active:
        users = {ln: sum(1 for f in active if ln in flows[f]) for ln in left}
        step = min([left[ln] / users[ln] for ln in left if users[ln]] +
                   [cap[f] - rate[f] for f in active if f in cap])
        for f in active:
            rate[f] += step
        for ln in left:
            left[ln] -= step * users[ln]
        full = {ln for ln in left if users[ln] and left[ln] <= 1e-6}
        active = {f for f in active if not (set(flows[f]) & full) and cap.get(f, float("inf")) - rate[f] > 1e-6}
    return rate
