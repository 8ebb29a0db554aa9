"""Killing the operator anywhere never duplicates a child or changes the outcome: it dies at
16 named points (between creating a child and recording it, before and after status writes,
after events) and at random moments (SIGKILL), and the run still ends Succeeded with exactly
one child per stage attempt."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from dflash_dev.kube_wait import get_json
from dflash_operator.runtime.faults import ENV as FAULT_ENV
from dflash_operator.runtime.faults import KILLED_EXIT_CODE

# In pipeline order; each is reached by the operator started right after the previous died.
FAULT_POINTS = (
    "after-apply-config",
    "after-create:Job:regen",
    "before-status:Regenerating",
    "after-status:Regenerating",
    "after-create:Job:audit-completions",
    "before-status:AuditingCompletions",
    "after-events",
    "after-create:Job:tokenize",
    "after-status:Tokenizing",
    "after-create:Job:audit-tokens",
    "after-create:ServiceAccount:train",
    "after-create:RoleBinding:train",
    "after-create:PyTorchJob:train",
    "before-status:Training",
    "after-create:Job:eval",
    "before-status:Succeeded",
)
POINT_TIMEOUT = 60.0


def drive(harness: Any) -> int:
    """The kubelet's part: end the pods of the stage the run's status says it is in.

    Returns how many pods it ended."""
    ended = 0
    phase = harness.status("r1").get("phase")
    for stage, stage_phase in harness.stage_phases.items():
        if phase != stage_phase:
            continue
        pods = [
            p
            for p in harness.pods_of(f"r1-{stage}")
            if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        # PyTorchJob: workers first; the job is over once its Master succeeded.
        pods.sort(
            key=lambda p: (
                p["metadata"]["labels"].get("training.kubeflow.org/replica-type") == "master"
            )
        )
        for pod in pods:
            harness.finish_pod(pod, harness.stage_results[stage])
            ended += 1
    return ended


def assert_one_child_per_stage(harness: Any) -> None:
    status = harness.wait_phase("r1", "Succeeded")
    assert harness.names("jobs") == sorted(
        f"r1-{stage}" for stage in harness.stage_phases if stage != "train"
    )
    # The training child is of the kind the run recorded (status.launcher).
    training = "trainjobs" if status.get("launcher") == "trainjob" else "pytorchjobs"
    assert harness.names(training) == ["r1-train"]
    assert status["attempts"] == dict.fromkeys(harness.stage_phases, 1)
    assert status["acceptanceLength"] == 5.5
    live = {}
    for kind in ("jobs", training, "configmaps", "serviceaccounts", "roles", "rolebindings"):
        for item in get_json(
            harness.cluster,
            kind,
            "-n",
            harness.namespace,
            "-l",
            "app.kubernetes.io/managed-by=dflash-operator",
        )["items"]:
            live[item["metadata"]["name"] + "/" + item["kind"]] = item["metadata"]["uid"]
    recorded = {c["name"] + "/" + c["kind"]: c["uid"] for c in status["children"]}
    assert recorded == live
    assert [c["type"] for c in status["conditions"] if c["type"] == "Succeeded"] == ["Succeeded"]


@pytest.mark.slow
def test_killing_the_operator_at_every_named_point_changes_nothing(
    harness: Any, make_spec: Any
) -> None:
    harness.apply_run("r1", make_spec())
    for point in FAULT_POINTS:
        process = harness.start_operator(env={FAULT_ENV: point}, ready=False)
        deadline = time.monotonic() + POINT_TIMEOUT
        while process.alive():
            assert time.monotonic() < deadline, (
                f"fault point {point} was never reached:\n{process.log_tail()}"
            )
            drive(harness)
            time.sleep(0.3)
        assert process.wait(5) == KILLED_EXIT_CODE, f"{point}: {process.log_tail()}"
        assert f"fault point {point} reached" in process.log_tail(5)
    harness.start_operator()
    deadline = time.monotonic() + POINT_TIMEOUT
    while harness.status("r1").get("phase") != "Succeeded" and time.monotonic() < deadline:
        drive(harness)
        time.sleep(0.3)
    assert_one_child_per_stage(harness)


@pytest.mark.slow
def test_sigkills_at_random_moments_converge_to_the_same_result(
    harness: Any, make_spec: Any
) -> None:
    rng = random.Random(20260501)
    harness.apply_run("r1", make_spec())
    harness.start_operator()
    kills = kills_at_last_drive = 0
    deadline = time.monotonic() + 4 * POINT_TIMEOUT
    next_kill = time.monotonic() + rng.uniform(0.5, 3.0)
    while harness.status("r1").get("phase") != "Succeeded":
        assert time.monotonic() < deadline, harness.operator.log_tail()
        # Every stage sees at least one kill before its pods end, however fast the machine.
        if (kills >= 10 or kills > kills_at_last_drive) and drive(harness):
            kills_at_last_drive = kills
        if kills < 10 and time.monotonic() >= next_kill:
            harness.operator.kill()
            kills += 1
            harness.start_operator(ready=False)
            next_kill = time.monotonic() + rng.uniform(0.5, 3.0)
        time.sleep(0.2)
    assert kills >= len(harness.stage_phases)
    assert_one_child_per_stage(harness)
