"""The sampling rule: which tokens the regeneration's sampler could have drawn at a position
(its support), and what negative log-likelihood a drawn token has on average there.

Every scorer (transformers on CPU, vLLM prompt log-probabilities, the trainer's monitor) reads,
per supervised token, the token's log-probability under the target and the K highest
log-probabilities of that position, sorted; `token_stats` turns them into:

- `gap`: the token's **margin outside the support**, in nats per logit: the largest engine
  tolerance eps under which the token is still outside the support of *every* sampler whose
  logits lie within eps (sup-norm) of the scorer's (`rowRule.engineTolerance` is compared with
  it, so a gate re-judges with its own tolerance without re-scoring); <= 0 when the token is
  inside the scorer's own support, -inf when no rule can judge the position;
- `mu`, `var`: mean and variance of the NLL of a token drawn by the sampler at that position
  (NaN where the support is not known exactly from the top K, and under greedy decoding).

The support follows vLLM's sampler, in its order (v1 `Sampler`): temperature, then min-p on the
tempered probabilities, then top-k, then top-p on what is left (renormalised). Greedy decoding
(temperature 0) draws the most likely token only. docs/audit-gates.md, section 8.2, derives the
margins (greedy, min-p, top-k in closed form; top-p by bisection) and the row rule.
"""

from __future__ import annotations

import math

import torch

from dflash_trainer.data.likelihood.sampling import DEFAULT_LOGPROBS, SamplingRule

__all__ = ["DEFAULT_LOGPROBS", "SamplingRule", "support_rule_judges", "token_stats"]


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


def _judged_filters(rule: SamplingRule) -> list[str]:
    """The truncations the support rule can prove a token outside of (none: it judges nothing)."""
    if rule.penalized:
        return []
    if rule.greedy:
        return ["greedy"]
    names = [("min-p", rule.min_p > 0), ("top-k", rule.top_k > 0), ("top-p", rule.top_p < 1)]
    return [name for name, on in names if on]


def support_rule_judges(rule: SamplingRule) -> bool:
    """Whether the support rule can call any token outside under these sampling settings
    (top-k 0, top-p 1 and min-p 0 at T > 0: every token can be drawn; a penalty: unknowable)."""
    return bool(_judged_filters(rule))


