"""The checks of each gate and the verdict: which metric, which threshold, which direction.

A check fails on the overall value or on any source with enough samples; the violation names
the value, the limit and the offending sources, most severe first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic.alias_generators import to_camel

from dflash_trainer.data.audit.metrics import GateMetrics
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
    # completions
    Check("empty_response_rate", "completions", "max_empty_response_rate", "max",
          "of answers are empty"),
    Check("empty_thinking_rate", "*", "max_empty_thinking_rate", "max",
          "of samples have empty thinking"),
    Check("stub_rate", "*", "max_stub_rate", "max", "of samples are stubs"),
    Check("top_response_share", "completions", "max_top_response_share", "max",
          "of samples share one identical answer"),
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
)  # fmt: skip


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "thresholdField": self.threshold_field,
            "value": round(self.value, 6),
            "threshold": self.threshold,
            "message": self.message,
            "sources": self.sources,
            "perSource": {k: round(v, 6) for k, v in self.per_source.items()},
        }


@dataclass(frozen=True)
class Verdict:
    gate: str
    passed: bool
    violations: list[Violation]
    evaluated: list[str]
    skipped: list[str]

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
    if check.kind == "max":
        return value / limit if limit > 0 else float("inf")
    return limit / value if value > 0 else float("inf")


def build_violation(
    check: Check, value: float, limit: float, overall_bad: bool, bad_sources: dict[str, float]
) -> Violation:
    ordered = sorted(bad_sources.items(), key=lambda kv: kv[1], reverse=check.kind == "max")
    relation = "above" if check.kind == "max" else "below"
    if overall_bad:
        head = f"{check.name}: {fmt_value(check, value)} {check.what} ({relation} the limit {fmt_value(check, limit)})"
    else:
        head = f"{check.name}: {len(ordered)} source(s) {relation} the limit {fmt_value(check, limit)} (overall {fmt_value(check, value)})"
    if ordered:
        named = ", ".join(f"{n} {fmt_value(check, v)}" for n, v in ordered[:MAX_NAMED_SOURCES])
        more = len(ordered) - MAX_NAMED_SOURCES
        head += f"; sources: {named}" + (f" and {more} more" if more > 0 else "")
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
    )


def evaluate(metrics: GateMetrics, thresholds: Thresholds) -> Verdict:
    """Compare every applicable metric with its threshold, overall and per source."""
    violations: list[Violation] = []
    evaluated: list[str] = []
    skipped: list[str] = []
    for check in checks_for(metrics.gate):
        if check.name not in metrics.overall.values:
            skipped.append(check.name)
            continue
        evaluated.append(check.name)
        limit = float(getattr(thresholds, check.threshold))
        value = metrics.overall.values[check.name]
        overall_bad = is_violated(check, value, limit)
        bad_sources: dict[str, float] = {}
        if check.per_source:
            for name, group in metrics.sources.items():
                if group.samples < thresholds.min_source_samples and check.name != "source_samples":
                    continue
                src_value = group.values.get(check.name)
                if src_value is not None and is_violated(check, src_value, limit):
                    bad_sources[name] = src_value
        if overall_bad or bad_sources:
            violations.append(build_violation(check, value, limit, overall_bad, bad_sources))
    violations.sort(key=lambda v: v.severity, reverse=True)
    return Verdict(metrics.gate, not violations, violations, evaluated, skipped)
