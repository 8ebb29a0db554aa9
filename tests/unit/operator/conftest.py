"""Builders for the operator's unit tests: runs as the API server would return them, the
node pools of the chart, child and pod views, and `Sim`, which plays the cluster for the
pure planner (actions become observed children; the test decides how they end).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dflash_operator.api.constants import LABEL_ATTEMPT, LABEL_STAGE, Stage
from dflash_operator.children.kinds import summarize_child
from dflash_operator.children.meta import ANNOTATION_CONFIG_HASH
from dflash_operator.plan.actions import (
    ApplyConfig,
    CreateChild,
    DeleteChild,
    LookUp,
    Plan,
    SetDeadline,
    SetSuspend,
    SetWorkloadActive,
)
from dflash_operator.plan.observed import (
    ChildView,
    CreateFailure,
    Finished,
    Lookup,
    Observed,
    PodView,
    Termination,
    WorkloadView,
)
from dflash_operator.plan.planner import PlanInput, plan
from dflash_operator.plan.stages import PlanSettings
from dflash_operator.pools import PoolsConfig, parse_pools
from dflash_operator.runtime.kube import describe_not_served

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
RUN_UID = "0b6c1a0e-0000-4000-8000-000000000001"

POOLS: dict[str, Any] = {
    "nodePools": {
        "b200": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "gpusPerNode": 8,
            "shmSize": "64Gi",
            "extraResources": {"rdma/ib": 1},
            "addCapabilities": ["IPC_LOCK"],
        },
        "rtx-pro-6000": {
            "nodeSelector": {
                "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
            },
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "gpusPerNode": 4,
            "env": {"NCCL_SOCKET_IFNAME": "eth0"},
            "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"},
        },
        "cpu": {"nodeSelector": {"dflash.dev/node-pool": "cpu"}},
    },
    "defaults": {
        "regeneration": "b200",
        "audit": "cpu",
        "tokenization": "cpu",
        "training": "rtx-pro-6000",
    },
}


def spec_dict(**overrides: Any) -> dict[str, Any]:
    """A small valid spec; `overrides` replace top-level sections."""
    spec: dict[str, Any] = {
        "target": {"model": "s3://models/qwen3-8b"},
        "data": {
            "sources": [
                {"name": "chat", "uri": "s3://data/chat.jsonl", "format": "openai-messages"}
            ]
        },
        # The canary has tests of its own (test_planner_canary.py); elsewhere it is off so that
        # each test drives only the stages it is about.
        "regeneration": {"shards": 4, "tensorParallel": 2, "canary": {"samplesPerSource": 0}},
        "training": {"nodes": 2},
        "storage": {"bucket": "artifacts", "credentialsSecretRef": {"name": "s3-creds"}},
    }
    spec.update(overrides)
    return spec


def run_body(
    name: str = "r1",
    *,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "dflash.dev/v1alpha1",
        "kind": "DFlashRun",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": RUN_UID,
            "generation": generation,
            "annotations": dict(annotations or {}),
        },
        "spec": spec if spec is not None else spec_dict(),
    }
    if status is not None:
        body["status"] = status
    return body


def termination(
    result: dict[str, Any] | None = None, exit_code: int = 0, at: int = 0
) -> Termination:
    return Termination(
        exit_code=exit_code,
        reason="Completed" if exit_code == 0 else "Error",
        message=json.dumps(result) if result is not None else None,
        finished_at=NOW + timedelta(seconds=at),
    )


class Sim:
    """The cluster, as far as the planner can tell: children appear when created, and end
    when the test says so. `step()` reconciles like `runtime/reconciler.py` does."""

    def __init__(
        self, body: dict[str, Any], pools: PoolsConfig, settings: PlanSettings | None = None
    ) -> None:
        self.body = copy.deepcopy(body)
        self.pools = pools
        self.settings = settings or PlanSettings()
        self.children: dict[tuple[str, str], ChildView] = {}
        self.manifests: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: list[PodView] = []
        self.created: list[str] = []
        self.now = NOW
        self.plans: list[Plan] = []
        # The actions of each step's first plan (what the executor carried out).
        self.actions: list[tuple[Any, ...]] = []
        # Kueue, as far as the planner can tell: a Workload per queued child, admitted at
        # once (the child unsuspended) while `quota_free`, else left waiting with `quota_message`.
        self.workloads: dict[str, WorkloadView] = {}
        self.quota_free = True
        self.quota_message = "couldn't assign flavors to pod set main: insufficient quota"
        # Kinds the API server does not serve (their CRD is missing): creating one fails 404.
        self.missing_kinds: set[str] = set()
        self.failures: list[CreateFailure] = []
        # Objects a run names that do not exist, (kind, name): the executor's lookups find
        # them absent; and Kueue makes no Workload while `kueue_blocked` (what a missing
        # PriorityClass does to it).
        self.absent: set[tuple[str, str]] = set()
        self.lookups: list[Lookup] = []
        self.not_served: set[str] = set()  # kinds whose API the cluster does not serve
        self.kueue_blocked = False
        # Training kinds the API server serves (API discovery): the training-operator only,
        # unless a test installs Kubeflow Trainer v2.
        self.served_kinds: frozenset[str] | None = frozenset({"PyTorchJob"})

    # --- the world ---------------------------------------------------------------------------
    def observed(self) -> Observed:
        return Observed(
            children=tuple(self.children.values()),
            pods=tuple(self.pods),
            workloads=tuple(self.workloads.values()),
            served_kinds=self.served_kinds,
        )

    def kueue(self) -> None:
        """Kueue's reconcile: admit (and unsuspend) the waiting active workloads while the
        quota allows; stop the children of deactivated ones."""
        for key, child in list(self.children.items()):
            if not child.queue or child.finished.done:
                continue
            if self.kueue_blocked and child.uid not in self.workloads:
                continue
            workload = self.workloads.setdefault(
                child.uid, WorkloadView(name=f"job-{child.name}-abcde", job_uid=child.uid)
            )
            if not workload.active:
                self.workloads[child.uid] = replace(workload, admitted=False)
                self.children[key] = replace(child, suspended=True)
            elif self.quota_free:
                self.workloads[child.uid] = replace(
                    workload, admitted=True, cluster_queue="gpu-cq", message="admitted"
                )
                self.children[key] = replace(child, suspended=False)
            else:
                self.workloads[child.uid] = replace(workload, message=self.quota_message)

    def child(self, name: str, kind: str | None = None) -> ChildView:
        for (child_kind, child_name), view in self.children.items():
            if child_name == name and kind in (None, child_kind):
                return view
        raise KeyError(name)

    def _look_up(self, refs: tuple[Any, ...]) -> list[Lookup]:
        found = [
            Lookup(ref, None, describe_not_served(ref.kind))
            if ref.kind in self.not_served
            else Lookup(ref, (ref.kind, ref.name) not in self.absent)
            for ref in refs
        ]
        self.lookups.extend(found)
        return found

    def _apply(self, actions: tuple[Any, ...]) -> None:
        self.failures = []
        self.lookups = []
        for action in actions:
            if isinstance(action, LookUp):
                self._look_up(action.refs)
                continue
            if isinstance(action, CreateChild) and action.requires:
                found = self._look_up(action.requires)
                missing = tuple(lk.ref for lk in found if lk.exists is False)
                if missing:
                    self.failures.append(
                        CreateFailure(action.kind, action.name, "missing", missing=missing)
                    )
                    break
            if isinstance(action, CreateChild) and action.kind in self.missing_kinds:
                message = "the server could not find the requested resource"
                self.failures.append(
                    CreateFailure(action.kind, action.name, message, api_missing=True)
                )
                break  # the executor stops at the first creation that fails
            if isinstance(action, CreateChild | ApplyConfig):
                manifest = copy.deepcopy(action.manifest)
                key = (action.kind, action.name)
                if key in self.children and isinstance(action, CreateChild):
                    continue  # AlreadyExists: adopted
                manifest["metadata"]["uid"] = f"uid-{action.name}-{len(self.created)}"
                self.manifests[key] = manifest
                view = summarize_child(manifest)
                if view is None:
                    labels = manifest["metadata"].get("labels", {})
                    view = ChildView(
                        kind=action.kind, api_version=manifest["apiVersion"], name=action.name,
                        uid=manifest["metadata"]["uid"], owner_uid=RUN_UID,
                        stage=Stage(labels[LABEL_STAGE]) if LABEL_STAGE in labels else None,
                        attempt=int(labels.get(LABEL_ATTEMPT, "1")),
                    )  # fmt: skip
                if isinstance(action, ApplyConfig):
                    hash_ = manifest["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]
                    view = replace(view, config_hash=hash_)
                self.children[key] = view
                if isinstance(action, CreateChild):
                    self.created.append(action.name)
            elif isinstance(action, SetSuspend):
                key = (action.kind, action.name)
                self.children[key] = replace(self.children[key], suspended=action.suspend)
            elif isinstance(action, SetWorkloadActive):
                for uid, workload in self.workloads.items():
                    if workload.name == action.name:
                        self.workloads[uid] = replace(workload, active=action.active)
            elif isinstance(action, SetDeadline):
                key = (action.kind, action.name)
                self.children[key] = replace(
                    self.children[key], active_deadline_seconds=action.seconds
                )
            elif isinstance(action, DeleteChild):
                # Background deletion: still there for the re-plan, gone by the next step.
                key = (action.kind, action.name)
                if key in self.children:
                    self.children[key] = replace(self.children[key], deleting=True)

    def step(self, body_changes: Callable[[dict[str, Any]], None] | None = None) -> Plan:
        """One reconcile: plan, act, re-plan with the result, store the status."""
        if body_changes is not None:
            body_changes(self.body)
        self.kueue()
        inputs = PlanInput(self.body, self.observed(), self.pools, self.settings, self.now)
        first = plan(inputs)
        self.actions.append(first.actions)
        final = first
        if first.actions:
            self._apply(first.actions)
            self.kueue()
            observed = self.observed().with_failures(self.failures).with_lookups(self.lookups)
            final = plan(replace(inputs, observed=observed))
        trainer = {
            k: v
            for k, v in (self.body.get("status") or {}).items()
            if k in ("training", "checkpoint")
        }
        self.body["status"] = {**final.status.to_api(), **trainer}
        self.plans.append(final)
        for key, child in list(self.children.items()):
            if child.deleting:
                del self.children[key]
        self.now += timedelta(seconds=1)
        return final

    def settle(self, limit: int = 10) -> Plan:
        """Reconcile until nothing more happens (at most `limit` passes)."""
        last = self.step()
        for _ in range(limit):
            if not last.actions:
                break
            last = self.step()
        return last

    # --- how children end ------------------------------------------------------------------------
    def finish_data_stages(self) -> None:
        """End regeneration (4 shards), both gates (pass) and tokenization successfully, in
        order (after the model stage, for a Hub target): the run then stands at training."""
        if "r1-model" in self.created:
            self.finish("r1-model", result={"revision": "a" * 40, "files": 5, "bytes": 100})
            self.settle()
        for name, result in (
            ("r1-regen", {"samples": 10}),
            ("r1-audit-completions", {"verdict": "pass"}),
            ("r1-tokenize", {}),
            ("r1-audit-tokens", {"verdict": "pass"}),
        ):
            self.finish(name, result=result, pods=4 if name == "r1-regen" else 1)
            self.settle()

    def finish(
        self,
        name: str,
        ok: bool = True,
        message: str = "",
        result: dict[str, Any] | None = None,
        exit_code: int | None = None,
        pods: int = 1,
    ) -> None:
        view = self.child(name)
        self.children[(view.kind, name)] = replace(
            view,
            finished=Finished(
                True,
                ok,
                message
                or (
                    "done"
                    if ok
                    else "BackoffLimitExceeded: Job has reached the specified backoff limit"
                ),
            ),
            succeeded=pods if ok else 0,
        )
        code = exit_code if exit_code is not None else (0 if ok else 1)
        for index in range(pods):
            self.pods.append(
                PodView(
                    name=f"{name}-{index}-abcde", uid=f"pod-{name}-{index}", owner_name=name,
                    owner_uid=view.uid,
                    stage=view.stage, attempt=view.attempt,
                    index=index if view.stage == Stage.REGEN else None,
                    phase="Succeeded" if code == 0 else "Failed",
                    node_name="node-0", terminated=termination(result, code, at=index),
                    replica_type="master" if view.kind == "PyTorchJob" and index == 0 else None,
                )
            )  # fmt: skip

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    def condition(self, type_: str) -> dict[str, Any] | None:
        for condition in self.status.get("conditions") or ():
            if condition["type"] == type_:
                return dict(condition)
        return None

    def events(self) -> list[tuple[str, str]]:
        return [(e.reason, e.message) for p in self.plans for e in p.events]


@pytest.fixture
def pools() -> PoolsConfig:
    return parse_pools(POOLS)


@pytest.fixture
def sim(pools: PoolsConfig) -> Callable[..., Sim]:
    def make(**kwargs: Any) -> Sim:
        return Sim(run_body(**kwargs), pools)

    return make


@pytest.fixture
def make_spec() -> Callable[..., dict[str, Any]]:
    return spec_dict


@pytest.fixture
def make_body() -> Callable[..., dict[str, Any]]:
    return run_body
