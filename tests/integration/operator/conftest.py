"""The operator on the real local control plane, with the Helm chart's RBAC (not admin).

`harness` gives each test its namespace, an operator process watching only it, and kubelet-
like helpers: stage pods are held Running by kwok (pool label kwok.dflash.dev/hold=true) and
the test writes their terminated state and termination message, as a real stage would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev import operator_local, third_party_crds
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.pytest_plugin import ClusterHandle

HOLD = {"kwok.dflash.dev/hold": "true"}
# The training backend the operator defaults to in these tests (DFLASH_DEFAULT_LAUNCHER): the
# legacy PyTorchJob path unless DFLASH_TEST_LAUNCHER says trainjob (or auto), so that the same
# suite runs on a control plane with Kubeflow Trainer v2 against TrainJobs.
TEST_LAUNCHER = os.environ.get("DFLASH_TEST_LAUNCHER", "pytorchjob")
# Generous: the machine is small and shared; a healthy step takes about a second.
STEP_TIMEOUT = 60.0


@pytest.fixture(scope="session")
def operator_install(cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's CRD, RBAC and pools applied once; a token kubeconfig for its account."""
    workdir = tmp_path_factory.mktemp("operator")
    operator_local.install(cluster.kubeconfig)
    return operator_local.token_kubeconfig(cluster.kubeconfig, workdir / "operator.kubeconfig")


