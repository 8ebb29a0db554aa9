"""Simulated engine noise for the likelihood rule: rows sampled from noisy logits (the
generating engine) and scored with the clean ones (the scorer), as every scorer scores them.

Used by tests/unit/data/test_likelihood_noise.py and `bench/bench_likelihood.py noise`; the
rule itself lives in dflash_trainer.data.likelihood.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from dflash_trainer.data.likelihood.rows import RowFigures, RowRule, build_row_figures
from dflash_trainer.data.likelihood.rule import SamplingRule, token_stats

# A small vocabulary keeps a million positions cheap; the tail beyond the top K is what matters.
VOCAB = 256
# Positions scored per tensor pass: [CHUNK, VOCAB] float32 is 8 MB.
CHUNK = 8192
# Logits of a position: N(0, SPREAD^2) over the vocabulary, the first token raised by an
# Exp(mean BOOST) margin. Most positions are then near-certain (the top token holds 0.9+ of the
# mass, a nucleus of 0.95 ends one or two tokens later: where a moving boundary bites), a few
# are spread: low-entropy rows like a chat model's answers.
SPREAD = 2.5
BOOST = 4.0


@dataclass(frozen=True)
class NoisyRows:
    """Flat per-token scores of `rows` rows (row i: `[offsets[i], offsets[i+1])`)."""

    offsets: np.ndarray
    lp: np.ndarray
    rank: np.ndarray
    gap: np.ndarray
    mu: np.ndarray
    var: np.ndarray

    def figures(self, rule: SamplingRule, row_rule: RowRule) -> RowFigures:
        return build_row_figures(self.offsets, self.lp, self.rank, self.gap, self.mu, self.var,
                                 rule.share_k, row_rule)  # fmt: skip


def _sample(logits: torch.Tensor, rule: SamplingRule, gen: torch.Generator) -> torch.Tensor:
    """One token per row, drawn as vLLM's sampler draws: temperature, min-p, top-k, top-p."""
    if rule.temperature <= 0:
        return logits.argmax(dim=1)
    tempered = torch.log_softmax(logits / rule.temperature, dim=1)
    ninf = torch.full_like(tempered, -math.inf)
    if rule.min_p > 0:
        cut = tempered.max(dim=1, keepdim=True).values + math.log(rule.min_p)
        tempered = torch.where(tempered >= cut, tempered, ninf)
    if rule.top_k > 0:
        kth = tempered.topk(rule.top_k, dim=1).values[:, -1:]
        tempered = torch.where(tempered >= kth, tempered, ninf)
    ordered, order = tempered.sort(dim=1, descending=True)
    probs = torch.softmax(ordered, dim=1)
    before = torch.cumsum(probs, dim=1) - probs
    probs = torch.where(before < rule.top_p, probs, torch.zeros_like(probs))
    probs[:, 0] = torch.clamp(probs[:, 0], min=1e-30)
    picked = torch.multinomial(probs, 1, generator=gen)
    return order.gather(1, picked)[:, 0]


def simulate_rows(
    rule: SamplingRule,
    noise: float,
    rows: int,
    tokens: int,
    seed: int,
    generated_with: SamplingRule | None = None,
) -> NoisyRows:
    """`rows` rows of `tokens` tokens: each position's clean logits drawn at random, the
    generator samples from them plus N(0, noise^2) per logit under `generated_with` (default
    `rule`, a healthy source), the scorer scores the drawn token under `rule` with the clean
    log-probabilities (its top `rule.logprobs`)."""
    gen = torch.Generator().manual_seed(seed)
    sampler = generated_with or rule
    total = rows * tokens
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("lp", "rank", "gap", "mu", "var")}
    for start in range(0, total, CHUNK):
        n = min(CHUNK, total - start)
        clean = torch.randn(n, VOCAB, generator=gen) * SPREAD
        clean[:, 0] += torch.empty(n).exponential_(1.0 / BOOST, generator=gen)
        noisy = clean + torch.randn(n, VOCAB, generator=gen) * noise
        token = _sample(noisy, sampler, gen)
        lp_all = torch.log_softmax(clean, dim=1)
        lp = lp_all.gather(1, token[:, None])[:, 0]
        rank = (lp_all > lp[:, None]).sum(dim=1)
        top = lp_all.topk(rule.logprobs, dim=1).values
        gap, mu, var = token_stats(top, lp, rule, VOCAB)
        for name, value in (("lp", lp), ("rank", rank), ("gap", gap), ("mu", mu), ("var", var)):
            parts[name].append(value.numpy())
    flat = {k: np.concatenate(v) for k, v in parts.items()}
    offsets = np.arange(0, total + 1, tokens, dtype=np.int64)
    return NoisyRows(offsets, flat["lp"], flat["rank"], flat["gap"], flat["mu"], flat["var"])


def off_row_rate(
    rule: SamplingRule, noise: float, rows: int, tokens: int, seed: int, row_rule: RowRule
) -> float:
    """The share of healthy rows (generated under `rule` with `noise`) the row rule calls off."""
    figures = simulate_rows(rule, noise, rows, tokens, seed).figures(rule, row_rule)
    return float(np.mean(figures.off))
