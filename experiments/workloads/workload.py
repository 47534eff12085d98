"""Workloads: flow sizes from published distributions, Poisson arrivals, seeded schedules.

Sizes come from piecewise-linear CDFs shipped in ``experiments/workloads/data`` (web
search from DCTCP, data mining from VL2; each file names its source), cut at a
mice boundary: a mouse is a flow of at most ``boundary`` bytes, drawn from the
distribution conditioned on that. Arrivals are Poisson at the rate that makes
the offered mice load a given fraction of a host's link.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data"
PACKET = 1460


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True)
class SizeCDF:
    sizes: tuple[float, ...]  # bytes, non-decreasing
    probs: tuple[float, ...]  # cumulative, non-decreasing, from 0 to 1

    @classmethod
    def load(cls, name: str) -> SizeCDF:
        path = DATA / f"{name}.cdf"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in DATA.glob("*.cdf")))
            raise WorkloadError(f"distribution: unknown {name!r} (known: {known})")
        pts = []
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                size, prob = line.split()
                pts.append((float(size) * PACKET, float(prob)))
        return cls.of(pts)

    @classmethod
    def of(cls, pts: list[tuple[float, float]]) -> SizeCDF:
        if len(pts) < 2 or pts[0][1] != 0.0 or pts[-1][1] != 1.0:
            raise WorkloadError("a CDF must start at probability 0 and end at 1")
        for (s0, p0), (s1, p1) in zip(pts, pts[1:], strict=False):
            if s1 < s0 or p1 < p0:
                raise WorkloadError("a CDF must be non-decreasing in size and probability")
        return cls(tuple(s for s, _ in pts), tuple(p for _, p in pts))

    def quantile(self, u: float) -> float:
        """Inverse CDF with linear interpolation."""
        i = bisect.bisect_left(self.probs, u)
        if i == 0:
            return self.sizes[0]
        if i >= len(self.probs):
            return self.sizes[-1]
        p0, p1 = self.probs[i - 1], self.probs[i]
        s0, s1 = self.sizes[i - 1], self.sizes[i]
        return s0 if p1 == p0 else s0 + (s1 - s0) * (u - p0) / (p1 - p0)

    def cdf(self, size: float) -> float:
        i = bisect.bisect_right(self.sizes, size)
        if i == 0:
            return 0.0
        if i >= len(self.sizes):
            return 1.0
        s0, s1 = self.sizes[i - 1], self.sizes[i]
        p0, p1 = self.probs[i - 1], self.probs[i]
        return p1 if s1 == s0 else p0 + (p1 - p0) * (size - s0) / (s1 - s0)

    def mice(self, boundary: float) -> SizeCDF:
        """The distribution conditioned on size <= boundary."""
        top = self.cdf(boundary)
        if top <= 0:
            raise WorkloadError(f"mice boundary {boundary:.0f} bytes is below every flow of this distribution")
        pts = [(s, p / top) for s, p in zip(self.sizes, self.probs, strict=True) if s < boundary]
        pts.append((boundary, 1.0))
        return SizeCDF.of(pts)

    def mean(self) -> float:
        """Mean of the piecewise-linear distribution (uniform within each segment)."""
        m = 0.0
        for (s0, p0), (s1, p1) in zip(zip(self.sizes, self.probs, strict=True),
                                      zip(self.sizes[1:], self.probs[1:], strict=True), strict=False):
            m += (p1 - p0) * (s0 + s1) / 2
        return m

    def sample(self, rng: random.Random) -> int:
        return max(1, int(self.quantile(rng.random())))


def poisson_schedule(rng: random.Random, cdf: SizeCDF, load: float, link_bps: float, duration: float,
                     servers: list[str]) -> list[tuple[float, str, int]]:
    """(start offset s, server, size) for one client: Poisson arrivals offering ``load`` x link rate."""
    if not 0 < load < 1:
        raise WorkloadError(f"mice load: must be in (0, 1), got {load}")
    rate = load * link_bps / 8 / cdf.mean()  # flows per second
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append((round(t, 4), rng.choice(servers), cdf.sample(rng)))
