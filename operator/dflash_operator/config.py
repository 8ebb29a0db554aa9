"""The one typed configuration of the operator process: where the node pools are, which
namespaces to watch, stage images, timers and endpoints. Read from `DFLASH_*` environment
variables and command-line flags (flags win), validated at load. Pools live in `pools.py`.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dflash_operator.api.base import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, IMAGE_PATTERN
from dflash_operator.api.spec_training import Launcher
from dflash_operator.version import OPERATOR_VERSION

ENV_PREFIX = "DFLASH_"
# Where the chart mounts the pools ConfigMap.
DEFAULT_POOLS_FILE = Path("/etc/dflash-operator/pools.yaml")
# Stage images of the operator's own release: the release workflow pushes all three with its tag.
DEFAULT_REGEN_IMAGE = f"ghcr.io/dflash-dev/dflash-regen:{OPERATOR_VERSION}"
DEFAULT_TRAINER_IMAGE = f"ghcr.io/dflash-dev/dflash-trainer:{OPERATOR_VERSION}"
# Reconcile workers: each holds one run at a time; 4 keep 200 runs moving on 2 cores.
DEFAULT_WORKERS = 4
# A slow safety net: events drive the reconcile, the resync only catches what they missed.
DEFAULT_RESYNC_SECONDS = 60.0
# Watches: the server closes a stream after this; the client gives up a little later, so a
# silently dead connection is noticed (kopf #585, #955) instead of stalling forever.
DEFAULT_WATCH_SERVER_TIMEOUT = 270.0
DEFAULT_WATCH_CLIENT_TIMEOUT = 300.0
DEFAULT_CONNECT_TIMEOUT = 10.0
# Every non-watch API request of the operator is bounded by this.
DEFAULT_REQUEST_TIMEOUT = 30.0
# Job retries of a single-pod stage (audit, tokenize, evaluate) before the stage fails.
DEFAULT_STAGE_BACKOFF_LIMIT = 2
# How long deletion waits for the S3 cleanup Job before releasing the finalizer anyway.
DEFAULT_CLEANUP_TIMEOUT = 1800.0
# The ClusterTrainingRuntime the chart ships (training.runtime.name).
DEFAULT_TRAINING_RUNTIME = "dflash-torch-distributed"
# The uid stage containers run as: the images' non-root user (docs/images.md).
DEFAULT_RUN_AS_USER = 65532

ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class ConfigError(ValueError):
    """A setting that cannot be used: the message names it, its value and what is accepted."""


class OperatorConfig(BaseModel):
    """Everything the operator process needs besides the node pools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pools_file: Path = Field(default=DEFAULT_POOLS_FILE, description="Node pools YAML file.")
    namespaces: tuple[str, ...] = Field(
        default=(), description="Namespaces to watch; empty watches the whole cluster."
    )
    regen_image: str = Field(default=DEFAULT_REGEN_IMAGE, pattern=IMAGE_PATTERN)
    trainer_image: str = Field(default=DEFAULT_TRAINER_IMAGE, pattern=IMAGE_PATTERN)
    image_pull_policy: ImagePullPolicy = "IfNotPresent"
    workers: int = Field(default=DEFAULT_WORKERS, ge=1, le=64)
    resync_seconds: float = Field(default=DEFAULT_RESYNC_SECONDS, ge=1, le=3600)
    watch_server_timeout: float = Field(default=DEFAULT_WATCH_SERVER_TIMEOUT, ge=10, le=3600)
    watch_client_timeout: float = Field(default=DEFAULT_WATCH_CLIENT_TIMEOUT, ge=10, le=3600)
    connect_timeout: float = Field(default=DEFAULT_CONNECT_TIMEOUT, gt=0, le=120)
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT, gt=0, le=600)
    stage_backoff_limit: int = Field(default=DEFAULT_STAGE_BACKOFF_LIMIT, ge=0, le=20)
    cleanup_timeout: float = Field(default=DEFAULT_CLEANUP_TIMEOUT, ge=0, le=7 * 24 * 3600)
    run_as_user: int = Field(default=DEFAULT_RUN_AS_USER, ge=1)
    default_launcher: Launcher = Field(
        default=Launcher.AUTO,
        description="spec.training.launcher of runs that set none (auto, trainjob, pytorchjob).",
    )
    training_runtime: str = Field(
        default=DEFAULT_TRAINING_RUNTIME,
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=253,
        description="ClusterTrainingRuntime of TrainJobs whose run sets no runtimeRef.",
    )
    metrics_port: int = Field(default=9090, ge=0, le=65535, description="0 disables /metrics.")
    health_port: int = Field(default=8080, ge=0, le=65535, description="0 disables /healthz.")
    readiness_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description=(
            "Port of /readyz (ready: the TrainJob or PyTorchJob CRD the default launcher may "
            "use is established); 0 disables it."
        ),
    )
    leader_election: bool = Field(
        default=False,
        description="Elect one active instance with a Lease (replicas > 1); the others stand by.",
    )
    lease_name: str = Field(default="dflash-operator", pattern=DNS_LABEL_PATTERN)
    lease_namespace: str | None = Field(
        default=None,
        pattern=DNS_LABEL_PATTERN,
        description="Namespace of the Lease. Unset: POD_NAMESPACE, else the pod's own namespace.",
    )
    lease_duration: float = Field(default=15.0, ge=2, le=300)
    lease_renew_deadline: float = Field(default=10.0, ge=1, le=300)
    lease_retry_period: float = Field(default=2.0, gt=0, le=60)
    bind_address: str = "0.0.0.0"  # noqa: S104 - the pod's probes and Prometheus reach it
    log_level: LogLevel = "INFO"
    log_format: LogFormat = "text"

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def liveness_endpoint(self) -> str | None:
        if not self.health_port:
            return None
        return f"http://{self.bind_address}:{self.health_port}/healthz"


