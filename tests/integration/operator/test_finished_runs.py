"""Finished runs on the real control plane: an edit of a Succeeded run is observed (status
observedGeneration catches up, so Argo CD stops showing it Progressing) without re-creating a
child; cleanupPolicy DeleteIntermediate prunes once after success."""

from __future__ import annotations

from typing import Any

from dflash_dev.kube_wait import get_json, wait_for


def run_to_success(harness: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Apply the run and play the kubelet stage by stage until it succeeded."""
    harness.apply_run("r1", spec)
    for stage, phase in harness.stage_phases.items():
        harness.wait_phase("r1", phase)
        count = {"regen": 2, "train": 2}.get(stage, 1)
        pods = harness.running_pods(f"r1-{stage}", count)
        # PyTorchJob: workers first; the job is over once its Master succeeded.
        pods.sort(key=lambda p: "master" in p["metadata"]["name"])
        for pod in pods:
            harness.finish_pod(pod, harness.stage_results[stage])
    return harness.wait_phase("r1", "Succeeded")


def child_uids(harness: Any) -> dict[str, str]:
    uids = {}
    for kind in ("jobs", "pytorchjobs", "configmaps"):
        for item in get_json(
            harness.cluster, kind, "-n", harness.namespace,
            "-l", "app.kubernetes.io/managed-by=dflash-operator",
        )["items"]:  # fmt: skip
            uids[f"{item['kind']}/{item['metadata']['name']}"] = item["metadata"]["uid"]
    return uids


def test_editing_a_succeeded_run_updates_observed_generation_and_recreates_nothing(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    done = run_to_success(harness, make_spec())
    before = child_uids(harness)
    generation = harness.run("r1")["metadata"]["generation"]
    assert done["observedGeneration"] == generation

    harness.patch_spec("r1", {"audit": {"maxStubRate": 0.2}})

    edited = harness.run("r1")["metadata"]["generation"]
    assert edited == generation + 1
    status = wait_for(
        "observedGeneration to catch up with the edit",
        lambda: (s := harness.status("r1")).get("observedGeneration") == edited and s,
        60.0,
    )
    assert status["phase"] == "Succeeded"
    assert child_uids(harness) == before
    assert {f"{c['kind']}/{c['name']}": c["uid"] for c in status["children"]}.items() >= {
        k: v for k, v in before.items() if not k.startswith("ConfigMap")
    }.items()


def test_delete_intermediate_prunes_once_after_success_and_reports_it(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    storage = {
        "bucket": "artifacts",
        "cleanupPolicy": "DeleteIntermediate",
        "credentialsSecretRef": {"name": "s3-creds"},
    }
    run_to_success(harness, make_spec(storage=storage))

    prune = harness.running_pods("r1-prune", 1)[0]
    args = prune["spec"]["containers"][0]["args"]
    assert args[args.index("--policy") + 1] == "DeleteIntermediate"
    node = get_json(harness.cluster, "node", prune["spec"]["nodeName"])
    assert node["metadata"]["labels"]["dflash.dev/node-pool"] == "cpu"
    started = harness.condition("r1", "CleanedUp")
    assert started["status"] == "Unknown" and started["reason"] == "CleanupStarted"
    harness.finish_pod(
        prune,
        {
            "stage": "cleanup",
            "ok": True,
            "message": "deleted 12 objects (3.1 GB)",
            "policy": "DeleteIntermediate",
        },
    )

    cleaned = wait_for(
        "CleanedUp=True",
        lambda: (c := harness.condition("r1", "CleanedUp")) and c["status"] == "True" and c,
        60.0,
    )
    assert cleaned["reason"] == "ArtifactsDeleted" and "deleted 12 objects" in cleaned["message"]
    assert harness.status("r1")["phase"] == "Succeeded"
    reasons = [r for _t, r, _m in harness.events("r1")]
    assert "CleanupStarted" in reasons and "ArtifactsDeleted" in reasons
    assert harness.names("jobs").count("r1-prune") == 1
