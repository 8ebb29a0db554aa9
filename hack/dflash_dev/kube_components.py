"""The Kubernetes processes of the local control plane: etcd, kube-apiserver, the
controller-manager, the scheduler and kwok (the nodes' kubelets), and the waits between them.
What runs on top (training backends, Kueue) is started by `cluster.py`.
"""

from __future__ import annotations

import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import procs
from .errors import DevError
from .paths import REPO_ROOT

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
READY_TIMEOUT_SECONDS = 90.0


def _ssl_context(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def http_get(url: str, pki: Path, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, context=_ssl_context(pki), timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def wait(what: str, check: object, tracked: list[procs.Tracked], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in tracked:
            if not proc.is_alive():
                raise DevError(
                    f"{proc.name} exited while waiting for {what}; last log lines "
                    f"({proc.log}):\n{procs.tail(proc.log)}"
                )
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    logs = "\n".join(f"--- {p.name} ({p.log})\n{procs.tail(p.log, 10)}" for p in tracked)
    raise DevError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")


def start_etcd_and_apiserver(
    state: Path, paths: dict[str, Path], ports: dict[str, int], server: str, pki: Path
) -> tuple[procs.Tracked, procs.Tracked]:
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    etcd = procs.start(
        state,
        "etcd",
        [
            str(paths["etcd"]),
            "--name=dflash",
            f"--data-dir={state / 'etcd-data'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-cluster=dflash=http://127.0.0.1:{ports['etcd-peer']}",
            "--unsafe-no-fsync=true",  # test data: durability is not needed, speed is
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
    )
    wait("etcd", lambda: _etcd_healthy(etcd_url), [etcd], 30)

    apiserver = procs.start(
        state,
        "kube-apiserver",
        [
            str(paths["kube-apiserver"]),
            f"--etcd-servers={etcd_url}",
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--enable-admission-plugins=NodeRestriction",
            "--profiling=false",
            "--v=1",
        ],
    )
    wait(
        "kube-apiserver /readyz",
        lambda: http_get(f"{server}/readyz", pki)[0] == 200,
        [etcd, apiserver],
        READY_TIMEOUT_SECONDS,
    )
    return etcd, apiserver


def start_kube_components(
    state: Path, paths: dict[str, Path], ports: dict[str, int]
) -> list[procs.Tracked]:
    """The controller-manager, the scheduler and kwok (the nodes' kubelets)."""
    pki = state / "pki"
    env = dict(os.environ)
    kcm = procs.start(
        state,
        "kube-controller-manager",
        [
            str(paths["kube-controller-manager"]),
            f"--kubeconfig={state / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={state / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={state / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kcm']}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            # No cloud, no kubelets: node lifecycle would evict pods of kwok nodes that
            # miss a heartbeat during a slow test; everything else (job, garbage collector,
            # ttl-after-finished, serviceaccount, namespace, endpoints...) runs.
            "--controllers=*,-nodelifecycle,-node-ipam-controller,-cloud-node-lifecycle-controller,"
            "-service-lb-controller,-node-route-controller",
            f"--cluster-cidr={POD_CIDR}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--v=1",
        ],
        env=env,
    )
    scheduler = procs.start(
        state,
        "kube-scheduler",
        [
            str(paths["kube-scheduler"]),
            f"--kubeconfig={state / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={state / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={state / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "--leader-elect=false",
            "--v=1",
        ],
        env=env,
    )
    kwok = procs.start(
        state,
        "kwok",
        [
            str(paths["kwok"]),
            f"--kubeconfig={state / 'kwok.kubeconfig'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--config={REPO_ROOT / 'hack' / 'kwok' / 'stages.yaml'}",
            f"--server-address=127.0.0.1:{ports['kwok']}",
            f"--cidr={POD_CIDR}",
            "--node-ip=127.0.0.1",
        ],
        env=env,
    )
    return [kcm, scheduler, kwok]


def _etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
            return '"health":"true"' in resp.read().decode().replace(" ", "")
    except (urllib.error.URLError, OSError):
        return False
