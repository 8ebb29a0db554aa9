"""A DFlashRun walks every phase on the real control plane: the operator (with the chart's
RBAC) creates exactly one child per stage, pinned to its pool; stage results come back from
termination messages; the trainer reports progress with its own, narrow ServiceAccount."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from dflash_dev import binaries
from dflash_dev.kube_wait import get_json, wait_for

from .conftest import imported_spec

REPORT = "s3://artifacts/dflash/ns/r1/uid/audit/completions/"


def node_pool(harness: Any, pod: dict[str, Any]) -> str:
    node = get_json(harness.cluster, "node", pod["spec"]["nodeName"])
    return str(node["metadata"]["labels"]["dflash.dev/node-pool"])


def as_trainer(kubeconfig: Any, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(binaries.cached_path("kubectl")), f"--kubeconfig={kubeconfig}", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def test_a_run_reaches_succeeded_through_every_phase_with_one_child_per_stage_on_its_pool(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec())

    status = harness.wait_phase("r1", "Regenerating")
    assert harness.names("jobs") == ["r1-regen"]
    assert harness.names("configmaps") == ["r1-config"]
    assert status["progress"] == "regen 0/2"
    regen_pods = harness.running_pods("r1-regen", 2)
    assert {node_pool(harness, p) for p in regen_pods} == {"b200"}
    for pod in regen_pods:
        index = int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        result = {
            "stage": "regenerate",
            "ok": True,
            "shard": index,
            "shards": 2,
            "samples": 500,
            "outputTokens": 200_000,
            "skipped": index == 1,
        }
        harness.finish_pod(pod, result)

    status = harness.wait_phase("r1", "AuditingCompletions")
    assert status["stages"]["regeneration"] == {
        "shardsDone": 2,
        "shardsTotal": 2,
        "shardsSkipped": 1,
        "samples": 1000,
        "outputTokens": 400000,
    }
    assert harness.condition("r1", "Regenerated")["status"] == "True"
    audit_pod = harness.running_pods("r1-audit-completions", 1)[0]
    assert node_pool(harness, audit_pod) == "cpu"
    harness.finish_pod(
        audit_pod,
        {
            "stage": "audit",
            "ok": True,
            "gate": "completions",
            "verdict": "pass",
            "metrics": {"stubRate": 0.01},
            "reportUri": REPORT,
        },
    )

    status = harness.wait_phase("r1", "Tokenizing")
    assert status["audit"]["completions"]["reportUri"] == REPORT
    assert status["audit"]["completions"]["metrics"] == {"stubRate": 0.01}
    harness.finish(
        "r1-tokenize",
        {
            "stage": "tokenize",
            "ok": True,
            "samples": 990,
            "tokens": 2_000_000,
            "supervisedTokens": 900_000,
            "truncated": 3,
            "shards": 1,
        },
    )

    status = harness.wait_phase("r1", "AuditingTokens")
    assert status["stages"]["tokenization"]["supervisedTokens"] == 900_000
    harness.finish(
        "r1-audit-tokens", {"stage": "audit", "ok": True, "gate": "tokens", "verdict": "pass"}
    )

    status = harness.wait_phase("r1", "Training")
    assert harness.names("pytorchjobs") == ["r1-train"]
    train_pods = harness.running_pods("r1-train", 2)
    assert {node_pool(harness, p) for p in train_pods} == {"rtx-pro-6000"}
    assert status["auditVerdict"] == "completions=pass tokens=pass"

    # The trainer reports progress as its pods would: with the run's own ServiceAccount.
    trainer = harness.trainer_kubeconfig("r1")
    progress = {
        "status": {
            "training": {"step": 50, "totalSteps": 100, "loss": 2.25},
            "checkpoint": {"uri": "s3://artifacts/ck/step-000000050", "step": 50},
        }
    }
    patched = as_trainer(
        trainer,
        "patch",
        "dflashrun",
        "r1",
        "-n",
        harness.namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(progress),
    )
    assert patched.returncode == 0, patched.stderr
    wait_for(
        "training progress in the Progress column",
        lambda: harness.status("r1").get("progress") == "train 50/100",
        30,
    )
    assert harness.status("r1")["training"]["loss"] == 2.25

    # Workers end first: once the Master succeeds the job is over and running pods go.
    for pod in sorted(
        train_pods,
        key=lambda p: p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "master",
    ):
        harness.finish_pod(
            pod,
            {
                "stage": "train",
                "ok": True,
                "step": 100,
                "totalSteps": 100,
                "loss": 1.5,
                "finalUri": "s3://artifacts/final/",
            },
        )
    harness.wait_phase("r1", "Evaluating")
    eval_pod = harness.running_pods("r1-eval", 1)[0]
    assert node_pool(harness, eval_pod) == "rtx-pro-6000"
    harness.finish_pod(
        eval_pod,
        {
            "stage": "evaluate",
            "ok": True,
            "acceptanceLength": 6.4,
            "prompts": 128,
            "perPositionAcceptance": [0.9, 0.8],
        },
    )

    status = harness.wait_phase("r1", "Succeeded")
    assert status["drafterUri"] == "s3://artifacts/final/"
    assert status["acceptanceLength"] == 6.4
    assert status["progress"] == "acceptance 6.40"
    assert harness.names("jobs") == [
        "r1-audit-completions",
        "r1-audit-tokens",
        "r1-eval",
        "r1-regen",
        "r1-tokenize",
    ]
    assert harness.names("pytorchjobs") == ["r1-train"]
    recorded = [(c["kind"], c["name"]) for c in status["children"]]
    assert recorded == [
        ("ConfigMap", "r1-config"), ("Job", "r1-regen"), ("Job", "r1-audit-completions"), ("Job", "r1-tokenize"),
        ("Job", "r1-audit-tokens"), ("ServiceAccount", "r1-trainer"), ("Role", "r1-trainer"),
        ("RoleBinding", "r1-trainer"), ("PyTorchJob", "r1-train"), ("Job", "r1-eval"),
    ]  # fmt: skip
    assert all(c["uid"] for c in status["children"])
    reasons = [reason for _type, reason, _message in harness.events("r1")]
    for expected in ("StageRunning", "StageSucceeded", "AuditPassed", "Succeeded"):
        assert expected in reasons
    assert not [e for e in harness.events("r1") if e[0] == "Warning"]


def test_the_trainers_account_may_patch_its_runs_status_and_nothing_more(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    harness.apply_run(
        "r1",
        imported_spec(make_spec),
    )
    harness.apply_run("other", make_spec(suspend=True))
    harness.wait_phase("other", "Suspended")
    harness.finish_score("r1")
    harness.wait_phase("r1", "AuditingCompletions")
    harness.finish("r1-audit-completions", {"verdict": "pass"})
    harness.wait_phase("r1", "Tokenizing")
    harness.finish("r1-tokenize", {"samples": 1})
    harness.wait_phase("r1", "AuditingTokens")
    harness.finish("r1-audit-tokens", {"verdict": "pass"})
    harness.wait_phase("r1", "Training")
    trainer = harness.trainer_kubeconfig("r1")
    ns = harness.namespace
    patch = json.dumps({"status": {"training": {"step": 1}}})

    allowed = as_trainer(
        trainer,
        "patch",
        "dflashrun",
        "r1",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        patch,
    )
    assert allowed.returncode == 0, allowed.stderr
    for args in (
        (
            "patch",
            "dflashrun",
            "other",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ),
        (
            "patch",
            "dflashrun",
            "r1",
            "-n",
            ns,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"suspend": True}}),
        ),
        ("get", "dflashrun", "other", "-n", ns),
        ("get", "secrets", "-n", ns),
        ("get", "pods", "-n", ns),
        ("delete", "pytorchjob", "r1-train", "-n", ns),
    ):
        denied = as_trainer(trainer, *args)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), args
