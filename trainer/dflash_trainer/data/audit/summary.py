"""Short forms of an audit report: the console summary and the stage termination payload."""

from __future__ import annotations

from typing import Any

from dflash_trainer.data.audit.checks import Violation
from dflash_trainer.data.audit.report import CHECK_BY_NAME, AuditReport, format_cell

CONSOLE_SOURCES = 20
# Checks whose problem shows at the end of a text: the console quotes its tail.
TAIL_CHECKS = ("repetition_rate", "silent_truncation_rate", "truncation_rate")
KEY_METRICS = {
    "tokens": ("loss_mask_mode_share", "stub_rate", "no_anchor_rate", "supervised_fraction",
               "empty_thinking_rate", "seq_truncation_rate", "repetition_rate", "mask_error_rate",
               "completion_tokens_p50", "off_distribution_rate"),
    "completions": ("stub_rate", "empty_thinking_rate", "empty_response_rate", "truncation_rate",
                    "silent_truncation_rate", "duplicate_completion_rate", "repetition_rate",
                    "wrong_language_rate", "completion_tokens_p50", "top_response_share",
                    "off_distribution_rate"),
    "prompts": ("malformed_rate", "role_error_rate", "empty_prompt_rate", "duplicate_rate"),
}  # fmt: skip


def build_console_summary(report: AuditReport, report_uri: str, quiet: bool = False) -> str:
    v = report.verdict
    m = report.metrics
    head = (
        f"{report.gate} gate: {v.label.upper()} ({m.overall.samples:,} samples, "
        f"{len(v.violations)} violated check(s), {report.settings.get('seconds', 0)} s) -> {report_uri}"
    )
    if quiet:
        return head
    lines = [head]
    lines += [f"  x {viol.message}" for viol in v.violations]
    lines += [f"  ~ {a['message']}" for a in v.advisory]
    likelihood = describe_likelihood(report)
    if likelihood:
        lines.append(f"  {likelihood}")
    keys = [k for k in KEY_METRICS.get(report.gate, ()) if k in m.overall.values]
    if keys and m.sources:
        width = max(len(n) for n in [*m.sources, "source"])
        lines.append("  " + "source".ljust(width) + "  samples  " + "  ".join(keys))
        rows = [("ALL", m.overall), *list(m.sources.items())[:CONSOLE_SOURCES]]
        for name, group in rows:
            cells = "  ".join(format_cell(k, group.values.get(k)).rjust(len(k)) for k in keys)
            lines.append(f"  {name.ljust(width)}  {group.samples:>7,}  {cells}")
    for check, rows_ in report.examples.items():
        if rows_:
            first = rows_[0]
            shown_keys = ("supervised", "response", "supervisedIds", "where", "marked")
            found = next((k for k in shown_keys if k in first), None)
            if found is None:
                continue
            key: str = found
            if check in TAIL_CHECKS:
                key = next((k for k in ("supervisedTail", "responseTail") if k in first), key)
            shown = first[key]
            lines.append(f"  example ({check}, {first.get('source')}): {shown!r}"[:300])
    return "\n".join(lines)


def describe_likelihood(report: AuditReport) -> str:
    """One plain line: what the target-likelihood check scored, or that it was skipped."""
    info = report.likelihood
    if not info:
        return ""
    if info.get("skipped"):
        return f"likelihood check skipped: {info['skipped']}"
    d = report.metrics.overall.details.get("likelihood") or {}
    return (
        f"likelihood: {d.get('scored', 0):,} rows scored by {info.get('scorer')} against "
        f"{info.get('sampling')}: {d.get('offRows', 0)} off-distribution, mean NLL "
        f"{d.get('meanNll', 0):.3f} nats/token"
    )


def describe_violation(x: Violation) -> str:
    """`stub_rate 87.0% in stub_x (limit 5.0%, overall 5.0%)`: the failing value first, so a
    violation found in one source never reads as passing."""
    limit = format_cell(x.check, x.threshold)
    source, value = x.worst
    if source is None:
        where = f" in {', '.join(x.sources[:3])}" if x.sources else ""
        return f"{x.check} {format_cell(x.check, x.value)} (limit {limit}){where}"
    others = list(x.sources[1:3])
    also = f"; also {', '.join(others)}" if others else ""
    return (
        f"{x.check} {format_cell(x.check, value)} in {source} (limit {limit}, overall "
        f"{format_cell(x.check, x.value)}{also})"
    )


def build_stage_payload(report: AuditReport, report_uri: str) -> dict[str, Any]:
    """Contract section 5, audit stage: verdict, violations (most severe first) and key figures."""
    v = report.verdict
    m = report.metrics
    keys = [k for k in KEY_METRICS.get(report.gate, ()) if k in m.overall.values]
    if v.passed:
        message = f"{report.gate} gate passed on {m.overall.samples:,} samples"
    else:
        names = ", ".join(describe_violation(x) for x in v.violations)
        message = f"{report.gate} gate failed: {names}"
    return {
        "stage": "audit",
        "ok": v.passed,
        "gate": report.gate,
        "verdict": v.label,
        "message": message,
        "violations": [x.to_dict() for x in v.violations],
        "metrics": {"samples": m.overall.samples}
        | {k: round(m.overall.values[k], 4) for k in keys if k in CHECK_BY_NAME},
        "reportUri": report_uri,
        **({"advisory": [a["message"] for a in v.advisory][:4]} if v.advisory else {}),
    }
