"""Gates, failures and bad runs on the real control plane: a failed audit stops the run with
no PyTorchJob; approve and retry; training fails after maxRestarts with the pod's reason;
unknown pools and too many GPUs fail at once with no child."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dflash_dev.kube_wait import wait_for

from .conftest import imported_spec

STUB_FAIL = {
    "stage": "audit", "ok": False, "gate": "completions", "verdict": "fail",
    "violations": [{"check": "maxStubRate", "value": 0.871, "threshold": 0.05, "message": "stub responses 87.1% > 5%"}],
    "reportUri": "s3://artifacts/report/completions/",
}  # fmt: skip


def regenerated(harness: Any, make_spec: Any, name: str = "r1") -> None:
    harness.start_operator()
    harness.apply_run(name, make_spec())
    harness.wait_phase(name, "Regenerating")
    harness.finish(f"{name}-regen", {"stage": "regenerate", "ok": True, "samples": 10}, count=2)
    harness.wait_phase(name, "AuditingCompletions")


def test_a_failed_completions_audit_stops_the_run_and_approval_lets_it_continue(
    harness: Any, make_spec: Any
) -> None:
    regenerated(harness, make_spec)
    harness.finish("r1-audit-completions", STUB_FAIL, exit_code=3)

    status = harness.wait_phase("r1", "AuditFailed")
    passed = harness.condition("r1", "DataAuditPassed")
    assert passed["status"] == "False"
    assert "stub responses 87.1% > 5%" in passed["message"]
    assert status["audit"]["completions"]["reportUri"] == "s3://artifacts/report/completions/"
    assert harness.names("pytorchjobs") == []
    assert "r1-tokenize" not in harness.names("jobs")
    assert any(t == "Warning" and r == "AuditFailed" for t, r, _ in harness.events("r1"))

    harness.annotate("r1", "dflash.dev/approve-audit", "completions@1")
    status = harness.wait_phase("r1", "Tokenizing")
    assert status["approvals"][0]["gate"] == "completions"
    assert harness.condition("r1", "CompletionsAudited")["reason"] == "AuditApproved"
    assert "r1-tokenize" in harness.names("jobs")
    assert any(r == "AuditApproved" for _t, r, _m in harness.events("r1"))


def test_a_failing_canary_stops_the_run_before_any_shard_and_a_retry_redoes_the_canary(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    spec = make_spec(
        regeneration={"shards": 2, "tensorParallel": 1, "canary": {"samplesPerSource": 32}}
    )
    harness.apply_run("r1", spec)
    harness.wait_phase("r1", "Canary")
    job = json.loads(harness.kubectl("get", "job", "r1-canary", "-o", "json").stdout)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--canary-samples-per-source") + 1] == "32"
    harness.finish("r1-canary", {"stage": "regenerate", "ok": True, "canary": True, "samples": 32})
    harness.wait_phase("r1", "AuditingCanary")
    printed = harness.kubectl("get", "dfr", "r1").stdout
    assert "AuditingCanary" in printed
    harness.finish("r1-audit-canary", STUB_FAIL | {"reportUri": "s3://artifacts/report/canary/"},
                   exit_code=3)  # fmt: skip

    status = harness.wait_phase("r1", "AuditFailed")
    assert status["auditVerdict"] == "canary=fail"
    assert (
        "dflash.dev/approve-audit=canary@1" in harness.condition("r1", "DataAuditPassed")["message"]
    )
    assert "r1-regen" not in harness.names("jobs"), "no shard may start after a failed canary"

    harness.annotate("r1", "dflash.dev/retry", "fixed-the-template")
    wait_for("a second canary", lambda: "r1-canary-2" in harness.names("jobs"))
    harness.wait_phase("r1", "Canary")
    # Its pod ends, so that no fake GPU stays taken after the test.
    harness.finish(
        "r1-canary-2", {"stage": "regenerate", "ok": True, "canary": True, "samples": 32}
    )
    harness.wait_phase("r1", "AuditingCanary")


def test_a_retry_reruns_the_failed_audit_as_a_new_attempt(harness: Any, make_spec: Any) -> None:
    regenerated(harness, make_spec)
    harness.finish("r1-audit-completions", STUB_FAIL, exit_code=3)
    harness.wait_phase("r1", "AuditFailed")
    harness.patch_spec("r1", {"audit": {"maxStubRate": 0.9}})
    harness.annotate("r1", "dflash.dev/retry", "looser-thresholds")

    wait_for("a second audit attempt", lambda: "r1-audit-completions-2" in harness.names("jobs"))
    status = harness.wait_phase("r1", "AuditingCompletions")
    assert status["attempts"]["audit-completions"] == 2
    assert status["retryToken"] == "looser-thresholds"
    assert (
        "maxStubRate: 0.9"
        in harness.kubectl(
            "get", "configmap", "r1-config", "-o", "jsonpath={.data.thresholds\\.yaml}"
        ).stdout
    )
    harness.finish("r1-audit-completions-2", {"stage": "audit", "ok": True, "verdict": "pass"})
    harness.wait_phase("r1", "Tokenizing")
    assert [n for n in harness.names("jobs") if n.startswith("r1-audit-completions")] == [
        "r1-audit-completions",
        "r1-audit-completions-2",
    ]
    assert any(r == "RetryRequested" for _t, r, _m in harness.events("r1"))


def crash_in_place(harness: Any, pod: dict[str, Any], restarts: int, message: str) -> None:
    """What a kubelet reports when a container restarted in place (restartPolicy OnFailure)."""
    container = pod["spec"]["containers"][0]
    status = {"status": {"containerStatuses": [{
        "name": container["name"], "image": container["image"], "imageID": "", "ready": True, "started": True,
        "restartCount": restarts, "state": {"running": {"startedAt": "2026-05-01T00:00:00Z"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": message,
                                     "startedAt": "2026-05-01T00:00:00Z", "finishedAt": "2026-05-01T00:00:01Z"}},
    }]}}  # fmt: skip
    harness.cluster.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "-n",
        harness.namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )


def test_training_fails_the_run_after_max_restarts_with_the_last_pod_failure(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    spec = imported_spec(make_spec)
    spec["training"] = {"nodes": 1, "gpusPerNode": 1, "maxRestarts": 2}
    harness.apply_run("r1", spec)
    harness.finish_score("r1")
    for stage in ("audit-completions", "tokenize", "audit-tokens"):
        wait_for(f"r1-{stage}", lambda stage=stage: f"r1-{stage}" in harness.names("jobs"))
        harness.finish(f"r1-{stage}", {"verdict": "pass"})
    harness.wait_phase("r1", "Training")
    master = harness.running_pods("r1-train", 1)[0]
    crash = "CUDA error: an illegal memory access was encountered"
    crash_in_place(harness, master, restarts=1, message=crash)
    wait_for(
        "the crash noted while training runs",
        lambda: crash in harness.condition("r1", "Trained")["message"],
    )
    crash_in_place(harness, master, restarts=2, message=crash)

    status = harness.wait_phase("r1", "Failed")
    failed = harness.condition("r1", "Failed")
    assert failed["reason"] == "RetriesExhausted"
    assert "train failed 3 times (limit 2)" in failed["message"]
    assert "CUDA error: an illegal memory access" in failed["message"]
    assert status["completionTime"]
    assert harness.names("pytorchjobs") == ["r1-train"]
    assert any(t == "Warning" and r == "RetriesExhausted" for t, r, _m in harness.events("r1"))


@pytest.mark.parametrize(
    ("overrides", "reason", "words"),
    [
        (
            {"training": {"nodePool": "h100", "nodes": 1}},
            "UnknownNodePool",
            ["spec.training.nodePool=h100", "b200, cpu, rtx-pro-6000"],
        ),
        (
            {"training": {"nodes": 2, "gpusPerNode": 8}},
            "InvalidSpec",
            ["spec.training.gpusPerNode=8", "rtx-pro-6000 has 4 GPUs per node"],
        ),
        (
            {
                "target": {"model": "Qwen/Qwen3.6-27B"},
                "training": {"nodes": 2, "gpusPerNode": 4, "strategy": "fsdp", "batchSize": 8},
            },
            "TrainingWontFit",
            ["node pool rtx-pro-6000 has 95.00 GiB (gpuMemory)", "spec.training.batchSize 8 -> "],
        ),
    ],
)
def test_a_run_that_does_not_fit_its_pools_fails_with_no_child(
    harness: Any, make_spec: Any, overrides: dict[str, Any], reason: str, words: list[str]
) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec(**overrides))

    harness.wait_phase("r1", "Failed")
    failed = harness.condition("r1", "Failed")
    assert failed["reason"] == reason
    for word in words:
        assert word in failed["message"]
    assert (
        harness.names("jobs") == []
        and harness.names("pytorchjobs") == []
        and harness.names("configmaps") == []
    )
    assert any(t == "Warning" and r == reason for t, r, _m in harness.events("r1"))
