"""Text and JSON/YAML views of run summaries: the `status` page with a progress bar per stage,
the `list` table, durations and ages. Pure string building; `summary.py` computes the facts.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import yaml

from dflash_operator.api.constants import Phase
from dflash_operator.api.status import format_count
from dflash_operator.cli.summary import RunSummary, StageLine, StageState, failed_gates

BAR_WIDTH = 24
_UNICODE_BAR = ("█", "░")
_ASCII_BAR = ("#", "-")
_MINUTE, _HOUR, _DAY = 60, 3600, 86400
# A label column wide enough for the longest stage name, "audit-completions".
_STAGE_COLUMN = 18
_STATE_COLUMN = 9
# What follows a bar: " 100%".
_PERCENT_WIDTH = len(" 100%")
OUTPUT_FORMATS = ("json", "yaml")
WIDE_HEADER = ["TARGET", "POOLS", "GPU-HOURS", "GENERATION"]


def human_duration(seconds: float) -> str:
    """45s, 12m, 7h 46m, 2d 3h: two units at most, like kubectl's ages."""
    total = round(max(0.0, seconds))
    if total < _MINUTE:
        return f"{total}s"
    if total < _HOUR:
        return f"{total // _MINUTE}m"
    if total < _DAY:
        hours, rest = divmod(total, _HOUR)
        return f"{hours}h {rest // _MINUTE}m" if rest >= _MINUTE else f"{hours}h"
    days, rest = divmod(total, _DAY)
    return f"{days}d {rest // _HOUR}h" if rest >= _HOUR else f"{days}d"


