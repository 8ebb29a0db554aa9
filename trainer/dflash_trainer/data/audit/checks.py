"""The checks of each gate and the verdict: which metric, which threshold, which direction.

A check fails on the overall value or on any source with enough samples; the violation names
the value, the limit and the offending sources (each with its own value), most severe first.
Rates and quantile floors are judged with a one-sided Wilson bound (`stats`): a value across
the limit that is within sampling noise is reported as marginal, not as a violation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pydantic.alias_generators import to_camel

from dflash_trainer.data.audit.metrics import GateMetrics, GroupMetrics
from dflash_trainer.data.audit.stats import is_rate_above
from dflash_trainer.data.audit.thresholds import Thresholds

MAX_NAMED_SOURCES = 8


@dataclass(frozen=True)
class Check:
    name: str
    gate: str
    threshold: (
        str  # a Thresholds field: `max_<name>` or `min_<name>` (`source_samples`: `min_samples`)
    )
    kind: str  # "max": value must be <= threshold; "min": value must be >= threshold
    what: str  # completes "<value> of samples ..." in messages
    per_source: bool = True
    is_rate: bool = True
    # Quantile floors: the share of rows below the floor must not exceed this quantile.
    quantile: float | None = None
    # Judged on a scored sample, not on every row: a source is judged when its sample (the
    # check's trials), not the source, has at least minSourceSamples rows.
    sampled: bool = False

    @property
    def threshold_field(self) -> str:
        """The threshold's name in thresholds.yaml and spec.audit, e.g. `maxStubRate`."""
        return to_camel(self.threshold)


CHECKS: tuple[Check, ...] = (
    Check("samples", "*", "min_samples", "min", "samples in the dataset", False, False),
    # prompts
    Check("malformed_rate", "prompts", "max_malformed_rate", "max", "of rows are unreadable"),
    Check("role_error_rate", "prompts", "max_role_error_rate", "max", "of rows have role errors"),
    Check("empty_prompt_rate", "prompts", "max_empty_prompt_rate", "max", "of rows have no prompt"),
    Check("duplicate_rate", "prompts", "max_duplicate_rate", "max", "of prompts are duplicates"),
    Check("overlong_prompt_rate", "prompts", "max_overlong_prompt_rate", "max",
          "of prompts leave the engine too little context"),
    Check("source_samples", "prompts", "min_samples", "min", "usable prompts in a source",
          True, False),
    # completions and tokens
    Check("near_empty_thinking_rate", "*", "max_near_empty_thinking_rate", "max",
          "of samples have near-empty thinking"),
    Check("completion_tokens_p10", "*", "min_completion_tokens_p10", "min",
          "generated tokens at the 10th percentile", is_rate=False, quantile=0.10),
    Check("completion_tokens_p50", "*", "min_completion_tokens_p50", "min",
          "generated tokens at the median", is_rate=False, quantile=0.50),
    Check("thinking_tokens_p10", "*", "min_thinking_tokens_p10", "min",
          "reasoning tokens at the 10th percentile", is_rate=False, quantile=0.10),
    Check("thinking_tokens_p50", "*", "min_thinking_tokens_p50", "min",
          "reasoning tokens at the median", is_rate=False, quantile=0.50),
    Check("duplicate_completion_rate", "*", "max_duplicate_completion_rate", "max",
          "of completions repeat an earlier one"),
    Check("repetition_rate", "*", "max_repetition_rate", "max",
          "of completions are repetition loops"),
    # completions
    Check("silent_truncation_rate", "completions", "max_silent_truncation_rate", "max",
          "of completions look cut without saying so"),
    Check("wrong_language_rate", "completions", "max_wrong_language_rate", "max",
          "of answers are in another script than their prompt"),
    Check("empty_response_rate", "completions", "max_empty_response_rate", "max",
          "of answers are empty"),
    Check("empty_thinking_rate", "*", "max_empty_thinking_rate", "max",
          "of samples have empty thinking"),
    Check("stub_rate", "*", "max_stub_rate", "max", "of samples are stubs"),
    Check("top_response_share", "completions", "max_top_response_share", "max",
          "of samples share one identical completion"),
    Check("truncation_rate", "completions", "max_truncation_rate", "max",
          "of generations hit maxTokens"),
    Check("stray_think_rate", "completions", "max_stray_think_rate", "max",
          "of answers contain a stray think tag"),
    # tokens
    Check("loss_mask_mode_share", "tokens", "max_loss_mask_mode_share", "max",
          "of samples have the same loss_mask sum"),
    Check("no_anchor_rate", "tokens", "max_no_anchor_rate", "max",
          "of samples have no valid anchor"),
    Check("supervised_fraction", "tokens", "min_supervised_fraction", "min",
          "of tokens are supervised"),
    Check("seq_truncation_rate", "tokens", "max_seq_truncation_rate", "max",
          "of samples are cut at maxSeqLen"),
    Check("thinking_missing_rate", "tokens", "max_thinking_missing_rate", "max",
          "of samples have no thinking"),
    Check("supervised_tokens", "tokens", "min_supervised_tokens", "min",
          "supervised tokens in the dataset", False, False),
    Check("drift_rate", "tokens", "max_drift_rate", "max",
          "of answers re-tokenize differently from the engine's ids"),
    Check("mask_error_rate", "tokens", "max_mask_error_rate", "max",
          "of samples supervise more than the assistant's answer"),
    # completions and tokens: the target-likelihood check (data/likelihood, docs section 8)
    Check("off_distribution_rate", "*", "max_off_distribution_rate", "max",
          "of scored rows are not what the target would generate", sampled=True),
)  # fmt: skip
LIKELIHOOD_CHECK = "off_distribution_rate"
# Shape checks that a healthy source can trip with the target's own answers (a translation
# answered in another script, code whose tables repeat): where the target scores a source's
# rows as its own, their violation there is advisory (docs/audit-gates.md, section 8.4).
DEFERS_TO_LIKELIHOOD = frozenset({"wrong_language_rate", "repetition_rate"})


