"""Jobs created through the real Job controller complete on executor nodes, and an Indexed
Job's pods see their JOB_COMPLETION_INDEX (the downward API the controller injects)."""

from __future__ import annotations

from typing import Any

from dflash_dev.executor.testing import LocalExecutor, container_state
from dflash_dev.kube_wait import get_json, wait_for

SHARD = (
    "import os; i = os.environ['JOB_COMPLETION_INDEX']; print('shard', i); "
    "open('/dev/termination-log', 'w').write(i)"
)


def job(executor: LocalExecutor, name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    template = executor.template(command)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": template, **spec},
    }


def pods_of(executor: LocalExecutor, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        executor.cluster, "pods", "-n", namespace, "-l", f"job-name={name}"
    )["items"]
    return items


def completed(executor: LocalExecutor, namespace: str, name: str) -> bool:
    conditions = get_json(executor.cluster, "job", name, "-n", namespace)["status"].get(
        "conditions"
    )
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions or [])


def test_a_job_runs_its_pod_and_completes(executor: LocalExecutor, namespace: str) -> None:
    executor.apply(namespace, job(executor, "tokenize", ["python", "-c", "print('tokenized')"]))
    wait_for("the Job to complete", lambda: completed(executor, namespace, "tokenize"))
    (pod,) = pods_of(executor, namespace, "tokenize")
    assert pod["spec"]["nodeName"] in executor.nodes
    assert "tokenized" in executor.logs(namespace, pod["metadata"]["name"])


def test_an_indexed_job_gives_each_pod_its_completion_index(
    executor: LocalExecutor, namespace: str
) -> None:
    indexed = job(
        executor,
        "regen",
        ["python", "-c", SHARD],
        completionMode="Indexed",
        completions=3,
        parallelism=3,
    )
    executor.apply(namespace, indexed)
    wait_for("the Indexed Job to complete", lambda: completed(executor, namespace, "regen"))
    by_index = {
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p
        for p in pods_of(executor, namespace, "regen")
    }
    assert sorted(by_index) == ["0", "1", "2"]
    for index, pod in by_index.items():
        assert container_state(pod)["terminated"]["message"] == index
