"""The support rule under engine noise (issue 31, item 2): a token is outside only when it is
outside for every sampler within the engine tolerance of the scorer's logits. Simulated:
rows sampled from noisy logits (the generating engine), scored with the clean ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dflash_trainer.data.likelihood.rows import DEFAULT_ENGINE_TOLERANCE, RowRule
from dflash_trainer.data.likelihood.rule import SamplingRule, support_rule_judges, token_stats
from dflash_trainer.tiny.likelihood_noise import simulate_rows

# 2,000 rows of 100 tokens: "at most 0.1%" is at most 2 rows.
ROWS = 2000
TOKENS = 100
NOISE = 0.1  # nats per logit, N(0, 0.1^2), between generator and scorer
HEALTHY = {
    "T=0.6, top-p 0.95, top-k 20": SamplingRule(temperature=0.6, top_p=0.95, top_k=20),
    "T=1.0, top-p 0.95, no top-k": SamplingRule(temperature=1.0, top_p=0.95, top_k=0),
}


@pytest.mark.parametrize("name", list(HEALTHY))
def test_healthy_rows_with_a_tenth_of_a_nat_of_engine_noise_are_almost_never_called_off(
    name: str,
) -> None:
    rule = HEALTHY[name]
    rows = simulate_rows(rule, NOISE, ROWS, TOKENS, seed=31)
    figures = rows.figures(rule, RowRule())
    assert int(figures.off.sum()) <= ROWS // 1000, (name, int(figures.off.sum()))
    # Without the tolerance the same rows are called off: the noise is real.
    strict = rows.figures(rule, RowRule(engine_tolerance=0.0))
    assert int(strict.off.sum()) > 3 * ROWS // 1000, (name, int(strict.off.sum()))


@pytest.mark.parametrize("name", list(HEALTHY))
def test_hotter_sampling_is_still_caught_under_the_same_noise(name: str) -> None:
    rule = HEALTHY[name]
    hotter = SamplingRule(temperature=1.6, top_p=rule.top_p, top_k=rule.top_k)
    rows = simulate_rows(rule, NOISE, 300, TOKENS, seed=32, generated_with=hotter)
    assert float(np.mean(rows.figures(rule, RowRule()).off)) > 0.5


def margin(top: list[float], token: float, rule: SamplingRule) -> float:
    gap, _, _ = token_stats(torch.tensor([top]), torch.tensor([token]), rule, 1000)
    return float(gap[0])


def test_a_token_tied_at_the_top_k_edge_is_inside() -> None:
    # top-k 2: the token ties the 2nd: some sampler within any tolerance keeps it.
    rule = SamplingRule(temperature=1.0, top_p=1.0, top_k=2)
    top = [math.log(0.5), math.log(0.2), math.log(0.2), math.log(0.1)]
    assert margin(top, math.log(0.2), rule) <= 0
    # One nat below the 2nd: outside unless the tolerance reaches half of it.
    assert margin(top, math.log(0.2) - 1.0, rule) == pytest.approx(0.5, abs=1e-4)


def test_a_token_just_past_a_top_p_boundary_is_inside_within_the_tolerance() -> None:
    # Top token 0.94: the nucleus of 0.95 takes the 2nd token (0.03) too, not the 3rd (0.02)
    # whose mass above (0.97) reaches 0.95. Under a sampler 0.25 nats away, 0.94 lowered and the
    # rest raised puts the mass above the 2nd below 0.95 ... and the 3rd stays out.
    rule = SamplingRule(temperature=1.0, top_p=0.95, top_k=0)
    top = [math.log(p) for p in (0.94, 0.03, 0.02, 0.01)]
    third = margin(top, math.log(0.02), rule)
    assert 0 < third < DEFAULT_ENGINE_TOLERANCE
    # The certainly-above mass 0.94 x e^(-eps) against 0.06 x e^(eps) reaches 0.95 at eps 0 only
    # when the 2nd is counted above: within 2 eps of the 3rd it may not be, so the margin is
    # half the distance between the 2nd and the 3rd at most.
    assert third <= (math.log(0.03) - math.log(0.02)) / 2 + 1e-4
    # A nucleus that closes at its first token: the last token stays out until the top one,
    # lowered by eps, against the other 0.01 raised by eps, falls to 0.95 of the mass:
    # 0.99 e^-eps / (0.99 e^-eps + 0.01 e^eps) = 0.95 at eps = ln(99 x 0.05 / 0.95) / 2.
    top = [math.log(p) for p in (0.99, 0.005, 0.003, 0.002)]
    expected = math.log(99 * 0.05 / 0.95) / 2
    assert margin(top, math.log(0.002), rule) == pytest.approx(expected, abs=1e-3)


def test_a_rule_that_can_judge_no_position_says_so() -> None:
    assert not support_rule_judges(SamplingRule(temperature=1.0, top_p=1.0, top_k=0))
    assert not support_rule_judges(SamplingRule(temperature=0.0, penalized=True))
    assert support_rule_judges(SamplingRule(temperature=1.0, top_p=0.95, top_k=0))
    assert support_rule_judges(SamplingRule(temperature=0.0))
