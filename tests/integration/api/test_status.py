"""The status the operator and the trainer write survives the CRD (nothing pruned), and
`kubectl get dfr` shows it in the printer columns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dflash_operator.api.constants import (
    ConditionStatus,
    ConditionType,
    Gate,
    Phase,
    Reason,
    Verdict,
)
from dflash_operator.api.crd import build_root_schema
from dflash_operator.api.schema import iter_fields
from dflash_operator.api.spec_training import Launcher
from dflash_operator.api.status import (
    DFlashRunStatus,
    build_condition,
    format_audit_verdict,
    format_node_pools,
    format_progress,
)
from dflash_operator.api.status_parts import (
    Approval,
    AuditResult,
    AuditStatus,
    AuditViolation,
    CheckpointStatus,
    ChildRef,
    EvaluationResult,
    GpuHours,
    ModelCopyResult,
    RegenerationProgress,
    SourceLikelihood,
    StageProgress,
    TokenizationResult,
    TrainingLikelihood,
    TrainingProgress,
)

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
SHA = "ab" * 32


def audit_result(gate: Gate, verdict: Verdict) -> AuditResult:
    """A gate's result with every field set (what the operator copies from a stage result)."""
    return AuditResult(
        verdict=verdict,
        approved=verdict is Verdict.FAIL,
        violations=[
            AuditViolation(
                check="stub_rate",
                threshold_field="spec.audit.maxStubRate",
                value=0.87,
                threshold=0.05,
                message="87% of answers have fewer than 16 tokens",
                sources=["openorca"],
                worst_source="openorca",
                worst_value=0.87,
            )
        ],
        metrics={"stubRate": 0.87, "p50ResponseTokens": 6.0},
        report_uri=f"s3://b/p/ns/r/uid/audit/{gate.value}/",
        observed_generation=1,
        attempt=1,
        time=T0,
    )


def full_status() -> DFlashRunStatus:
    """A status with every field of the schema set, as the operator would build it."""
    audit = AuditStatus(
        prompts=audit_result(Gate.PROMPTS, Verdict.PASS),
        canary=audit_result(Gate.CANARY, Verdict.PASS),
        completions=audit_result(Gate.COMPLETIONS, Verdict.FAIL),
        tokens=audit_result(Gate.TOKENS, Verdict.PASS),
        training=audit_result(Gate.TRAINING, Verdict.PASS),
    )
    return DFlashRunStatus(
        phase=Phase.TRAINING,
        launcher=Launcher.TRAINJOB,
        observed_generation=1,
        conditions=[
            build_condition(
                ConditionType.TRAINED,
                ConditionStatus.FALSE,
                Reason.STAGE_RUNNING,
                Reason.STAGE_RUNNING.message(stage="train", attempt=1, progress="step 12000"),
                generation=1,
                now=T0,
            )
        ],
        message="training step 12000 of 40000",
        start_time=T0,
        completion_time=T0,
        progress=format_progress("train", 12000, 40000, exact=True),
        audit_verdict=format_audit_verdict(audit),
        node_pools=format_node_pools({"regen": "b200", "train": "rtx-pro-6000"}),
        stages=StageProgress(
            model=ModelCopyResult(
                uri="s3://b/p/ns/r/uid/model",
                revision="3f2a9c1" + "0" * 33,
                files=9,
                bytes=16_400_000_000,
                fetched_bytes=16_400_000_000,
            ),
            canary=RegenerationProgress(
                shards_done=1,
                shards_total=1,
                shards_skipped=0,
                samples=1280,
                samples_total=1280,
                output_tokens=2_400_000,
            ),
            regeneration=RegenerationProgress(
                shards_done=64,
                shards_total=64,
                shards_skipped=3,
                samples=902_000,
                samples_total=902_000,
                output_tokens=1_600_000_000,
            ),
            tokenization=TokenizationResult(
                samples=900_000,
                tokens=2_000_000_000,
                supervised_tokens=1_500_000_000,
                truncated=1200,
                shards=32,
                manifest_uri="s3://b/p/ns/r/uid/tokenized/_SUCCESS.json",
            ),
            evaluation=EvaluationResult(
                acceptance_length=6.25,
                per_position_acceptance=[0.9, 0.8, 0.7],
                prompts=128,
                report_uri="s3://b/p/ns/r/uid/eval/acceptance.json",
            ),
        ),
        training=TrainingProgress(
            step=12000,
            total_steps=40000,
            epoch=1.8,
            loss=1.25,
            accuracy=0.61,
            tokens_per_second=52000.5,
            eta_seconds=86400,
            updated_at=T0,
            likelihood=TrainingLikelihood(
                step=12000,
                every_steps=10,
                scored_rows=4800,
                off_rows=310,
                max_off_distribution_rate=0.05,
                verdict=Verdict.FAIL,
                sources={
                    "openorca": SourceLikelihood(
                        scored_rows=600, off_rows=300, off_distribution_rate=0.5, mean_nll=2.4
                    )
                },
            ),
        ),
        checkpoint=CheckpointStatus(
            uri="s3://b/p/ns/r/uid/checkpoints/step-000012000/", step=12000, time=T0, sha256=SHA
        ),
        audit=audit,
        drafter_uri="s3://b/p/ns/r/uid/final/",
        acceptance_length=6.25,
        children=[
            ChildRef(
                kind="PyTorchJob",
                api_version="kubeflow.org/v1",
                name="status-train",
                uid="3f1c2d4e-0000-4000-8000-000000000001",
                stage="train",
                attempt=1,
            )
        ],
        attempts={"regen": 1, "train": 1},
        approvals=[Approval(gate=Gate.COMPLETIONS, generation=1, time=T0)],
        retry_token="2026-05-01T12:00:00Z",
        gpu_hours=GpuHours(
            total=412.5,
            by_stage={"regen": 400.0, "train": 12.5},
            by_attempt={"regen-1": 400.0, "train-1": 12.5},
            updated_at=T0,
        ),
    )


