"""The local control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok, the
training backends (Kubeflow Trainer v2 on JobSet, the training-operator v1, or both) and Kueue,
as tracked processes on loopback with TLS and RBAC.

`up()` is idempotent (a healthy cluster of the same layout returns at once); `down()` stops
everything and removes the state. Binaries come from `binaries.py` (built once per version);
the Kubernetes processes from `kube_components.py`, the backends' own pieces from
`trainer_v2.py` and `training_operator.py`, Kueue's from `kueue.py` and `topology.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from . import binaries, kueue, procs, topology, trainer_v2, training_operator
from .certs import ensure_pki
from .errors import DevError
from .kube_components import http_get, start_etcd_and_apiserver, start_kube_components, wait
from .kube_wait import local_readyz
from .nodes import build_nodes
from .paths import state_root
from .ports import free_ports

# The training backends a cluster can serve: Kubeflow Trainer v2 (TrainJob, with the JobSet
# controller) and the training-operator v1 (PyTorchJob). By default those whose binaries are
# built (`default_backends`); a test or a developer picks one with
# DFLASH_CLUSTER_BACKENDS=trainer (or =training-operator), or up(backends=...).
TRAINER = "trainer"
TRAINING_OPERATOR = "training-operator"
ALL_BACKENDS = (TRAINER, TRAINING_OPERATOR)
BACKENDS_ENV = "DFLASH_CLUSTER_BACKENDS"
# Start order matters for the first three; the rest start together once the apiserver is up.
BASE_COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)
BACKEND_COMPONENTS = {TRAINER: ("jobset", "trainer"), TRAINING_OPERATOR: ("training-operator",)}
# The cached binaries each backend runs (binaries.py names).
BACKEND_BINARIES = {
    TRAINER: ("jobset", "trainer-controller-manager"),
    TRAINING_OPERATOR: ("training-operator",),
}
# Every component any layout runs (down() stops whichever are running).
COMPONENTS = (*BASE_COMPONENTS, "jobset", "trainer", "training-operator", "kueue")
CLIENTS = {
    "admin": ("admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    # kwok plays every kubelet and the training-operator is a cluster-wide controller: both get
    # full rights here (a dev cluster); the DFlash operator itself runs with the chart's RBAC.
    "kwok": ("kwok-controller", "system:masters"),
    "training-operator": ("training-operator", "system:masters"),
    "jobset": ("jobset", "system:masters"),
    "trainer": ("trainer", "system:masters"),
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
    # The training backends it serves (ALL_BACKENDS order).
    backends: list[str] = field(default_factory=lambda: list(ALL_BACKENDS))


def default_backends() -> tuple[str, ...]:
    """The backends whose binaries are built, or both when neither is (they are built then).
    `make demo` builds only Trainer v2's (its run trains as a TrainJob), so its cluster starts
    without the training-operator; `make cluster-up`, `make test*` build both and serve both."""
    built = tuple(
        backend
        for backend in ALL_BACKENDS
        if all(binaries.cached_path(name).exists() for name in BACKEND_BINARIES[backend])
    )
    return built or ALL_BACKENDS


def requested_backends(value: str | Iterable[str] | None = None) -> tuple[str, ...]:
    """The backends to serve: `value` (a comma-separated string or names), else
    $DFLASH_CLUSTER_BACKENDS, else `default_backends()`. Unknown names are refused, naming what
    is accepted."""
    if value is None:
        value = os.environ.get(BACKENDS_ENV, "")
    source = f"{BACKENDS_ENV}={value!r}" if isinstance(value, str) else f"backends={value!r}"
    raw = value.split(",") if isinstance(value, str) else list(value)
    names = {name.strip() for name in raw if name.strip()}
    if not names:
        return default_backends()
    unknown = sorted(names - set(ALL_BACKENDS))
    if unknown:
        raise DevError(
            f"{source}: unknown training backend {', '.join(unknown)}; accepted: "
            f"{TRAINER} (Kubeflow Trainer v2 with JobSet), {TRAINING_OPERATOR} (training-operator "
            "v1), or both, comma-separated (the default where both are built)"
        )
    return tuple(name for name in ALL_BACKENDS if name in names)


def components(backends: Iterable[str]) -> tuple[str, ...]:
    chosen = set(backends)
    extra = [c for b in ALL_BACKENDS if b in chosen for c in BACKEND_COMPONENTS[b]]
    return (*BASE_COMPONENTS, *extra, "kueue")


def layout(backends: Iterable[str] = ALL_BACKENDS) -> str:
    digest = hashlib.sha256(binaries.VERSIONS_FILE.read_bytes())
    digest.update(training_operator.PYTORCH_INIT_CONTAINER.read_bytes())
    digest.update(",".join(sorted(backends)).encode())
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


def is_healthy(info: ClusterInfo | None = None) -> bool:
    """Every component process is alive and the apiserver answers /readyz."""
    info = info or read_info()
    if info is None:
        return False
    for name in components(info.backends):
        tracked = procs.read_tracked(Path(info.state_dir), name)
        if tracked is None or not tracked.is_alive():
            return False
    code, _ = http_get(f"{info.server}/readyz", Path(info.state_dir) / "pki")
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


def up(backends: str | Iterable[str] | None = None) -> ClusterInfo:
    """Start the whole control plane with the given training backends (see
    `requested_backends`), or return at once when it is already up, healthy, and of this layout;
    a cluster of another layout (versions, backends) is restarted."""
    chosen = requested_backends(backends)
    info = read_info()
    if info is not None and is_healthy(info):
        if info.layout == layout(chosen):
            return info
        print("the local cluster was started with other versions or backends: restarting it")
    down()
    with_trainer, with_v1 = TRAINER in chosen, TRAINING_OPERATOR in chosen
    wanted = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
    wanted += ["kwok", "kueue"]
    for backend in chosen:
        wanted += BACKEND_BINARIES[backend]
    paths = binaries.ensure_built(wanted)
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
        "jobset-webhook",
        "jobset-probe",
        "trainer-webhook",
        "trainer-probe",
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

    etcd, apiserver = start_etcd_and_apiserver(state, paths, ports, server, pki)
    core = [etcd, apiserver]
    everything = [*core, *start_kube_components(state, paths, ports)]

    crds: list[Path] = []
    crd_names: list[str] = []
    if with_v1:
        training_operator.prepare(kubectl)
        crds += training_operator.crd_files()
        crd_names += training_operator.CRDS
    if with_trainer:
        crds += trainer_v2.crd_files()
        crd_names += [*trainer_v2.JOBSET_CRDS, *trainer_v2.TRAINER_CRDS]
    kubectl("create", "namespace", kueue.NAMESPACE)
    crds += kueue.crd_files()
    crd_names += [f"{name}.kueue.x-k8s.io" for name in kueue.CRDS]
    for crd_file in crds:
        kubectl("apply", "--server-side", "-f", str(crd_file))
    for crd_name in crd_names:
        wait(
            f"the {crd_name} CRD",
            lambda crd_name=crd_name: _crd_established(crd_name),
            core,
            60,
        )

    env = dict(os.environ)
    if with_v1:
        everything.append(
            procs.start(
                state,
                "training-operator",
                training_operator.command(paths["training-operator"], ports),
                env=dict(env, KUBECONFIG=str(state / "training-operator.kubeconfig")),
                cwd=state,
            )
        )
    if with_trainer:
        everything += _start_trainer_v2(state, paths, ports, pki, env)
    frameworks = kueue.frameworks(with_trainer=with_trainer, with_training_operator=with_v1)
    everything.append(
        procs.start(
            state,
            "kueue",
            kueue.command(
                state, paths["kueue"], kueue.write_config(state, pki, ports, frameworks), ports
            ),
            env=dict(env, KUBECONFIG=str(state / "kueue.kubeconfig")),
            cwd=state,
        )
    )
    if with_v1:
        wait(
            "the training-operator's webhook Secret",
            lambda: training_operator.install_webhook_certs(kubectl),
            everything,
            60,
        )

    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(build_nodes()))
    wait("fake nodes Ready", lambda: _nodes_ready(len(build_nodes())), everything, 60)
    # The apiserver taints new nodes not-ready; the node lifecycle controller that would lift
    # the taint is off (see kube_components.py), so lift it once kwok reports them Ready.
    kubectl("taint", "nodes", "--all", "node.kubernetes.io/not-ready:NoSchedule-", check=False)
    wait(
        "the default ServiceAccount",
        lambda: (
            kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode
            == 0
        ),
        everything,
        60,
    )
    if with_v1:
        wait("the training-operator", lambda: local_readyz(ports["to-probe"]), everything, 60)

    # Webhooks go in once their servers serve them (failurePolicy Fail: registered earlier, they
    # would refuse objects while the controllers start).
    ca_bundle = (pki / "ca.crt").read_bytes()
    if with_trainer:
        wait("JobSet", lambda: local_readyz(ports["jobset-probe"]), everything, 90)
        wait("Kubeflow Trainer", lambda: local_readyz(ports["trainer-probe"]), everything, 90)
        hooks = [
            *trainer_v2.jobset_webhook_configurations(ca_bundle, ports["jobset-webhook"]),
            *trainer_v2.trainer_webhook_configurations(ca_bundle, ports["trainer-webhook"]),
        ]
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(hooks))
        for runtime in trainer_v2.runtime_files():
            _apply_when_served(runtime, everything)
    wait("Kueue", lambda: local_readyz(ports["kueue-probe"]), everything, 90)
    configurations = kueue.webhook_configurations(ca_bundle, ports["kueue-webhook"], frameworks)
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(configurations))
    # Topology-aware scheduling: the Topology of the fake nodes and a flavor per GPU pool.
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(topology.build_objects()))

    info = ClusterInfo(
        server=server,
        kubeconfig=str(kubeconfig_path()),
        state_dir=str(state),
        ports=ports,
        kubernetes_version=version,
        layout=layout(chosen),
        backends=list(chosen),
    )
    _info_file().write_text(json.dumps(asdict(info), indent=2))
    return info


def _start_trainer_v2(
    state: Path, paths: dict[str, Path], ports: dict[str, int], pki: Path, env: dict[str, str]
) -> list[procs.Tracked]:
    """The JobSet controller and Kubeflow Trainer's controller manager (each with its webhook
    server); their webhook configurations go in once they are ready (`up`)."""
    jobset = procs.start(
        state,
        "jobset",
        trainer_v2.jobset_command(
            paths["jobset"], trainer_v2.write_jobset_config(state, pki, ports)
        ),
        env=dict(env, KUBECONFIG=str(state / "jobset.kubeconfig")),
        cwd=state,
    )
    trainer = procs.start(
        state,
        "trainer",
        trainer_v2.trainer_command(
            paths["trainer-controller-manager"], trainer_v2.write_trainer_config(state, pki, ports)
        ),
        env=dict(
            env, KUBECONFIG=str(state / "trainer.kubeconfig"), **trainer_v2.trainer_env(state)
        ),
        cwd=state,
    )
    return [jobset, trainer]


def _apply_when_served(manifest: Path, tracked: list[procs.Tracked]) -> None:
    """Apply through a webhook that was just registered: the API server may take a moment to
    reach it, so a refusal is retried until the deadline, then reported."""
    last = ""

    def applied() -> bool:
        nonlocal last
        result = kubectl("apply", "--server-side", "-f", str(manifest), check=False)
        last = result.stderr.strip()
        return result.returncode == 0

    try:
        wait(f"{manifest.name} applied", applied, tracked, 30)
    except DevError as exc:
        raise DevError(f"{exc}\nlast kubectl error: {last}") from exc


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
