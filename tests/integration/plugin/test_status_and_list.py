"""`kubectl dflash status` and `list` on live runs of the real control plane: phase, a progress
bar per stage, audit verdicts, the checkpoint and the ETA, in text, JSON and YAML."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml
from dflash_operator.api.constants import Stage

StageRow = Callable[[str, Stage], str]


def test_status_mid_training_shows_each_stage_the_checkpoint_and_the_trainers_eta(
    plugin: Any, stage_row: StageRow
) -> None:
    plugin.create_run("mid-training", "training")

    result = plugin.run("status", "mid-training")

    assert result.code == 0, result.err
    assert "Phase:       Training" in result.out
    assert "Target:      Qwen/Qwen3-8B" in result.out
    regen = stage_row(result.out, Stage.REGEN)
    assert "█" * 24 in regen and "100%" in regen and "done" in regen
    assert "64/64 shards · 902k/902k completions · 1.6G tokens" in regen
    train = stage_row(result.out, Stage.TRAIN)
    assert "running" in train and " 30%" in train
    assert "step 12000/40000 · loss 1.82 · accuracy 0.61 · 52k tok/s" in train
    assert "░" * 24 in stage_row(result.out, Stage.EVAL)
    assert "Audit:       completions=pass tokens=pass" in result.out
    assert (
        f"Checkpoint:  step 12000, s3://ml-artifacts/dflash/{plugin.namespace}/mid-training/5c1f/checkpoints/step-000012000/ (committed 2m ago)"
        in result.out
    )
    # 27960 s reported 30 s ago: 7h 45m left.
    assert "ETA:         7h 45m (reported by the trainer)" in result.out
    assert f"kubectl dflash logs mid-training -n {plugin.namespace}" in result.out


def test_status_of_a_failed_gate_marks_the_gate_failed_and_says_what_to_do_next(
    plugin: Any, stage_row: StageRow
) -> None:
    plugin.create_run("stub-answers", "audit-failed")

    result = plugin.run("status", "stub-answers")

    assert result.code == 0, result.err
    assert "Phase:       AuditFailed" in result.out
    assert "failed" in stage_row(result.out, Stage.AUDIT_COMPLETIONS)
    assert "fail (2 checks violated)" in stage_row(result.out, Stage.AUDIT_COMPLETIONS)
    assert "waiting" in stage_row(result.out, Stage.TOKENIZE)
    assert "Checkpoint:  none committed yet" in result.out
    assert (
        f"kubectl dflash approve stub-answers -n {plugin.namespace} --gate completions"
        in result.out
    )


def test_status_of_a_succeeded_run_shows_the_drafter_and_every_stage_done(
    plugin: Any, stage_row: StageRow
) -> None:
    plugin.create_run("finished", "succeeded")

    result = plugin.run("status", "finished")

    assert result.code == 0, result.err
    for stage in (Stage.REGEN, Stage.TOKENIZE, Stage.TRAIN, Stage.EVAL):
        assert "done" in stage_row(result.out, stage)
    assert "acceptance length 6.42 on 512 prompts" in stage_row(result.out, Stage.EVAL)
    assert "(acceptance length 6.42)" in result.out
    assert "ETA:         -" in result.out


def test_status_as_json_gives_the_same_facts_to_scripts(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")

    result = plugin.run("status", "mid-training", "-o", "json")

    data = json.loads(result.out)
    stages = {s["stage"]: s for s in data["stages"]}
    assert result.code == 0
    assert data["phase"] == "Training"
    assert stages["train"] == {
        "stage": "train", "state": "running", "fraction": 0.3,
        "details": "step 12000/40000 · loss 1.82 · accuracy 0.61 · 52k tok/s",
    }  # fmt: skip
    assert stages["regen"]["state"] == "done"
    assert 27_900 < data["etaSeconds"] <= 27_930
    assert data["checkpoint"]["step"] == 12000


def test_status_as_yaml_parses_back_to_the_json_form(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")

    as_yaml = yaml.safe_load(plugin.run("status", "mid-training", "-o", "yaml").out)
    as_json = json.loads(plugin.run("status", "mid-training", "-o", "json").out)

    assert {k: v for k, v in as_yaml.items() if k != "etaSeconds"} == {
        k: v for k, v in as_json.items() if k != "etaSeconds"
    }


def test_status_of_a_run_without_status_says_the_operator_has_not_started_it(plugin: Any) -> None:
    plugin.create_run("just-applied", None)

    result = plugin.run("status", "just-applied")

    assert result.code == 0, result.err
    assert "Phase:       - (no status yet)" in result.out
    assert "ETA:         unknown (no progress reported yet)" in result.out


def test_list_shows_each_run_with_phase_progress_audit_and_checkpoint(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    plugin.create_run("stub-answers", "audit-failed")

    result = plugin.run("list")

    rows = [line.split() for line in result.out.splitlines()]
    assert result.code == 0, result.err
    assert rows[0] == ["NAME", "PHASE", "PROGRESS", "AUDIT", "CHECKPOINT", "ETA", "AGE"]
    by_name = {row[0]: row for row in rows[1:]}
    assert set(by_name) == {"mid-training", "stub-answers"}
    assert by_name["mid-training"][1:8] == [
        "Training", "train", "12000/40000", "completions=pass", "tokens=pass", "step", "12k",
    ]  # fmt: skip
    assert by_name["stub-answers"][1:4] == ["AuditFailed", "-", "completions=fail"]


def test_list_of_all_namespaces_adds_the_namespace_column(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")

    result = plugin.run("list", "-A", namespace=False)

    assert result.out.split()[0] == "NAMESPACE"
    assert any(
        line.split()[:2] == [plugin.namespace, "mid-training"] for line in result.out.splitlines()
    )


def test_list_of_an_empty_namespace_says_so_and_succeeds(plugin: Any) -> None:
    result = plugin.run("list")

    assert result.code == 0
    assert result.out == ""
    assert result.err == f"No DFlashRuns found in namespace {plugin.namespace}.\n"