@dataclass(frozen=True)
class Violation:
    check: str
    value: float
    threshold: float
    message: str
    sources: list[str] = field(default_factory=list)
    per_source: dict[str, float] = field(default_factory=dict)
    severity: float = 0.0
    threshold_field: str = ""
    overall_bad: bool = True

    @property
    def worst(self) -> tuple[str | None, float]:
        """(source, value) to quote: the worst source when only sources fail, else overall."""
        if self.overall_bad or not self.sources:
            return None, self.value
        return self.sources[0], self.per_source[self.sources[0]]

    def to_dict(self) -> dict[str, Any]:
        worst_source, worst_value = self.worst
        return {
            "check": self.check,
            "thresholdField": self.threshold_field,
            "value": round(self.value, 6),
            "threshold": self.threshold,
            "message": self.message,
            "sources": self.sources,
            "perSource": {k: round(v, 6) for k, v in self.per_source.items()},
            "worstSource": worst_source,
            "worstValue": round(worst_value, 6),
        }


@dataclass(frozen=True)
class Verdict:
    gate: str
    passed: bool
    violations: list[Violation]
    evaluated: list[str]
    skipped: list[str]
    # Values across a limit that the bound does not confirm: reported, not failed.
    marginal: list[str] = field(default_factory=list)
    # Shape-check violations in sources the target scores as its own: reported, not failed.
    advisory: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return "pass" if self.passed else "fail"


def checks_for(gate: str) -> list[Check]:
    return [c for c in CHECKS if c.gate in (gate, "*")]


def is_violated(check: Check, value: float, limit: float) -> bool:
    return value > limit if check.kind == "max" else value < limit


def fmt_value(check: Check, value: float) -> str:
    return f"{value:.1%}" if check.is_rate else f"{value:,.0f}"


def _severity(check: Check, value: float, limit: float) -> float:
    """How far past its limit a value is, as a factor (the report sorts by it)."""
    if check.kind == "max":
        return value / limit if limit > 0 else float("inf")
    if check.quantile is not None:  # token counts: 0 tokens is as bad as 1
        return limit / max(value, 1.0)
    return limit / value if value > 0 else float("inf")


