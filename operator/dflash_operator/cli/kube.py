"""The plugin's access to the cluster: kubeconfig, context and namespace the way kubectl picks
them, DFlashRuns, pods, nodes and pod logs, with API failures turned into `CliError`s that
name the object and say what to do. Everything is returned as plain JSON-shaped dicts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from dflash_operator.api.constants import CRD_NAME, GROUP, PLURAL, VERSION
from dflash_operator.cli.errors import CliError

T = TypeVar("T")
# (connect, read) seconds: a plugin command should fail clearly, not hang on a dead server.
REQUEST_TIMEOUT = (10, 60)
DEFAULT_NAMESPACE = "default"
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# Bytes read at a time from a followed log stream.
LOG_CHUNK_BYTES = 4096


def _status_body(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError):
        return None
    chosen = active
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), None)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else None


def kubeconfig_contexts(kubeconfig: str | None) -> list[str]:
    """Names of the kubeconfig's contexts (none when there is no readable kubeconfig)."""
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError):
        return []
    return sorted(str(c["name"]) for c in contexts if c.get("name"))


class Kube:
    """One cluster, one namespace: the calls the plugin's commands need."""

    def __init__(self, api: Any, namespace: str, server: str) -> None:
        self.api = api
        self.namespace = namespace
        self.server = server
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
        """Like kubectl: --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else in-cluster."""
        try:
            api = config.new_client_from_config(config_file=kubeconfig, context=context)
            found = namespace or _kubeconfig_namespace(kubeconfig, context)
        except (ConfigException, OSError) as exc:
            in_cluster = os.environ.get("KUBERNETES_SERVICE_HOST")
            if kubeconfig is None and context is None and in_cluster:
                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)
                api = client.ApiClient(configuration)
                found = namespace or IN_CLUSTER_NAMESPACE_FILE.read_text().strip()
            else:
                where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                raise CliError(
                    f"cannot load the kubeconfig {where}"
                    + (f" (context {context!r})" if context else "")
                    + f": {exc}. Pass --kubeconfig PATH or --context NAME, or set KUBECONFIG"
                ) from exc
        return cls(api, found or DEFAULT_NAMESPACE, str(api.configuration.host))

    def _call(self, what: str, call: Callable[[], T], name: str | None = None) -> T:
        try:
            return call()
        except ApiException as exc:
            raise self._api_error(what, exc, name) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise CliError(
                f"cannot reach the Kubernetes API server at {self.server}: {exc}. Is the cluster "
                "up, and are --kubeconfig / --context the right ones?"
            ) from exc

    def _api_error(self, what: str, exc: ApiException, name: str | None) -> CliError:
        body = _status_body(exc)
        message = body.get("message") or exc.reason or "no details"
        if exc.status == 404 and name is not None and (body.get("details") or {}).get("name"):
            return CliError(
                f'{what} "{name}" not found in namespace "{self.namespace}". '
                f"List the runs there with: kubectl dflash list -n {self.namespace}"
            )
        if exc.status == 404:
            return CliError(
                f"the server has no {CRD_NAME} resource: the DFlashRun CRD is not installed in "
                "this cluster. Install the dflash-operator chart (or kubectl apply -f crds/)"
            )
        if exc.status == 403:
            return CliError(f"forbidden: {message}. Ask for RBAC on {what} in {self.namespace}")
        if exc.status in (500, 502) and "dial tcp" in message:
            return CliError(
                f"the API server could not reach the kubelet of the node that runs {name} to "
                f"read its {what}: {message}"
            )
        if exc.status == 409:
            return CliError(f"{what} {name} changed while it was being updated: run it again")
        return CliError(f"the API server refused the request ({exc.status}): {message}")

    # --- DFlashRuns -----------------------------------------------------------------------
    def get_run(self, name: str) -> dict[str, Any]:
        run: dict[str, Any] = self._call(
            "dflashrun",
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, _request_timeout=REQUEST_TIMEOUT
            ),
            name,
        )
        return run

    def list_runs(self, all_namespaces: bool, selector: str | None = None) -> list[dict[str, Any]]:
        """The runs of the namespace (or all); `selector` is sent as labelSelector, so the API
        server parses it and a bad one is its 400, reported with the selector named."""
        selected = {"label_selector": selector} if selector else {}

        def call() -> Any:
            try:
                if all_namespaces:
                    return self._custom.list_cluster_custom_object(
                        GROUP, VERSION, PLURAL, _request_timeout=REQUEST_TIMEOUT, **selected
                    )
                return self._custom.list_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    _request_timeout=REQUEST_TIMEOUT,
                    **selected,
                )
            except ApiException as exc:
                if selector and exc.status == 400:
                    message = _status_body(exc).get("message") or exc.reason or "no details"
                    raise CliError(
                        f"invalid label selector {selector!r} (-l/--selector), the API server "
                        f"says: {message}. Selectors look like app=x, tier!=test, "
                        "env in (a,b), !label"
                    ) from exc
                raise

        items: list[dict[str, Any]] = self._call("dflashruns", call).get("items", [])
        return items

    def annotate_run(
        self, name: str, annotations: dict[str, str], resource_version: str | None
    ) -> dict[str, Any]:
        """A merge patch of annotations; with resource_version, refused if the run changed."""
        metadata: dict[str, Any] = {"annotations": annotations}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        run: dict[str, Any] = self._call(
            "dflashrun",
            lambda: self._custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                {"metadata": metadata},
                _request_timeout=REQUEST_TIMEOUT,
            ),
            name,
        )
        return run

    def list_namespaces(self) -> list[str]:
        namespaces = self._call(
            "namespaces", lambda: self._core.list_namespace(_request_timeout=REQUEST_TIMEOUT)
        )
        return sorted(item.metadata.name for item in namespaces.items)

    # --- pods, nodes, logs ------------------------------------------------------------------
    def list_pods(self, selector: str) -> list[dict[str, Any]]:
        pods = self._call(
            "pods",
            lambda: self._core.list_namespaced_pod(
                self.namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
            ),
        )
        items: list[dict[str, Any]] = self.api.sanitize_for_serialization(pods).get("items", [])
        return items

    def get_node(self, name: str) -> dict[str, Any] | None:
        try:
            node = self._core.read_node(name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            # Without RBAC on nodes (or a deleted node) logs may still work: try them.
            if exc.status in (403, 404):
                return None
            raise self._api_error("node", exc, name) from exc
        result: dict[str, Any] = self.api.sanitize_for_serialization(node)
        return result

    def stream_log(
        self, pod: str, container: str | None, follow: bool, tail: int | None
    ) -> Iterator[str]:
        """Lines of a container's log, as the kubelet serves them through the API server."""
        response = self._call(
            "pod log",
            lambda: self._core.read_namespaced_pod_log(
                pod,
                self.namespace,
                container=container,
                follow=follow,
                tail_lines=tail,
                _preload_content=False,
                _request_timeout=None if follow else REQUEST_TIMEOUT,
            ),
            pod,
        )
        pending = b""
        try:
            for chunk in response.stream(LOG_CHUNK_BYTES):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            response.release_conn()
