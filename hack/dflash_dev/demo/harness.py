"""A small-size demo world for e2e tests and benchmarks: namespaces with the S3 Secret, a bucket
with the demo's assets, operator processes (chart RBAC, cpu pool on one executor's nodes,
training as a TrainJob unless a test asks for the legacy PyTorchJob), runs of the demo's
DFlashRun at test size, and waits that fail with the run's whole story."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflash_dev import operator_local
from dflash_dev.demo import assets, environment, manifest
from dflash_dev.executor.testing import LocalExecutor
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.pytest_plugin import ClusterHandle, S3Handle

# Generous: 2 shared cores, and other people's tests run at the same time.
RUN_TIMEOUT = 540.0  # under pytest-timeout (600 s), so a failure shows the run's story
PHASE_TIMEOUT = 420.0
PER_SOURCE = 16  # x 4 sources: 64 prompts
# The demo run at a test size: a few training steps, a short evaluation.
SMALL_SPEC: dict[str, Any] = {
    # A canary of 4 per source: the shards still regenerate most of each 16-sample source.
    "regeneration": {"canary": {"samplesPerSource": 4}},
    "training": {"epochs": 2, "anchorsPerSequence": 16, "checkpointEverySteps": 4},
    "evaluation": {"maxPrompts": 4, "maxNewTokens": 24},
    "ttlSecondsAfterFinished": None,  # keep the children: tests count them
}
MANAGED = "app.kubernetes.io/managed-by=dflash-operator"
# The training backends (spec.training.launcher) and their child kinds. The harness's operators
# default to TrainJob, as `make demo` trains; a test of the legacy path asks for PyTorchJob.
TRAINJOB = "trainjob"
PYTORCHJOB = "pytorchjob"
TRAINING_KINDS = {TRAINJOB: "trainjobs", PYTORCHJOB: "pytorchjobs"}
# The labels that find a training child's pods and their rank: a TrainJob's JobSet pods by
# their Job completion index, a PyTorchJob's by replica type and index.
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
PYTORCHJOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
# The Jobs a run at test size creates, one per stage (sorted as `children` lists them).
STAGE_JOBS = ("audit-canary", "audit-completions", "audit-tokens", "canary", "eval", "regen",
              "tokenize")  # fmt: skip


def rank_order(pods: list[dict[str, Any]], child: str) -> list[str]:
    """The names of a training child's pods (TrainJob or PyTorchJob) by rank: rank 0 first (a
    TrainJob's completion index 0, a PyTorchJob's Master); the newest first within a rank (a
    child re-created under its name)."""
    ranked = []
    for pod in pods:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(JOBSET_NAME) == child:
            rank = int(labels.get(COMPLETION_INDEX, "0"))
        elif labels.get(PYTORCHJOB_NAME) == child:
            master = labels.get(REPLICA_TYPE) == "master"
            rank = 0 if master else 1 + int(labels.get(REPLICA_INDEX, "0"))
        else:
            continue
        ranked.append((rank, meta.get("creationTimestamp") or "", meta["name"]))
    ranked.sort(key=lambda item: item[1], reverse=True)  # newest first (RFC 3339 sorts)
    ranked.sort(key=lambda item: item[0])  # stable: by rank, newest first within one
    return [name for _rank, _created, name in ranked]


@dataclass
class DemoHarness:
    """One test's world: namespaces, a bucket with the demo's assets, operators, runs."""

    cluster: ClusterHandle
    s3: S3Handle
    executor: LocalExecutor
    operator_kubeconfig: Path
    workdir: Path
    namespace: str
    bucket: str
    target: Path
    operators: list[operator_local.OperatorProcess] = field(default_factory=list)
    launcher: str = TRAINJOB  # DFLASH_DEFAULT_LAUNCHER of its operators

    # --- setup ------------------------------------------------------------------------------------
    def prepare_namespace(self, namespace: str) -> None:
        environment.ensure_s3_secret(self.cluster.kubeconfig, namespace, self.s3.info)

    def upload(self, files: list[assets.SourceFile]) -> None:
        client = self.s3.client()
        assets.ensure_bucket(client, self.bucket)
        assets.upload_folder(client, self.target, self.bucket, manifest.MODEL_KEY)
        assets.upload_sources(client, files, self.bucket)

    def start_operator(
        self,
        namespaces: tuple[str, ...] | None = None,
        pool_env: dict[str, str] | None = None,
        image: str | None = None,
        env: dict[str, str] | None = None,
    ) -> operator_local.OperatorProcess:
        """The operator, its `cpu` pool on this test's executor (`pool_env` over the pool's env,
        e.g. HF_ENDPOINT), runs that set no launcher trained by the harness's `launcher`; from
        the operator `image` when given (image mode), with `env` over its settings (e.g.
        DFLASH_REGEN_IMAGE)."""
        pools = environment.write_pools_file(
            environment.executor_pool_values(self.executor.instance, pool_env),
            self.workdir / "pools.yaml",
        )
        process = operator_local.OperatorProcess(
            kubeconfig=self.operator_kubeconfig,
            pools_file=pools,
            log_path=self.workdir / f"operator-{len(self.operators)}.log",
            namespaces=namespaces or (self.namespace,),
            resync_seconds=10,
            image=image,
            env={"DFLASH_DEFAULT_LAUNCHER": self.launcher, **(env or {})},
        ).start()
        self.operators.append(process)
        return process.wait_ready()

    def build_run(
        self,
        name: str,
        files: list[assets.SourceFile] | None = None,
        per_source: int = PER_SOURCE,
        **spec: Any,
    ) -> dict[str, Any]:
        """The demo's DFlashRun at test size, in this test's bucket (`files`: its sources,
        uploaded; default the demo's four prompt sources)."""
        files = files if files is not None else assets.build_prompt_sources(per_source)
        self.upload(files)
        sources = assets.build_sources_spec(files, manifest.EXAMPLE_BUCKET, per_source)
        body = manifest.deep_merge(SMALL_SPEC, spec)
        body = {k: v for k, v in body.items() if v is not None}
        run = manifest.build_run(
            manifest.load_example(), endpoint=self.s3.endpoint_url, name=name,
            bucket=self.bucket, sources=sources, spec=body,
        )  # fmt: skip
        run["spec"].pop("ttlSecondsAfterFinished", None)
        return run

    def apply(self, run: dict[str, Any], namespace: str | None = None) -> None:
        manifest.apply_run(self.cluster.kubeconfig, namespace or self.namespace, run)

    # --- observing --------------------------------------------------------------------------------
    def run(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        found = manifest.get_run(self.cluster.kubeconfig, namespace or self.namespace, name)
        assert found is not None, f"DFlashRun {name} does not exist"
        return found

    def status(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return dict(self.run(name, namespace).get("status") or {})

    def wait_until(
        self,
        what: str,
        name: str,
        check: Any,
        timeout: float = PHASE_TIMEOUT,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Poll the run's status until check(status) holds; fail with the whole story."""

        def reached() -> dict[str, Any] | None:
            status = self.status(name, namespace)
            return status if check(status) else None

        try:
            found = wait_for(f"{name}: {what}", reached, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe(name, namespace)}") from None
        return found or {}  # wait_for returns only a truthy value

    def wait_phase(
        self, name: str, *phases: str, timeout: float = RUN_TIMEOUT, namespace: str | None = None
    ) -> dict[str, Any]:
        return self.wait_until(
            f"phase {' or '.join(phases)}",
            name,
            lambda s: s.get("phase") in phases,
            timeout,
            namespace,
        )

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = get_json(
            self.cluster, "pods", "-n", namespace or self.namespace
        )["items"]
        return items

    def children(self, kind: str, namespace: str | None = None) -> list[str]:
        items = get_json(self.cluster, kind, "-n", namespace or self.namespace, "-l", MANAGED)[
            "items"
        ]
        return sorted(item["metadata"]["name"] for item in items)

    def training_children(self, namespace: str | None = None) -> list[str]:
        """The names of the training children of the harness's launcher."""
        return self.children(TRAINING_KINDS[self.launcher], namespace)

    def rank_pods(self, child: str, namespace: str | None = None) -> list[str]:
        """The pods of a training child, rank 0 first (`rank_order`)."""
        return rank_order(self.pods(namespace), child)

    def describe(self, name: str, namespace: str | None = None) -> str:
        ns = namespace or self.namespace
        status = json.dumps(self.status(name, ns), indent=1)[:4000]
        pods = []
        for pod in self.pods(ns):
            pod_name = pod["metadata"]["name"]
            phase = pod.get("status", {}).get("phase")
            line = f"  {pod_name}: {phase} on {pod['spec'].get('nodeName')}"
            if phase == "Failed":
                try:
                    line += "\n" + self.executor.logs(ns, pod_name)[-1500:]
                except Exception as exc:
                    line += f" (no log: {exc})"
            pods.append(line)
        operator = self.operators[-1].log_tail(30) if self.operators else "(no operator)"
        return (
            f"--- status:\n{status}\n--- pods:\n"
            + "\n".join(pods)
            + f"\n--- operator log:\n{operator}"
        )

    def stop(self) -> None:
        for process in self.operators:
            process.stop()
        self.delete_bucket()

    def delete_bucket(self) -> None:
        """The test's bucket and everything in it: SeaweedFS gives its volume slots back, so a
        session of many tests fits a small disk (s3capacity.py). Best effort."""
        try:
            self.s3.client().delete_bucket(Bucket=self.bucket)
        except Exception:  # gone already, or the server is down: nothing to free
            return
