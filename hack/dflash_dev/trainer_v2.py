"""Kubeflow Trainer v2 and the JobSet controller it builds on, on the local control plane: their
CRDs, configurations, commands and webhooks. The API server calls the webhooks over loopback TLS
(a `url` clientConfig, the project's CA as caBundle), as for Kueue (`kueue.py`).

Both controllers run with their cert management off and the API server's serving cert (its
SANs cover 127.0.0.1). The trainer's webhook server reads its cert from controller-runtime's
default dir under $TMPDIR, so each process gets a TMPDIR of its own in the cluster's state.
"""

from __future__ import annotations

import base64
import copy
import shutil
from pathlib import Path
from typing import Any

import yaml

from . import binaries

JOBSET_CRDS = ("jobsets.jobset.x-k8s.io",)
TRAINER_CRDS = (
    "trainjobs.trainer.kubeflow.org",
    "trainingruntimes.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org",
)
WEBHOOK_CONFIG_PREFIXES = {"jobset": "jobset-", "trainer": "trainer-"}
# The upstream kustomize patch (config/components/webhook/patches/) narrows JobSet's pod
# webhooks to the pods of JobSets; without it every pod create would call the JobSet webhook
# (failurePolicy Fail).
JOBSET_POD_SELECTOR = {
    "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
}
# The platform's default runtime, as Trainer's manifests install it (manifests/base/runtimes/).
TORCH_RUNTIME = "torch-distributed"


def crd_files() -> list[Path]:
    return [
        *sorted((binaries.share_dir("jobset") / "crd").glob("*.yaml")),
        *sorted((binaries.share_dir("trainer") / "crd").glob("*.yaml")),
    ]


def _serving_certs(state: Path, pki: Path, name: str) -> Path:
    """A copy of the API server's serving cert and key as tls.crt / tls.key in `name`'s dir."""
    certs = state / f"{name}-certs"
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pki / "apiserver.crt", certs / "tls.crt")
    shutil.copyfile(pki / "apiserver.key", certs / "tls.key")
    return certs


def write_jobset_config(state: Path, pki: Path, ports: dict[str, int]) -> Path:
    certs = _serving_certs(state, pki, "jobset")
    config: dict[str, Any] = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": "127.0.0.1", "port": ports["jobset-webhook"], "certDir": str(certs)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['jobset-probe']}"},
        # "0": no metrics server (it would want a serving cert of its own).
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }
    path = state / "jobset-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def jobset_command(binary: Path, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", "--zap-log-level=info"]


def write_trainer_config(state: Path, pki: Path, ports: dict[str, int]) -> Path:
    """The trainer's Configuration; its serving cert goes where its webhook server looks:
    $TMPDIR/k8s-webhook-server/serving-certs (see `trainer_env`)."""
    certs = _serving_certs(state, pki, "trainer")
    served = trainer_tmpdir(state) / "k8s-webhook-server" / "serving-certs"
    served.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        shutil.copyfile(certs / name, served / name)
    config: dict[str, Any] = {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": "127.0.0.1", "port": ports["trainer-webhook"]},
        "health": {
            "healthProbeBindAddress": f"127.0.0.1:{ports['trainer-probe']}",
            "readinessEndpointName": "readyz",
            "livenessEndpointName": "healthz",
        },
        "metrics": {"bindAddress": "0", "secureServing": False},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }
    path = state / "trainer-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def trainer_tmpdir(state: Path) -> Path:
    return state / "trainer-tmp"


def trainer_command(binary: Path, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", "--zap-log-level=info"]


def trainer_env(state: Path) -> dict[str, str]:
    return {"TMPDIR": str(trainer_tmpdir(state))}


def _local_hooks(
    source: Path, prefix: str, ca_bundle: bytes, port: int, pod_selector: dict[str, Any] | None
) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all(source.read_text()):
        if not doc:
            continue
        for hook in doc.get("webhooks") or ():
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            resources = {r for rule in hook.get("rules") or () for r in rule.get("resources", ())}
            if pod_selector is not None and "pods" in resources:
                hook["objectSelector"] = copy.deepcopy(pod_selector)
        doc["metadata"] = {"name": prefix + doc["metadata"]["name"]}
        out.append(doc)
    return out


def jobset_webhook_configurations(ca_bundle: bytes, port: int) -> list[dict[str, Any]]:
    source = binaries.share_dir("jobset") / "webhooks.yaml"
    return _local_hooks(
        source, WEBHOOK_CONFIG_PREFIXES["jobset"], ca_bundle, port, JOBSET_POD_SELECTOR
    )


def trainer_webhook_configurations(ca_bundle: bytes, port: int) -> list[dict[str, Any]]:
    source = binaries.share_dir("trainer") / "webhooks.yaml"
    return _local_hooks(source, WEBHOOK_CONFIG_PREFIXES["trainer"], ca_bundle, port, None)


def runtime_files() -> list[Path]:
    return sorted((binaries.share_dir("trainer") / "runtimes").glob("*.yaml"))
