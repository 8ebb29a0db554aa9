"""`kubectl dflash logs` finds the current stage's pods. The local cluster's nodes are kwok
fakes without a kubelet, so the API server cannot serve their logs: the plugin says so and
points at the process executor's logs instead of failing obscurely."""

from __future__ import annotations

from typing import Any

import yaml
from dflash_operator.api.constants import LABEL_ATTEMPT, LABEL_RUN, LABEL_STAGE


def create_pod(plugin: Any, name: str, labels: dict[str, str], node: str | None) -> None:
    """A pod as a stage's Job would create it; bound to `node` (a kwok node) or unscheduled."""
    spec: dict[str, Any] = {"containers": [{"name": "pytorch", "image": "dflash-trainer:dev"}]}
    if node is None:
        spec["nodeSelector"] = {"dflash.dev/node-pool": "no-such-pool"}
    else:
        spec["nodeName"] = node
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }
    plugin.cluster.kubectl("apply", "-n", plugin.namespace, "-f", "-", input=yaml.safe_dump(pod))


def test_logs_of_pods_on_nodes_without_a_kubelet_say_so_and_point_to_the_executor(
    plugin: Any,
) -> None:
    plugin.create_run("mid-training", "training")
    labels = {LABEL_RUN: "mid-training", LABEL_STAGE: "train", LABEL_ATTEMPT: "1"}
    create_pod(plugin, "mid-training-train-master-0", labels, node="cpu-0")

    result = plugin.run("logs", "mid-training")

    assert result.code == 1
    assert result.err.startswith(
        "error: cannot show logs of stage train of dflashrun mid-training: the API server has no logs to serve for its pods:\n"
    )
    assert (
        "mid-training-train-master-0 on node cpu-0: a kwok fake node (kwok.x-k8s.io/node), kubelet port 0"
        in result.err
    )
    assert result.err.endswith(
        "In the local development cluster the process executor runs these pods as local "
        "processes, and their output is in its logs:\n"
        f"  make executor-logs POD={plugin.namespace}/mid-training-train-master-0 FOLLOW=1\n"
    )


def test_logs_name_pods_that_are_not_scheduled_yet(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    create_pod(
        plugin,
        "mid-training-train-master-0",
        {LABEL_RUN: "mid-training", LABEL_STAGE: "train"},
        node=None,
    )

    result = plugin.run("logs", "mid-training", "--stage", "train")

    assert result.code == 1
    assert "mid-training-train-master-0: Pending, not scheduled to a node yet" in result.err
    assert "make executor-logs" not in result.err


def test_logs_follow_the_newest_attempt_and_find_pods_by_their_jobs_name(plugin: Any) -> None:
    plugin.create_run("oom", "failed")
    old = {LABEL_RUN: "oom", LABEL_STAGE: "train", LABEL_ATTEMPT: "1"}
    new = {LABEL_RUN: "oom", LABEL_STAGE: "train", LABEL_ATTEMPT: "2"}
    create_pod(plugin, "oom-train-master-0", old, node="cpu-0")
    create_pod(plugin, "oom-train-2-master-0", new, node="cpu-0")
    create_pod(
        plugin, "oom-regen-0-abcde", {"batch.kubernetes.io/job-name": "oom-regen"}, node="cpu-0"
    )

    train = plugin.run("logs", "oom")
    regen = plugin.run("logs", "oom", "--stage", "regen")

    assert "oom-train-2-master-0" in train.err and "oom-train-master-0 " not in train.err
    assert "oom-regen-0-abcde on node cpu-0" in regen.err


def test_logs_of_a_stage_without_pods_say_none_exist(plugin: Any) -> None:
    plugin.create_run("stub-answers", "audit-failed")

    result = plugin.run("logs", "stub-answers", "--stage", "tokenize")

    assert result.code == 1
    assert result.err.startswith(
        f"error: no pods of stage tokenize of dflashrun stub-answers in namespace {plugin.namespace}"
    )


def test_logs_of_a_finished_run_ask_for_a_stage(plugin: Any) -> None:
    plugin.create_run("finished", "succeeded")

    result = plugin.run("logs", "finished")

    assert result.code == 1
    assert (
        result.err
        == "error: dflashrun finished is Succeeded: no stage is running; name one with --stage\n"
    )
