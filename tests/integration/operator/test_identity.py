"""Identity by UID, not by name: a run deleted and re-created under the same name never reads
the old run's pods, and a status write meant for the old run never lands on the new one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dflash_dev.kube_wait import get_json, wait_for
from dflash_operator.children.meta import RunRef
from dflash_operator.runtime.kube import Kube, KubeError, load_api_client

HOLD_FINALIZER = "test.dflash.dev/hold"
REGEN_RESULT = {"stage": "regenerate", "ok": True, "samples": 100, "outputTokens": 5000}


def shards_done(harness: Any, run: str) -> int | None:
    regeneration = (harness.status(run).get("stages") or {}).get("regeneration") or {}
    return regeneration.get("shardsDone")


def index_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])


def test_a_recreated_run_never_reads_the_old_runs_terminating_pods(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec())
    old_pods = sorted(harness.running_pods("r1-regen", 2), key=index_of)
    held = old_pods[0]
    name = held["metadata"]["name"]
    # The old run's shard 0 finishes, and its pod is kept terminating by a finalizer (as a
    # slow kubelet, a node that went away or a log shipper's finalizer would keep it).
    harness.kubectl(
        "patch", "pod", name, "--type=merge",
        "-p", json.dumps({"metadata": {"finalizers": [HOLD_FINALIZER]}}),
    )  # fmt: skip
    try:
        harness.finish_pod(held, REGEN_RESULT)
        wait_for("the old run to count shard 0", lambda: shards_done(harness, "r1") == 1)
        harness.kubectl("delete", "dflashrun", "r1", "--wait=true")
        wait_for("the old Job to go", lambda: "r1-regen" not in harness.names("jobs"))

        harness.apply_run("r1", make_spec())
        new_pods = harness.running_pods("r1-regen", 2)
        assert name not in {p["metadata"]["name"] for p in new_pods}
        old = get_json(harness.cluster, "pod", name, "-n", harness.namespace)
        assert old["metadata"].get("deletionTimestamp"), "the old pod must still be terminating"
        # Same labels as the new Job's pods (job-name r1-regen, run r1, stage regen, index 0),
        # a finished shard: only its owner's UID tells it apart.
        assert old["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "r1-regen"

        # The new run's shard 1 ends: the run counts exactly that one shard, not the old 0.
        new_shard_1 = next(p for p in new_pods if index_of(p) == "1")
        harness.finish_pod(new_shard_1, REGEN_RESULT)
        wait_for("the new run to count its shard", lambda: shards_done(harness, "r1") == 1)
        assert harness.status("r1")["progress"] == "regen 1/2"
        assert "1/2 shards committed" in harness.condition("r1", "Regenerated")["message"]
    finally:
        harness.kubectl(
            "patch", "pod", name, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]), check=False,
        )  # fmt: skip


def test_a_status_write_meant_for_a_deleted_run_is_refused_on_its_namesake(
    harness: Any, make_spec: Any
) -> None:
    """The operator's own client and account: the UID test of the patch is what refuses it."""
    kube = Kube(load_api_client(str(harness.operator_kubeconfig)), 5, 30)
    harness.apply_run("r1", make_spec(suspend=True))
    first = RunRef("r1", harness.namespace, harness.run("r1")["metadata"]["uid"])
    kube.patch_run_status(first, {"phase": "Regenerating", "message": "old"}, has_status=False)
    assert harness.status("r1")["message"] == "old"

    harness.kubectl("delete", "dflashrun", "r1", "--wait=true")
    harness.apply_run("r1", make_spec(suspend=True))
    second = RunRef("r1", harness.namespace, harness.run("r1")["metadata"]["uid"])
    assert second.uid != first.uid
    with pytest.raises(KubeError) as refused:
        kube.patch_run_status(first, {"message": "stale", "progress": None}, has_status=True)
    assert refused.value.status == 422
    assert "message" not in harness.status("r1")

    # The same write for the run that exists lands, and leaves the trainer's keys alone.
    harness.kubectl(
        "patch", "dflashrun", "r1", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"training": {"step": 7}}}),
    )  # fmt: skip
    kube.patch_run_status(second, {"message": "new", "phase": "Pending"}, has_status=True)
    kube.patch_run_status(second, {"phase": None}, has_status=True)
    status = harness.status("r1")
    assert status["message"] == "new" and "phase" not in status
    assert status["training"] == {"step": 7}
