"""Kueue on the local control plane: its CRDs, its configuration, and its webhooks, which the
API server calls over loopback TLS (a `url` clientConfig, the project's CA as caBundle).

Only the integrations the pipeline uses are on, each listed explicitly: `batch/job`, and per
training backend the cluster serves `trainer.kubeflow.org/trainjob` (Trainer v2) and
`kubeflow.org/pytorchjob` (training-operator v1; Kueue 0.19's defaults leave it out). Only the
webhooks of those kinds and of Kueue's own objects are registered: a webhook for a kind Kueue
does not serve (pods, deployments) would refuse every such object (failurePolicy Fail). Jobs without the `kueue.x-k8s.io/queue-name` label are left alone
(`manageJobsWithoutQueueName: false`), so clusters, tests and runs that use no queue behave as
without Kueue.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from . import binaries
from .errors import DevError

# Kueue's own objects, whose webhooks are always registered.
OWN_RESOURCES = frozenset({"workloads", "clusterqueues", "cohorts", "resourceflavors"})
# The integrations the pipeline can use, and the resource each one's webhooks are for.
JOB_FRAMEWORK = "batch/job"
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
PYTORCHJOB_FRAMEWORK = "kubeflow.org/pytorchjob"
FRAMEWORK_RESOURCES = {
    JOB_FRAMEWORK: "jobs",
    TRAINJOB_FRAMEWORK: "trainjobs",
    PYTORCHJOB_FRAMEWORK: "pytorchjobs",
}
NAMESPACE = "kueue-system"
WEBHOOK_CONFIG_PREFIX = "kueue-"
CRDS = (
    "workloads",
    "clusterqueues",
    "localqueues",
    "resourceflavors",
    "admissionchecks",
    "topologies",
)


def crd_files() -> list[Path]:
    return sorted((binaries.share_dir("kueue") / "crd").glob("*.yaml"))


def frameworks(*, with_trainer: bool, with_training_operator: bool) -> tuple[str, ...]:
    """The integrations for a cluster's training backends (each backend's own kind)."""
    out = [JOB_FRAMEWORK]
    if with_trainer:
        out.append(TRAINJOB_FRAMEWORK)
    if with_training_operator:
        out.append(PYTORCHJOB_FRAMEWORK)
    return tuple(out)


def write_config(state: Path, pki: Path, ports: dict[str, int], enabled: tuple[str, ...]) -> Path:
    """Kueue's Configuration file, and its webhook serving cert (the project's CA signs it:
    the API server's serving cert, whose SANs cover 127.0.0.1)."""
    certs = state / "kueue-certs"
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pki / "apiserver.crt", certs / "tls.crt")
    shutil.copyfile(pki / "apiserver.key", certs / "tls.key")
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue-probe']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue-metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["kueue-webhook"], "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(enabled)},
        # Off by a feature gate (`command`); the port is ours all the same.
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": ports["kueue-visibility"]},
        "clientConnection": {"qps": 50, "burst": 100},
    }
    path = state / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# Kueue reads its metrics serving cert from this fixed path when its internal cert management
# is off (cmd/kueue/main.go), as a mounted Secret in a real cluster.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Run Kueue in its own mount namespace, where an overlay on /etc holds that path: nothing is
# written to the machine's /etc. Arguments come as "$@", never through the script's text.
_OVERLAY_SCRIPT = (
    'upper="$1"; work="$2"; certs="$3"; shift 3; '
    'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$upper,workdir=$work" /etc && '
    'mkdir -p /etc/kueue/metrics/certs && cp "$certs/tls.crt" "$certs/tls.key" /etc/kueue/metrics/certs/ && '
    'exec "$@"'
)


def _in_private_etc(state: Path, certs: Path, argv: list[str]) -> list[str]:
    if (METRICS_CERT_DIR / "tls.crt").exists():
        return argv  # provided by the machine's admin
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        raise DevError(
            "Kueue needs its metrics cert at /etc/kueue/metrics/certs (a fixed path in Kueue "
            f"{binaries.version_of('kueue')} when its internal cert management is off): run "
            "`make cluster-up` as root (it then mounts the path in a private mount namespace), "
            "or copy a serving cert there as tls.crt and tls.key"
        )
    upper, work = state / "kueue-etc" / "upper", state / "kueue-etc" / "work"
    shutil.rmtree(state / "kueue-etc", ignore_errors=True)
    upper.mkdir(parents=True)
    work.mkdir(parents=True)
    return [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", _OVERLAY_SCRIPT,
            "sh", str(upper), str(work), str(certs), *argv]  # fmt: skip


def command(state: Path, binary: Path, config: Path, ports: dict[str, int]) -> list[str]:
    argv = [
        str(binary),
        f"--config={config}",
        # The on-demand visibility API server needs an APIService and its own port: not used.
        "--feature-gates=VisibilityOnDemand=false",
        "--zap-log-level=info",
    ]
    return _in_private_etc(state, state / "kueue-certs", argv)


def webhook_configurations(
    ca_bundle: bytes, port: int, enabled: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for its own objects and the `enabled` integrations,
    served at https://127.0.0.1:<port><path>."""
    served = OWN_RESOURCES | {FRAMEWORK_RESOURCES[name] for name in enabled}
    source = binaries.share_dir("kueue") / "webhooks.yaml"
    out = []
    for doc in yaml.safe_load_all(source.read_text()):
        if not doc:
            continue
        webhooks = []
        for hook in doc.get("webhooks") or ():
            resources = {r for rule in hook.get("rules") or () for r in rule.get("resources", ())}
            if not resources & served:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            webhooks.append(hook)
        doc["metadata"] = {"name": WEBHOOK_CONFIG_PREFIX + doc["metadata"]["name"]}
        doc["webhooks"] = webhooks
        out.append(doc)
    return out
