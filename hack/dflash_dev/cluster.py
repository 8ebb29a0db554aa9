"""The local control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok, the
Kubeflow training-operator and Kueue, as tracked processes on loopback with TLS and RBAC.

`up()` is idempotent (a healthy cluster returns at once); `down()` stops everything and
removes the state. Binaries come from `binaries.py` (built once per version).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from . import binaries, kueue, procs
from .certs import ensure_pki
from .errors import DevError
from .kube_wait import local_readyz
from .nodes import build_nodes
from .paths import REPO_ROOT, state_root
from .ports import free_ports

PYTORCH_INIT_CONTAINER = (
    REPO_ROOT / "examples" / "production" / "training-operator" / "initContainer.yaml"
)

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
READY_TIMEOUT_SECONDS = 90.0
# Start order matters for the first three; the rest start together once the apiserver is up.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "training-operator",
    "kueue",
)
CLIENTS = {
    "admin": ("admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    # kwok plays every kubelet and the training-operator is a cluster-wide controller: both get
    # full rights here (a dev cluster); the DFlash operator itself runs with the chart's RBAC.
    "kwok": ("kwok-controller", "system:masters"),
    "training-operator": ("training-operator", "system:masters"),
    "kueue": ("kueue", "system:masters"),
}


@dataclass(frozen=True)
class ClusterInfo:
    server: str
    kubeconfig: str
    state_dir: str
    ports: dict[str, int]
    kubernetes_version: str
    # What the components were started with (versions, files they read at start): a running
    # cluster of another layout is restarted, not reused (a checkout that changed them).
    layout: str = ""


def layout() -> str:
    digest = hashlib.sha256(binaries.VERSIONS_FILE.read_bytes())
    digest.update(PYTORCH_INIT_CONTAINER.read_bytes())
    return digest.hexdigest()[:16]


def state_dir() -> Path:
    return state_root() / "cluster"


def kubeconfig_path() -> Path:
    return state_dir() / "kubeconfig"


def _info_file() -> Path:
    return state_dir() / "cluster.json"


def read_info() -> ClusterInfo | None:
    try:
        return ClusterInfo(**json.loads(_info_file().read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _ssl_context(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def _get(url: str, pki: Path, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, context=_ssl_context(pki), timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def is_healthy(info: ClusterInfo | None = None) -> bool:
    """Every component process is alive and the apiserver answers /readyz."""
    info = info or read_info()
    if info is None:
        return False
    for name in COMPONENTS:
        tracked = procs.read_tracked(Path(info.state_dir), name)
        if tracked is None or not tracked.is_alive():
            return False
    code, _ = _get(f"{info.server}/readyz", Path(info.state_dir) / "pki")
    return code == 200


def _write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "dflash-local",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "dflash-local", "context": {"cluster": "dflash-local", "user": user}}
        ],
        "current-context": "dflash-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _wait(what: str, check: object, tracked: list[procs.Tracked], timeout: float) -> None:
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


def kubectl_binary() -> Path:
    return binaries.cached_path("kubectl")


def kubectl(
    *args: str, kubeconfig: Path | None = None, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    argv = [str(kubectl_binary()), f"--kubeconfig={kubeconfig or kubeconfig_path()}", *args]
    result = subprocess.run(argv, input=input, text=True, capture_output=True, check=False)
    if check and result.returncode != 0:
        raise DevError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def up() -> ClusterInfo:
    """Start the whole control plane (or return at once when it is already up and healthy)."""
    info = read_info()
    if info is not None and is_healthy(info):
        if info.layout == layout():
            return info
        print("the local cluster was started with other versions or settings: restarting it")
    down()
    paths = binaries.ensure_built(
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
            "kwok",
            "training-operator",
            "kueue",
        ]
    )
    state = state_dir()
    state.mkdir(parents=True, exist_ok=True)
    pki = state / "pki"
    ensure_pki(pki, CLIENTS)
    names = [
        "etcd",
        "etcd-peer",
        "apiserver",
        "kcm",
        "scheduler",
        "kwok",
        "to-metrics",
        "to-probe",
        "to-webhook",
        "kueue-webhook",
        "kueue-metrics",
        "kueue-probe",
        "kueue-visibility",
    ]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    server = f"https://127.0.0.1:{ports['apiserver']}"
    for user in CLIENTS:
        _write_kubeconfig(state / f"{user}.kubeconfig", server, pki, user)
    shutil.copyfile(state / "admin.kubeconfig", kubeconfig_path())
    kubeconfig_path().chmod(0o600)
    version = binaries.version_of("kube-apiserver")

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
    _wait("etcd", lambda: _etcd_healthy(etcd_url), [etcd], 30)

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
    _wait(
        "kube-apiserver /readyz",
        lambda: _get(f"{server}/readyz", pki)[0] == 200,
        [etcd, apiserver],
        READY_TIMEOUT_SECONDS,
    )

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

    # The training-operator's cert rotator wants its namespace, its Secret and a webhook
    # configuration of its name to exist before it reports ready. The configuration holds
    # no webhooks, so the apiserver never calls the operator's webhook server.
    kubectl("create", "namespace", "kubeflow")
    kubectl("create", "secret", "generic", "training-operator-webhook-cert", "-n", "kubeflow")
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
    crd = binaries.share_dir("training-operator") / "kubeflow.org_pytorchjobs.yaml"
    kubectl("apply", "--server-side", "-f", str(crd))
    _wait(
        "the PyTorchJob CRD",
        lambda: _crd_established("pytorchjobs.kubeflow.org"),
        [etcd, apiserver],
        60,
    )
    kubectl("create", "namespace", kueue.NAMESPACE)
    for crd_file in kueue.crd_files():
        kubectl("apply", "--server-side", "-f", str(crd_file))
    for crd_name in kueue.CRDS:
        _wait(
            f"the {crd_name} CRD",
            lambda crd_name=crd_name: _crd_established(f"{crd_name}.kueue.x-k8s.io"),
            [etcd, apiserver],
            60,
        )
    training_operator = procs.start(
        state,
        "training-operator",
        [
            str(paths["training-operator"]),
            "--enable-scheme=pytorchjob",
            f"--metrics-bind-address=127.0.0.1:{ports['to-metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['to-probe']}",
            f"--webhook-server-port={ports['to-webhook']}",
            "--leader-elect=false",
            "--controller-threads=4",
            # The Worker init container that Pod Security "restricted" accepts, as the
            # production guide installs it (examples/production/training-operator/).
            f"--pytorch-init-container-template-file={PYTORCH_INIT_CONTAINER}",
        ],
        env=dict(env, KUBECONFIG=str(state / "training-operator.kubeconfig")),
        cwd=state,
    )
    kueue_process = procs.start(
        state,
        "kueue",
        kueue.command(state, paths["kueue"], kueue.write_config(state, pki, ports), ports),
        env=dict(env, KUBECONFIG=str(state / "kueue.kubeconfig")),
        cwd=state,
    )
    everything = [etcd, apiserver, kcm, scheduler, kwok, training_operator, kueue_process]
    # In a real deployment the Secret the rotator fills is mounted at its cert dir; here we
    # copy it there ourselves (the path is fixed in training-operator's pkg/cert).
    _wait("the training-operator's webhook Secret", _install_webhook_certs, everything, 60)

    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(build_nodes()))
    _wait("fake nodes Ready", lambda: _nodes_ready(len(build_nodes())), everything, 60)
    # The apiserver taints new nodes not-ready; the node lifecycle controller that would lift
    # the taint is off (see above), so lift it once kwok reports the nodes Ready.
    kubectl("taint", "nodes", "--all", "node.kubernetes.io/not-ready:NoSchedule-", check=False)
    _wait(
        "the default ServiceAccount",
        lambda: (
            kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode
            == 0
        ),
        everything,
        60,
    )
    _wait("the training-operator", lambda: local_readyz(ports["to-probe"]), everything, 60)

    # Kueue's webhooks go in once it serves them (failurePolicy Fail: registered earlier, they
    # would refuse Jobs while it starts).
    _wait("Kueue", lambda: local_readyz(ports["kueue-probe"]), everything, 90)
    ca_bundle = (pki / "ca.crt").read_bytes()
    configurations = kueue.webhook_configurations(ca_bundle, ports["kueue-webhook"])
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(configurations))

    info = ClusterInfo(
        server=server,
        kubeconfig=str(kubeconfig_path()),
        state_dir=str(state),
        ports=ports,
        kubernetes_version=version,
        layout=layout(),
    )
    _info_file().write_text(json.dumps(asdict(info), indent=2))
    return info


def _etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
            return '"health":"true"' in resp.read().decode().replace(" ", "")
    except (urllib.error.URLError, OSError):
        return False


def _crd_established(name: str) -> bool:
    result = kubectl(
        "get",
        "crd",
        name,
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Established')].status}",
        check=False,
    )
    return result.returncode == 0 and result.stdout.strip() == "True"


def _nodes_ready(expected: int) -> bool:
    result = kubectl("get", "nodes", "-o", "json", check=False)
    if result.returncode != 0:
        return False
    ready = 0
    for node in json.loads(result.stdout).get("items", []):
        for cond in node.get("status", {}).get("conditions", []):
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                ready += 1
    return ready >= expected


WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # noqa: S108 (upstream path)


def _install_webhook_certs() -> bool:
    result = kubectl(
        "get",
        "secret",
        "training-operator-webhook-cert",
        "-n",
        "kubeflow",
        "-o",
        "json",
        check=False,
    )
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


def down() -> bool:
    """Stop every component (reverse order) and remove the cluster's state. True if any ran."""
    state = state_dir()
    stopped = False
    for name in reversed(COMPONENTS):
        stopped = procs.stop(state, name) or stopped
    if state.exists():
        for child in ("etcd-data", "cluster.json", "kubeconfig", "pids"):
            path = state / child
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return stopped