def _present(value: Any, path: list[str]) -> bool:
    if not path:
        return value is not None
    head, rest = path[0], path[1:]
    if head == "[]":
        return bool(value) and all(_present(item, rest) for item in value)
    if head == "*":
        return bool(value) and all(_present(item, rest) for item in value.values())
    return isinstance(value, dict) and head in value and _present(value[head], rest)


def test_the_sample_status_sets_every_field_of_the_schema() -> None:
    schema = build_root_schema()["properties"]["status"]
    dumped = full_status().to_api()
    unset = [
        path
        for path, _ in iter_fields(schema)
        if not _present(dumped, path.replace("[]", ".[]").split("."))
    ]
    assert unset == []


def test_a_full_status_round_trips_through_the_crd_without_pruning(
    runs: Any, base_manifest: dict[str, Any]
) -> None:
    manifest = base_manifest
    manifest["metadata"]["name"] = "status"
    assert runs.apply(manifest).returncode == 0
    sent = full_status().to_api()

    runs.patch_status("status", sent)

    stored = runs.get("status")["status"]
    assert stored == sent
    assert DFlashRunStatus.model_validate(stored).to_api() == sent


def test_the_trainer_patch_of_the_data_contract_is_kept(
    runs: Any, base_manifest: dict[str, Any]
) -> None:
    manifest = base_manifest
    manifest["metadata"]["name"] = "trainer-patch"
    assert runs.apply(manifest).returncode == 0
    # data-contracts.md section 6, as the trainer's rank 0 sends it.
    patch = {
        "training": {
            "step": 100, "totalSteps": 1000, "epoch": 0, "loss": 3.5, "accuracy": 0.2,
            "tokensPerSecond": 1500.0, "etaSeconds": 600, "updatedAt": "2026-05-01T12:00:00Z",
        },
        "checkpoint": {
            "uri": "s3://b/p/ns/r/uid/checkpoints/step-000000100/", "step": 100,
            "time": "2026-05-01T12:00:00Z", "sha256": SHA,
        },
    }  # fmt: skip

    runs.patch_status("trainer-patch", patch)

    assert runs.get("trainer-patch")["status"] == patch


def test_kubectl_get_shows_phase_progress_loss_checkpoint_and_wide_columns(
    runs: Any, base_manifest: dict[str, Any]
) -> None:
    manifest = base_manifest
    manifest["metadata"]["name"] = "columns"
    assert runs.apply(manifest).returncode == 0
    runs.patch_status("columns", full_status().to_api())

    narrow = runs.table("columns")
    wide = runs.table("columns", "-o", "wide")

    assert narrow[0] == ["NAME", "PHASE", "PROGRESS", "LOSS", "CHECKPOINT", "GPU-H", "AGE"]
    assert narrow[1][:6] == ["columns", "Training", "train 12000/40000", "1.25", "12000", "412.5"]
    assert wide[0] == [*narrow[0], "TARGET", "AUDIT", "POOLS", "LAUNCHER"]
    assert wide[1][7:] == [
        "Qwen/Qwen3-8B",
        "prompts=pass canary=pass completions=approved tokens=pass training=pass",
        "regen=b200 train=rtx-pro-6000",
        "trainjob",
    ]


def test_the_short_name_and_category_find_runs(runs: Any, base_manifest: dict[str, Any]) -> None:
    manifest = base_manifest
    manifest["metadata"]["name"] = "found"
    assert runs.apply(manifest).returncode == 0

    by_category = runs.cluster.kubectl("get", "dflash", "-n", runs.namespace, "-o", "name").stdout

    assert "dflashrun.dflash.dev/found" in by_category.split()
