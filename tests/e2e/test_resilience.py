"""Failures in the middle of a real run, on the TrainJob path `make demo` takes (and a SIGKILL on
the legacy PyTorchJob path): a training rank SIGKILLed (a TrainJob fails and the operator starts
the next attempt, a PyTorchJob restarts the pod in place) and the child TrainJob deleted (the
operator re-creates it) each resume from the newest committed S3 checkpoint; the S3 server
restarted during regeneration and the operator killed during training converge with one child
per stage, every shard committed once and no sample lost or duplicated."""

from __future__ import annotations

import dataclasses
import io
import re
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dflash_dev.demo.harness import PYTORCHJOB, STAGE_JOBS, TRAINJOB, DemoHarness
from dflash_dev.demo.private_s3 import PrivateS3
from dflash_dev.demo.summary import split_s3_uri
from dflash_dev.kube_wait import get_json
from dflash_dev.pytest_plugin import S3Handle

SAMPLES = 4 * 16
# Long enough to be killed mid-way on a fast machine: ~16 checkpoints of 4 steps.
LONG_TRAINING = {"epochs": 16, "anchorsPerSequence": 64, "checkpointEverySteps": 4}
RESUMED = re.compile(r"resumed from step (\d+)")
S3_OUTAGE_SECONDS = 8.0


def has_a_checkpoint_and_steps_left(status: dict[str, Any]) -> bool:
    training, checkpoint = status.get("training") or {}, status.get("checkpoint") or {}
    total = training.get("totalSteps") or 0
    return bool(checkpoint.get("step", 0) >= 4 and training.get("step", total) < total - 8)


def resumed_steps(harness: DemoHarness, pod: str) -> list[int]:
    return [int(step) for step in RESUMED.findall(harness.executor.logs(harness.namespace, pod))]


def assert_trained_to_the_end(harness: DemoHarness, run: str) -> dict[str, Any]:
    status = harness.wait_phase(run, "Succeeded", "Failed", "AuditFailed")
    assert status["phase"] == "Succeeded", harness.describe(run)
    assert status["training"]["step"] == status["training"]["totalSteps"]
    return status


# TrainJob by default, and one PyTorchJob run: the legacy path restarts the pod in place. The
# same manifest names its launcher (spec.training.launcher), over the operator's default.
@pytest.mark.parametrize("launcher", [TRAINJOB, PYTORCHJOB])
def test_a_training_rank_killed_mid_run_resumes_from_the_last_checkpoint_and_the_run_succeeds(
    harness: DemoHarness, launcher: str
) -> None:
    harness.start_operator()
    training = {**LONG_TRAINING, "launcher": launcher}
    harness.apply(harness.build_run("kill", training=training))

    before = harness.wait_until(
        "a checkpoint with steps left", "kill", has_a_checkpoint_and_steps_left
    )
    committed = before["checkpoint"]["step"]
    rank_zero = harness.rank_pods("kill-train")[0]
    assert harness.executor.kill(harness.namespace, rank_zero) > 0

    status = assert_trained_to_the_end(harness, "kill")
    assert status["launcher"] == launcher
    if launcher == TRAINJOB:
        # The JobSet fails with its rank (the runtime restarts nothing in place): the operator
        # starts attempt 2, a new TrainJob that resumes from the newest checkpoint.
        assert harness.children("trainjobs") == ["kill-train", "kill-train-2"]
        assert status["attempts"]["train"] == 2
        killed = harness.executor.get_pod(harness.namespace, rank_zero)
        assert killed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
        resumed = resumed_steps(harness, harness.rank_pods("kill-train-2")[0])
    else:
        # The same PyTorchJob carried on: no second training job, no second attempt.
        assert harness.children("pytorchjobs") == ["kill-train"]
        assert status["attempts"]["train"] == 1
        master = harness.executor.get_pod(harness.namespace, rank_zero)
        assert master["status"]["containerStatuses"][0]["restartCount"] >= 1
        resumed = resumed_steps(harness, rank_zero)
    assert resumed, "the restarted trainer did not log a resume"
    assert max(resumed) >= committed > 0


