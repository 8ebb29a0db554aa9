"""Argo CD core on the local control plane: its CRDs and settings in namespace `argocd`, and the
application-controller, the repo-server and Redis as tracked local processes (Argo CD's own
`Procfile` way of running it outside a cluster), plus the sources it pulls from (gitserver.py).

`make gitops-up` / `make gitops-down` call `up()` / `down()`; the GitOps e2e tests share one.
Binaries: `argocd` from hack/build-binaries.sh, helm (the repo-server renders charts with it),
git, and Debian's redis-server.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from . import binaries, procs
from .cluster import kubectl
from .errors import DevError
from .paths import REPO_ROOT, cache_root, state_root, venv_bin
from .ports import free_ports

NAMESPACE = "argocd"
COMPONENTS = ("redis", "gitserver", "argocd-repo-server", "argocd-application-controller")
HEALTH_PATCH = REPO_ROOT / "deploy" / "argocd" / "argocd-cm-patch.yaml"
READY_TIMEOUT_SECONDS = 120.0
# How often the controller compares every Application with Git (--app-resync; an install sets
# it from argocd-cm's timeout.reconciliation through ARGOCD_RECONCILIATION_TIMEOUT, default
# 120 s): short here, so that a commit is seen within seconds without a webhook. The repo-server
# caches a branch's resolved commit as long (--revision-cache-expiration), so both are set.
RESYNC_SECONDS = 10
# The settings Argo CD's controller and repo-server read besides argocd-cm (core-install.yaml
# ships them empty).
EMPTY_CONFIGMAPS = (
    "argocd-cmd-params-cm",
    "argocd-rbac-cm",
    "argocd-tls-certs-cm",
    "argocd-ssh-known-hosts-cm",
    "argocd-gpg-keys-cm",
)
PART_OF = {"app.kubernetes.io/part-of": "argocd"}


@dataclass(frozen=True)
class GitOpsInfo:
    state_dir: str
    kubeconfig: str
    sources_url: str  # gitserver: <url>/git/<name>.git and <url>/charts
    ports: dict[str, int]
    argocd_version: str


def state_dir() -> Path:
    return state_root() / "gitops"


def _info_file() -> Path:
    return state_dir() / "gitops.json"


def read_info() -> GitOpsInfo | None:
    try:
        return GitOpsInfo(**json.loads(_info_file().read_text()))
    except (OSError, ValueError, TypeError):
        return None


def argocd_version() -> str:
    return binaries.versions()["ARGOCD_VERSION"]


def share_dir() -> Path:
    """What the Argo CD build copies from the module zip: the CRDs, and in bin/ the scripts
    Argo CD's image puts on the repo-server's PATH (git-verify-wrapper.sh)."""
    return cache_root() / "share" / f"argocd-{argocd_version()}"


def crd_files() -> list[Path]:
    """Application and AppProject."""
    return [share_dir() / "application-crd.yaml", share_dir() / "appproject-crd.yaml"]


def build_argocd_cm() -> dict[str, Any]:
    """argocd-cm: the DFlashRun health check, as users apply it (deploy/argocd/argocd-cm-patch.yaml)."""
    patch = yaml.safe_load(HEALTH_PATCH.read_text())
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": NAMESPACE, "labels": PART_OF},
        "data": dict(patch["data"]),
    }


def build_settings() -> list[dict[str, Any]]:
    """Everything core-install.yaml puts in `argocd` besides workloads: settings and the
    `default` AppProject (in a full install the API server creates it)."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        build_argocd_cm(),
        *(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": PART_OF},
            }
            for name in EMPTY_CONFIGMAPS
        ),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "argocd-secret", "namespace": NAMESPACE, "labels": PART_OF},
            "type": "Opaque",
        },
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {
                "sourceRepos": ["*"],
                "destinations": [{"server": "*", "namespace": "*"}],
                "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
            },
        },
    ]
    return objects


def _require_tools() -> dict[str, Path]:
    missing = [tool for tool in ("git", "redis-server") if shutil.which(tool) is None]
    if missing:
        raise DevError(
            f"{' and '.join(missing)} not found on PATH: Argo CD's repo-server needs git and its "
            "cache needs Redis; install them (Debian: apt-get install git redis-server)"
        )
    names = ["argocd-application-controller", "argocd-repo-server", "helm", "kubectl"]
    paths = binaries.ensure_built(names)
    return {**paths, "redis-server": Path(str(shutil.which("redis-server")))}