def _outside_top_p(
    top: torch.Tensor, token_lp: torch.Tensor, eps: torch.Tensor, rule: SamplingRule,
    log_tail: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """Whether the token is outside the nucleus under every logit vector within `eps [n]`
    (sup-norm) of the scorer's, given that it survived min-p and top-k (docs 8.2): the mass of
    the tokens certainly above it (by more than 2 eps), each lowered by eps, against everything
    that could share the candidate set with it, each raised by eps, already reaches top-p."""
    t = rule.temperature
    e = eps[:, None]
    above = top > token_lp[:, None] + 2 * e  # a prefix of the sorted top K
    ninf = torch.full_like(top, -math.inf)
    log_above = torch.logsumexp(torch.where(above, (top - e) / t, ninf), dim=1)
    possible = torch.ones_like(above)  # could pass min-p under some sampler within eps
    if rule.min_p > 0:
        possible &= top - top[:, :1] + 2 * e >= t * math.log(rule.min_p)
    if 0 < rule.top_k <= top.shape[1]:
        # Exactly k candidates (a tie at the k-th value, which vLLM would keep, has
        # probability zero in floating point): besides A, k - |A| tokens, at most the k - |A|
        # heaviest that are not in A, i.e. entries |A| .. k-1 of the sorted top K; the token
        # itself weighs no more than they do unless it is one of them. Nothing below the K.
        index = torch.arange(top.shape[1], device=top.device)[None, :]
        rest = ~above & (index < rule.top_k) & possible
        log_rest = torch.logsumexp(torch.where(rest, (top + e) / t, ninf), dim=1)
        log_rest = torch.logaddexp(log_rest, torch.where(
            rest.any(dim=1), torch.full_like(token_lp, -math.inf), (token_lp + eps) / t))  # fmt: skip
    else:
        rest = (possible | (top == token_lp[:, None])) & ~above
        log_rest = torch.logsumexp(torch.where(rest, (top + e) / t, ninf), dim=1)
        unseen = token_lp < top[:, -1]  # the token itself is below the K read
        log_rest = torch.where(unseen, torch.logaddexp(log_rest, (token_lp + eps) / t), log_rest)
        # Tokens below the top K join the candidates unless min-p certainly cuts them.
        tail_in = torch.ones_like(unseen)
        if rule.min_p > 0:
            tail_in &= top[:, -1] - top[:, 0] + 2 * eps >= t * math.log(rule.min_p)
        log_rest = torch.where(tail_in, torch.logaddexp(log_rest, log_tail + eps / t), log_rest)
    share = log_above - torch.logaddexp(log_above, log_rest)
    return share >= math.log(rule.top_p)


# Top-p margins are found by bisection on [0, MAX_MARGIN] (the largest engineTolerance the
# API accepts); BISECTIONS halvings leave them within 20 / 2^16 = 0.0003 nats.
MAX_MARGIN = 20.0
BISECTIONS = 16


def _top_p_margin(
    top: torch.Tensor, token_lp: torch.Tensor, rule: SamplingRule, log_tail: torch.Tensor
) -> torch.Tensor:
    """The largest eps under which the token is certainly outside the nucleus (0 when it is
    inside at eps = 0). Outside-ness only shrinks as eps grows, so bisection finds it."""
    margin = torch.zeros_like(token_lp)
    zero = torch.zeros_like(token_lp)
    out = _outside_top_p(top, token_lp, zero, rule, log_tail)
    idx = out.nonzero()[:, 0]
    if idx.numel() == 0:
        return margin
    top, token_lp, log_tail = top[idx], token_lp[idx], log_tail[idx]
    lo = torch.zeros_like(token_lp)
    hi = torch.full_like(token_lp, MAX_MARGIN)
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        still = _outside_top_p(top, token_lp, mid, rule, log_tail)
        lo = torch.where(still, mid, lo)
        hi = torch.where(still, hi, mid)
    margin[idx] = lo
    return margin


def _support_margin(
    top: torch.Tensor, token_lp: torch.Tensor, rule: SamplingRule, vocab_size: int
) -> torch.Tensor:
    """The token's margin outside the support (module docstring): the largest of the margins
    of the truncations that are on, since it is outside when any one of them certainly cuts it.
    Log-probabilities stand for logits: they differ by one constant per position."""
    if rule.greedy:  # some token certainly above it: the top one, by more than 2 eps
        return (top[:, 0] - token_lp) / 2
    margin = torch.full_like(token_lp, -math.inf)
    if rule.min_p > 0:  # (l - l_max + 2 eps) / T < log(min_p)
        margin = torch.maximum(
            margin, (top[:, 0] - token_lp + rule.temperature * math.log(rule.min_p)) / 2
        )
    if 0 < rule.top_k <= top.shape[1]:  # k tokens certainly above it
        margin = torch.maximum(margin, (top[:, rule.top_k - 1] - token_lp) / 2)
    if rule.top_p < 1:
        log_tail = _log_tail_bound(top, rule.temperature, vocab_size)
        margin = torch.maximum(margin, _top_p_margin(top, token_lp, rule, log_tail))
    return margin


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
    gap = _support_margin(top, token_lp, rule, vocab_size)
    if rule.greedy:
        return gap, nan.clone(), nan
    tempered = top / rule.temperature
    keep = torch.ones_like(top, dtype=torch.bool)
    if rule.min_p > 0:
        keep &= tempered >= tempered[:, :1] + math.log(rule.min_p)
    if 0 < rule.top_k < k_read:
        keep[:, rule.top_k :] = False
    # The candidates (before top-p) are known when top-k or min-p cut them inside the top K.
    known = ~keep[:, -1] | torch.tensor(0 < rule.top_k <= k_read)
    weights = torch.where(keep, tempered, torch.full_like(tempered, -math.inf))
    log_z = torch.logsumexp(weights, dim=1)
    probs = torch.exp(weights - log_z[:, None])
    before = torch.cumsum(probs, dim=1) - probs
    support = keep & (before < rule.top_p)
    support[:, 0] = True  # the sampler always keeps the most likely token
    q = torch.where(support, probs, torch.zeros_like(probs))
    q = q / q.sum(dim=1, keepdim=True)
    first = (q * top).sum(dim=1)
    second = (q * top * top).sum(dim=1)
    mu = torch.where(known, -first, nan)
    var = torch.where(known, torch.clamp(second - first * first, min=0.0), nan)
    return gap, mu, var
