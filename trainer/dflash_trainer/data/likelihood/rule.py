"""The sampling rule: which tokens the regeneration's sampler could have drawn at a position
(its support), and what negative log-likelihood a drawn token has on average there.

Every scorer (transformers on CPU, vLLM prompt log-probabilities, the trainer's monitor) reads,
per supervised token, the token's log-probability under the target and the K highest
log-probabilities of that position, sorted; `token_stats` turns them into:

- `gap`: how far (nats) the token's log-probability lies below the lowest log-probability the
  sampler could still draw (its support's boundary); <= 0 inside the support, +inf never;
- `mu`, `var`: mean and variance of the NLL of a token drawn by the sampler at that position
  (NaN where the support is not known exactly from the top K, and under greedy decoding).

The support follows vLLM's sampler, in its order (v1 `Sampler`): temperature, then min-p on the
tempered probabilities, then top-k, then top-p on what is left (renormalised). Greedy decoding
(temperature 0) draws the most likely token only. docs/audit-gates.md, section 8, derives the
row rule from these numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

# K: how many of a position's highest log-probabilities the scorers read. vLLM returns at most
# its engine's `max_logprobs` (20 by default) prompt log-probabilities per position; the support
# of the default sampling (top-k 20) lies inside it, so the rule is exact there.
DEFAULT_LOGPROBS = 20


@dataclass(frozen=True)
class SamplingRule:
    """The regeneration's sampling settings (spec.regeneration), as the check reads them."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0
    # A repetition or presence penalty moves tokens into the support that the unpenalised
    # logits would not admit: the support test cannot be reproduced, only the NLL is reported.
    penalized: bool = False
    # k of the top-k share when sampling has no top-k (audit.likelihood.topK).
    default_k: int = DEFAULT_LOGPROBS

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def share_k(self) -> int:
        """k of the reported top-k share: 1 when greedy, else top-k, else the default."""
        if self.greedy:
            return 1
        return self.top_k if self.top_k > 0 else self.default_k

    @property
    def logprobs(self) -> int:
        """How many top log-probabilities a scorer should read per position."""
        return max(self.share_k, self.top_k, 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SamplingRule:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _log_tail_bound(top: torch.Tensor, temperature: float, vocab_size: int) -> torch.Tensor:
    """An upper bound (log) of the tempered weight of the tokens below the top K: their raw
    mass is 1 - sum(top), each at most the K-th probability (T <= 1), or spread evenly over
    the rest of the vocabulary at worst (T > 1, concavity)."""
    raw = torch.logsumexp(top, dim=1)
    tail = torch.clamp(-torch.expm1(torch.clamp(raw, max=0.0)), min=1e-30)
    inv = 1.0 / temperature
    if inv >= 1.0:
        return (inv - 1.0) * top[:, -1] + torch.log(tail)
    rest = max(vocab_size - top.shape[1], 1)
    return (1.0 - inv) * math.log(rest) + inv * torch.log(tail)


def token_stats(
    top: torch.Tensor, token_lp: torch.Tensor, rule: SamplingRule, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(gap, mu, var) per position from the sorted top-K log-probabilities `[n, K]` and the
    scored token's log-probability `[n]` (raw: temperature 1, before any truncation)."""
    top = top.float()
    token_lp = token_lp.float()
    nan = torch.full_like(token_lp, float("nan"))
    n, k_read = top.shape
    if n == 0 or k_read == 0:
        return nan.clone(), nan.clone(), nan
    if rule.penalized:
        return torch.full_like(token_lp, -math.inf), nan.clone(), nan
    if rule.greedy:
        return top[:, 0] - token_lp, nan.clone(), nan
    tempered = top / rule.temperature
    keep = torch.ones_like(top, dtype=torch.bool)
    if rule.min_p > 0:
        keep &= tempered >= tempered[:, :1] + math.log(rule.min_p)
    if 0 < rule.top_k < k_read:
        keep[:, rule.top_k :] = False
    # The candidates (before top-p) are known when top-k or min-p cut them inside the top K.
    known = ~keep[:, -1] | torch.tensor(0 < rule.top_k <= k_read)
    weights = torch.where(keep, tempered, torch.full_like(tempered, -math.inf))
    log_mass = torch.logsumexp(weights, dim=1)
    if bool(known.all()):
        log_z = log_mass
    else:  # conservative: the largest total the unseen tokens could add (fewer proven outside)
        bound = _log_tail_bound(top, rule.temperature, vocab_size)
        log_z = torch.where(known, log_mass, torch.logaddexp(log_mass, bound))
    probs = torch.exp(weights - log_z[:, None])
    before = torch.cumsum(probs, dim=1) - probs
    support = keep & (before < rule.top_p)
    support[:, 0] = True  # the sampler always keeps the most likely token
    closed = known | ~support[:, -1]  # the support ends inside the top K
    last = support.sum(dim=1) - 1
    boundary = top.gather(1, last[:, None])[:, 0]
    gap = torch.where(closed, boundary - token_lp, torch.full_like(token_lp, -math.inf))
    q = torch.where(support, probs, torch.zeros_like(probs))
    q = q / q.sum(dim=1, keepdim=True)
    first = (q * top).sum(dim=1)
    second = (q * top * top).sum(dim=1)
    mu = torch.where(known, -first, nan)
    var = torch.where(known, torch.clamp(second - first * first, min=0.0), nan)
    return gap, mu, var