def _wait(what: str, check: Any, running: list[procs.Tracked], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in running:
            if not proc.is_alive():
                raise DevError(
                    f"{proc.name} exited while waiting for {what}; last log lines "
                    f"({proc.log}):\n{procs.tail(proc.log)}"
                )
        if check():
            return
        time.sleep(0.3)
    logs = "\n".join(f"--- {p.name} ({p.log})\n{procs.tail(p.log, 10)}" for p in running)
    raise DevError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def is_healthy(info: GitOpsInfo | None = None) -> bool:
    info = info or read_info()
    if info is None:
        return False
    for name in COMPONENTS:
        tracked = procs.read_tracked(Path(info.state_dir), name)
        if tracked is None or not tracked.is_alive():
            return False
    return _http_ok(f"http://127.0.0.1:{info.ports['controller-metrics']}/healthz")


def _crd_established(kubeconfig: Path, name: str) -> bool:
    result = kubectl(
        "get", "crd", name, "-o",
        "jsonpath={.status.conditions[?(@.type=='Established')].status}",
        kubeconfig=kubeconfig, check=False,
    )  # fmt: skip
    return result.returncode == 0 and result.stdout.strip() == "True"


def up(kubeconfig: Path) -> GitOpsInfo:
    """Start Argo CD core against the cluster of `kubeconfig` (admin), or return the running one."""
    info = read_info()
    if info is not None and info.kubeconfig == str(kubeconfig) and is_healthy(info):
        return info
    down()
    paths = _require_tools()
    state = state_dir()
    for sub in ("tmp", "tls", "ssh", "gpg", "sources/charts", "sources/git", "bin"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    # The repo-server runs `helm`, `git` and git-verify-wrapper.sh from PATH, as in its image.
    helm_link = state / "bin" / "helm"
    helm_link.unlink(missing_ok=True)
    helm_link.symlink_to(paths["helm"])

    for crd in crd_files():
        kubectl("apply", "--server-side", "-f", str(crd), kubeconfig=kubeconfig)
    for name in ("applications.argoproj.io", "appprojects.argoproj.io"):
        deadline = time.monotonic() + 60
        while not _crd_established(kubeconfig, name):
            if time.monotonic() > deadline:
                raise DevError(f"the {name} CRD was not Established after 60 s")
            time.sleep(0.3)
    kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-",
        input=yaml.safe_dump_all(build_settings()), kubeconfig=kubeconfig,
    )  # fmt: skip

    names = ["redis", "sources", "repo-server", "repo-metrics", "controller-metrics"]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    redis_address = f"127.0.0.1:{ports['redis']}"
    base_env = {
        "PATH": f"{state / 'bin'}:{share_dir() / 'bin'}:{os.environ.get('PATH', '')}",
        "HOME": str(state),
        "TMPDIR": str(state / "tmp"),
        "ARGOCD_FAKE_IN_CLUSTER": "true",
        "ARGOCD_TLS_DATA_PATH": str(state / "tls"),
        "ARGOCD_SSH_DATA_PATH": str(state / "ssh"),
        "ARGOCD_GNUPGHOME": str(state / "gpg"),
        "ARGOCD_GPG_ENABLED": "false",
        "KUBECONFIG": str(kubeconfig),
    }
    redis = procs.start(
        state, "redis",
        [str(paths["redis-server"]), "--bind", "127.0.0.1", "--port", str(ports["redis"]),
         "--save", "", "--appendonly", "no", "--dir", str(state / "tmp")],
    )  # fmt: skip
    sources = procs.start(
        state, "gitserver",
        [str(venv_bin() / "python"), "-m", "dflash_dev.gitserver",
         "--root", str(state / "sources"), "--port", str(ports["sources"])],
        env=dict(os.environ),
    )  # fmt: skip
    repo_server = procs.start(
        state, "argocd-repo-server",
        [str(paths["argocd-repo-server"]), "--loglevel", "info",
         "--address", "127.0.0.1", "--port", str(ports["repo-server"]),
         "--metrics-address", "127.0.0.1", "--metrics-port", str(ports["repo-metrics"]),
         "--redis", redis_address, "--disable-tls",
         # Its default (the mTLS Secret's mount path) is refused with --disable-tls.
         "--client-ca-path=",
         "--revision-cache-expiration", f"{RESYNC_SECONDS}s"],
        # cmd/main.go dispatches on the binary's name; the cached link carries the version
        # too, so name the command as Argo CD's Procfile does.
        env={**base_env, "ARGOCD_BINARY_NAME": "argocd-repo-server"}, cwd=state,
    )  # fmt: skip
    controller = procs.start(
        state, "argocd-application-controller",
        [str(paths["argocd-application-controller"]),
         "--loglevel", "info", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
         "--repo-server", f"127.0.0.1:{ports['repo-server']}", "--repo-server-plaintext",
         "--redis", redis_address, "--metrics-port", str(ports["controller-metrics"]),
         "--app-resync", str(RESYNC_SECONDS), "--self-heal-timeout-seconds", "5",
         # Each resource's health in the Application's status.resources, as before 3.0: core
         # mode has no API server to show the resource tree (controller.resource.health.persist).
         "--persist-resource-health"],
        # The controller shards by the ordinal at the end of its hostname (a StatefulSet's).
        env={**base_env, "HOSTNAME": "argocd-application-controller-0",
             "ARGOCD_BINARY_NAME": "argocd-application-controller"}, cwd=state,
    )  # fmt: skip
    running = [redis, sources, repo_server, controller]
    _wait("the local Git and Helm server", lambda: _http_ok(
        f"http://127.0.0.1:{ports['sources']}/charts/"), running, 30)  # fmt: skip
    _wait("the repo-server", lambda: _http_ok(
        f"http://127.0.0.1:{ports['repo-metrics']}/metrics"), running, READY_TIMEOUT_SECONDS)  # fmt: skip
    _wait("the application-controller", lambda: _http_ok(
        f"http://127.0.0.1:{ports['controller-metrics']}/healthz"), running, READY_TIMEOUT_SECONDS)  # fmt: skip
    info = GitOpsInfo(
        state_dir=str(state),
        kubeconfig=str(kubeconfig),
        sources_url=f"http://127.0.0.1:{ports['sources']}",
        ports=ports,
        argocd_version=argocd_version(),
    )
    _info_file().write_text(json.dumps(asdict(info), indent=2))
    return info


def down() -> bool:
    """Stop Argo CD's processes and remove their state (the cluster's objects stay with the
    cluster). True if any ran."""
    state = state_dir()
    stopped = False
    for name in reversed(COMPONENTS):
        stopped = procs.stop(state, name) or stopped
    if state.exists():
        shutil.rmtree(state, ignore_errors=True)
    return stopped
