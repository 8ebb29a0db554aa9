"""Stage results: the short JSON each stage container writes to its termination message
(docs/data-contracts.md section 5), read from pod status and turned into status parts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from dflash_operator.api.constants import Gate, Verdict
from dflash_operator.api.spec_audit import threshold_field_path
from dflash_operator.api.status_parts import (
    AuditResult,
    AuditViolation,
    EvaluationResult,
    ModelCopyResult,
    RegenerationProgress,
    TokenizationResult,
)
from dflash_operator.plan.observed import PodView, Termination
from dflash_operator.plan.redaction import redact

# Bounds on what one gate may put into status (a status object should stay small).
MAX_VIOLATIONS = 20
MAX_METRICS = 32
MAX_MESSAGE = 1024
# Exit code of an audit whose gate failed (data-contracts section 5).
EXIT_GATE_FAILED = 3


def parse_result(message: str | None) -> dict[str, Any] | None:
    """The JSON object of a termination message; None for logs or anything else."""
    if not message:
        return None
    try:
        value = json.loads(message)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _finished_at(pod: PodView) -> float:
    when = pod.terminated.finished_at if pod.terminated else None
    return when.timestamp() if when else 0.0


def _finished_pods(pods: Iterable[PodView]) -> list[PodView]:
    """Pods whose main container ended, oldest first."""
    return sorted((pod for pod in pods if pod.terminated is not None), key=_finished_at)


def latest_result(pods: Iterable[PodView]) -> tuple[dict[str, Any] | None, Termination | None]:
    """The result and termination of the pod that finished last (the Master of a PyTorchJob)."""
    finished = _finished_pods(pods)
    masters = [p for p in finished if p.replica_type in (None, "master")]
    chosen = (masters or finished)[-1:]
    if not chosen:
        return None, None
    term = chosen[0].terminated
    return parse_result(term.message if term else None), term


def _int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value[:MAX_MESSAGE] if isinstance(value, str) and value else None


def summarize_regeneration(pods: Iterable[PodView], shards: int) -> RegenerationProgress:
    """Per shard, the result of its succeeded pod; summed over the shards done so far."""
    per_index: dict[int, dict[str, Any]] = {}
    for pod in pods:
        if pod.index is None or pod.phase != "Succeeded" or pod.terminated is None:
            continue
        per_index[pod.index] = parse_result(pod.terminated.message) or {}
    results = list(per_index.values())
    return RegenerationProgress(
        shards_done=len(per_index),
        shards_total=shards,
        shards_skipped=sum(1 for r in results if r.get("skipped") is True),
        samples=sum(_int(r, "samples") or 0 for r in results),
        output_tokens=sum(_int(r, "outputTokens") or 0 for r in results),
    )


def summarize_canary(pods: Iterable[PodView]) -> RegenerationProgress:
    """The canary's single pod result (one shard of one)."""
    for pod in pods:
        if pod.phase == "Succeeded" and pod.terminated is not None:
            result = parse_result(pod.terminated.message) or {}
            return RegenerationProgress(
                shards_done=1,
                shards_total=1,
                shards_skipped=1 if result.get("skipped") is True else 0,
                samples=_int(result, "samples") or 0,
                output_tokens=_int(result, "outputTokens") or 0,
            )
    return RegenerationProgress(shards_done=0, shards_total=1)


def _violations(raw: Any) -> list[AuditViolation]:
    out = []
    for item in raw if isinstance(raw, list) else []:
        try:
            violation = AuditViolation.model_validate(item)
        except ValidationError:
            continue
        if violation.threshold_field:
            # The stage names the thresholds.yaml key; status names the spec field to edit.
            path = threshold_field_path(violation.threshold_field)
            violation = violation.model_copy(update={"threshold_field": path})
        out.append(violation)
        if len(out) >= MAX_VIOLATIONS:
            break
    return out


def _metrics(raw: Any) -> dict[str, float] | None:
    if not isinstance(raw, dict):
        return None
    kept = {k: float(v) for k, v in raw.items() if _float(raw, k) is not None}
    return dict(list(kept.items())[:MAX_METRICS]) or None


