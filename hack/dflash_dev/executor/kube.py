"""A thin JSON client over the official kubernetes ApiClient: objects stay plain dicts
(camelCase, exactly as in manifests), and watches are line streams we read ourselves.

Authentication, TLS and connection pooling come from the kubeconfig via `kubernetes.config`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# (connect, read) seconds for ordinary calls: a hung apiserver must not hang a pod worker.
REQUEST_TIMEOUT = (5.0, 30.0)
# One connection per pod worker plus the watches; the default pool (5 x cpus) is too small
# on a 2-core machine running a dozen pods.
CONNECTION_POOL_SIZE = 64
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"

__all__ = ["MERGE", "STRATEGIC", "ApiException", "Kube", "Obj", "is_status"]


def is_status(exc: BaseException, *codes: int) -> bool:
    """True if `exc` is an API error with one of these HTTP status codes."""
    return isinstance(exc, ApiException) and exc.status in codes


class Kube:
    """JSON-in, JSON-out access to one cluster, safe to share between threads."""

    def __init__(self, kubeconfig: Path) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
        # Configuration() resets urllib3's logger to WARNING, which prints every retry; the
        # executor reports failed calls itself, with what they were for.
        logging.getLogger("urllib3").setLevel(logging.ERROR)
        self.configuration = configuration
        self._api = client.ApiClient(configuration)

    @property
    def server(self) -> str:
        return str(self.configuration.host)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] = REQUEST_TIMEOUT,
    ) -> Obj:
        response = self._api.call_api(
            path,
            method,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        data = response.data
        return json.loads(data) if data else {}

    def get(self, path: str, **query: Any) -> Obj:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body=body)

    def patch(self, path: str, body: Obj, content_type: str = STRATEGIC) -> Obj:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: Obj | None = None) -> Obj:
        return self.request("DELETE", path, body=body)

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int, **query: Any
    ) -> Iterator[Obj]:
        """Yield watch events ({type, object}) until the server ends the watch.

        The server closes it after `timeout_seconds`; our read timeout is a little longer so a
        silently dead connection ends too. An ERROR event is raised as ApiException.
        """
        response = self._api.call_api(
            path,
            "GET",
            query_params=[
                ("watch", "true"),
                ("resourceVersion", resource_version),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", timeout_seconds),
                *((k, v) for k, v in query.items() if v is not None),
            ],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], timeout_seconds + REQUEST_TIMEOUT[1]),
        )
        try:
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiException(
                            status=int(status.get("code") or 500),
                            reason=str(status.get("message") or status),
                        )
                    yield event
        finally:
            response.release_conn()


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}" + (f"/{sub}" if sub else "")


def namespaced(namespace: str, plural: str, name: str = "", group: str = "") -> str:
    """Path of a namespaced object (or collection when `name` is empty)."""
    prefix = f"/apis/{group}" if group else "/api/v1"
    path = f"{prefix}/namespaces/{quote(namespace)}/{plural}"
    return f"{path}/{quote(name)}" if name else path
