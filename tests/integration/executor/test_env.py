"""A container's env is resolved as kubelet resolves it, and a missing reference keeps the
pod waiting with kubelet's reason instead of crashing the executor."""

from __future__ import annotations

import json
from typing import Any

from dflash_dev.executor.testing import LocalExecutor, container_state

PRINT_ENV = (
    "import json, os; keys = os.environ['WANTED'].split(); "
    "open('/dev/termination-log', 'w').write(json.dumps({k: os.environ.get(k) for k in keys}))"
)


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def test_env_comes_from_literals_secrets_configmaps_and_the_downward_api(
    executor: LocalExecutor, namespace: str
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s3-creds"},
        "stringData": {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "other": "x"},
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"mode": "fast", "LEVEL": "3"},
    }
    env = [
        {"name": "LITERAL", "value": "plain"},
        {"name": "EXPANDED", "value": "$(LITERAL)-and-$$(LITERAL)"},
        {
            "name": "SECRET_KEY",
            "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}},
        },
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {
            "name": "OPTIONAL",
            "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}},
        },
        _field("POD_NAME", "metadata.name"),
        _field("POD_NAMESPACE", "metadata.namespace"),
        _field("POD_IP", "status.podIP"),
        _field("RUN", "metadata.annotations['dflash.dev/run']"),
        _field("NODE", "spec.nodeName"),
        {
            "name": "WANTED",
            "value": "LITERAL EXPANDED SECRET_KEY MODE OPTIONAL POD_NAME POD_NAMESPACE POD_IP "
            "RUN NODE CFG_LEVEL HOSTNAME KUBECONFIG",
        },
    ]
    pod = executor.pod(
        "env",
        ["python", "-c", PRINT_ENV],
        metadata={"annotations": {"dflash.dev/run": "tiny-run"}},
        container={
            "env": env,
            "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
        },
    )
    executor.apply(namespace, secret, config, pod)
    done = executor.wait_phase(namespace, "env", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", executor.describe(namespace, "env")
    seen = json.loads(container_state(done)["terminated"]["message"])
    assert seen["LITERAL"] == "plain"
    assert seen["EXPANDED"] == "plain-and-$(LITERAL)"
    assert seen["SECRET_KEY"] == "s3cr3t"
    assert seen["MODE"] == "fast"
    assert seen["OPTIONAL"] is None
    assert seen["POD_NAME"] == "env"
    assert seen["POD_NAMESPACE"] == namespace
    assert seen["POD_IP"] == done["status"]["podIP"]
    assert seen["RUN"] == "tiny-run"
    assert seen["NODE"] == done["spec"]["nodeName"]
    assert seen["CFG_LEVEL"] == "3"
    assert seen["HOSTNAME"] == "env"
    # The executor's own (admin) kubeconfig never leaks into a pod: only the pod's own.
    assert seen["KUBECONFIG"].startswith(str(executor.state_dir / "pods" / namespace / "env"))


def test_a_missing_secret_key_keeps_the_pod_waiting_with_a_config_error_until_it_appears(
    executor: LocalExecutor, namespace: str
) -> None:
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "stringData": {"user": "me"},
    }
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    pod = executor.pod(
        "needs-token",
        ["python", "-c", "import os; print(os.environ['TOKEN'])"],
        container={"env": env},
    )
    executor.apply(namespace, secret, pod)

    def config_error(p: dict[str, Any]) -> bool:
        reason = container_state(p).get("waiting", {}).get("reason")
        return bool(reason == "CreateContainerConfigError")

    stuck = executor.wait_until(
        "a CreateContainerConfigError", namespace, "needs-token", config_error
    )
    assert stuck["status"]["phase"] == "Pending"
    message = container_state(stuck)["waiting"]["message"]
    assert message == f"couldn't find key token in Secret {namespace}/creds (env TOKEN)"
    # Like kubelet, the executor retries: once the key exists the pod runs.
    secret["stringData"]["token"] = "abc"
    executor.apply(namespace, secret)
    done = executor.wait_phase(namespace, "needs-token", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert "abc" in executor.logs(namespace, "needs-token")
