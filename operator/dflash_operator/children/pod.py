"""The pod template every stage shares: node-pool placement, resources (children/resources.py), S3
credentials from the Secret (`secretKeyRef`, never values), the rendered config files,
a memory-backed /dev/shm, and a non-root, read-only container.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dflash_memplan.allocator import ALLOC_CONF_ENV, EXPANDABLE_SEGMENTS, alloc_conf_of

from dflash_operator.api.constants import KUEUE_QUEUE_LABEL, Stage
from dflash_operator.api.naming import child_name
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.children.commands import CONFIG_DIR, PVC_ROOT
from dflash_operator.children.meta import RunRef, build_child_labels
from dflash_operator.children.resources import build_resources, tmp_size_limit
from dflash_operator.config import DEFAULT_RUN_AS_USER
from dflash_operator.plan.placement import Placement

TMP_DIR = "/tmp"  # noqa: S108 - an emptyDir of the pod, the only writable path
# Where the S3 CA bundle (spec.storage.caBundle) is mounted, and the file AWS_CA_BUNDLE names.
CA_DIR = "/etc/dflash-ca"
CA_FILE = "ca.crt"
SHM_DIR = "/dev/shm"  # noqa: S108 - a memory-backed emptyDir for NCCL, not a temp file
# Kueue reads the queue from this label on the workload.
# NCCL: fail fast instead of hanging on a dead peer, and say why at WARN level.
NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"}
# Caches of Hugging Face and friends go to the writable emptyDir.
# Only the model stage talks to the Hub; every other stage loads the target from S3 or a PVC, so
# nothing may reach for the Hub there (a missing file fails fast).
OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
CACHE_ENV = {
    "HOME": TMP_DIR,
    "HF_HOME": f"{TMP_DIR}/hf",
    "XDG_CACHE_HOME": f"{TMP_DIR}/cache",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class PodSettings:
    """Operator-wide pod settings (from the operator's config)."""

    image_pull_policy: str = "IfNotPresent"
    run_as_user: int = DEFAULT_RUN_AS_USER


@dataclass(frozen=True)
class PodContext:
    """Everything that shapes one stage's pods."""

    run: RunRef
    spec: DFlashRunSpec
    stage: Stage
    attempt: int | None
    placement: Placement
    image: str
    settings: PodSettings = field(default_factory=PodSettings)
    service_account: str | None = None
    # Only the trainer talks to the API server (its own status): only it mounts a token.
    mount_token: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        """Pod labels: the pool's (e.g. a scheduler's queue), then ours."""
        return {
            **self.placement.pool.labels,
            **build_child_labels(self.run, self.stage, self.attempt),
        }

    @property
    def active_deadline_seconds(self) -> int | None:
        """The stage's deadline from the spec (None: no limit; cleanup Jobs have none)."""
        section = self.spec.section_of(self.stage)
        seconds = getattr(section, "active_deadline_seconds", None)
        return int(seconds) if seconds is not None else None

    @property
    def workload_labels(self) -> dict[str, str]:
        """Labels for the Job / PyTorchJob itself (Kueue reads its queue from there)."""
        labels = dict(self.placement.pool.labels)
        if self.spec.queue_name:
            labels[KUEUE_QUEUE_LABEL] = self.spec.queue_name
        return labels


def pvc_claims(spec: DFlashRunSpec) -> list[str]:
    """Claims named by pvc:// URIs of the spec, each mounted read-only under PVC_ROOT."""
    uris = [spec.target.model, *(source.uri for source in spec.data.sources)]
    if spec.evaluation.prompts is not None:
        uris.append(spec.evaluation.prompts.uri)
    claims = []
    for uri in uris:
        if uri.startswith("pvc://"):
            claim = uri.removeprefix("pvc://").split("/", 1)[0]
            if claim not in claims:
                claims.append(claim)
    return claims


def build_s3_env(ctx: PodContext) -> list[dict[str, Any]]:
    """S3 settings as env; the credentials only as references to the run's Secret."""
    storage = ctx.spec.storage
    env: list[dict[str, Any]] = [
        {"name": "DFLASH_S3_PATH_STYLE", "value": "true" if storage.path_style else "false"},
        # The same for the Run:ai model streamer vLLM loads the target's weights with.
        {
            "name": "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING",
            "value": "0" if storage.path_style else "1",
        },
    ]
    if storage.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": storage.endpoint})
    if storage.region:
        env.append({"name": "AWS_REGION", "value": storage.region})
    if storage.ca_bundle is not None:
        env.append({"name": "AWS_CA_BUNDLE", "value": f"{CA_DIR}/{CA_FILE}"})
    ref = storage.credentials_secret_ref
    if ref is not None:
        for name, key in (
            ("AWS_ACCESS_KEY_ID", ref.access_key_id_key),
            ("AWS_SECRET_ACCESS_KEY", ref.secret_access_key_key),
        ):
            env.append(
                {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": key}}}
            )
    return env


def build_hf_env(ctx: PodContext) -> list[dict[str, Any]]:
    """The Hugging Face token, as a reference to its Secret, for the model stage alone: it is
    the only pod that talks to the Hub (every other stage loads the run's copy)."""
    ref = ctx.spec.hf_token_secret_ref
    if ref is None or ctx.stage != Stage.MODEL:
        return []
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}]


