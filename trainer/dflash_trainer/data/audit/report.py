"""Audit reports: `report.json` (machine), `report.md` (human) and PNG histograms, written to a
local folder or an S3 prefix. Layout and how to read it: docs/audit-gates.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dflash_trainer.data.audit.checks import CHECKS, Verdict, fmt_value
from dflash_trainer.data.audit.metrics import OVERALL, GateMetrics
from dflash_trainer.data.audit.plots import build_histogram_png
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.storage import join_uri, store_for

PLOTS = {
    "loss_mask_sum": ("loss_mask sums per sample", "supervised tokens per sample"),
    "seq_len": ("sequence lengths", "tokens per sample"),
    "output_tokens": ("generated tokens per answer", "generated tokens"),
    "thinking_tokens": ("reasoning tokens per answer", "reasoning tokens"),
    "nll_per_token": (
        "target NLL per supervised token of each scored row",
        "mean NLL per token (nats)",
    ),
}
# Plots whose integer bins stand for a finer unit (NLL: hundredths of a nat).
PLOT_SCALES = {"nll_per_token": 0.01}
CHECK_BY_NAME = {c.name: c for c in CHECKS}
MAX_SOURCES_IN_TABLE = 40


@dataclass
class AuditReport:
    gate: str
    input_uri: str
    verdict: Verdict
    metrics: GateMetrics
    thresholds: Thresholds
    settings: dict[str, Any]
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    plots: dict[str, bytes] = field(default_factory=dict)
    # The target-likelihood check: how it was scored (or why not) and the least likely rows.
    likelihood: dict[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


def build_plots(metrics: GateMetrics, thresholds: Thresholds) -> dict[str, bytes]:
    out = {}
    for name, per_group in metrics.histograms.items():
        if not any(h.total for h in per_group.values()):
            continue
        title, xlabel = PLOTS.get(name, (name, name))
        marker = thresholds.stub_tokens if name in ("loss_mask_sum", "output_tokens") else None
        scale = PLOT_SCALES.get(name, 1.0)
        out[f"{name}.png"] = build_histogram_png(per_group, title, xlabel, marker, scale)
    return out


def _round(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in values.items()}


def build_report_json(report: AuditReport) -> dict[str, Any]:
    m = report.metrics
    return {
        "gate": report.gate,
        "verdict": report.verdict.label,
        "createdAt": report.created_at,
        "input": report.input_uri,
        "violations": [v.to_dict() for v in report.verdict.violations],
        "evaluatedChecks": report.verdict.evaluated,
        "skippedChecks": report.verdict.skipped,
        "thresholds": report.thresholds.model_dump(by_alias=True),
        "settings": report.settings,
        "overall": {
            "samples": m.overall.samples,
            "metrics": _round(m.overall.values),
            "details": m.overall.details,
        },
        "sources": {
            name: {"samples": g.samples, "metrics": _round(g.values), "details": g.details}
            for name, g in m.sources.items()
        },
        "examples": report.examples,
        "plots": sorted(report.plots),
        "notes": m.notes,
        "marginal": report.verdict.marginal,
        "advisory": report.verdict.advisory,
        "likelihood": report.likelihood,
    }


def format_cell(check_name: str, value: float | None) -> str:
    check = CHECK_BY_NAME.get(check_name)
    if value is None:
        return "-"
    return fmt_value(check, value) if check else f"{value:g}"


def build_report_markdown(report: AuditReport) -> str:
    v = report.verdict
    m = report.metrics
    lines = [f"# Data audit: {report.gate} gate: **{v.label.upper()}**", ""]
    lines += [
        f"Input: `{report.input_uri}`  ",
        f"Samples: {m.overall.samples:,}  ",
        f"Created: {report.created_at}",
        "",
    ]
    if v.violations:
        lines += [
            "## Violated checks",
            "",
            "| check | value | limit | sources |",
            "|---|---|---|---|",
        ]
        for viol in v.violations:
            srcs = (
                ", ".join(
                    f"{s} ({format_cell(viol.check, viol.per_source[s])})" for s in viol.sources[:8]
                )
                or "-"
            )
            lines.append(
                f"| `{viol.check}` | {format_cell(viol.check, viol.value)} | {format_cell(viol.check, viol.threshold)} | {srcs} |"
            )
        lines += ["", *[f"- {viol.message}" for viol in v.violations], ""]
    else:
        lines += ["All checks passed.", ""]
    checks = [c for c in v.evaluated if c != "samples"]
    lines += ["## Per source", "", "| source | samples | " + " | ".join(f"`{c}`" for c in checks) + " |",
              "|---|---|" + "---|" * len(checks)]  # fmt: skip
    groups = [(OVERALL, m.overall), *list(m.sources.items())[:MAX_SOURCES_IN_TABLE]]
    for name, group in groups:
        label = "**all**" if name == OVERALL else name
        cells = " | ".join(format_cell(c, group.values.get(c)) for c in checks)
        lines.append(f"| {label} | {group.samples:,} | {cells} |")
    lines.append("")
    for detail in ("lossMaskSum", "outputTokens", "thinkingTokens", "seqLen"):
        summary = m.overall.details.get(detail)
        if isinstance(summary, dict):
            lines.append(
                f"**{detail}** (all): " + ", ".join(f"{k} {val}" for k, val in summary.items())
            )
    lines.append("")
    for png in sorted(report.plots):
        lines += [f"![{png}]({png})", ""]
    lines += build_likelihood_markdown(report)
    if report.examples:
        lines += ["## Examples (per failing check)", ""]
        for check, rows in report.examples.items():
            lines.append(f"### `{check}`")
            lines.append("")
            for row in rows:
                lines += ["```", json.dumps(row, ensure_ascii=False, indent=1)[:2000], "```"]
            lines.append("")
    if m.notes or v.skipped or v.marginal or v.advisory:
        lines += ["## Notes", ""] + [f"- {n}" for n in m.notes]
        lines += [f"- across its limit but within sampling noise: {n}" for n in v.marginal]
        lines += [f"- advisory (not failed): {a['message']}" for a in v.advisory]
        if v.skipped:
            lines.append(f"- checks not applicable to this data: {', '.join(v.skipped)}")
    return "\n".join(lines) + "\n"


def build_likelihood_markdown(report: AuditReport) -> list[str]:
    """The target-likelihood section: per-source figures, and the least likely rows with their
    least likely tokens marked."""
    info = report.likelihood
    if not info:
        return []
    lines = ["## Target likelihood", ""]
    if info.get("skipped"):
        return [*lines, f"Skipped: {info['skipped']}.", ""]
    lines += [
        f"Scored by {info.get('scorer')} against {info.get('sampling')}: `{info.get('scoresUri')}`",
        "",
    ]
    lines += ["| source | scored | off-distribution | mean NLL/token | p50 | p90 | outside support | "
              f"outside top-{info.get('topK')} |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    m = report.metrics
    for name, group in [(OVERALL, m.overall), *m.sources.items()]:
        d = group.details.get("likelihood")
        if not d:
            continue
        label = "**all**" if name == OVERALL else name
        rate = d["offRows"] / d["scored"] if d["scored"] else 0.0
        lines.append(
            f"| {label} | {d['scored']:,} | {d['offRows']} ({rate:.1%}) | {d['meanNll']:.3f} | "
            f"{d['nllP50']:.2f} | {d['nllP90']:.2f} | {d['outsideShare']:.2%} | {d['topKShare']:.2%} |"
        )
    lines += (
        ["", "![nll_per_token.png](nll_per_token.png)", ""]
        if "nll_per_token.png" in report.plots
        else [""]
    )
    lines += ["### Least likely rows of each source (least likely tokens marked ⟦ ⟧)", ""]
    for source, rows in (info.get("leastLikely") or {}).items():
        lines += [f"**{source}**", ""]
        for row in rows:
            head = (f"- `{row['id']}`: {row['nllPerToken']:.3f} nats/token, {row['outsideTokens']} of "
                    f"{row['tokens']} tokens outside the support, z {row['z']:.1f}"
                    + (" - **off-distribution**" if row["offDistribution"] else ""))  # fmt: skip
            lines.append(head)
            if row.get("marked"):
                lines += [
                    "",
                    "```",
                    str(row.get("promptTail", ""))[-200:],
                    "---",
                    row["marked"][:1500],
                    "```",
                ]
        lines.append("")
    return lines


def write_report(report: AuditReport, out: str) -> str:
    """Write every file under `out` (local folder or s3:// prefix); returns report.json's URI."""
    store = store_for(out)
    for name, data in report.plots.items():
        store.write_bytes(join_uri(out, name), data)
    store.write_bytes(join_uri(out, "report.md"), build_report_markdown(report).encode())
    uri = join_uri(out, "report.json")
    store.write_bytes(
        uri, json.dumps(build_report_json(report), indent=1, ensure_ascii=False).encode()
    )
    return uri
