"""Declared sampling (issue 31, item 3): each imported source is judged against the sampling it
declares; a source that declares none, or a rule that can judge no position, is reported as
skipped and never passes as judged; audit.likelihood.topK sets the gate's top-k share."""

from __future__ import annotations

import numpy as np
from dflash_trainer.data.audit.checks import LIKELIHOOD_CHECK, is_own
from dflash_trainer.data.audit.likelihood import attach_likelihood, judge_scores
from dflash_trainer.data.audit.metrics import GateMetrics, GroupMetrics
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.likelihood.rule import SamplingRule, token_stats
from dflash_trainer.data.likelihood.scores import SOURCE_RULES_KEY, ScoresMeta, build_scores_table
from dflash_trainer.data.likelihood.types import RowScores
from dflash_trainer.tiny.likelihood_noise import simulate_rows

ROWS = 60  # above minSourceSamples (50)
DECLARED = SamplingRule(temperature=0.6, top_p=0.95, top_k=20)
UNTRUNCATED = SamplingRule(temperature=1.0, top_p=1.0, top_k=0)
UNKNOWN = SamplingRule(temperature=1.0, top_p=1.0, top_k=0)


def rows_of(source: str, rule: SamplingRule, seed: int) -> list[RowScores]:
    flat = simulate_rows(rule, 0.0, ROWS, 40, seed)
    out = []
    for i in range(ROWS):
        lo, hi = flat.offsets[i], flat.offsets[i + 1]
        ids = np.zeros(hi - lo, dtype=np.int32)
        out.append(RowScores(f"{source}-{i}", source, ids[:0], ids, flat.lp[lo:hi],
                             flat.rank[lo:hi], flat.gap[lo:hi], flat.mu[lo:hi],
                             flat.var[lo:hi]))  # fmt: skip
    return out


def gate(thresholds: Thresholds) -> GateMetrics:
    rows = rows_of("declared", DECLARED, 1) + rows_of("unknown", UNKNOWN, 2)
    rows += rows_of("untruncated", UNTRUNCATED, 3)
    rules = {"declared": DECLARED.to_json(), "unknown": None,
             "untruncated": UNTRUNCATED.to_json()}  # fmt: skip
    meta = ScoresMeta(UNKNOWN, "test", "m", 256, {SOURCE_RULES_KEY: rules})
    sample = judge_scores(build_scores_table(rows, meta), meta, "mem://", thresholds)
    metrics = GateMetrics("completions", GroupMetrics(samples=3 * ROWS), {})
    attach_likelihood(metrics, sample)
    return metrics


def test_a_source_without_declared_sampling_is_reported_skipped_and_not_judged() -> None:
    thresholds = Thresholds()
    metrics = gate(thresholds)
    unknown = metrics.sources["unknown"]
    details = unknown.details["likelihood"]
    assert set(details["skippedRules"]) == {"support", "nll"}
    assert "sampling is unknown" in details["skippedRules"]["support"]
    assert details["judged"] is False
    # Not a pass: no off-distribution rate at all, so never "the target's own" either.
    assert LIKELIHOOD_CHECK not in unknown.counts and not is_own(unknown, thresholds)
    assert any("unknown: support rule skipped" in n for n in metrics.notes)
    # The declared source is judged, and its own rows pass.
    declared = metrics.sources["declared"]
    assert declared.counts[LIKELIHOOD_CHECK] == (0.0, float(ROWS))
    assert "skippedRules" not in declared.details["likelihood"]
    # The whole dataset counts only judged rows.
    assert metrics.overall.counts[LIKELIHOOD_CHECK][1] == float(ROWS)


def test_a_rule_that_can_judge_no_position_says_so() -> None:
    metrics = gate(Thresholds())
    details = metrics.sources["untruncated"].details["likelihood"]
    assert "every token can be drawn" in details["skippedRules"]["support"]
    assert "nll" in details["skippedRules"] and details["judged"] is False


def test_the_gates_top_k_sets_the_top_k_share_of_sampling_without_one() -> None:
    metrics = gate(Thresholds(top_k=5))
    assert metrics.sources["untruncated"].details["likelihood"]["topK"] == 5
    assert metrics.sources["declared"].details["likelihood"]["topK"] == 20


def test_token_stats_of_unknown_sampling_judge_nothing() -> None:
    top = np.log(np.array([[0.5, 0.3, 0.2]], dtype=np.float32))
    import torch

    gap, mu, _ = token_stats(torch.from_numpy(top), torch.tensor([-5.0]), UNKNOWN, 100)
    assert float(gap[0]) == -np.inf and np.isnan(float(mu[0]))


def test_a_run_that_regenerates_judges_its_own_sources_by_its_sampling_and_imports_by_theirs() -> (
    None
):
    from dflash_trainer.data.likelihood.source_rules import run_source_rules
    from dflash_trainer.data.sources import parse_sources

    sources = parse_sources({"sources": [
        {"name": "own", "uri": "s3://b/own.jsonl", "format": "prompt-only"},
        {"name": "greedy", "uri": "s3://b/g.jsonl", "format": "regenerated",
         "sampling": {"temperature": 0}},
        {"name": "unknown", "uri": "s3://b/u.jsonl", "format": "regenerated"},
    ]}, "sources.yaml")  # fmt: skip
    run = SamplingRule(temperature=0.6, top_p=0.95, top_k=20, default_k=32)
    rules = run_source_rules(sources, run)
    assert rules["own"] == run
    assert rules["greedy"] == SamplingRule(temperature=0.0, top_p=1.0, top_k=0, default_k=32)
    assert rules["unknown"] is None
