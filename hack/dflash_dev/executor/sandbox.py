"""A pod's sandbox: one directory per pod that stands in for its container filesystem.

Every volume (emptyDir, secret, configMap, downwardAPI, projected with ServiceAccount tokens)
becomes a directory filled with the volume's files; every volumeMount's path, and the
termination-message path, map to places inside it. `Sandbox.rewrite` turns container paths in
command, args and env into those local paths (see docs/executor.md, "Paths").
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from .env import PodFacts, expand, field_value, resource_value
from .errors import PodConfigError, VolumeMountError
from .objects import ObjectSource, Token

Obj = dict[str, Any]
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
DEFAULT_FILE_MODE = 0o644
# kubelet renews a projected token at 80% of its lifetime, or once it is a day old.
TOKEN_REFRESH_FRACTION = 0.8
TOKEN_MAX_AGE = timedelta(hours=24)
SUPPORTED = ("emptyDir", "secret", "configMap", "downwardAPI", "projected")
# The volume plugins' words for a listed key that is missing (MakePayload in
# pkg/volume/secret/secret.go and pkg/volume/configmap/configmap.go).
MISSING_SECRET_KEY = "references non-existent secret key"  # noqa: S105 (words, no secret)
MISSING_CONFIG_MAP_KEY = "configmap references non-existent config key"


@dataclass
class ProjectedToken:
    path: Path
    audience: str | None
    expiration_seconds: int | None
    token: Token

    def is_due(self, now: datetime) -> bool:
        lifetime = self.token.expires - self.token.issued
        age = now - self.token.issued
        return age >= lifetime * TOKEN_REFRESH_FRACTION or age >= TOKEN_MAX_AGE


@dataclass
class Sandbox:
    root: Path
    mounts: dict[str, Path] = field(default_factory=dict)  # container path -> local path
    tokens: list[ProjectedToken] = field(default_factory=list)
    termination_path: str = DEFAULT_TERMINATION_PATH
    rootfs: Path | None = None  # image mode: the pod's root filesystem
    volumes: dict[str, Path] = field(default_factory=dict)  # volume name -> local dir

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def termination_log(self) -> Path:
        return self.root / "termination-log"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def service_account_dir(self) -> Path | None:
        """The local dir of the standard ServiceAccount mount, when it holds a token."""
        local = self.mounts.get(SA_MOUNT)
        return local if local is not None and (local / "token").is_file() else None

    def path_map(self) -> dict[str, Path]:
        return {**self.mounts, self.termination_path: self.termination_log}

    def rewrite(self, value: str) -> str:
        """Replace each mapped container path used as a path prefix in `value`.

        A mapped path matches only where a path starts (not after a letter, digit, '.', '-'
        or '/', so `s3://bucket/data` is never touched) and where it ends ('/' or the end of
        a path); longer paths win, so /data/cache maps before /data.
        """
        mapping = self.path_map()
        ordered = sorted(mapping, key=len, reverse=True)
        pattern = re.compile(
            r"(?<![\w.\-/])("
            + "|".join(re.escape(p.rstrip("/")) for p in ordered)
            + r")(?=/|$|[^\w.\-])"
        )
        lookup = {p.rstrip("/"): str(local) for p, local in mapping.items()}
        return pattern.sub(lambda m: lookup[m.group(1)], value)

    def working_dir(self, container_dir: str | None) -> Path:
        """workingDir under a mount is that local dir; any other lives under work/."""
        if not container_dir:
            return self.work
        rewritten = self.rewrite(container_dir)
        local = (
            Path(rewritten) if rewritten != container_dir else self.work / container_dir.lstrip("/")
        )
        local.mkdir(parents=True, exist_ok=True)
        return local

    def refresh_tokens(self, objects: ObjectSource, pod: Obj) -> None:
        now = datetime.now(UTC)
        for projected in self.tokens:
            if projected.is_due(now):
                projected.token = objects.request_token(
                    pod, projected.audience, projected.expiration_seconds
                )
                _write(projected.path, projected.token.token.encode(), 0o600)


def sandbox_root(pods_dir: Path, namespace: str, name: str, uid: str) -> Path:
    return pods_dir / namespace / name / uid


def _safe_relative(base: Path, relative: str, what: str) -> Path:
    rel = PurePosixPath(relative)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise PodConfigError(f"{what}: path {relative!r} must be relative and without '..'")
    return base.joinpath(*rel.parts)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace the file atomically, keeping its owner (image mode gives files to the pod's user)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    with contextlib.suppress(OSError):
        owner = path.stat()
        os.chown(tmp, owner.st_uid, owner.st_gid)
    tmp.replace(path)


def _write_keys(
    target: Path,
    data: dict[str, bytes],
    items: list[Obj] | None,
    mode: int,
    what: str,
    optional: bool,
    missing_key: str,
) -> None:
    """Project keys of a Secret/ConfigMap: all keys, or the listed `items` (key -> path).
    A listed key that is missing fails the volume with the plugin's words (`missing_key`)."""
    if not items:
        for key, value in data.items():
            _write(_safe_relative(target, key, what), value, mode)
        return
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if optional:
                continue
            raise _MountFailedError(f"{missing_key}: {key}")
        _write(
            _safe_relative(target, item.get("path") or key, what),
            data[key],
            item.get("mode") or mode,
        )


