"""How often a mouse passes the elephant byte bar, by sampling alone (Monte Carlo; no fabric).

Each observation point (a switch port the flow enters) samples each packet with probability 1/N; the
estimate is the mean, over the points that sampled the flow, of samples x N x frame bytes: the rule of
``monitoring.estimator.Estimator._big_enough``. For a mouse of ``--mouse`` bytes crossing 1, 3 or 5
points (same ToR, same pod, other pod in a fat-tree), prints the fraction whose estimate reaches each
bar, and how long an elephant at ``--elephant-mbps`` takes to send that many bytes.

    python experiments/benches/detection_bar.py [--mouse 100000] [--sampling 10] [--trials 20000]
"""

import argparse
import json
import math
import random

FRAME, PAYLOAD = 1514, 1448


def _poisson(rng: random.Random, lam: float) -> int:
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p < limit:
            return k
        k += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mouse", type=int, default=100_000)
    ap.add_argument("--sampling", type=int, default=10)
    ap.add_argument("--trials", type=int, default=20_000)
    ap.add_argument("--elephant-mbps", type=float, default=3.0)
    ap.add_argument("--bars", default="100000,125000,150000,175000,200000,250000")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    packets = math.ceil(a.mouse / PAYLOAD)
    bars = [int(b) for b in a.bars.split(",")]
    out = {"mouse_bytes": a.mouse, "sampling": a.sampling, "trials": a.trials, "flagged_percent": {},
           "elephant_seconds_to_bar": {b: round(b * 8 / (a.elephant_mbps * 1e6), 3) for b in bars}}
    for points in (1, 3, 5):
        hits = dict.fromkeys(bars, 0)
        for _ in range(a.trials):
            seen = [s * a.sampling * FRAME for s in (_poisson(rng, packets / a.sampling) for _ in range(points)) if s]
            est = sum(seen) / len(seen) if seen else 0.0
            for b in bars:
                hits[b] += est >= b
        out["flagged_percent"][points] = {b: round(100 * h / a.trials, 2) for b, h in hits.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
