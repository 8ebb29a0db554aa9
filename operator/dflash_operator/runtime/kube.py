"""The operator's only Kubernetes client: plain JSON over the official (sync) client, with a
timeout on every request, one error type, and a count of requests for `/metrics`.

Secrets are not among the kinds it knows: the operator never reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dflash_operator import metrics
from dflash_operator.api.constants import GROUP, PLURAL, VERSION
from dflash_operator.version import OPERATOR_VERSION

USER_AGENT = f"dflash-operator/{OPERATOR_VERSION}"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# The API server's status codes that mean "the object you sent is wrong".
PERMANENT_CODES = frozenset({400, 422})


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        path = (
            f"{base}/namespaces/{namespace}/{self.plural}"
            if self.namespaced
            else (f"{base}/{self.plural}")
        )
        if name:
            path += f"/{name}"
        if sub:
            path += f"/{sub}"
        return path


RESOURCES: dict[str, Resource] = {
    "DFlashRun": Resource(GROUP, VERSION, PLURAL),
    "Job": Resource("batch", "v1", "jobs"),
    "PyTorchJob": Resource("kubeflow.org", "v1", "pytorchjobs"),
    "TrainJob": Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    "ConfigMap": Resource("", "v1", "configmaps"),
    "Pod": Resource("", "v1", "pods"),
    "Event": Resource("", "v1", "events"),
    "ServiceAccount": Resource("", "v1", "serviceaccounts"),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "Workload": Resource("kueue.x-k8s.io", "v1beta2", "workloads"),
    # Objects a run names (plan/references.py): looked up by name, never listed or watched.
    "LocalQueue": Resource("kueue.x-k8s.io", "v1beta2", "localqueues"),
    "PriorityClass": Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False),
    "ClusterTrainingRuntime": Resource(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", namespaced=False
    ),
    "Lease": Resource("coordination.k8s.io", "v1", "leases"),
}

# Who serves the kinds that come from add-ons: named when the cluster does not serve them.
PROVIDERS: dict[str, str] = {
    "LocalQueue": "Kueue LocalQueue {version} is not served: install Kueue >= 0.15",
    "Workload": "Kueue Workload {version} is not served: install Kueue >= 0.15",
    "PyTorchJob": "PyTorchJob {version} is not served: install the Kubeflow training-operator",
    "TrainJob": "TrainJob {version} is not served: install Kubeflow Trainer >= v2.3",
    "ClusterTrainingRuntime": (
        "ClusterTrainingRuntime {version} is not served: install Kubeflow Trainer >= v2.3"
    ),
}


class RunIdentity(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def uid(self) -> str: ...


def _pointer(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def status_patch_ops(
    uid: str, changes: Mapping[str, Any], has_status: bool
) -> list[dict[str, Any]]:
    """JSON patch operations for top-level status keys, guarded by a test of the run's UID.
    `add` on an existing member replaces it (RFC 6902); keys absent from `changes` (the
    trainer's) are left alone. Without a status yet, the whole object is added at once."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    if not has_status:
        value = {k: v for k, v in changes.items() if v is not None}
        return [*ops, {"op": "add", "path": "/status", "value": value}]
    for key, value in changes.items():
        path = f"/status/{_pointer(key)}"
        ops.append({"op": "remove", "path": path} if value is None else
                   {"op": "add", "path": path, "value": value})  # fmt: skip
    return ops


def describe_not_served(kind: str) -> str:
    """'Kueue LocalQueue v1beta2 is not served: install Kueue >= 0.15 (...)'."""
    resource = RESOURCES[kind]
    api = f"{resource.group}/{resource.version} {resource.plural}"
    text = PROVIDERS.get(kind, f"{kind} {{version}} is not served").format(version=resource.version)
    return f"{text} (the operator uses {api}; this cluster does not serve it)"


class KubeError(Exception):
    """An API request that failed: HTTP status (0 for no answer), reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def permanent(self) -> bool:
        return self.status in PERMANENT_CODES


def _error(exc: ApiException) -> KubeError:
    message = exc.reason or ""
    reason = exc.reason or "Error"
    try:
        body = json.loads(exc.body or "{}")
        message = body.get("message") or message
        reason = body.get("reason") or reason
    except (ValueError, TypeError):
        pass
    return KubeError(int(exc.status or 0), str(reason), str(message))


def load_api_client(kubeconfig: str | None = None, pool_size: int = 8) -> client.ApiClient:
    """In-cluster config when running in a pod, else the kubeconfig (KUBECONFIG)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    api = client.ApiClient(configuration)
    api.user_agent = USER_AGENT
    return api


class Kube:
    """Thin, thread-safe JSON calls; every one bounded by (connect, read) timeouts."""

    def __init__(self, api: client.ApiClient, connect_timeout: float, read_timeout: float) -> None:
        self.api = api
        self.timeout = (connect_timeout, read_timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        kind: str = "",
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            response = self.api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            metrics.API_REQUESTS.labels(method, kind, str(exc.status)).inc()
            raise _error(exc) from None
        except HTTPError as exc:
            metrics.API_REQUESTS.labels(method, kind, "0").inc()
            raise KubeError(0, "NoResponse", str(exc)) from None
        metrics.API_REQUESTS.labels(method, kind, str(response.status)).inc()
        data = response.data
        return json.loads(data) if data else {}

    # --- objects ---------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", RESOURCES[kind].path(namespace, name), kind=kind)
        except KubeError as error:
            if error.not_found:
                return None
            raise

    def serves(self, kind: str) -> bool | None:
        """Whether the cluster serves `kind`'s group/version and resource (API discovery);
        None when discovery itself fails (unknown, never a verdict)."""
        resource = RESOURCES[kind]
        if not resource.group:
            return True
        try:
            found = self.request("GET", f"/apis/{resource.group}/{resource.version}")
        except KubeError as error:
            return False if error.not_found else None
        names = {str(r.get("name")) for r in found.get("resources") or [] if isinstance(r, dict)}
        return resource.plural in names

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        kind = str(manifest["kind"])
        namespace = str(manifest["metadata"]["namespace"])
        return self.request("POST", RESOURCES[kind].path(namespace), dict(manifest), kind=kind)

    def patch(
        self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], sub: str | None = None
    ) -> dict[str, Any]:
        path = RESOURCES[kind].path(namespace, name, sub)
        return self.request("PATCH", path, dict(patch), content_type=MERGE_PATCH, kind=kind)

    def replace(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        kind = str(manifest["kind"])
        meta = manifest["metadata"]
        path = RESOURCES[kind].path(str(meta["namespace"]), str(meta["name"]))
        return self.request("PUT", path, dict(manifest), kind=kind)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.request("DELETE", RESOURCES[kind].path(namespace, name), body, kind=kind)
        except KubeError as error:
            if not error.not_found:
                raise

    def list(
        self, kind: str, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        path = RESOURCES[kind].path(namespace)
        query = {"labelSelector": label_selector} if label_selector else {}
        if field_selector:
            query["fieldSelector"] = field_selector
        answer = self.request("GET", path, query=query, kind=kind)
        items: list[dict[str, Any]] = answer.get("items") or []
        for item in items:
            # Lists leave kind/apiVersion out of their items.
            item.setdefault("kind", kind)
        return items

    # --- the run -------------------------------------------------------------------------------
    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("DFlashRun", namespace, name)

    def patch_run_status(
        self, run: RunIdentity, changes: Mapping[str, Any], has_status: bool
    ) -> dict[str, Any]:
        """Write our status keys (None: remove the key) to this very run: a JSON patch whose
        first operation tests `metadata.uid`, so a write meant for a deleted run can never land
        on a run re-created under its name (the API server answers 422 instead)."""
        path = RESOURCES["DFlashRun"].path(run.namespace, run.name, "status")
        ops = status_patch_ops(run.uid, changes, has_status)
        return self.request("PATCH", path, ops, content_type=JSON_PATCH, kind="DFlashRun")

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self.request("POST", RESOURCES["Event"].path(namespace), dict(event), kind="Event")
