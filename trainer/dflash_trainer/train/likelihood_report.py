"""What a failed likelihood monitor leaves behind: the report (`<run-root>/audit/training/`)
and the stage result the operator turns into `AuditFailed` (gate `training`), naming the
source and the step."""

from __future__ import annotations

import json
import logging
from typing import Any

from dflash_trainer.storage import StorageError, join_uri, store_for
from dflash_trainer.train.likelihood_monitor import LikelihoodMonitor, MonitorFailure

log = logging.getLogger(__name__)
GATE = "training"
CHECK = "off_distribution_rate"
THRESHOLD_FIELD = "maxOffDistributionRate"


def build_violation(monitor: LikelihoodMonitor, failure: MonitorFailure) -> dict[str, Any]:
    limit = monitor.cfg.max_off_distribution_rate
    ordered = sorted(failure.sources, key=lambda s: -failure.rates[s])
    worst = ordered[0]
    also = (
        "; also " + ", ".join(f"{s} {failure.rates[s]:.1%}" for s in ordered[1:])
        if ordered[1:]
        else ""
    )
    snapshot = monitor.snapshot()
    overall = snapshot["offRows"] / snapshot["scoredRows"] if snapshot["scoredRows"] else 0.0
    message = (
        f"{CHECK}: {failure.rates[worst]:.1%} of scored rows are not what the target would "
        f"generate in {worst} (above the limit {limit:.1%}; {failure.scored[worst]} rows scored "
        f"by step {failure.step}){also}"
    )
    return {
        "check": CHECK,
        "thresholdField": THRESHOLD_FIELD,
        "value": round(overall, 6),
        "threshold": limit,
        "message": message,
        "sources": ordered,
        "perSource": {s: round(failure.rates[s], 6) for s in ordered},
        "worstSource": worst,
        "worstValue": round(failure.rates[worst], 6),
    }


def build_stage_payload(
    monitor: LikelihoodMonitor, failure: MonitorFailure, report_uri: str
) -> dict[str, Any]:
    """Contract section 5, train stage stopped by the monitor."""
    violation = build_violation(monitor, failure)
    snapshot = monitor.snapshot()
    return {
        "stage": "train",
        "ok": False,
        "gate": GATE,
        "verdict": "fail",
        "step": failure.step,
        "message": f"training stopped at step {failure.step}: {violation['message']}",
        "violations": [violation],
        "metrics": {
            "step": float(failure.step),
            "scoredRows": float(snapshot["scoredRows"]),
            "offRows": float(snapshot["offRows"]),
            "offDistributionRate": violation["value"],
        },
        "reportUri": report_uri,
    }


def _decoder(target_path: str | None) -> Any:
    """The target's tokenizer for decoding examples, when it loads (else ids are shown)."""
    if not target_path:
        return None
    try:
        from dflash_trainer.data.target import load_tokenizer

        tokenizer = load_tokenizer(target_path)
    except Exception:  # a report without decoded text is still a report
        return None
    return lambda ids: tokenizer.decode(ids)


def build_report(
    monitor: LikelihoodMonitor, failure: MonitorFailure, target_path: str | None
) -> dict[str, Any]:
    decode = _decoder(target_path)
    examples = {
        source: [
            {
                "id": row.id,
                "step": row.step,
                "nllPerToken": round(row.nll, 4),
                "tokens": row.tokens,
                "outsideTokens": row.outside,
                "z": round(row.z, 2),
                "leastLikely": [
                    {
                        "position": p,
                        "token": decode([t]) if decode else t,
                        "logprob": round(lp, 3),
                    }
                    for p, t, lp in row.least_likely
                ],
            }
            for row in rows
        ]
        for source, rows in monitor.examples.items()
    }
    return {
        "gate": GATE,
        "verdict": "fail",
        "step": failure.step,
        "violations": [build_violation(monitor, failure)],
        "likelihood": monitor.snapshot(),
        "rule": monitor.rule.to_json(),
        "rowRule": {
            "engineTolerance": monitor.row_rule.engine_tolerance,
            "nllTolerance": monitor.row_rule.nll_tolerance,
            "rowOutsideShare": monitor.row_rule.row_outside_share,
            "rowZ": monitor.row_rule.row_z,
        },
        "minSourceRows": monitor.cfg.min_source_rows,
        # Sources never scored: their sampling is unknown (spec.data.sources[].sampling).
        "notJudged": monitor.unjudged,
        "offRowsSeenByRank0": examples,
    }


def write_report(report: dict[str, Any], folder: str) -> str:
    """report.json and a short report.md under `folder`; a write failure is logged, never
    hides the verdict."""
    uri = join_uri(folder, "report.json")
    lines = [f"# Training stopped by the likelihood monitor at step {report['step']}", ""]
    lines += [f"- {v['message']}" for v in report["violations"]]
    lines += [
        "",
        "| source | scored rows | off-distribution | mean NLL/token |",
        "|---|---|---|---|",
    ]
    for name, s in report["likelihood"]["sources"].items():
        lines.append(
            f"| {name} | {s['scoredRows']} | {s['offRows']} ({s['offDistributionRate']:.1%}) | "
            f"{s['meanNll']:.3f} |"
        )
    try:
        store = store_for(folder)
        store.write_bytes(join_uri(folder, "report.md"), ("\n".join(lines) + "\n").encode())
        store.write_bytes(uri, json.dumps(report, indent=1, ensure_ascii=False).encode())
    except StorageError as exc:
        log.warning("could not write the likelihood report to %s: %s", folder, exc)
    return folder
