"""Before/after for the pure modules: one elephant placement and whole Freeway periods (as the app runs
them), on the same seeded workload, with whichever code tree is first on ``sys.path``, so that an older
commit can be timed the same way (``git worktree add /tmp/old <commit>``):

    PYTHONPATH=/tmp/old python experiments/benches/period_ab.py 24 1000 old.json
    PYTHONPATH=.        python experiments/benches/period_ab.py 24 1000 new.json

Arguments: fat-tree arity, active ToR pairs, output JSON. Six busy periods (static random loads of
0-60%, which keep pairs adding paths), then six quiet ones (loads between the partition's bounds,
jittering). ``freeway bench scale`` times the current code alone at k=48."""

import json
import random
import sys
import time


def run_periods(core, active, first_time: float) -> list[tuple[float, int, int]]:
    """(seconds, pairs added, mice ops) of one period, the moves it asks for reported finished."""
    t = time.perf_counter()
    res, ops = core.period(first_time, active)
    for _ in core.take_moves():
        ops += core.move_finished()
    return time.perf_counter() - t, len(res.added), sum(len(o) for _, o in ops)


def main(k: int, pairs: int, out: str) -> dict:
    from ryu_apps.algorithms.binpack import place_subflows
    from ryu_apps.modes.freeway_state import FreewayState
    from topology.fabric import fattree

    rng = random.Random(7)
    fabric = fattree(k, 10_000)
    core = FreewayState(fabric)
    tors = fabric.tors()
    core.link_util = {(a, b): rng.uniform(0, 0.6) for ln in fabric.links for a, b in ((ln.a, ln.b), (ln.b, ln.a))}
    placement = []
    for _ in range(300):
        a, b = rng.sample(fabric.hosts, 2)
        pair, rate = (a.switch, b.switch), rng.uniform(0.1, 2) * 1e9
        t = time.perf_counter()
        try:
            if hasattr(core, "place"):
                core.place(pair, rate)
            else:  # the code before the grouped search
                place_subflows(core.hol_paths(pair), [rate], core.load_bps, core.capacity_bps)
        except ValueError:
            pass
        placement.append(time.perf_counter() - t)
    t = time.perf_counter()
    core.mice_updates()
    first = time.perf_counter() - t
    active = set()
    while len(active) < pairs:
        s, d = rng.sample(tors, 2)
        if core.partition.is_partitioned((s, d)):
            active.add((s, d))
    busy = [run_periods(core, active, 10.0 * i) for i in range(6)]
    mid = (core.partition.cfg.lol_low + core.partition.cfg.lol_high) / 2
    quiet = []
    for i in range(6):
        core.link_util = {ln: mid + rng.uniform(-0.02, 0.02) for ln in core.link_util}
        quiet.append(run_periods(core, active, 1000.0 + 10 * i))
    placement.sort()
    import ryu_apps

    result = {"k": k, "pairs": pairs, "code": ryu_apps.__file__, "placement_median_ms": round(placement[150] * 1e3, 3),
              "first_mice_s": round(first, 2), "busy_periods_ms": [round(p[0] * 1e3, 1) for p in busy],
              "busy_added": [p[1] for p in busy], "busy_ops": [p[2] for p in busy],
              "quiet_periods_ms": [round(q[0] * 1e3, 1) for q in quiet], "quiet_ops": [q[2] for q in quiet]}
    print(json.dumps(result))
    with open(out, "w") as f:
        f.write(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
