"""Per-row likelihood figures and the off-distribution rule, from per-token numbers.

A row is **off-distribution** when either
- more than `row_outside_share` of its supervised tokens lie outside the support of every
  sampler whose logits are within `engine_tolerance` nats of the scorer's (a token the
  regeneration could not have drawn: its margin, `gap`, exceeds the tolerance), or
- its total NLL exceeds what the sampler's own draws would give by more than `row_z` standard
  deviations: z = (sum(nll - mu) - nll_tolerance * n) / sqrt(sum(var)) over the positions whose
  support is known (tokens drawn from the right distribution give z ~ N(0, 1)).

Every figure here is a whole-array numpy pass over the flat token arrays (rows by offsets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The engine tolerance (nats per logit, sup-norm): one bf16 spacing at logit magnitudes 32-64
# (0.125 at 16-32). Two bf16 engines that each round to nearest differ by up to one spacing;
# Qwen-sized targets' top logits lie at 20-40. docs/audit-gates.md 8.2 and docs/benchmarks.md
# ("Target likelihood") give the measured false-positive rates against simulated noise.
DEFAULT_ENGINE_TOLERANCE = 0.25
# Bins of the per-row NLL histogram: hundredths of a nat per token.
NLL_BIN = 0.01


@dataclass(frozen=True)
class RowRule:
    """The row rule's settings (`spec.audit.likelihood`)."""

    engine_tolerance: float = DEFAULT_ENGINE_TOLERANCE
    nll_tolerance: float = 0.01
    row_outside_share: float = 0.005
    row_z: float = 4.0


@dataclass(frozen=True)
class RowFigures:
    """One value per row."""

    tokens: np.ndarray  # supervised tokens scored
    nll: np.ndarray  # mean NLL per supervised token (nats)
    top_k_share: np.ndarray  # share of tokens ranked k or lower
    outside: np.ndarray  # tokens outside the support (beyond the tolerance)
    z: np.ndarray  # the NLL excess in standard deviations (0 where it cannot be judged)
    off: np.ndarray  # bool: off-distribution
    share_k: np.ndarray  # k of the top-k share per row

    @property
    def outside_share(self) -> np.ndarray:
        share: np.ndarray = self.outside / np.maximum(self.tokens, 1)
        return share


def _row_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-row sums of a flat array (rows may be empty)."""
    cumulative = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    sums: np.ndarray = cumulative[offsets[1:]] - cumulative[offsets[:-1]]
    return sums


def build_row_figures(
    offsets: np.ndarray,
    lp: np.ndarray,
    rank: np.ndarray,
    gap: np.ndarray,
    mu: np.ndarray,
    var: np.ndarray,
    share_k: int | np.ndarray,
    rule: RowRule,
) -> RowFigures:
    """Row figures from flat per-token arrays; row i is `[offsets[i], offsets[i+1])`;
    `share_k`: k of the top-k share, one for all rows or one per row (rows of several sources)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    tokens = np.diff(offsets)
    nll = _row_sums(-lp.astype(np.float64), offsets) / np.maximum(tokens, 1)
    k = np.repeat(share_k, tokens) if isinstance(share_k, np.ndarray) else share_k
    top_k = _row_sums((rank >= k).astype(np.float64), offsets) / np.maximum(tokens, 1)
    outside = _row_sums((gap > rule.engine_tolerance).astype(np.float64), offsets)
    judged = np.isfinite(mu) & np.isfinite(var)
    excess = _row_sums(np.where(judged, -lp - mu, 0.0), offsets)
    spread = _row_sums(np.where(judged, var, 0.0), offsets)
    count = _row_sums(judged.astype(np.float64), offsets)
    shifted = excess - rule.nll_tolerance * count
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(spread > 1e-9, shifted / np.sqrt(spread), 0.0)
    off = (outside > rule.row_outside_share * tokens) | (z > rule.row_z)
    ks = share_k if isinstance(share_k, np.ndarray) else np.full(len(tokens), share_k)
    return RowFigures(tokens, nll, top_k, outside.astype(np.int64), z, off & (tokens > 0), ks)


def least_likely(lp: np.ndarray, count: int) -> np.ndarray:
    """Positions of the `count` least likely tokens of one row, in text order."""
    if len(lp) <= count:
        return np.arange(len(lp))
    picked: np.ndarray = np.sort(np.argpartition(lp, count)[:count])
    return picked
