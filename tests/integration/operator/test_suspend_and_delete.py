"""Suspend and resume mid-training (same PyTorchJob, back from its checkpoint); deleting a
run mid-regeneration deletes its children; cleanupPolicy Delete runs a cleanup Job under a
finalizer that is released even when the Job fails."""

from __future__ import annotations

import json
from typing import Any

from dflash_dev.kube_wait import get_json, wait_for

from .conftest import imported_spec


def to_training(harness: Any, make_spec: Any) -> None:
    harness.start_operator()
    spec = imported_spec(make_spec)
    harness.apply_run("r1", spec)
    harness.finish_score("r1")
    for stage in ("audit-completions", "tokenize", "audit-tokens"):
        wait_for(f"r1-{stage}", lambda stage=stage: f"r1-{stage}" in harness.names("jobs"))
        harness.finish(f"r1-{stage}", {"verdict": "pass"})
    harness.wait_phase("r1", "Training")


def test_suspend_stops_training_and_resume_continues_the_same_job_from_its_checkpoint(
    harness: Any, make_spec: Any
) -> None:
    to_training(harness, make_spec)
    harness.running_pods("r1-train", 2)
    uid = get_json(harness.cluster, "pytorchjob", "r1-train", "-n", harness.namespace)["metadata"][
        "uid"
    ]
    checkpoint = {
        "status": {"checkpoint": {"uri": "s3://artifacts/ck/step-000000400", "step": 400}}
    }
    harness.kubectl(
        "patch",
        "dflashrun",
        "r1",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(checkpoint),
    )

    harness.patch_spec("r1", {"suspend": True})
    harness.wait_phase("r1", "Suspended")
    job = get_json(harness.cluster, "pytorchjob", "r1-train", "-n", harness.namespace)
    assert job["spec"]["runPolicy"]["suspend"] is True
    wait_for("the training pods to go", lambda: not harness.pods_of("r1-train"))
    assert harness.condition("r1", "Suspended")["status"] == "True"

    harness.patch_spec("r1", {"suspend": False})
    harness.wait_phase("r1", "Training")
    job = get_json(harness.cluster, "pytorchjob", "r1-train", "-n", harness.namespace)
    assert (job["metadata"]["uid"], job["spec"]["runPolicy"]["suspend"]) == (uid, False)
    assert harness.names("pytorchjobs") == ["r1-train"]
    harness.running_pods("r1-train", 2)
    assert harness.condition("r1", "Suspended")["reason"] == "Resumed"
    resumed = [m for _t, r, m in harness.events("r1") if r == "TrainingResumed"]
    assert resumed == [
        "Training resumed from checkpoint s3://artifacts/ck/step-000000400 (step 400)"
    ]


def test_deleting_a_run_mid_regeneration_deletes_its_children_and_creates_no_more(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec())
    harness.wait_phase("r1", "Regenerating")
    harness.running_pods("r1-regen", 2)
    assert not get_json(harness.cluster, "dflashrun", "r1", "-n", harness.namespace)[
        "metadata"
    ].get("finalizers")

    harness.kubectl("delete", "dflashrun", "r1", "--wait=false")
    wait_for(
        "the run to go",
        lambda: harness.kubectl("get", "dflashrun", "r1", check=False).returncode != 0,
    )
    wait_for(
        "its Job and ConfigMap to be garbage-collected",
        lambda: harness.names("jobs") == [] and harness.names("configmaps") == [],
    )
    wait_for("its pods to go", lambda: not harness.pods_of("r1-regen"))
    harness.apply_run("probe", make_spec(suspend=True))
    harness.wait_phase("probe", "Suspended")  # the operator is alive and has seen the deletion
    assert harness.names("jobs") == []


def test_cleanup_policy_delete_runs_a_cleanup_job_and_releases_the_finalizer_even_if_it_fails(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    storage = {"bucket": "artifacts", "cleanupPolicy": "Delete"}
    spec = make_spec(storage={**storage, "credentialsSecretRef": {"name": "s3-creds"}})
    harness.apply_run("r1", spec)
    harness.wait_phase("r1", "Regenerating")

    def has_cleanup_finalizer(name: str) -> bool:
        return "dflash.dev/cleanup" in (harness.run(name)["metadata"].get("finalizers") or [])

    wait_for("the cleanup finalizer", lambda: has_cleanup_finalizer("r1"))

    harness.kubectl("delete", "dflashrun", "r1", "--wait=false")
    cleanup = harness.running_pods("r1-cleanup", 1)[0]
    pool = get_json(harness.cluster, "node", cleanup["spec"]["nodeName"])["metadata"]["labels"][
        "dflash.dev/node-pool"
    ]
    assert pool == "cpu"
    args = cleanup["spec"]["containers"][0]["args"]
    root = args[args.index("--run-root") + 1]
    assert root.startswith(f"s3://artifacts/dflash/{harness.namespace}/r1/")
    harness.finish_pod(
        cleanup, {"stage": "cleanup", "ok": False, "message": "AccessDenied"}, exit_code=2
    )

    wait_for(
        "the run to go",
        lambda: harness.kubectl("get", "dflashrun", "r1", check=False).returncode != 0,
    )
    warnings = [(r, m) for t, r, m in harness.events("r1") if t == "Warning"]
    assert any(r == "CleanupFailed" and "may remain" in m for r, m in warnings), warnings

    # The same name again, deleted within the hour the first cleanup Job is kept: the second
    # run gets its own cleanup Job, for its own root (never the first run's finished one).
    harness.apply_run("r1", spec)
    uid = harness.run("r1")["metadata"]["uid"]
    wait_for("the second run's finalizer", lambda: has_cleanup_finalizer("r1"))
    harness.kubectl("delete", "dflashrun", "r1", "--wait=false")

    def second_cleanup() -> dict[str, Any] | None:
        for pod in harness.pods_of("r1-cleanup"):
            args = pod["spec"]["containers"][0]["args"]
            if args[args.index("--run-root") + 1].endswith(f"/r1/{uid}"):
                return pod if pod.get("status", {}).get("phase") == "Running" else None
        return None

    pod = wait_for("a cleanup pod for the second run's root", second_cleanup)
    job = get_json(harness.cluster, "job", "r1-cleanup", "-n", harness.namespace)
    assert job["metadata"]["labels"]["dflash.dev/run-uid"] == uid
    harness.finish_pod(pod, {"stage": "cleanup", "ok": True, "message": "deleted 3 objects"})
    wait_for(
        "the second run to go",
        lambda: harness.kubectl("get", "dflashrun", "r1", check=False).returncode != 0,
    )
