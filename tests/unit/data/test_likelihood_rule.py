"""The likelihood rule in numbers: the sampler's support (greedy, top-k, top-p, min-p, unknown
tails, penalties), the NLL a sampled token has on average, and the row rule; and a sampler
that draws from the support is never judged off, while tokens it could not draw are."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dflash_trainer.data.likelihood.rows import RowRule, build_row_figures
from dflash_trainer.data.likelihood.rule import SamplingRule, token_stats

VOCAB = 50


def log_probs(*weights: float) -> torch.Tensor:
    """A full distribution over VOCAB tokens: the given weights first, the rest tiny."""
    full = torch.full((VOCAB,), 1e-6)
    full[: len(weights)] = torch.tensor(weights)
    return torch.log(full / full.sum())


def stats(lp: torch.Tensor, token: int, rule: SamplingRule, k: int = 20) -> tuple[float, ...]:
    top = lp.topk(k).values[None]
    gap, mu, var = token_stats(top, lp[token][None], rule, VOCAB)
    return float(gap[0]), float(mu[0]), float(var[0])


def test_greedy_admits_the_most_likely_token_only() -> None:
    lp = log_probs(0.5, 0.3, 0.2)
    rule = SamplingRule(temperature=0)
    assert stats(lp, 0, rule)[0] == 0.0
    gap, mu, _ = stats(lp, 1, rule)
    # Its margin: the top token stays above it unless both move by half the distance.
    assert gap == pytest.approx(math.log(0.5 / 0.3) / 2, rel=1e-4) and math.isnan(mu)
    assert rule.share_k == 1


def test_top_k_and_top_p_cut_the_support_where_vllm_does() -> None:
    lp = log_probs(0.4, 0.3, 0.2, 0.1)
    # top-k 2: tokens 0 and 1 only; token 2 stays out unless the 2nd and it move by half of
    # log(0.3/0.2) each.
    rule = SamplingRule(temperature=1.0, top_p=1.0, top_k=2)
    assert stats(lp, 1, rule)[0] == pytest.approx(0.0, abs=1e-5)
    assert stats(lp, 2, rule)[0] == pytest.approx(math.log(0.3 / 0.2) / 2, rel=1e-4)
    # top-p 0.65 (temperature 1, top-k 20): 0.4 + 0.3 reaches it, so the nucleus is {0, 1}.
    rule = SamplingRule(temperature=1.0, top_p=0.65, top_k=20)
    assert stats(lp, 1, rule)[0] <= 0 < stats(lp, 2, rule)[0]
    # min-p 0.6 at temperature 1: only tokens with p >= 0.6 x 0.4 = 0.24.
    rule = SamplingRule(temperature=1.0, top_p=1.0, top_k=20, min_p=0.6)
    assert stats(lp, 1, rule)[0] <= 0 < stats(lp, 2, rule)[0]


def test_the_sampled_nll_has_the_mean_and_variance_of_the_truncated_tempered_distribution() -> None:
    lp = log_probs(0.5, 0.3, 0.2)
    rule = SamplingRule(temperature=0.5, top_p=1.0, top_k=2)
    _, mu, var = stats(lp, 0, rule)
    q = np.array([0.5, 0.3]) ** 2  # temperature 0.5: p^(1/0.5), over the top-2
    q /= q.sum()
    nll = -lp[:2].numpy().astype(np.float64)
    assert mu == pytest.approx(float(q @ nll), rel=1e-4)
    assert var == pytest.approx(float(q @ nll**2 - (q @ nll) ** 2), rel=1e-3)


def test_an_unseen_tail_is_bounded_never_guessed() -> None:
    # No top-k and a nucleus wider than the K log-probabilities read: nothing can be proven
    # outside, and the mean NLL is unknown.
    lp = torch.log(torch.full((VOCAB,), 1.0 / VOCAB))
    rule = SamplingRule(temperature=1.0, top_p=0.99, top_k=0)
    gap, mu, _ = stats(lp, 40, rule, k=5)
    assert gap <= 0 and math.isnan(mu)
    # A nucleus that closes inside the top K even with the largest tail it could hide does.
    lp = log_probs(0.9, 0.05, 0.03, 0.01, 0.005)
    gap, _, _ = stats(lp, 4, SamplingRule(temperature=1.0, top_p=0.5, top_k=0), k=5)
    assert gap > 0


def test_a_penalty_makes_the_support_unknowable() -> None:
    lp = log_probs(0.9, 0.1)
    gap, mu, _ = stats(lp, 1, SamplingRule(temperature=0, penalized=True))
    assert gap == -math.inf and math.isnan(mu)


def sample_rows(rule: SamplingRule, rows: int, tokens: int, seed: int, hot: float = 1.0) -> dict:
    """Rows drawn position by position from the rule's sampler at `hot` x its temperature,
    scored like every scorer scores them."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("lp", "rank", "gap", "mu", "var")}
    for _ in range(rows * tokens):
        logits = torch.tensor(rng.normal(0, 2.5, VOCAB), dtype=torch.float32)
        lp = torch.log_softmax(logits, -1)
        sampler = SamplingRule(temperature=rule.temperature * hot, top_p=1.0, top_k=rule.top_k)
        top = lp.topk(rule.top_k)
        tempered = torch.softmax(top.values / sampler.temperature, -1)
        token = int(
            top.indices[int(rng.choice(rule.top_k, p=tempered.numpy() / tempered.sum().item()))]
        )
        gap, mu, var = token_stats(top.values[None], lp[token][None], rule, VOCAB)
        out["lp"].append(lp[token][None].numpy())
        out["rank"].append(np.array([int((lp > lp[token]).sum())]))
        for name, value in (("gap", gap), ("mu", mu), ("var", var)):
            out[name].append(value.numpy())
    flat = {k: np.concatenate(v) for k, v in out.items()}
    flat["offsets"] = np.arange(0, rows * tokens + 1, tokens)
    return flat