def build_env(ctx: PodContext) -> list[dict[str, Any]]:
    """Plain env (caches, NCCL for GPU pods, the pool's, the stage's), then S3 and the Hub."""
    plain = dict(CACHE_ENV)
    if ctx.placement.gpus or ctx.stage == Stage.TRAIN:
        plain.update(NCCL_ENV)
    if pvc_claims(ctx.spec):
        plain["DFLASH_PVC_ROOT"] = PVC_ROOT
    if ctx.stage == Stage.TRAIN and alloc_conf_of(ctx.placement.pool.env) is None:
        # Shapes change every micro-batch: without expandable segments the caching allocator
        # strands 10-15% of the peak (the memory plan counts what this setting implies).
        plain[ALLOC_CONF_ENV] = EXPANDABLE_SEGMENTS
    plain.update(ctx.placement.pool.env)
    if ctx.stage not in (Stage.MODEL, Stage.CLEANUP, Stage.PRUNE):
        # Over the pool's env: these stages load the target from S3 or a PVC, never the Hub.
        plain.update(dict.fromkeys(OFFLINE_ENV, "1"))
    plain.update(ctx.extra_env)
    env = [{"name": name, "value": value} for name, value in plain.items()]
    # One entry per name (the API server refuses duplicates): references win over plain values.
    by_name = {item["name"]: item for item in [*env, *build_s3_env(ctx), *build_hf_env(ctx)]}
    return list(by_name.values())


def build_pod_resources(ctx: PodContext) -> dict[str, Any]:
    return build_resources(ctx.spec, ctx.stage, ctx.placement)


def _tmp_volume(ctx: PodContext) -> dict[str, Any]:
    """The only writable path (the model download, caches): sized like the pod's
    ephemeral storage, so a runaway write evicts the pod instead of filling the node."""
    size = tmp_size_limit(build_pod_resources(ctx))
    return {"sizeLimit": size} if size else {}


def build_volumes(ctx: PodContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): config files, /tmp, /dev/shm for GPU and training pods, PVCs."""
    config_map = child_name(ctx.run.name, Stage.CONFIG)
    # The cleanup Jobs read no config, and a run may never have rendered it: optional there.
    optional = ctx.stage in (Stage.CLEANUP, Stage.PRUNE)
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": config_map, "optional": optional}},
        {"name": "tmp", "emptyDir": _tmp_volume(ctx)},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": TMP_DIR},
    ]
    ca = ctx.spec.storage.ca_bundle
    if ca is not None:
        items = [{"key": ca.key, "path": CA_FILE}]
        source: dict[str, Any] = (
            {"configMap": {"name": ca.config_map_name, "items": items}}
            if ca.config_map_name
            else {"secret": {"secretName": ca.secret_name, "items": items}}
        )
        volumes.append({"name": "s3-ca", **source})
        mounts.append({"name": "s3-ca", "mountPath": CA_DIR, "readOnly": True})
    if ctx.placement.gpus or ctx.stage == Stage.TRAIN:
        shm: dict[str, Any] = {"medium": "Memory"}
        if ctx.placement.pool.shm_size:
            shm["sizeLimit"] = ctx.placement.pool.shm_size
        volumes.append({"name": "dshm", "emptyDir": shm})
        mounts.append({"name": "dshm", "mountPath": SHM_DIR})
    for index, claim in enumerate(pvc_claims(ctx.spec)):
        name = f"pvc-{index}"
        volumes.append(
            {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        mounts.append({"name": name, "mountPath": f"{PVC_ROOT}/{claim}", "readOnly": True})
    return volumes, mounts


def build_container(
    ctx: PodContext, name: str, args: list[str], ports: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The stage's one container: non-root, read-only root, no privilege escalation."""
    _volumes, mounts = build_volumes(ctx)
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if ctx.placement.gpus and ctx.placement.pool.add_capabilities:
        capabilities["add"] = list(ctx.placement.pool.add_capabilities)
    container: dict[str, Any] = {
        "name": name,
        "image": ctx.image,
        "imagePullPolicy": ctx.settings.image_pull_policy,
        "args": args,
        "env": build_env(ctx),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": capabilities,
        },
    }
    container["resources"] = build_pod_resources(ctx)
    if ports:
        container["ports"] = ports
    return container


def build_pod_spec(
    ctx: PodContext, container: dict[str, Any], restart_policy: str
) -> dict[str, Any]:
    """Pod spec: placement from the pool, security, volumes, the service account."""
    pool = ctx.placement.pool
    volumes, _mounts = build_volumes(ctx)
    uid = ctx.settings.run_as_user
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if ctx.service_account:
        spec["serviceAccountName"] = ctx.service_account
    spec["automountServiceAccountToken"] = ctx.mount_token
    if pool.node_selector:
        spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        spec["tolerations"] = [t.to_api() for t in pool.tolerations]
    if pool.affinity:
        spec["affinity"] = pool.affinity
    if pool.scheduler_name:
        spec["schedulerName"] = pool.scheduler_name
    if ctx.spec.priority_class_name:
        spec["priorityClassName"] = ctx.spec.priority_class_name
    pull_secrets = list(pool.image_pull_secrets)
    for ref in ctx.spec.image_pull_secrets or ():
        if ref.name not in pull_secrets:
            pull_secrets.append(ref.name)
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    return spec


def build_pod_annotations(ctx: PodContext) -> dict[str, str]:
    """The pool's annotations; on the training gang, its Kueue topology request too (Kueue
    reads it from the pod template of each podset)."""
    annotations = dict(ctx.placement.pool.annotations)
    topology = ctx.placement.pool.topology
    if topology is not None and ctx.stage == Stage.TRAIN:
        annotations.update(topology.annotation)
    return annotations


def build_pod_template(
    ctx: PodContext, container: dict[str, Any], restart_policy: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": ctx.labels}
    annotations = build_pod_annotations(ctx)
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": build_pod_spec(ctx, container, restart_policy)}
