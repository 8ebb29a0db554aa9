"""`kubectl dflash approve` and `retry` set the annotations the operator acts on, with the
values it expects, and refuse what would not make sense, saying why."""

from __future__ import annotations

import json
import re
from typing import Any

from dflash_operator.api.annotations import parse_approvals
from dflash_operator.api.constants import ANNOTATION_APPROVE_AUDIT, ANNOTATION_RETRY, Gate


def test_approve_records_the_gate_at_the_generation_it_failed(plugin: Any) -> None:
    plugin.create_run("stub-answers", "audit-failed")

    result = plugin.run("approve", "stub-answers", "--gate", "completions")

    assert result.code == 0, result.err
    value = plugin.annotations("stub-answers")[ANNOTATION_APPROVE_AUDIT]
    assert value == "completions@1"
    assert [str(a) for a in parse_approvals(value)] == ["completions@1"]
    assert result.out.startswith(
        "dflashrun.dflash.dev/stub-answers annotated: dflash.dev/approve-audit=completions@1\n"
    )
    assert "goes on with tokenize" in result.out


def test_approving_twice_changes_nothing_and_keeps_other_approvals(plugin: Any) -> None:
    plugin.create_run("stub-answers", "audit-failed")
    plugin.cluster.kubectl(
        "annotate",
        "dfr",
        "stub-answers",
        "-n",
        plugin.namespace,
        f"{ANNOTATION_APPROVE_AUDIT}=tokens@7",
    )

    first = plugin.run("approve", "stub-answers", "--gate", "completions")
    version = plugin.get("stub-answers")["metadata"]["resourceVersion"]
    second = plugin.run("approve", "stub-answers", "--gate", "completions")

    assert plugin.annotations("stub-answers")[ANNOTATION_APPROVE_AUDIT] == "tokens@7,completions@1"
    assert first.code == second.code == 0
    assert "already annotated" in second.out
    assert plugin.get("stub-answers")["metadata"]["resourceVersion"] == version


def test_approving_a_gate_that_passed_or_never_ran_is_refused(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")

    passed = plugin.run("approve", "mid-training", "--gate", "tokens")
    never_ran = plugin.run("approve", "mid-training", "--gate", "prompts")

    assert passed.code == never_ran.code == 1
    assert (
        passed.err
        == "error: the tokens gate of dflashrun mid-training passed: nothing to approve\n"
    )
    assert "the prompts gate of dflashrun mid-training has not run yet" in never_ran.err
    assert ANNOTATION_APPROVE_AUDIT not in plugin.annotations("mid-training")


def test_a_malformed_approval_already_on_the_run_is_named_not_overwritten(plugin: Any) -> None:
    plugin.create_run("stub-answers", "audit-failed")
    plugin.cluster.kubectl(
        "annotate",
        "dfr",
        "stub-answers",
        "-n",
        plugin.namespace,
        f"{ANNOTATION_APPROVE_AUDIT}=yes please",
    )

    result = plugin.run("approve", "stub-answers", "--gate", "completions")

    assert result.code == 1
    assert "entry 'yes please' is not accepted" in result.err
    assert plugin.annotations("stub-answers")[ANNOTATION_APPROVE_AUDIT] == "yes please"


def test_retry_of_a_failed_run_sets_a_new_retry_value_naming_the_stage(plugin: Any) -> None:
    plugin.create_run("oom", "failed")

    result = plugin.run("retry", "oom", "--stage", "train", "-o", "json")

    value = plugin.annotations("oom")[ANNOTATION_RETRY]
    assert result.code == 0, result.err
    assert re.fullmatch(r"train-\d{8}T\d{6}Z", value)
    assert json.loads(result.out) == {
        "name": "oom", "namespace": plugin.namespace, "annotations": {ANNOTATION_RETRY: value}
    }  # fmt: skip


def test_retry_of_another_stage_than_the_one_that_failed_is_refused(plugin: Any) -> None:
    plugin.create_run("oom", "failed")

    result = plugin.run("retry", "oom", "--stage", "regen")

    assert result.code == 1
    assert "error: --stage regen: dflashrun oom stopped at train" in result.err
    assert ANNOTATION_RETRY not in plugin.annotations("oom")


def test_retry_after_a_failed_gate_retries_that_gate(plugin: Any) -> None:
    plugin.create_run("stub-answers", "audit-failed")

    result = plugin.run("retry", "stub-answers")

    assert result.code == 0, result.err
    assert plugin.annotations("stub-answers")[ANNOTATION_RETRY].startswith(
        f"audit-{Gate.COMPLETIONS.value}-"
    )


def test_retry_of_a_running_or_succeeded_run_is_refused(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    plugin.create_run("finished", "succeeded")

    running = plugin.run("retry", "mid-training")
    done = plugin.run("retry", "finished")

    assert running.code == done.code == 1
    assert (
        running.err
        == "error: dflashrun mid-training is Training: only a Failed or AuditFailed run can be retried\n"
    )
    assert "dflashrun finished is Succeeded" in done.err