def build_violation(
    check: Check, value: float, limit: float, overall_bad: bool, bad_sources: dict[str, float]
) -> Violation:
    ordered = sorted(bad_sources.items(), key=lambda kv: kv[1], reverse=check.kind == "max")
    relation = "above the limit" if check.kind == "max" else "below the floor"
    if overall_bad or not ordered:
        head = f"{check.name}: {fmt_value(check, value)} {check.what} ({relation} {fmt_value(check, limit)})"
        named = ordered
        label = "sources"
    else:
        # Quote the failing source's own value: the overall one may well be within the limit.
        worst, worst_value = ordered[0]
        head = (
            f"{check.name}: {fmt_value(check, worst_value)} {check.what} in {worst} ({relation} "
            f"{fmt_value(check, limit)}; overall {fmt_value(check, value)})"
        )
        named = ordered[1:]
        label = "also"
    if named:
        shown = ", ".join(f"{n} {fmt_value(check, v)}" for n, v in named[:MAX_NAMED_SOURCES])
        more = len(named) - MAX_NAMED_SOURCES
        head += f"; {label}: {shown}" + (f" and {more} more" if more > 0 else "")
    severity = max(
        [_severity(check, value, limit)]
        + [_severity(check, v, limit) for v in bad_sources.values()]
    )
    return Violation(
        check=check.name,
        value=value,
        threshold=limit,
        message=head,
        sources=[n for n, _ in ordered],
        per_source=dict(ordered),
        severity=severity,
        threshold_field=check.threshold_field,
        overall_bad=overall_bad,
    )


def is_confidently_violated(check: Check, group: GroupMetrics, limit: float) -> bool | None:
    """Whether `group` breaks `check` beyond sampling noise; None when the point value is fine."""
    value = group.values.get(check.name)
    if value is None or not is_violated(check, value, limit):
        return None
    counts = group.counts.get(check.name)
    if counts is None:
        return True  # a total or a token fraction: no sampling noise to allow for
    events, trials = counts
    if check.quantile is not None:
        return is_rate_above(events, trials, check.quantile)
    if check.kind == "max":
        return is_rate_above(events, trials, limit)
    return True


def evaluate(metrics: GateMetrics, thresholds: Thresholds) -> Verdict:
    """Compare every applicable metric with its threshold, overall and per source."""
    violations: list[Violation] = []
    evaluated: list[str] = []
    skipped: list[str] = []
    marginal: list[str] = []
    advisory: list[dict[str, Any]] = []
    for check in checks_for(metrics.gate):
        if check.name not in metrics.overall.values:
            skipped.append(check.name)
            continue
        evaluated.append(check.name)
        limit = float(getattr(thresholds, check.threshold))
        value = metrics.overall.values[check.name]
        judged = is_confidently_violated(check, metrics.overall, limit)
        overall_bad = bool(judged)
        if judged is False:
            marginal.append(f"{check.name}: overall {fmt_value(check, value)} (within noise)")
        bad_sources: dict[str, float] = {}
        if check.per_source:
            for name, group in metrics.sources.items():
                if _size(check, group) < thresholds.min_source_samples and (
                    check.name != "source_samples"
                ):
                    continue
                src_judged = is_confidently_violated(check, group, limit)
                if src_judged:
                    bad_sources[name] = group.values[check.name]
                elif src_judged is False:
                    marginal.append(
                        f"{check.name}: {name} {fmt_value(check, group.values[check.name])} "
                        f"on {group.samples:,} samples (within noise)"
                    )
        if check.name in DEFERS_TO_LIKELIHOOD and (overall_bad or bad_sources):
            overall_bad, bad_sources = _defer(check, metrics, thresholds, overall_bad,
                                              bad_sources, advisory)  # fmt: skip
        if overall_bad or bad_sources:
            violation = build_violation(check, value, limit, overall_bad, bad_sources)
            if check.name in DEFERS_TO_LIKELIHOOD:
                violation = _with_likelihood_hint(violation, metrics)
            violations.append(violation)
    violations.sort(key=lambda v: v.severity, reverse=True)
    return Verdict(metrics.gate, not violations, violations, evaluated, skipped, marginal, advisory)