class _MountFailedError(Exception):
    """One volume cannot be set up; the message is the volume plugin's error."""


class SandboxBuilder:
    """Creates the sandbox of one pod: directories and volume contents (`build`, before env,
    as kubelet mounts volumes before it resolves env), then the mount map (`mount`)."""

    def __init__(self, objects: ObjectSource, facts: PodFacts) -> None:
        self.objects = objects
        self.facts = facts
        self.pod = facts.pod
        self.namespace = facts.pod["metadata"]["namespace"]

    def build(self, root: Path, container: Obj) -> Sandbox:
        """Raises VolumeMountError naming every volume that cannot be set up (kubelet sets
        them all up, and posts one FailedMount event per failing volume)."""
        if root.exists():  # a previous attempt (the pod waited on a missing object): start clean
            shutil.rmtree(root)
        sandbox = Sandbox(
            root=root,
            termination_path=container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH,
        )
        for folder in (sandbox.work, sandbox.home, sandbox.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        failures: list[tuple[str, str]] = []
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            sandbox.volumes[name] = root / "volumes" / name
            sandbox.volumes[name].mkdir(parents=True, exist_ok=True)
            try:
                self._fill(sandbox.volumes[name], volume, sandbox)
            except _MountFailedError as exc:
                failures.append((name, str(exc)))
        if failures:
            raise VolumeMountError(failures)
        return sandbox

    def mount(self, sandbox: Sandbox, container: Obj, env: dict[str, str]) -> None:
        """Map each volumeMount's path (subPath, or subPathExpr expanded with `env`)."""
        local = sandbox.volumes
        for mount in container.get("volumeMounts") or []:
            name = mount.get("name", "")
            if name not in local:
                raise PodConfigError(
                    f"volumeMount {mount.get('mountPath')}: no volume named {name!r}"
                )
            sub = str(mount.get("subPath") or expand(mount.get("subPathExpr") or "", env))
            target = _safe_relative(local[name], sub, f"volumeMount {name}") if sub else local[name]
            if not target.exists():
                target.mkdir(parents=True)
            sandbox.mounts[mount["mountPath"]] = target

    def _fill(self, target: Path, volume: Obj, sandbox: Sandbox) -> None:
        name = volume["name"]
        kind = next((k for k in volume if k != "name"), "")
        spec = volume.get(kind) or {}
        mode = int(spec.get("defaultMode") or DEFAULT_FILE_MODE)
        what = f"volume {name}"
        if kind == "emptyDir":
            return  # medium: Memory (/dev/shm) is a sandbox dir too: see docs/executor.md
        if kind == "secret":
            self._project_secret(target, spec.get("secretName", ""), spec, mode, what)
        elif kind == "configMap":
            self._project_config_map(target, spec.get("name", ""), spec, mode, what)
        elif kind == "downwardAPI":
            self._project_downward(target, spec.get("items") or [], mode, what)
        elif kind == "projected":
            for source in spec.get("sources") or []:
                self._project(target, source, mode, what, sandbox)
        else:
            raise PodConfigError(
                f"{what}: type {kind or 'unknown'} is not supported by the process executor "
                f"(supported: {', '.join(SUPPORTED)})"
            )

    def _project(self, target: Path, source: Obj, mode: int, what: str, sandbox: Sandbox) -> None:
        # A projected volume stops at its first failing source (kubelet aggregates them all).
        if "secret" in source:
            ref = source["secret"]
            self._project_secret(target, ref.get("name", ""), ref, mode, what)
        elif "configMap" in source:
            ref = source["configMap"]
            self._project_config_map(target, ref.get("name", ""), ref, mode, what)
        elif "downwardAPI" in source:
            self._project_downward(target, source["downwardAPI"].get("items") or [], mode, what)
        elif "serviceAccountToken" in source:
            ref = source["serviceAccountToken"]
            path = _safe_relative(target, ref.get("path", ""), what)
            audience, seconds = ref.get("audience"), ref.get("expirationSeconds")
            token = self.objects.request_token(self.pod, audience, seconds)
            _write(path, token.token.encode(), 0o600)
            sandbox.tokens.append(ProjectedToken(path, audience, seconds, token))
        else:
            raise PodConfigError(
                f"{what}: projected source {sorted(source)} is not supported (supported: "
                "secret, configMap, downwardAPI, serviceAccountToken)"
            )

    def _project_secret(self, target: Path, name: str, ref: Obj, mode: int, what: str) -> None:
        data = self.objects.secret(self.namespace, name)
        if data is None:
            if ref.get("optional"):
                return
            raise _MountFailedError(f'secret "{name}" not found')  # kubelet's secret manager
        _write_keys(
            target,
            data,
            ref.get("items"),
            mode,
            f'{what} (secret "{name}")',
            bool(ref.get("optional")),
            MISSING_SECRET_KEY,
        )

    def _project_config_map(self, target: Path, name: str, ref: Obj, mode: int, what: str) -> None:
        data = self.objects.config_map(self.namespace, name)
        if data is None:
            if ref.get("optional"):
                return
            raise _MountFailedError(f'configmap "{name}" not found')
        _write_keys(
            target,
            data,
            ref.get("items"),
            mode,
            f'{what} (configmap "{name}")',
            bool(ref.get("optional")),
            MISSING_CONFIG_MAP_KEY,
        )

    def _project_downward(self, target: Path, items: list[Obj], mode: int, what: str) -> None:
        for item in items:
            if "fieldRef" in item:
                value = field_value(self.facts, item["fieldRef"].get("fieldPath", ""))
            else:
                container = self.pod["spec"]["containers"][0]["name"]
                value = resource_value(self.facts, container, item.get("resourceFieldRef") or {})
            _write(
                _safe_relative(target, item.get("path", ""), what),
                value.encode(),
                item.get("mode") or mode,
            )


def remove_sandbox(root: Path) -> None:
    """Delete a pod's sandbox and its now-empty parent folders (logs live elsewhere)."""
    shutil.rmtree(root, ignore_errors=True)
    for parent in (root.parent, root.parent.parent):
        try:
            parent.rmdir()
        except OSError:
            break


def write_kubeconfig(path: Path, server: str, sa_dir: Path, namespace: str) -> None:
    """A kubeconfig that acts as the pod's ServiceAccount (token file re-read on each load)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "in-cluster",
                "cluster": {"server": server, "certificate-authority": str(sa_dir / "ca.crt")},
            }
        ],
        "users": [{"name": "service-account", "user": {"tokenFile": str(sa_dir / "token")}}],
        "contexts": [
            {
                "name": "in-cluster",
                "context": {
                    "cluster": "in-cluster",
                    "user": "service-account",
                    "namespace": namespace,
                },
            }
        ],
        "current-context": "in-cluster",
    }
    _write(path, yaml.safe_dump(config, sort_keys=False).encode(), 0o600)