def figures(flat: dict, rule: SamplingRule) -> tuple[np.ndarray, np.ndarray]:
    f = build_row_figures(flat["offsets"], flat["lp"], flat["rank"], flat["gap"], flat["mu"],
                          flat["var"], rule.share_k, RowRule())  # fmt: skip
    return np.asarray(f.off), np.asarray(f.z)


def test_the_samplers_own_draws_are_never_off_and_hotter_draws_are() -> None:
    rule = SamplingRule(temperature=0.6, top_p=1.0, top_k=8)
    off, z = figures(sample_rows(rule, rows=40, tokens=60, seed=1), rule)
    assert off.sum() == 0
    assert abs(float(np.mean(z))) < 0.5 and 0.6 < float(np.std(z)) < 1.4  # z ~ N(0, 1)
    off, _ = figures(sample_rows(rule, rows=40, tokens=60, seed=2, hot=2.0), rule)
    assert off.mean() > 0.5


def test_one_token_outside_the_support_makes_a_short_row_off_but_not_a_long_one() -> None:
    rule = RowRule()
    for length, outside, expected in ((100, 1, True), (4000, 1, False), (4000, 21, True)):
        gap = np.full(length, -1.0, dtype=np.float32)
        gap[:outside] = 2.0  # a margin of 2 nats: beyond the 0.25 tolerance
        nan = np.full(length, np.nan, dtype=np.float32)
        f = build_row_figures(np.array([0, length]), np.full(length, -0.1, dtype=np.float32),
                              np.zeros(length, dtype=np.int64), gap, nan, nan, 1, rule)  # fmt: skip
        assert bool(f.off[0]) is expected, (length, outside)
    # Within the engine tolerance (0.25) is not outside.
    gap = np.full(100, 0.2, dtype=np.float32)
    nan = np.full(100, np.nan, dtype=np.float32)
    f = build_row_figures(np.array([0, 100]), np.zeros(100, dtype=np.float32),
                          np.zeros(100, dtype=np.int64), gap, nan, nan, 1, rule)  # fmt: skip
    assert not f.off[0] and f.outside[0] == 0
