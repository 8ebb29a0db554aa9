"""One-sided binomial bounds for judging rates: a source fails a check only when its rate is
above the limit with confidence, so small sources neither pass on luck nor fail on noise.

Wilson score interval (Wilson 1927; Brown, Cai & DasGupta 2001): accurate for small counts and
rates near 0 or 1, closed form, vectorisable. Quantile floors are judged with the same bound:
"p10 of lengths >= F" is "the share of rows shorter than F is <= 10%".
"""

from __future__ import annotations

import math

# One-sided 99% (z = 2.326): with the dozen or so rate checks of a gate judged over every
# source, a healthy source sitting exactly at a limit raises a false alarm on one check in a
# hundred; one at half the limit almost never (docs/audit-gates.md, "False alarms").
CONFIDENCE_Z = 2.326


def _wilson(events: float, samples: float, z: float, side: int) -> float:
    """One side (-1 lower, +1 upper) of the Wilson score interval of `events / samples`."""
    p = events / samples
    z2 = z * z
    centre = p + z2 / (2 * samples)
    spread = z * math.sqrt(max(p * (1 - p) / samples + z2 / (4 * samples * samples), 0.0))
    return (centre + side * spread) / (1 + z2 / samples)


def wilson_lower(events: float, samples: float, z: float = CONFIDENCE_Z) -> float:
    """Lower one-sided Wilson bound of a rate `events / samples` (0 for no samples)."""
    return max(0.0, _wilson(events, samples, z, -1)) if samples > 0 else 0.0


def wilson_upper(events: float, samples: float, z: float = CONFIDENCE_Z) -> float:
    """Upper one-sided Wilson bound of a rate `events / samples` (1 for no samples)."""
    return min(1.0, _wilson(events, samples, z, 1)) if samples > 0 else 1.0


def is_rate_above(events: float, samples: float, limit: float, z: float = CONFIDENCE_Z) -> bool:
    """Whether the true rate is above `limit` with confidence (lower bound > limit)."""
    return samples > 0 and wilson_lower(events, samples, z) > limit


def binomial_tail(samples: int, rate: float, at_least: int) -> float:
    """P[X >= at_least] for X ~ Binomial(samples, rate): exact, for the false-alarm tables."""
    if at_least <= 0:
        return 1.0
    if at_least > samples:
        return 0.0
    total = 0.0
    for k in range(at_least, samples + 1):
        total += math.exp(
            math.lgamma(samples + 1)
            - math.lgamma(k + 1)
            - math.lgamma(samples - k + 1)
            + (k * math.log(rate) if rate > 0 else (0.0 if k == 0 else -math.inf))
            + (
                (samples - k) * math.log1p(-rate)
                if rate < 1
                else (0.0 if k == samples else -math.inf)
            )
        )
    return min(1.0, total)


def events_to_fail(samples: int, limit: float, z: float = CONFIDENCE_Z) -> int:
    """The fewest events among `samples` that fail a `max` check at `limit` (samples + 1: never)."""
    lo, hi = 0, samples + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if is_rate_above(mid, samples, limit, z):
            hi = mid
        else:
            lo = mid + 1
    return lo


def false_alarm_rate(
    samples: int, true_rate: float, limit: float, z: float = CONFIDENCE_Z
) -> float:
    """Chance that a source of `samples` rows with `true_rate` fails a check at `limit`."""
    return binomial_tail(samples, true_rate, events_to_fail(samples, limit, z))
