"""Find the control plane's binaries in the build cache, building them when missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .errors import DevError
from .paths import REPO_ROOT, cache_root

VERSIONS_FILE = REPO_ROOT / "hack" / "versions.env"
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-binaries.sh"

# binary name -> (versions.env key, build-script target)
BINARIES = {
    "etcd": ("ETCD_VERSION", "etcd"),
    "kube-apiserver": ("KUBERNETES_VERSION", "kube"),
    "kube-controller-manager": ("KUBERNETES_VERSION", "kube"),
    "kube-scheduler": ("KUBERNETES_VERSION", "kube"),
    "kubectl": ("KUBERNETES_VERSION", "kube"),
    "kwok": ("KWOK_VERSION", "kwok"),
    "helm": ("HELM_VERSION", "helm"),
    "actionlint": ("ACTIONLINT_VERSION", "actionlint"),
    "training-operator": ("TRAINING_OPERATOR_VERSION", "training-operator"),
    "kueue": ("KUEUE_VERSION", "kueue"),
    "trainer-controller-manager": ("TRAINER_VERSION", "trainer"),
    "jobset": ("JOBSET_VERSION", "trainer"),
    "promtool": ("PROMETHEUS_VERSION", "promtool"),
    # Argo CD core (one binary; the build links the two commands to it): gitops.py.
    "argocd": ("ARGOCD_VERSION", "argocd"),
    "argocd-application-controller": ("ARGOCD_VERSION", "argocd"),
    "argocd-repo-server": ("ARGOCD_VERSION", "argocd"),
}


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def version_of(name: str) -> str:
    return versions()[BINARIES[name][0]]


def cached_path(name: str) -> Path:
    return cache_root() / "bin" / f"{name}-{version_of(name)}"


def share_dir(name: str) -> Path:
    """Files shipped in a module zip (kwok stages, CRDs, webhooks), cached beside the binary."""
    key = {
        "kwok": "KWOK_VERSION",
        "training-operator": "TRAINING_OPERATOR_VERSION",
        "kueue": "KUEUE_VERSION",
        "trainer": "TRAINER_VERSION",
        "jobset": "JOBSET_VERSION",
    }[name]
    return cache_root() / "share" / f"{name}-{versions()[key]}"


def missing() -> list[str]:
    return [name for name in BINARIES if not cached_path(name).exists()]


def ensure_built(names: list[str] | None = None) -> dict[str, Path]:
    """Paths of the requested binaries; builds the missing ones (minutes, once per version)."""
    names = names or list(BINARIES)
    absent = [n for n in names if not cached_path(n).exists()]
    if absent:
        if shutil.which("go") is None:
            raise DevError(
                f"missing binaries {', '.join(absent)} and no Go toolchain to build them: "
                "install Go >= 1.26 (https://go.dev/doc/install) and rerun; the build uses only the "
                "Go module proxy"
            )
        targets = sorted({BINARIES[n][1] for n in absent})
        # The script says what it builds, about how long it takes, and shows its progress.
        argv = ["bash", str(BUILD_SCRIPT), *targets]
        result = subprocess.run(argv, check=False)
        if result.returncode != 0:
            raise DevError(f"building {', '.join(targets)} failed (see the messages above)")
    return {n: cached_path(n) for n in names}
