"""Deadlines on the real control plane: a stage's activeDeadlineSeconds is enforced by the
Job controller and fails the run naming the stage; the run's own deadline stops its running
children (no pod keeps running for a failed run)."""

from __future__ import annotations

from typing import Any

from dflash_dev.kube_wait import get_json, wait_for

DEADLINE = 60  # the smallest the API accepts


def test_a_stage_past_its_deadline_fails_the_run_naming_the_stage(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    spec = make_spec()
    spec["regeneration"]["activeDeadlineSeconds"] = DEADLINE
    harness.apply_run("r1", spec)
    harness.running_pods("r1-regen", 2)  # held Running: they never finish on their own
    job = get_json(harness.cluster, "job", "r1-regen", "-n", harness.namespace)
    assert job["spec"]["activeDeadlineSeconds"] == DEADLINE
    status = harness.wait_phase("r1", "Failed", timeout=DEADLINE + 60)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert "regen" in failed["message"] and "DeadlineExceeded" in failed["message"], failed
    wait_for("the regen pods to go", lambda: not harness.running_pods_now("r1-regen"))


def test_the_run_deadline_fails_the_run_and_deletes_its_running_children(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec(activeDeadlineSeconds=DEADLINE))
    harness.running_pods("r1-regen", 2)
    status = harness.wait_phase("r1", "Failed", timeout=DEADLINE + 60)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert f"activeDeadlineSeconds={DEADLINE}" in failed["message"]
    assert "in stage regen" in failed["message"]
    wait_for("r1-regen to be deleted", lambda: "r1-regen" not in harness.names("jobs"))
    wait_for("its pods to go", lambda: not harness.pods_of("r1-regen"))
    events = [(r, m) for t, r, m in harness.events("r1") if t == "Warning"]
    assert [r for r, _ in events].count("DeadlineExceeded") == 1