def held_pools(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's pools, every one holding its pods so the test plays the kubelet."""
    pools = operator_local.chart_pools()
    for pool in pools["nodePools"].values():
        pool["labels"] = {**(pool.get("labels") or {}), **HOLD}
    pools["nodePools"].update(extra or {})
    return pools


def imported_spec(make_spec: Any, **overrides: Any) -> dict[str, Any]:
    """A run of completions regenerated elsewhere (regeneration off): its first stage is the
    score stage, placed on the cpu pool so that any test queue admits it."""
    spec: dict[str, Any] = make_spec(
        **{
            "regeneration": {"enabled": False, "nodePool": "cpu"},
            "data": {
                "sources": [
                    {"name": "done", "uri": "s3://datasets/regen/", "format": "regenerated"}
                ]
            },
            **overrides,
        }
    )
    return spec


def is_rank_zero(pod: dict[str, Any]) -> bool:
    """The pod of torch rank 0 (whose result the operator reads): a PyTorchJob's Master, or a
    TrainJob's completion index 0."""
    labels = pod["metadata"].get("labels", {})
    if "jobset.sigs.k8s.io/jobset-name" in labels:
        return labels.get("batch.kubernetes.io/job-completion-index") == "0"
    return labels.get("training.kubeflow.org/replica-type") == "master"


def minimal_runtime(name: str) -> dict[str, Any]:
    """The smallest ClusterTrainingRuntime the Trainer's webhook accepts (torch, one `node`
    replicated job): what a TrainJob's runtimeRef must name before the webhook admits it."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "node", "image": "trainer:1"}]}}}}}]}}},
    }  # fmt: skip


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def base_spec(**overrides: Any) -> dict[str, Any]:
    """A run small enough for the fake nodes shared with other tests."""
    spec: dict[str, Any] = {
        "target": {"model": "s3://models/qwen3-8b"},
        "data": {
            "sources": [
                {"name": "chat", "uri": "s3://datasets/chat.jsonl", "format": "openai-messages"}
            ]
        },
        # The canary has its own test (test_gates_and_failures.py); off here so that each test
        # drives only the stages it is about.
        "regeneration": {"shards": 2, "tensorParallel": 1, "canary": {"samplesPerSource": 0}},
        "training": {"nodes": 2, "gpusPerNode": 1, "maxRestarts": 2},
        "storage": {"bucket": "artifacts", "credentialsSecretRef": {"name": "s3-creds"}},
    }
    spec.update(overrides)
    return spec


# Each stage's child (name suffix) -> the phase the run is in while it runs, in pipeline order,
# and the result a successful pod of that stage reports (what real stage pods write).
STAGE_PHASES = {
    "regen": "Regenerating", "audit-completions": "AuditingCompletions", "tokenize": "Tokenizing",
    "audit-tokens": "AuditingTokens", "train": "Training", "eval": "Evaluating",
}  # fmt: skip
# The canary's stages, for runs that have one (base_spec turns it off).
CANARY_PHASES = {"canary": "Canary", "audit-canary": "AuditingCanary"}
# Runs of imported completions (regeneration off) start with the score stage instead.
IMPORTED_PHASES = {"score": "Scoring"}
STAGE_RESULTS: dict[str, dict[str, Any]] = {
    "canary": {"stage": "regenerate", "ok": True, "canary": True, "samples": 16},
    "audit-canary": {"stage": "audit", "ok": True, "verdict": "pass"},
    "regen": {"stage": "regenerate", "ok": True, "samples": 100, "outputTokens": 5000},
    "score": {
        "stage": "score",
        "ok": True,
        "samples": 100,
        "scored": 64,
        "scoresUri": "s3://artifacts/likelihood/sample/",
    },
    "audit-completions": {"stage": "audit", "ok": True, "verdict": "pass"},
    "tokenize": {"stage": "tokenize", "ok": True, "samples": 200, "tokens": 90000},
    "audit-tokens": {"stage": "audit", "ok": True, "verdict": "pass"},
    "train": {"stage": "train", "ok": True, "finalUri": "s3://artifacts/final/"},
    "eval": {"stage": "evaluate", "ok": True, "acceptanceLength": 5.5},
}


@dataclass
class Harness:
    cluster: ClusterHandle
    namespace: str
    workdir: Path
    operator_kubeconfig: Path
    pools: dict[str, Any] = field(default_factory=held_pools)
    operators: list[operator_local.OperatorProcess] = field(default_factory=list)
    stage_phases: dict[str, str] = field(default_factory=lambda: dict(STAGE_PHASES))
    stage_results: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(STAGE_RESULTS))
    launcher: str = TEST_LAUNCHER

    # --- the operator ----------------------------------------------------------------------------
    @property
    def operator(self) -> operator_local.OperatorProcess:
        return self.operators[-1]

    def start_operator(
        self, env: dict[str, str] | None = None, ready: bool = True
    ) -> operator_local.OperatorProcess:
        pools_file = self.workdir / "pools.yaml"
        pools_file.write_text(yaml.safe_dump(self.pools))
        process = operator_local.OperatorProcess(
            kubeconfig=self.operator_kubeconfig,
            pools_file=pools_file,
            log_path=self.workdir / f"operator-{len(self.operators)}.log",
            namespaces=(self.namespace,),
            env={"DFLASH_DEFAULT_LAUNCHER": self.launcher, **(env or {})},
            resync_seconds=5,
        ).start()
        self.operators.append(process)
        return process.wait_ready() if ready else process

    def stop_operators(self) -> None:
        for process in self.operators:
            process.stop()

    # --- runs -------------------------------------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.cluster.kubectl(*args, "-n", self.namespace, input=input, check=check)

    def apply_run(self, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": "dflash.dev/v1alpha1",
            "kind": "DFlashRun",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))

    def run(self, name: str) -> dict[str, Any]:
        return dict(get_json(self.cluster, "dflashrun", name, "-n", self.namespace))

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.run(name).get("status") or {})

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        for condition in self.status(name).get("conditions") or ():
            if condition["type"] == type_:
                return dict(condition)
        return None

    def wait_phase(self, name: str, phase: str, timeout: float = STEP_TIMEOUT) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status = self.status(name)
            return status if status.get("phase") == phase else None

        try:
            return wait_for(f"{name} to reach {phase}", reached, timeout)
        except AssertionError:
            raise AssertionError(
                f"{name} did not reach {phase}; status: {json.dumps(self.status(name), indent=1)[:3000]}\n"
                f"operator log:\n{self.operator.log_tail()}"
            ) from None

    def patch_spec(self, name: str, patch: dict[str, Any]) -> None:
        self.kubectl("patch", "dflashrun", name, "--type=merge", "-p", json.dumps({"spec": patch}))

    def annotate(self, name: str, key: str, value: str) -> None:
        self.kubectl("annotate", "dflashrun", name, f"{key}={value}", "--overwrite")

    def events(self, name: str) -> list[tuple[str, str, str]]:
        items = get_json(
            self.cluster,
            "events",
            "-n",
            self.namespace,
            "--field-selector",
            f"involvedObject.name={name},involvedObject.kind=DFlashRun",
        )["items"]
        return [(e["type"], e["reason"], e["message"]) for e in items]

    # --- children ---------------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        items = get_json(
            self.cluster,
            kind,
            "-n",
            self.namespace,
            "-l",
            "app.kubernetes.io/managed-by=dflash-operator",
        )["items"]
        return sorted(item["metadata"]["name"] for item in items)

    def pods_of(self, child: str) -> list[dict[str, Any]]:
        items = get_json(self.cluster, "pods", "-n", self.namespace)["items"]
        # Job and PyTorchJob pods name their owner; a TrainJob's pods name its JobSet (the
        # TrainJob's namesake).
        owners = (
            "batch.kubernetes.io/job-name",
            "training.kubeflow.org/job-name",
            "jobset.sigs.k8s.io/jobset-name",
        )
        return [
            p for p in items if any(p["metadata"].get("labels", {}).get(k) == child for k in owners)
        ]

    def running_pods(
        self, child: str, count: int, timeout: float = STEP_TIMEOUT
    ) -> list[dict[str, Any]]:
        def ready() -> list[dict[str, Any]] | None:
            pods = [
                p
                for p in self.pods_of(child)
                if p.get("status", {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ]
            return pods if len(pods) >= count else None

        return wait_for(f"{count} running pod(s) of {child}", ready, timeout)

    def running_pods_now(self, child: str) -> list[dict[str, Any]]:
        """The child's pods that are Running and not being deleted, now (no waiting)."""
        return [
            p for p in self.pods_of(child)
            if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]  # fmt: skip

    def finish_pod(
        self, pod: dict[str, Any], result: dict[str, Any] | None, exit_code: int = 0
    ) -> None:
        """Write the pod's end as a kubelet would: terminated state and termination message."""
        container = pod["spec"]["containers"][0]
        terminated: dict[str, Any] = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": now(),
            "finishedAt": now(),
        }
        if result is not None:
            terminated["message"] = json.dumps(result)
        status = {
            "status": {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": [{
                    "name": container["name"], "image": container["image"], "imageID": "",
                    "ready": False, "started": False, "restartCount": 0,
                    "state": {"terminated": terminated},
                }],
            }
        }  # fmt: skip
        self.cluster.kubectl(
            "patch", "pod", pod["metadata"]["name"], "-n", self.namespace,
            "--subresource=status", "--type=merge", "-p", json.dumps(status),
        )  # fmt: skip

    def finish(
        self, child: str, result: dict[str, Any] | None = None, count: int = 1, exit_code: int = 0
    ) -> None:
        """Wait for `count` running pods of the child and end them all with `result`."""
        for pod in self.running_pods(child, count):
            self.finish_pod(pod, result, exit_code)

    def finish_score(self, run: str) -> None:
        """End an imported run's score stage (its first) as a passing score pod would."""
        child = f"{run}-score"
        wait_for(child, lambda: child in self.names("jobs"))
        self.finish(child, self.stage_results["score"])

    def trainer_kubeconfig(self, run: str) -> Path:
        """Credentials of the run's trainer ServiceAccount (as its pods would have)."""
        return operator_local.token_kubeconfig(
            self.cluster.kubeconfig,
            self.workdir / f"{run}-trainer.kubeconfig",
            account=f"{run}-trainer",
            namespace=self.namespace,
            duration="1h",
        )


