"""A shape check that defers to the likelihood check (audit-gates.md 8.4) names it when it
fails a source the likelihood check did not judge: a tokenizer-only gate fails a healthy
translation source, and the failure says what would decide it."""

from __future__ import annotations

from dflash_trainer.data.audit.checks import LIKELIHOOD_CHECK, evaluate
from dflash_trainer.data.audit.metrics import GateMetrics, GroupMetrics
from dflash_trainer.data.audit.thresholds import Thresholds


def metrics(scored: bool) -> GateMetrics:
    group = GroupMetrics(samples=200, values={"wrong_language_rate": 0.9},
                         counts={"wrong_language_rate": (180.0, 200.0)})  # fmt: skip
    if scored:  # scored and off-distribution: the likelihood check judged it (not its own)
        group.values[LIKELIHOOD_CHECK] = 0.5
        group.counts[LIKELIHOOD_CHECK] = (32.0, 64.0)
    overall = GroupMetrics(samples=200, values=dict(group.values), counts=dict(group.counts))
    return GateMetrics("completions", overall, {"translation": group})


def message(verdict_metrics: GateMetrics) -> str:
    verdict = evaluate(verdict_metrics, Thresholds())
    (violation,) = [v for v in verdict.violations if v.check == "wrong_language_rate"]
    return violation.message


def test_a_script_failure_without_likelihood_scores_says_what_decides_such_a_source() -> None:
    text = message(metrics(scored=False))
    assert "target-likelihood check decides such a source" in text
    assert "--model" in text and "translations" in text


def test_no_hint_when_the_likelihood_check_judged_the_source() -> None:
    assert "target-likelihood check decides" not in message(metrics(scored=True))