def test_a_deleted_trainjob_is_recreated_and_resumes_from_the_last_checkpoint(
    harness: DemoHarness,
) -> None:
    harness.start_operator()
    harness.apply(harness.build_run("gone", training=LONG_TRAINING))
    before = harness.wait_until(
        "a checkpoint with steps left", "gone", has_a_checkpoint_and_steps_left
    )
    committed = before["checkpoint"]["step"]
    first = get_json(harness.cluster, "trainjob", "gone-train", "-n", harness.namespace)
    harness.cluster.kubectl("delete", "trainjob", "gone-train", "-n", harness.namespace)

    status = assert_trained_to_the_end(harness, "gone")
    # Re-created under its name (a lost child is not a failed attempt: no restart spent).
    again = get_json(harness.cluster, "trainjob", "gone-train", "-n", harness.namespace)
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    assert harness.children("trainjobs") == ["gone-train"]
    assert status["attempts"]["train"] == 1
    lost = get_json(harness.cluster, "events", "-n", harness.namespace,
                    "--field-selector", "reason=ChildLost")["items"]  # fmt: skip
    assert any("TrainJob gone-train" in event["message"] for event in lost), lost
    resumed = resumed_steps(harness, harness.rank_pods("gone-train")[0])
    assert resumed, "the re-created trainer did not log a resume"
    assert max(resumed) >= committed > 0


def _regenerated_ids(client: object, run_root: str) -> list[str]:
    bucket, prefix = split_s3_uri(run_root)
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/regen/")  # type: ignore[attr-defined]
    keys = [item["Key"] for item in listing.get("Contents", [])]
    ids: list[str] = []
    for key in sorted(k for k in keys if k.endswith(".parquet")):
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
        ids += pq.read_table(io.BytesIO(body), columns=["id"]).column("id").to_pylist()
    commits = [k for k in keys if k.endswith(".commit.json")]
    assert len(commits) == 2, keys
    return ids


def test_a_run_converges_without_duplicates_or_lost_shards_when_s3_restarts_and_the_operator_dies(
    harness: DemoHarness, tmp_path: Path
) -> None:
    private = PrivateS3(tmp_path / "s3").start()
    world = dataclasses.replace(
        harness, s3=S3Handle(private.info, started_here=False), operators=[]
    )
    try:
        world.prepare_namespace(world.namespace)  # the Secret now holds the private server's keys
        world.start_operator()
        world.apply(world.build_run("flaky"))

        # S3 goes away while the regeneration pods work, and comes back on the same data.
        world.wait_until(
            "a regeneration pod running", "flaky",
            lambda s: s.get("phase") == "Regenerating"
            and any(p.get("status", {}).get("phase") == "Running" for p in world.pods()),
        )  # fmt: skip
        private.stop()
        time.sleep(S3_OUTAGE_SECONDS)
        private.start()

        # The operator dies during training and a new one takes over.
        world.wait_phase("flaky", "Training", "Failed", "AuditFailed", "Succeeded")
        world.operators[-1].kill()
        world.start_operator()
        status = world.wait_phase("flaky", "Succeeded", "Failed", "AuditFailed")
        assert status["phase"] == "Succeeded", world.describe("flaky")

        assert world.children("jobs") == [f"flaky-{stage}" for stage in STAGE_JOBS]
        assert world.children("trainjobs") == ["flaky-train"]
        assert status["launcher"] == TRAINJOB
        assert all(count == 1 for count in status["attempts"].values()), status["attempts"]
        kinds = [(c["kind"], c["name"]) for c in status["children"]]
        assert len(kinds) == len(set(kinds))
        regen = status["stages"]["regeneration"]
        assert regen["shardsDone"] == regen["shardsTotal"] == 2
        assert regen["samples"] == SAMPLES
        assert status["stages"]["tokenization"]["samples"] == SAMPLES
        run_root = status["drafterUri"].removesuffix("/final")
        ids = _regenerated_ids(private.info.client(), run_root)
        assert len(ids) == len(set(ids)) == SAMPLES
    finally:
        world.stop()
        private.stop()