# Why a deferring check's failure may be a healthy source, when the likelihood check did not
# judge it (docs/audit-gates.md 8.4).
LIKELIHOOD_HINT = {
    "wrong_language_rate": "translations and multilingual chat rightly answer in another script",
    "repetition_rate": "code tables and enumerations rightly repeat 4-grams",
}


def _with_likelihood_hint(violation: Violation, metrics: GateMetrics) -> Violation:
    """The violation with a hint when the target-likelihood check, which decides this check
    for a source whose rows are the target's own, judged none of the sources it names."""
    names = violation.sources or list(metrics.sources)
    judged = [n for n in names if LIKELIHOOD_CHECK in metrics.sources[n].counts]
    if judged:
        return violation
    hint = (
        f" (a healthy source can fail this: {LIKELIHOOD_HINT[violation.check]}; the "
        "target-likelihood check decides such a source, and it judged none here: give the gate "
        "the target's weights (--model with a folder holding them, or --scores from the canary "
        "or the score stage), or declare an imported source's sampling; docs/audit-gates.md 8.4)"
    )
    return replace(violation, message=violation.message + hint)


def _size(check: Check, group: GroupMetrics) -> float:
    """How many rows a check judges in a group: its sample for a sampled check."""
    if check.sampled:
        return group.counts.get(check.name, (0.0, 0.0))[1]
    return group.samples


def is_own(group: GroupMetrics, thresholds: Thresholds) -> bool:
    """Whether the target scores a group's rows as its own: a sample large enough to be judged
    whose off-distribution rate is within its limit."""
    counts = group.counts.get(LIKELIHOOD_CHECK)
    if counts is None or counts[1] < min(thresholds.min_source_samples, group.samples or 1):
        return False
    return group.values[LIKELIHOOD_CHECK] <= thresholds.max_off_distribution_rate


def _defer(
    check: Check,
    metrics: GateMetrics,
    thresholds: Thresholds,
    overall_bad: bool,
    bad_sources: dict[str, float],
    advisory: list[dict[str, Any]],
) -> tuple[bool, dict[str, float]]:
    """Move the violation of a deferring shape check out of the sources the target scores as
    its own (and out of the whole dataset when every source that crosses it is such a source)."""
    excused = {n: v for n, v in bad_sources.items() if is_own(metrics.sources[n], thresholds)}
    kept = {n: v for n, v in bad_sources.items() if n not in excused}
    limit = float(getattr(thresholds, check.threshold))
    crossing = [
        name
        for name, group in metrics.sources.items()
        if group.values.get(check.name) is not None
        and is_violated(check, group.values[check.name], limit)
    ]
    if not overall_bad or kept:
        overall_excused = False
    elif crossing:
        overall_excused = all(is_own(metrics.sources[n], thresholds) for n in crossing)
    else:  # no source crosses on its own: the whole dataset's sample decides
        overall_excused = is_own(metrics.overall, thresholds)
    if excused or overall_excused:
        names = sorted(excused) or sorted(crossing)
        groups = {n: metrics.sources[n] for n in names} or {"the whole dataset": metrics.overall}
        advisory.append(
            {
                "check": check.name,
                "thresholdField": check.threshold_field,
                "sources": names,
                "perSource": {n: round(g.values[check.name], 6) for n, g in groups.items()},
                "message": (
                    f"{check.name}: advisory in {', '.join(groups)}: the target scores their "
                    "rows as its own ("
                    + ", ".join(
                        f"{n} {g.values[LIKELIHOOD_CHECK]:.1%} off-distribution"
                        for n, g in groups.items()
                    )
                    + "): this shape is the target's own writing, not broken data"
                ),
            }
        )
    return overall_bad and not overall_excused, kept
