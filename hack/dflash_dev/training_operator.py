"""The Kubeflow training-operator v1 (PyTorchJob) on the local control plane: what its cert
rotator needs before it reports ready, its command, and the copy of its webhook cert.
Trainer v2 (TrainJob) lives in `trainer_v2.py`.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from . import binaries
from .paths import REPO_ROOT

NAMESPACE = "kubeflow"
CERT_SECRET = "training-operator-webhook-cert"  # noqa: S105 (a Secret's name)
CRDS = ("pytorchjobs.kubeflow.org",)
PYTORCH_INIT_CONTAINER = (
    REPO_ROOT / "examples" / "production" / "training-operator" / "initContainer.yaml"
)
WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # noqa: S108 (upstream path)

Kubectl = Callable[..., Any]


def crd_files() -> list[Path]:
    return [binaries.share_dir("training-operator") / "kubeflow.org_pytorchjobs.yaml"]


def prepare(kubectl: Kubectl) -> None:
    """The training-operator's cert rotator wants its namespace, its Secret and a webhook
    configuration of its name to exist before it reports ready. The configuration holds no
    webhooks, so the apiserver never calls the operator's webhook server."""
    kubectl("create", "namespace", NAMESPACE)
    kubectl("create", "secret", "generic", CERT_SECRET, "-n", NAMESPACE)
    kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "validator.training-operator.kubeflow.org"},
                "webhooks": [],
            }
        ),
    )


def command(binary: Path, ports: dict[str, int]) -> list[str]:
    return [
        str(binary),
        "--enable-scheme=pytorchjob",
        f"--metrics-bind-address=127.0.0.1:{ports['to-metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['to-probe']}",
        f"--webhook-server-port={ports['to-webhook']}",
        "--leader-elect=false",
        "--controller-threads=4",
        # The Worker init container that Pod Security "restricted" accepts, as the
        # production guide installs it (examples/production/training-operator/).
        f"--pytorch-init-container-template-file={PYTORCH_INIT_CONTAINER}",
    ]


def install_webhook_certs(kubectl: Kubectl) -> bool:
    """In a real deployment the Secret the rotator fills is mounted at its cert dir; here we
    copy it there ourselves (the path is fixed in training-operator's pkg/cert). False until
    the rotator has filled it."""
    result = kubectl("get", "secret", CERT_SECRET, "-n", NAMESPACE, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    data = json.loads(result.stdout).get("data") or {}
    if "tls.crt" not in data or "tls.key" not in data:
        return False
    WEBHOOK_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        target = WEBHOOK_CERT_DIR / name
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(base64.b64decode(data[name]))
        tmp.replace(target)
    return True
