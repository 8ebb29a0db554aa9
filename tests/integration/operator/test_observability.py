"""The operator answers its liveness probe and exposes Prometheus metrics: runs per phase,
reconcile duration and errors, gate failures, and its own API requests."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

from dflash_dev.kube_wait import wait_for

from .conftest import imported_spec


def metric(text: str, name: str, labels: str = "") -> float | None:
    pattern = (
        re.escape(name)
        + (re.escape("{" + labels + "}") if labels else r"(\{[^}]*\})?")
        + r" ([0-9.e+-]+)"
    )
    found = re.search(pattern, text)
    return float(found.group(found.lastindex or 1)) if found else None


def test_liveness_and_metrics_report_runs_reconciles_and_gate_failures(
    harness: Any, make_spec: Any
) -> None:
    process = harness.start_operator()
    with urllib.request.urlopen(
        f"http://127.0.0.1:{process.health_port}/healthz", timeout=5
    ) as answer:
        assert answer.status == 200
    harness.apply_run("r1", imported_spec(make_spec))
    harness.finish_score("r1")
    harness.wait_phase("r1", "AuditingCompletions")
    harness.finish(
        "r1-audit-completions",
        {
            "verdict": "fail",
            "violations": [{"check": "maxStubRate", "value": 0.9, "threshold": 0.05}],
        },
        exit_code=3,
    )
    harness.wait_phase("r1", "AuditFailed")

    def scraped() -> str | None:
        text = process.metrics()
        return text if metric(text, "dflash_runs", 'phase="AuditFailed"') == 1.0 else None

    text = wait_for("the AuditFailed run in dflash_runs", scraped, 30)
    assert metric(text, "dflash_runs", 'phase="Training"') == 0.0
    assert metric(text, "dflash_gate_failures_total", 'gate="completions"') == 1.0
    assert (metric(text, "dflash_reconcile_duration_seconds_count") or 0) >= 2
    assert (metric(text, "dflash_reconciles_total", 'result="ok"') or 0) >= 2
    assert metric(text, "dflash_reconcile_errors_total") in (None, 0.0)
    # the score Job and the completions audit Job
    assert (metric(text, "dflash_children_created_total", 'kind="Job"') or 0) == 2
    assert (
        metric(text, "dflash_api_requests_total", 'code="200",kind="DFlashRun",verb="PATCH"') or 0
    ) >= 1
    assert (metric(text, "process_resident_memory_bytes") or 0) > 0