def parse_time(value: str | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def ago(value: str | datetime | None, now: datetime) -> str:
    when = parse_time(value)
    return "-" if when is None else f"{human_duration((now - when).total_seconds())} ago"


def progress_bar(line: StageLine, unicode: bool) -> str:
    full, empty = _UNICODE_BAR if unicode else _ASCII_BAR
    if line.fraction is None:
        return empty * BAR_WIDTH + " " * _PERCENT_WIDTH
    filled = round(line.fraction * BAR_WIDTH)
    return full * filled + empty * (BAR_WIDTH - filled) + f" {line.fraction * 100:3.0f}%"


def _checkpoint_text(summary: RunSummary, now: datetime) -> str | None:
    checkpoint = summary.checkpoint
    if checkpoint is None or checkpoint.uri is None:
        return None
    step = f"step {checkpoint.step}, " if checkpoint.step is not None else ""
    when = f" (committed {ago(checkpoint.time, now)})" if checkpoint.time else ""
    return f"{step}{checkpoint.uri}{when}"


def _eta_text(summary: RunSummary) -> str:
    if summary.eta is not None:
        return f"{human_duration(summary.eta.seconds)} ({summary.eta.basis})"
    if summary.phase is not None and summary.phase.is_terminal():
        return "-"
    return "unknown (no progress reported yet)"


def _next_steps(summary: RunSummary) -> list[str]:
    run = f"{summary.name} -n {summary.namespace}"
    if summary.phase == Phase.AUDIT_FAILED:
        gates = failed_gates(summary.status)
        gate = gates[0].value if gates else "<gate>"
        if gates and not gates[0].approvable:  # the training monitor stopped training
            return [
                f"see why:          kubectl dflash audit {run}",
                f"fix data, retry:  kubectl dflash retry {run} --stage tokenize",
                "or raise spec.audit.likelihood.maxOffDistributionRate, then: "
                f"kubectl dflash retry {run} --stage train",
            ]
        return [
            f"see why:          kubectl dflash audit {run}",
            f"fix data, retry:  kubectl dflash retry {run}",
            f"or accept it:     kubectl dflash approve {run} --gate {gate}",
        ]
    if summary.phase == Phase.FAILED:
        stage = summary.current.stage.value if summary.current else "<stage>"
        return [f"fix the cause, then: kubectl dflash retry {run} --stage {stage}"]
    if summary.current is not None and summary.current.state == StageState.RUNNING:
        return [f"follow it: kubectl dflash logs {run}"]
    return []


def pools_text(summary: RunSummary) -> str:
    """status.nodePools as one table cell: 'regen=b200,train=rtx-pro-6000'."""
    pools = summary.status.node_pools
    return ",".join(pools.split()) if pools else "-"


def gpu_hours_text(summary: RunSummary, by_stage: bool = False) -> str:
    hours = summary.status.gpu_hours
    if hours is None:
        return "-"
    text = f"{hours.total:.1f}"
    if by_stage and hours.by_stage:
        parts = ", ".join(f"{stage} {value:.1f}" for stage, value in hours.by_stage.items())
        text += f" ({parts})"
    return text


def generation_text(summary: RunSummary) -> str:
    """'<metadata.generation>/<status.observedGeneration>': unequal while an edit is pending."""
    observed = summary.status.observed_generation
    spec = "-" if summary.generation is None else str(summary.generation)
    return f"{spec}/{'-' if observed is None else observed}"


def _wide_rows(summary: RunSummary) -> list[tuple[str, str]]:
    observed = summary.status.observed_generation
    pending = summary.generation is not None and observed != summary.generation
    generation = f"{summary.generation if summary.generation is not None else '-'}"
    generation += f" (observed {observed if observed is not None else '-'})"
    if pending:
        generation += ": the operator has not acted on the newest spec yet"
    return [
        ("Generation", generation),
        ("Pools", summary.status.node_pools or "-"),
        ("GPU-hours", gpu_hours_text(summary, by_stage=True)),
    ]


def render_status(summary: RunSummary, now: datetime, unicode: bool, wide: bool = False) -> str:
    status = summary.status
    rows = [
        ("Name", summary.name),
        ("Namespace", summary.namespace),
        ("Target", summary.target or "-"),
        ("Phase", summary.phase.value if summary.phase else "- (no status yet)"),
    ]
    if summary.message:
        rows.append(("Message", summary.message))
    if status.start_time is not None:
        rows.append(("Started", f"{status.start_time:%Y-%m-%d %H:%M:%S} UTC"))
    if wide:
        rows += _wide_rows(summary)
    lines = [f"{key + ':':<12} {value}" for key, value in rows]
    lines.append("")
    progress_column = BAR_WIDTH + _PERCENT_WIDTH
    lines.append(
        f"{'STAGE':<{_STAGE_COLUMN}} {'PROGRESS':<{progress_column}} "
        f"{'STATE':<{_STATE_COLUMN}} DETAILS"
    )
    for line in summary.stages:
        bar = progress_bar(line, unicode)
        lines.append(
            f"{line.stage.value:<{_STAGE_COLUMN}} {bar} {line.state.value:<{_STATE_COLUMN}} "
            f"{line.detail}".rstrip()
        )
    lines.append("")
    tail = [("Audit", summary.audit_verdict or "no gate has run yet")]
    tail.append(("Checkpoint", _checkpoint_text(summary, now) or "none committed yet"))
    tail.append(("ETA", _eta_text(summary)))
    if status.drafter_uri:
        length = status.acceptance_length
        extra = f" (acceptance length {length:.2f})" if length is not None else ""
        tail.append(("Drafter", f"{status.drafter_uri}{extra}"))
    lines += [f"{key + ':':<12} {value}" for key, value in tail]
    steps = _next_steps(summary)
    if steps:
        lines += ["", "Next:", *(f"  {step}" for step in steps)]
    return "\n".join(lines) + "\n"


def summary_to_data(summary: RunSummary, now: datetime) -> dict[str, Any]:
    """The `-o json|yaml` form of `status`: the same facts, camelCase like the API."""
    checkpoint = summary.checkpoint
    return {
        "name": summary.name,
        "namespace": summary.namespace,
        "target": summary.target,
        "phase": summary.phase.value if summary.phase else None,
        "message": summary.message,
        "progress": summary.progress,
        "stages": [
            {
                "stage": line.stage.value,
                "state": line.state.value,
                "fraction": line.fraction,
                "details": line.detail or None,
            }
            for line in summary.stages
        ],
        "audit": summary.status.audit.to_api() if summary.status.audit else None,
        "checkpoint": checkpoint.to_api() if checkpoint else None,
        "etaSeconds": round(summary.eta.seconds) if summary.eta else None,
        "drafterUri": summary.status.drafter_uri,
        "acceptanceLength": summary.status.acceptance_length,
    }


def render_list(
    summaries: list[RunSummary], now: datetime, all_namespaces: bool, wide: bool = False
) -> str:
    header = ["NAME", "PHASE", "PROGRESS", "AUDIT", "CHECKPOINT", "ETA", "AGE"]
    if wide:
        header += WIDE_HEADER
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    table = [header]
    for summary in summaries:
        step = summary.checkpoint.step if summary.checkpoint else None
        row = [
            summary.name,
            summary.phase.value if summary.phase else "-",
            summary.progress or "-",
            summary.audit_verdict or "-",
            f"step {format_count(step)}" if step is not None else "-",
            human_duration(summary.eta.seconds) if summary.eta else "-",
            ago(summary.created, now).removesuffix(" ago"),
        ]
        if wide:
            row += [
                summary.target or "-",
                pools_text(summary),
                gpu_hours_text(summary),
                generation_text(summary),
            ]
        if all_namespaces:
            row.insert(0, summary.namespace)
        table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in table
    )


def dump(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
