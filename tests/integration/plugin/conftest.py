"""Fixtures for the kubectl plugin tests: runs created with `kubectl apply` of an example, and
realistic statuses (mid-training, audit failed, failed, succeeded) written through the status
subresource from the API's own models, as the operator and trainer would write them."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev.pytest_plugin import ClusterHandle
from dflash_operator.api.constants import (
    CRD_NAME,
    ConditionStatus,
    ConditionType,
    Gate,
    Phase,
    Reason,
    Stage,
    Verdict,
)
from dflash_operator.api.status import (
    DFlashRunStatus,
    build_condition,
    format_audit_verdict,
    format_progress,
)
from dflash_operator.api.status_parts import (
    AuditResult,
    AuditStatus,
    AuditViolation,
    CheckpointStatus,
    EvaluationResult,
    RegenerationProgress,
    StageProgress,
    TokenizationResult,
    TrainingProgress,
)
from dflash_operator.cli.main import main

ROOT = Path(__file__).parents[3]
CRD_FILE = ROOT / "crds" / "dflash.dev_dflashruns.yaml"
EXAMPLE = ROOT / "examples" / "qwen3-8b.yaml"
SHA = "5c" * 32
TRAIN_ETA_SECONDS = 27960.0
TRAINER_REPORTED_AGO = timedelta(seconds=30)
RUN_ROOT = "s3://ml-artifacts/dflash/{namespace}/{name}/5c1f"


class Utf8Buffer(io.StringIO):
    """A captured stdout that says it is UTF-8, as a terminal or a UTF-8 pipe does."""

    encoding = "utf-8"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def _done(kind: ConditionType, generation: int, now: datetime, summary: str) -> Any:
    message = Reason.STAGE_SUCCEEDED.message(stage=kind.value, summary=summary)
    return build_condition(
        kind, ConditionStatus.TRUE, Reason.STAGE_SUCCEEDED, message, generation=generation, now=now
    )


def _finished_data_stages(generation: int, now: datetime) -> list[Any]:
    t = now - timedelta(hours=20)
    return [
        _done(ConditionType.REGENERATED, generation, t, "64 shards, 902k completions"),
        _done(ConditionType.COMPLETIONS_AUDITED, generation, t, "pass"),
        _done(ConditionType.TOKENIZED, generation, t, "902k samples"),
        _done(ConditionType.TOKENS_AUDITED, generation, t, "pass"),
    ]


def _data_progress() -> StageProgress:
    return StageProgress(
        regeneration=RegenerationProgress(
            shards_done=64, shards_total=64, samples=902_000, samples_total=902_000,
            output_tokens=1_600_000_000,
        ),
        tokenization=TokenizationResult(
            samples=902_000, tokens=1_900_000_000, supervised_tokens=1_550_000_000, truncated=1200,
            shards=64,
        ),
    )  # fmt: skip


def _passed(gate: Gate, root: str, now: datetime) -> AuditResult:
    return AuditResult(
        verdict=Verdict.PASS,
        report_uri=f"{root}/audit/{gate.value}/",
        observed_generation=1,
        attempt=1,
        time=now - timedelta(hours=19),
    )


def mid_training(name: str, namespace: str, now: datetime, root: str) -> DFlashRunStatus:
    audit = AuditStatus(
        completions=_passed(Gate.COMPLETIONS, root, now), tokens=_passed(Gate.TOKENS, root, now)
    )
    running = build_condition(
        ConditionType.TRAINED, ConditionStatus.FALSE, Reason.STAGE_RUNNING,
        Reason.STAGE_RUNNING.message(stage="train", attempt=1, progress="step 12000 of 40000"),
        generation=1, now=now - timedelta(hours=18),
    )  # fmt: skip
    return DFlashRunStatus(
        phase=Phase.TRAINING,
        observed_generation=1,
        message="train is running (attempt 1): step 12000 of 40000, loss 1.82",
        start_time=now - timedelta(hours=26),
        progress=format_progress("train", 12000, 40000, exact=True),
        audit_verdict=format_audit_verdict(audit),
        conditions=[*_finished_data_stages(1, now), running],
        stages=_data_progress(),
        training=TrainingProgress(
            step=12000, total_steps=40000, epoch=1.8, loss=1.82, accuracy=0.61,
            tokens_per_second=52000, eta_seconds=TRAIN_ETA_SECONDS,
            updated_at=now - TRAINER_REPORTED_AGO,
        ),
        checkpoint=CheckpointStatus(
            uri=f"{root}/checkpoints/step-000012000/", step=12000,
            time=now - timedelta(minutes=2), sha256=SHA,
        ),
        audit=audit,
        attempts={"regen": 1, "audit-completions": 1, "tokenize": 1, "audit-tokens": 1, "train": 1},
    )  # fmt: skip


def audit_failed(name: str, namespace: str, now: datetime, root: str) -> DFlashRunStatus:
    report = f"{root}/audit/completions/"
    result = AuditResult(
        verdict=Verdict.FAIL,
        violations=[
            AuditViolation(
                check="maxStubRate", value=0.871, threshold=0.05,
                message="stub responses 87.1% > 5%", sources=["nemotron-chat", "codealpaca"],
            ),
            AuditViolation(check="maxEmptyThinkingRate", value=0.869, threshold=0.1),
        ],
        metrics={"stubRate": 0.871, "emptyThinkingRate": 0.869, "p50ResponseTokens": 6.0},
        report_uri=report, observed_generation=1, attempt=1, time=now - timedelta(minutes=5),
    )  # fmt: skip
    audit = AuditStatus(completions=result)
    message = Reason.AUDIT_FAILED.message(
        gate="completions", violations="stub responses 87.1% > 5%", report_uri=report,
        run=name, generation=1,
    )  # fmt: skip
    failed = build_condition(
        ConditionType.DATA_AUDIT_PASSED, ConditionStatus.FALSE, Reason.AUDIT_FAILED, message,
        generation=1, now=now - timedelta(minutes=5),
    )  # fmt: skip
    return DFlashRunStatus(
        phase=Phase.AUDIT_FAILED,
        observed_generation=1,
        message=message,
        start_time=now - timedelta(hours=8),
        audit_verdict=format_audit_verdict(audit),
        conditions=[_finished_data_stages(1, now)[0], failed],
        stages=StageProgress(
            regeneration=RegenerationProgress(shards_done=64, shards_total=64, samples=914_000)
        ),
        audit=audit,
        attempts={"regen": 1, "audit-completions": 1},
    )


def failed_in_training(name: str, namespace: str, now: datetime, root: str) -> DFlashRunStatus:
    status = mid_training(name, namespace, now, root)
    message = Reason.RETRIES_EXHAUSTED.message(
        stage="train", attempts=6, limit=5, error="NCCL timeout on rank 3", run=name
    )
    trained = build_condition(
        ConditionType.TRAINED, ConditionStatus.FALSE, Reason.RETRIES_EXHAUSTED, message,
        generation=1, now=now - timedelta(minutes=10),
    )  # fmt: skip
    conditions = [c for c in status.conditions or [] if c.type != ConditionType.TRAINED.value]
    return status.model_copy(
        update={
            "phase": Phase.FAILED, "message": message, "conditions": [*conditions, trained],
            "completion_time": now - timedelta(minutes=10),
        }
    )  # fmt: skip


def succeeded(name: str, namespace: str, now: datetime, root: str) -> DFlashRunStatus:
    status = mid_training(name, namespace, now, root)
    t = now - timedelta(hours=1)
    done = [
        *_finished_data_stages(1, now),
        _done(ConditionType.TRAINED, 1, t, "40000 steps"),
        _done(ConditionType.EVALUATED, 1, t, "acceptance length 6.42"),
    ]
    stages = status.stages or StageProgress()
    return status.model_copy(
        update={
            "phase": Phase.SUCCEEDED,
            "message": Reason.SUCCEEDED.message(drafter_uri=f"{root}/final/", acceptance_length=6.42),
            "progress": None, "conditions": done, "completion_time": t,
            "drafter_uri": f"{root}/final/", "acceptance_length": 6.42,
            "training": TrainingProgress(step=40000, total_steps=40000, loss=1.1, eta_seconds=0),
            "stages": stages.model_copy(
                update={"evaluation": EvaluationResult(acceptance_length=6.42, prompts=512)}
            ),
        }
    )  # fmt: skip


STATUSES: dict[str, Callable[[str, str, datetime, str], DFlashRunStatus]] = {
    "training": mid_training,
    "audit-failed": audit_failed,
    "failed": failed_in_training,
    "succeeded": succeeded,
}


@dataclass
class Plugin:
    """One namespace of the real cluster, runs in it, and `kubectl dflash` pointed at it."""

    cluster: ClusterHandle
    namespace: str

    def create_run(self, name: str, state: str | None, root: str | None = None) -> dict[str, Any]:
        manifest = yaml.safe_load(EXAMPLE.read_text())
        manifest["metadata"]["name"] = name
        self.cluster.kubectl(
            "apply", "-n", self.namespace, "-f", "-", input=yaml.safe_dump(manifest)
        )
        if state is not None:
            now = datetime.now(UTC)
            run_root = root or RUN_ROOT.format(namespace=self.namespace, name=name)
            status = STATUSES[state](name, self.namespace, now, run_root)
            self.cluster.kubectl(
                "patch", "dflashrun", name, "-n", self.namespace, "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": status.to_api()}),
            )  # fmt: skip
        return self.get(name)

    def get(self, name: str) -> dict[str, Any]:
        result = self.cluster.kubectl("get", "dflashrun", name, "-n", self.namespace, "-o", "json")
        run: dict[str, Any] = json.loads(result.stdout)
        return run

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.get(name)["metadata"].get("annotations") or {})

    def run(self, *args: str, namespace: bool = True) -> Result:
        """`kubectl dflash <args>` in this process (fast), with this cluster's kubeconfig."""
        out, err = Utf8Buffer(), Utf8Buffer()
        flags = ["--kubeconfig", str(self.cluster.kubeconfig)]
        if namespace:
            flags += ["-n", self.namespace]
        code = main([*args, *flags], out=out, err=err)
        return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def plugin_crd(cluster: ClusterHandle) -> str:
    """The checked-in CRD, applied server-side and Established."""
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=dflash-plugin-tests",
        "-f", str(CRD_FILE),
    )  # fmt: skip
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    return CRD_NAME


@pytest.fixture
def plugin(cluster: ClusterHandle, plugin_crd: str, namespace: str) -> Plugin:
    return Plugin(cluster, namespace)


def _stage_row(output: str, stage: Stage) -> str:
    match = re.search(rf"^{re.escape(stage.value)}\s.*$", output, re.MULTILINE)
    assert match, f"no row for {stage.value} in:\n{output}"
    return match.group(0)


@pytest.fixture
def stage_row() -> Callable[[str, Stage], str]:
    """The line of the stage table of `status` for one stage."""
    return _stage_row