def build_audit_result(
    gate: Gate,
    pods: Iterable[PodView],
    *,
    job_ok: bool,
    generation: int,
    attempt: int,
    now: datetime,
) -> AuditResult | None:
    """The gate's verdict from its result (else from the exit code); None if it errored."""
    data, term = latest_result(pods)
    verdict: Verdict | None = None
    if data is not None and data.get("verdict") in (Verdict.PASS.value, Verdict.FAIL.value):
        verdict = Verdict(data["verdict"])
    elif job_ok:
        verdict = Verdict.PASS
    elif term is not None and term.exit_code == EXIT_GATE_FAILED:
        verdict = Verdict.FAIL
    if verdict is None:
        return None
    data = data or {}
    return AuditResult(
        verdict=verdict,
        violations=_violations(data.get("violations")) or None,
        metrics=_metrics(data.get("metrics")),
        report_uri=_str(data, "reportUri"),
        observed_generation=generation,
        attempt=attempt,
        time=now,
    )


def describe_scoring(pods: Iterable[PodView]) -> str:
    """The score stage's result in words: rows imported, rows scored, where the scores are."""
    data, _term = latest_result(pods)
    data = data or {}
    imported, scored = _int(data, "samples"), _int(data, "scored")
    where = _str(data, "scoresUri")
    text = f"{imported if imported is not None else '?'} imported completions in regen/"
    if scored:
        text += f", {scored} rows scored under the target ({where or 'no scores URI'})"
    else:
        text += " (no rows scored: audit.likelihood.samplesPerSource is 0)"
    return text


def summarize_model_copy(pods: Iterable[PodView], uri: str) -> ModelCopyResult:
    data, _term = latest_result(pods)
    data = data or {}
    return ModelCopyResult(
        uri=uri,
        revision=_str(data, "revision"),
        files=_int(data, "files"),
        bytes=_int(data, "bytes"),
        fetched_bytes=_int(data, "fetchedBytes"),
    )


def summarize_tokenization(pods: Iterable[PodView]) -> TokenizationResult:
    data, _term = latest_result(pods)
    data = data or {}
    return TokenizationResult(
        samples=_int(data, "samples"),
        tokens=_int(data, "tokens"),
        supervised_tokens=_int(data, "supervisedTokens"),
        truncated=_int(data, "truncated"),
        shards=_int(data, "shards"),
        manifest_uri=_str(data, "manifestUri"),
    )


def summarize_evaluation(pods: Iterable[PodView]) -> EvaluationResult:
    data, _term = latest_result(pods)
    data = data or {}
    per_position = data.get("perPositionAcceptance")
    positions = (
        [float(x) for x in per_position if isinstance(x, (int, float))][:MAX_METRICS]
        if isinstance(per_position, list)
        else None
    )
    acceptance = _float(data, "acceptanceLength")
    return EvaluationResult(
        acceptance_length=acceptance if acceptance is None else max(acceptance, 0.0),
        per_position_acceptance=positions or None,
        prompts=_int(data, "prompts"),
        report_uri=_str(data, "reportUri"),
    )


def training_final_uri(pods: Iterable[PodView]) -> str | None:
    data, _term = latest_result(pods)
    return _str(data or {}, "finalUri")


def describe_failure(pods: Iterable[PodView], fallback: str) -> str:
    """The most recent pod failure in words: 'pod x-0 exited 1 (Error): CUDA error ...'."""
    failures: list[tuple[datetime | None, PodView, Termination]] = []
    for pod in pods:
        for term in (pod.terminated, pod.last_failure):
            if term is not None and term.exit_code != 0:
                failures.append((term.finished_at, pod, term))
    if not failures:
        return fallback
    _when, pod, term = max(failures, key=lambda f: f[0].timestamp() if f[0] else 0.0)
    data = parse_result(term.message)
    detail = (data or {}).get("message") if data else term.message
    reason = f" ({term.reason})" if term.reason else ""
    text = f"pod {pod.name} exited {term.exit_code}{reason}"
    if isinstance(detail, str) and detail.strip():
        text += f": {detail.strip()}"
    # Redacted before the cut: a cut credential would no longer match its shape.
    return redact(text)[:MAX_MESSAGE]
