"""A pod talks to the API as its own ServiceAccount (a bound token from the TokenRequest API),
so its Role's rules apply: allowed calls work, anything else is 403."""

from __future__ import annotations

import json
from typing import Any

from dflash_dev.executor.testing import LocalExecutor, container_state

CALLS = """
import json, os
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

config.load_kube_config()  # KUBECONFIG: the pod's own token, written by the executor
api = client.CoreV1Api()
namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
own = api.read_namespaced_pod(os.environ["POD_NAME"], namespace)
try:
    api.list_namespaced_secret(namespace)
    secrets = "allowed"
except ApiException as exc:
    secrets = exc.status
result = {"own_pod": own.metadata.name, "secrets": secrets, "namespace": namespace}
open("/dev/termination-log", "w").write(json.dumps(result))
"""


def test_a_pod_acts_with_its_service_accounts_rbac_and_nothing_more(
    executor: LocalExecutor, namespace: str
) -> None:
    rbac: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "read-pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "trainer-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-pods",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": namespace}],
        },
    ]
    pod = executor.pod(
        "as-trainer",
        ["python", "-c", CALLS],
        serviceAccountName="trainer",
        container={
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        },
    )
    executor.apply(namespace, *rbac)
    # The ServiceAccount admission plugin needs the account to exist before the pod.
    executor.apply(namespace, pod)
    done = executor.wait_phase(namespace, "as-trainer", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", executor.describe(namespace, "as-trainer")
    seen = json.loads(container_state(done)["terminated"]["message"])
    assert seen == {"own_pod": "as-trainer", "secrets": 403, "namespace": namespace}
