"""Cloud identity, registries and the Hub token of stage pods, on the real control plane: the
named ServiceAccount runs the stage pods (the API server's ServiceAccount admission checks it
exists), the trainer's own account carries the spec's annotations (IRSA's role ARN), pull
secrets and the Hub token reach the pods as references, never as values, and only the model
stage's pod (the one pod that talks to the Hub) gets the token."""

from __future__ import annotations

from typing import Any

from dflash_dev.kube_wait import get_json, wait_for

ROLE_ARN = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/dflash-train"}


def test_stage_pods_take_the_named_identity_pull_secrets_and_hub_token(
    harness: Any, make_spec: Any
) -> None:
    harness.kubectl("create", "serviceaccount", "s3-reader")
    harness.start_operator()
    spec = make_spec(
        target={"model": "Qwen/Qwen3-8B"},
        serviceAccountName="s3-reader",
        imagePullSecrets=[{"name": "regcred"}],
        hfTokenSecretRef={"name": "hf", "key": "token"},
    )
    spec["training"]["serviceAccountAnnotations"] = ROLE_ARN
    harness.apply_run("r1", spec)

    # A Hub target: one pod copies it into the run root; it alone holds the token.
    (model,) = harness.running_pods("r1-model", 1)
    assert model["spec"]["serviceAccountName"] == "s3-reader"
    assert model["spec"]["automountServiceAccountToken"] is False
    env = {e["name"]: e for e in model["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert "value" not in env["HF_TOKEN"]
    harness.finish("r1-model", {"stage": "model", "ok": True, "revision": "a" * 40,
                                "files": 9, "bytes": 16_400_000_000})  # fmt: skip

    for pod in harness.running_pods("r1-regen", 2):
        assert pod["spec"]["serviceAccountName"] == "s3-reader"
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert {"name": "regcred"} in pod["spec"]["imagePullSecrets"]
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert "HF_TOKEN" not in env  # it loads the run's copy, offline
        assert env["HF_HUB_OFFLINE"]["value"] == "1"
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--model") + 1].endswith("/model")
    for stage in ("regen", "audit-completions", "tokenize", "audit-tokens"):
        harness.finish(
            f"r1-{stage}", harness.stage_results[stage], count=2 if stage == "regen" else 1
        )

    for pod in harness.running_pods("r1-train", 2):
        assert pod["spec"]["serviceAccountName"] == "r1-trainer"
    account = wait_for(
        "the trainer's account",
        lambda: get_json(harness.cluster, "serviceaccount", "r1-trainer", "-n", harness.namespace),
    )
    assert account["metadata"]["annotations"] == ROLE_ARN