@pytest.fixture
def make_spec() -> Any:
    return base_spec


@pytest.fixture(scope="session")
def trainer_crds(cluster: ClusterHandle) -> ClusterHandle:
    """The Kubeflow Trainer v2.3.0 CRDs (TrainJob, ClusterTrainingRuntime) on the cluster, from
    the module proxy; no Trainer controller runs unless the control plane has one."""
    for path in third_party_crds.ensure("kubeflow-trainer"):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    return cluster


@pytest.fixture
def harness(
    cluster: ClusterHandle, namespace: str, operator_install: Path, tmp_path: Path
) -> Iterator[Harness]:
    world = Harness(cluster, namespace, tmp_path, operator_install)
    yield world
    world.stop_operators()
    for process in world.operators:
        print(f"--- {process.log_path.name}\n{process.log_tail(60)}")


def serve_pytorchjobs(cluster: ClusterHandle, served: bool) -> None:
    """Take the PyTorchJob API away (served: false) or give it back, as an uninstalled or
    reinstalled training-operator would, and wait until the API server agrees."""
    serve_crd_version(cluster, "pytorchjobs.kubeflow.org", "v1", served)


def serve_crd_version(cluster: ClusterHandle, crd: str, version: str, served: bool) -> None:
    """Mark one version of a CRD served or not (what a cluster without that API, or with
    another release of it, shows: a 404 on the resource at that version, and API discovery
    without it), and wait until the API server agrees. Nothing stored is lost."""
    found = get_json(cluster, f"customresourcedefinition/{crd}")
    names = [v["name"] for v in found["spec"]["versions"]]
    assert version in names, f"CRD {crd} has no version {version} (it has {names})"
    index = names.index(version)
    patch = [{"op": "replace", "path": f"/spec/versions/{index}/served", "value": served}]
    cluster.kubectl(
        "patch", f"customresourcedefinition/{crd}", "--type=json", "-p", json.dumps(patch)
    )
    plural, _, group = crd.partition(".")

    def settled() -> bool:
        listed = cluster.kubectl("get", f"{plural}.{version}.{group}", "-A", check=False)
        return (listed.returncode == 0) == served

    wait_for(f"{crd} {version} to be {'served' if served else 'gone'}", settled)
