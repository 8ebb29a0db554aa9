"""Reads the Secrets, ConfigMaps and ServiceAccount tokens a pod refers to (with the
executor's admin credentials, as a kubelet reads them with its node credentials)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime

from .kube import Kube, Obj, is_status, namespaced

# The apiserver's default audiences when a token request names none.
DEFAULT_TOKEN_SECONDS = 3600


@dataclass(frozen=True)
class Token:
    token: str
    issued: datetime
    expires: datetime


class ObjectSource:
    """`None` means "does not exist"; other API errors propagate (the caller retries)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def _get(self, namespace: str, plural: str, name: str) -> Obj | None:
        try:
            return self.kube.get(namespaced(namespace, plural, name))
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise

    def secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        obj = self._get(namespace, "secrets", name)
        if obj is None:
            return None
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}

    def config_map(self, namespace: str, name: str) -> dict[str, bytes] | None:
        obj = self._get(namespace, "configmaps", name)
        if obj is None:
            return None
        data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return data

    def secret_text(self, namespace: str, name: str) -> dict[str, str] | None:
        return _as_text(self.secret(namespace, name))

    def config_map_text(self, namespace: str, name: str) -> dict[str, str] | None:
        return _as_text(self.config_map(namespace, name))

    def request_token(
        self, pod: Obj, audience: str | None, expiration_seconds: int | None
    ) -> Token:
        """A bound ServiceAccount token for `pod` (TokenRequest API), as kubelet requests it."""
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        spec: Obj = {
            "expirationSeconds": int(expiration_seconds or DEFAULT_TOKEN_SECONDS),
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        }
        if audience:
            spec["audiences"] = [audience]
        answer = self.kube.create(
            namespaced(meta["namespace"], "serviceaccounts", account) + "/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        status = answer["status"]
        expires = datetime.fromisoformat(status["expirationTimestamp"].replace("Z", "+00:00"))
        return Token(status["token"], datetime.now(UTC), expires)


def _as_text(data: dict[str, bytes] | None) -> dict[str, str] | None:
    if data is None:
        return None
    return {k: v.decode(errors="replace") for k, v in data.items()}