# Setting name -> (environment variable suffix, flag). One table so docs, env and flags agree.
_SETTINGS: dict[str, tuple[str, str]] = {
    name: (name.upper(), "--" + name.replace("_", "-")) for name in OperatorConfig.model_fields
}


def _split_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _raw_settings(env: Mapping[str, str], flags: argparse.Namespace | None) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for name, (env_suffix, _flag) in _SETTINGS.items():
        value = env.get(ENV_PREFIX + env_suffix)
        if value is not None:
            raw[name] = value
        flag_value = getattr(flags, name, None) if flags is not None else None
        if flag_value is not None:
            raw[name] = flag_value
    if isinstance(raw.get("namespaces"), str):
        raw["namespaces"] = _split_list(raw["namespaces"])
    elif isinstance(raw.get("namespaces"), list):
        raw["namespaces"] = tuple(ns for item in raw["namespaces"] for ns in _split_list(item))
    return raw


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors(include_url=False):
        name = str(item["loc"][0]) if item["loc"] else "?"
        env_suffix, flag = _SETTINGS.get(name, (name.upper(), name))
        shown = item.get("input")
        lines.append(f"{flag} / {ENV_PREFIX}{env_suffix}={shown!r} is not accepted: {item['msg']}")
    return "; ".join(lines)


def check_namespaces(namespaces: Sequence[str]) -> None:
    for namespace in namespaces:
        if not re.fullmatch(DNS_LABEL_PATTERN, namespace):
            raise ConfigError(
                f"--namespaces / {ENV_PREFIX}NAMESPACES contains {namespace!r}, which is not a "
                "namespace name (lowercase letters, digits and '-')"
            )


def load_config(
    env: Mapping[str, str] | None = None, flags: argparse.Namespace | None = None
) -> OperatorConfig:
    """The config from `env` (default: os.environ) and parsed `flags`; ConfigError if invalid."""
    raw = _raw_settings(os.environ if env is None else env, flags)
    try:
        config = OperatorConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None
    check_namespaces(config.namespaces)
    if not config.lease_retry_period < config.lease_renew_deadline < config.lease_duration:
        raise ConfigError(
            f"--lease-retry-period={config.lease_retry_period} < --lease-renew-deadline="
            f"{config.lease_renew_deadline} < --lease-duration={config.lease_duration} must "
            "hold: a leader that cannot renew stops before a standby may take over"
        )
    if config.watch_client_timeout <= config.watch_server_timeout:
        raise ConfigError(
            f"--watch-client-timeout={config.watch_client_timeout} must be larger than "
            f"--watch-server-timeout={config.watch_server_timeout}, so that the server ends "
            "each watch and the client only steps in when a connection silently died"
        )
    return config


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; each defaults to None so the environment applies when unset."""
    for name, (env_suffix, flag) in _SETTINGS.items():
        field = OperatorConfig.model_fields[name]
        default = field.default
        shown = ",".join(default) if isinstance(default, tuple) else default
        help_text = f"(env {ENV_PREFIX}{env_suffix}; default {shown})"
        if field.description:
            help_text = f"{field.description} {help_text}"
        if name == "namespaces":
            parser.add_argument(flag, dest=name, action="append", default=None, help=help_text)
        else:
            parser.add_argument(flag, dest=name, default=None, help=help_text)
