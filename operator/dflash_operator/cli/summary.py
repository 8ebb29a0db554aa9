"""What `kubectl dflash status` and `list` show, computed from a DFlashRun as the API server
returns it: the state and progress of each stage, audit verdicts, the checkpoint and an ETA.
Pure: no I/O, the time is passed in. Text and JSON rendering live in `render.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from dflash_operator.api.constants import (
    GATE_STAGES,
    STAGE_CONDITIONS,
    STAGE_PHASES,
    ConditionStatus,
    Gate,
    Phase,
    Reason,
    Stage,
    Verdict,
)
from dflash_operator.api.status import DFlashRunStatus, format_bytes, format_count
from dflash_operator.api.status_parts import AuditResult, CheckpointStatus
from dflash_operator.cli.errors import CliError

# The stages a run goes through, in order (cleanup and config are not pipeline stages).
PIPELINE = (
    Stage.MODEL,
    Stage.CANARY,
    Stage.AUDIT_CANARY,
    Stage.REGEN,
    Stage.SCORE,
    Stage.AUDIT_COMPLETIONS,
    Stage.TOKENIZE,
    Stage.AUDIT_TOKENS,
    Stage.TRAIN,
    Stage.EVAL,
)
CANARY_STAGES = (Stage.CANARY, Stage.AUDIT_CANARY)
STAGE_GATES = {stage: gate for gate, stage in GATE_STAGES.items()}
PHASE_STAGES = {phase: stage for stage, phase in STAGE_PHASES.items()}
FAILED_REASONS = {Reason.STAGE_FAILED, Reason.RETRIES_EXHAUSTED, Reason.AUDIT_FAILED}
# Phases in which some stage is stopped rather than running: which one is found from conditions.
_STOPPED_PHASES = {Phase.FAILED, Phase.AUDIT_FAILED, Phase.SUSPENDED}


class StageState(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"
    SUSPENDED = "suspended"


@dataclass(frozen=True)
class StageLine:
    stage: Stage
    state: StageState
    fraction: float | None
    detail: str


@dataclass(frozen=True)
class Eta:
    seconds: float
    basis: str


@dataclass(frozen=True)
class RunSummary:
    name: str
    namespace: str
    created: str | None
    target: str | None
    phase: Phase | None
    message: str | None
    progress: str | None
    audit_verdict: str | None
    stages: list[StageLine]
    status: DFlashRunStatus
    eta: Eta | None
    # metadata.generation: the spec's version, compared with status.observedGeneration.
    generation: int | None = None

    @property
    def current(self) -> StageLine | None:
        """The stage that runs, or stopped the run (failed, suspended); None when none does."""
        active = (StageState.RUNNING, StageState.FAILED, StageState.SUSPENDED)
        return next((line for line in self.stages if line.state in active), None)

    @property
    def checkpoint(self) -> CheckpointStatus | None:
        return self.status.checkpoint


def parse_status(run: dict[str, Any]) -> DFlashRunStatus:
    name = (run.get("metadata") or {}).get("name", "?")
    try:
        return DFlashRunStatus.model_validate(run.get("status") or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"status.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise CliError(
            f"the status of dflashrun {name} cannot be read ({problems}); is kubectl-dflash "
            "older than the operator that wrote it?"
        ) from exc


def pipeline_of(status: DFlashRunStatus) -> tuple[Stage, ...]:
    """The stages of this run: the canary's, the model copy and the score stage only where the
    status knows of them (a run made by an operator without the canary has no canary conditions
    at all; a target on S3 or a PVC is not copied; only imported completions are scored)."""
    stages: tuple[Stage, ...] = PIPELINE
    known = any(status.condition(STAGE_CONDITIONS[s]) is not None for s in CANARY_STAGES)
    if not (known or status.phase in (Phase.CANARY, Phase.AUDITING_CANARY)):
        stages = tuple(s for s in stages if s not in CANARY_STAGES)
    copied = status.condition(STAGE_CONDITIONS[Stage.MODEL]) is not None
    if not (copied or status.phase == Phase.FETCHING_MODEL):
        stages = tuple(s for s in stages if s != Stage.MODEL)
    # The score stage exists only for imported completions (regeneration off).
    scored = status.condition(STAGE_CONDITIONS[Stage.SCORE]) is not None
    if not (scored or status.phase == Phase.SCORING):
        stages = tuple(s for s in stages if s != Stage.SCORE)
    return stages


def _gate_result(status: DFlashRunStatus, stage: Stage) -> AuditResult | None:
    gate = STAGE_GATES.get(stage)
    if gate is None or status.audit is None:
        return None
    return status.audit.result(gate)


def _is_finished(status: DFlashRunStatus, stage: Stage) -> bool:
    condition = status.condition(STAGE_CONDITIONS[stage])
    if condition is not None and condition.status == ConditionStatus.TRUE:
        return True
    result = _gate_result(status, stage)
    return result is not None and (result.verdict == Verdict.PASS or bool(result.approved))


def _stopped_stage(status: DFlashRunStatus, phase: Phase) -> Stage | None:
    """Which stage a Failed / AuditFailed / Suspended run stopped at."""
    pipeline = pipeline_of(status)
    for stage in pipeline:
        condition = status.condition(STAGE_CONDITIONS[stage])
        failing = condition is not None and condition.reason in FAILED_REASONS
        if failing and condition is not None and condition.status != ConditionStatus.TRUE:
            return stage
        result = _gate_result(status, stage)
        gate_failed = result is not None and result.verdict == Verdict.FAIL and not result.approved
        if phase == Phase.AUDIT_FAILED and gate_failed:
            return stage
    return next((stage for stage in pipeline if not _is_finished(status, stage)), None)


def _state(status: DFlashRunStatus, phase: Phase | None, stage: Stage) -> StageState:
    condition = status.condition(STAGE_CONDITIONS[stage])
    if condition is not None and condition.status == ConditionStatus.TRUE:
        skipped = condition.reason == Reason.STAGE_SKIPPED
        return StageState.SKIPPED if skipped else StageState.DONE
    if phase == Phase.SUCCEEDED or _is_finished(status, stage):
        return StageState.DONE
    if phase in _STOPPED_PHASES and _stopped_stage(status, phase) == stage:
        return StageState.SUSPENDED if phase == Phase.SUSPENDED else StageState.FAILED
    if phase is not None and PHASE_STAGES.get(phase) == stage:
        return StageState.RUNNING
    return StageState.WAITING


def _ratio(done: int | None, total: int | None) -> float | None:
    if done is None or not total:
        return None
    return min(1.0, done / total)


def _measured(status: DFlashRunStatus, stage: Stage) -> tuple[float | None, str]:
    """(fraction done, details) from what the stage reported."""
    stages = status.stages
    if stage == Stage.MODEL and stages is not None and stages.model is not None:
        copy = stages.model
        parts = [f"{copy.files or 0} files", format_bytes(copy.bytes or 0)]
        if copy.revision:
            parts.append(f"commit {copy.revision[:12]}")
        return 1.0, " · ".join(parts)
    if stage == Stage.CANARY and stages is not None and stages.canary is not None:
        canary = stages.canary
        parts = [f"{format_count(canary.samples or 0)} samples"]
        if canary.output_tokens:
            parts.append(f"{format_count(canary.output_tokens)} tokens")
        return _ratio(canary.shards_done, canary.shards_total), " · ".join(parts)
    if stage == Stage.REGEN and stages is not None and stages.regeneration is not None:
        regen = stages.regeneration
        parts = []
        if regen.shards_total:
            parts.append(f"{regen.shards_done or 0}/{regen.shards_total} shards")
        if regen.samples is not None:
            total = f"/{format_count(regen.samples_total)}" if regen.samples_total else ""
            parts.append(f"{format_count(regen.samples)}{total} completions")
        if regen.output_tokens:
            parts.append(f"{format_count(regen.output_tokens)} tokens")
        fraction = _ratio(regen.shards_done, regen.shards_total)
        if fraction is None:
            fraction = _ratio(regen.samples, regen.samples_total)
        return fraction, " · ".join(parts)
    if stage == Stage.TOKENIZE and stages is not None and stages.tokenization is not None:
        tok = stages.tokenization
        parts = []
        if tok.samples is not None:
            parts.append(f"{format_count(tok.samples)} samples")
        if tok.tokens is not None:
            supervised = tok.supervised_tokens
            extra = f" ({format_count(supervised)} supervised)" if supervised is not None else ""
            parts.append(f"{format_count(tok.tokens)} tokens{extra}")
        if tok.truncated:
            parts.append(f"{format_count(tok.truncated)} truncated")
        return None, " · ".join(parts)
    if stage == Stage.TRAIN and status.training is not None:
        train = status.training
        parts = []
        if train.step is not None:
            total = f"/{train.total_steps}" if train.total_steps else ""
            parts.append(f"step {train.step}{total}")
        if train.loss is not None:
            parts.append(f"loss {train.loss:.3g}")
        if train.accuracy is not None:
            parts.append(f"accuracy {train.accuracy:.2f}")
        if train.tokens_per_second:
            parts.append(f"{format_count(round(train.tokens_per_second))} tok/s")
        return _ratio(train.step, train.total_steps), " · ".join(parts)
    if stage == Stage.EVAL:
        evaluation = stages.evaluation if stages is not None else None
        length = status.acceptance_length
        if length is None and evaluation is not None:
            length = evaluation.acceptance_length
        if length is not None:
            prompts = evaluation.prompts if evaluation is not None else None
            on = f" on {prompts} prompts" if prompts else ""
            return None, f"acceptance length {length:.2f}{on}"
    result = _gate_result(status, stage)
    if result is not None:
        return None, gate_verdict_text(result)
    return None, ""


def gate_verdict_text(result: AuditResult) -> str:
    count = len(result.violations or [])
    checks = f"{count} check{'s' if count != 1 else ''} violated"
    if result.verdict == Verdict.PASS:
        return "pass"
    return f"approved ({checks})" if result.approved else f"fail ({checks})"


def _stage_line(status: DFlashRunStatus, phase: Phase | None, stage: Stage) -> StageLine:
    state = _state(status, phase, stage)
    fraction, detail = _measured(status, stage)
    if state in (StageState.DONE, StageState.SKIPPED):
        fraction = 1.0
    elif state == StageState.WAITING:
        fraction = 0.0
    return StageLine(stage, state, fraction, detail)


def _eta(status: DFlashRunStatus, current: StageLine | None, now: datetime) -> Eta | None:
    if current is None or current.state != StageState.RUNNING:
        return None
    training = status.training
    if current.stage == Stage.TRAIN and training is not None and training.eta_seconds is not None:
        basis = "reported by the trainer"
        if training.updated_at is not None:
            seconds = (now - training.updated_at).total_seconds()
            return Eta(max(0.0, training.eta_seconds - seconds), basis)
        return Eta(training.eta_seconds, basis)
    condition = status.condition(STAGE_CONDITIONS[current.stage])
    fraction = current.fraction
    if condition is None or fraction is None or not 0 < fraction < 1:
        return None
    # The stage's condition turned to "running" when the stage started.
    elapsed = (now - condition.last_transition_time).total_seconds()
    if elapsed <= 0:
        return None
    return Eta(elapsed * (1 - fraction) / fraction, f"estimated from {current.stage} progress")


def summarize(run: dict[str, Any], now: datetime) -> RunSummary:
    metadata = run.get("metadata") or {}
    status = parse_status(run)
    phase = status.phase
    stages = [_stage_line(status, phase, stage) for stage in pipeline_of(status)]
    target = ((run.get("spec") or {}).get("target") or {}).get("model")
    summary = RunSummary(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        created=metadata.get("creationTimestamp"),
        target=str(target) if target else None,
        phase=phase,
        message=status.message,
        progress=status.progress,
        audit_verdict=status.audit_verdict,
        stages=stages,
        status=status,
        eta=None,
        generation=generation
        if isinstance(generation := metadata.get("generation"), int)
        else None,
    )
    eta = _eta(status, summary.current, now)
    return summary if eta is None else replace(summary, eta=eta)


def failed_gates(status: DFlashRunStatus) -> list[Gate]:
    """Gates that failed and were not approved, in pipeline order."""
    if status.audit is None:
        return []
    return [
        gate
        for gate in Gate
        if (result := status.audit.result(gate)) is not None
        and result.verdict == Verdict.FAIL
        and not result.approved
    ]
