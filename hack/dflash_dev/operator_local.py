"""Run the DFlash operator as a local process against the local control plane, with the Helm
chart's RBAC (never cluster-admin): render the chart, apply the CRD, the RBAC, the pools
ConfigMap and (where Trainer v2 is served) the ClusterTrainingRuntime, mint a token for the
chart's ServiceAccount, write a kubeconfig with it.

`make operator` runs `python -m dflash_dev.operator_local` (foreground); the operator's
integration tests and benchmarks use `install()` and `OperatorProcess`.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import binaries
from .cluster import kubeconfig_path
from .paths import REPO_ROOT, state_root, venv_bin
from .ports import free_port

RELEASE = "dflash-operator"
NAMESPACE = "dflash-system"
CHART = REPO_ROOT / "charts" / "dflash-operator"
CRD = REPO_ROOT / "crds" / "dflash.dev_dflashruns.yaml"
# The chart's RBAC (ClusterRoles in cluster-wide mode, Roles with --set
# operator.watchNamespaces), the pools ConfigMap, and what the operator needs to authenticate.
RBAC_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
)
TOKEN_DURATION = "48h"  # noqa: S105 - a lifetime, not a secret
READY_TIMEOUT_SECONDS = 60.0
FIELD_MANAGER = "dflash-dev"


# The operator's settings for the chart's ClusterTrainingRuntime, installed by `install()`
# where the cluster serves Kubeflow Trainer v2 (the chart's own template, rendered as Helm would
# there). Under a name of its own: a `helm install` of the chart on the same cluster (the chart
# tests) ships the default name and would refuse to adopt an object it does not own;
# training.runtime.name exists for a second install on one cluster.
LOCAL_RUNTIME = "dflash-local-torch-distributed"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
RUNTIME_API = f"{TRAINER_API}/ClusterTrainingRuntime"


def local_launcher() -> str:
    """The training backend of runs that set none, for an operator on the local cluster: the
    chart's default, `auto` (`DFLASH_DEFAULT_LAUNCHER` overrides it). The local cluster serves
    Kubeflow Trainer v2 (and the training-operator where it is built), so auto picks TrainJob
    there, as `make demo` shows; a cluster started with only the training-operator
    (DFLASH_CLUSTER_BACKENDS=training-operator) picks PyTorchJob. Tests name theirs."""
    return os.environ.get("DFLASH_DEFAULT_LAUNCHER", "auto")


def local_settings() -> dict[str, str]:
    """The training settings of an operator on the local cluster: its default launcher and the
    runtime `install()` installs (what the chart's Deployment would set)."""
    return {"DFLASH_DEFAULT_LAUNCHER": local_launcher(), "DFLASH_TRAINING_RUNTIME": LOCAL_RUNTIME}


def _run(argv: list[str], input: str | None = None) -> str:
    result = subprocess.run(argv, input=input, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:3])} ... exited {result.returncode}: {result.stderr.strip()}"
        )
    return result.stdout


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    return _run([str(binaries.cached_path("kubectl")), f"--kubeconfig={kubeconfig}", *args], input)


def render_chart(*helm_args: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """`helm template` of the chart: its manifests, as dicts."""
    out = _run(
        [
            str(binaries.cached_path("helm")),
            "template",
            RELEASE,
            str(CHART),
            "-n",
            namespace,
            *helm_args,
        ]
    )
    return [doc for doc in yaml.safe_load_all(out) if doc]


def chart_pools(*helm_args: str) -> dict[str, Any]:
    """The pools file the chart renders (values nodePools + defaultPools)."""
    for doc in render_chart(*helm_args):
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-pools"):
            return dict(yaml.safe_load(doc["data"]["pools.yaml"]))
    raise RuntimeError("the chart renders no pools ConfigMap")


def _wait_established(admin_kubeconfig: Path, crd: str, timeout: float = 60.0) -> None:
    """Until the CRD is Established. Not `kubectl wait`: right after an update of the CRD its
    status may have no conditions yet, and kubectl wait then fails at once ("accessor error")."""
    deadline = time.monotonic() + timeout
    jsonpath = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    while True:
        try:
            if kubectl(admin_kubeconfig, "get", "crd", crd, "-o", jsonpath).strip() == "True":
                return
        except RuntimeError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD {crd} was not Established after {timeout:.0f}s")
        time.sleep(0.2)


def install(admin_kubeconfig: Path, *helm_args: str) -> list[dict[str, Any]]:
    """Apply the CRD, then the chart's RBAC and pools ConfigMap (idempotent, server-side)."""
    kubectl(
        admin_kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        str(CRD),
    )
    _wait_established(admin_kubeconfig, "dflashruns.dflash.dev")
    namespace = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    kubectl(
        admin_kubeconfig,
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        input=namespace,
    )
    manifests = [doc for doc in render_chart(*helm_args) if doc["kind"] in RBAC_KINDS]
    runtime = chart_runtime(*helm_args) if serves_trainer_v2(admin_kubeconfig) else None
    if runtime is not None:
        manifests.append(runtime)
    kubectl(
        admin_kubeconfig, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-",
        input=yaml.safe_dump_all(manifests),
    )  # fmt: skip
    return manifests


def serves_trainer_v2(admin_kubeconfig: Path) -> bool:
    """Whether the API server serves Kubeflow Trainer v2 (what the operator's `auto` asks)."""
    try:
        kubectl(admin_kubeconfig, "get", "--raw", f"/apis/{TRAINER_API}")
    except RuntimeError:
        return False
    return True


def chart_runtime(*helm_args: str) -> dict[str, Any] | None:
    """The chart's ClusterTrainingRuntime as Helm renders it on a cluster serving Trainer v2
    (named LOCAL_RUNTIME); None when the values switch it off (training.runtime.enabled)."""
    docs = render_chart(
        "--api-versions", RUNTIME_API, *helm_args, "--set", f"training.runtime.name={LOCAL_RUNTIME}"
    )
    return next((doc for doc in docs if doc["kind"] == "ClusterTrainingRuntime"), None)


def token_kubeconfig(
    admin_kubeconfig: Path,
    out: Path,
    account: str = RELEASE,
    namespace: str = NAMESPACE,
    duration: str = TOKEN_DURATION,
) -> Path:
    """A kubeconfig that authenticates as a ServiceAccount (a bound token from the API)."""
    token = kubectl(
        admin_kubeconfig, "create", "token", account, "-n", namespace, f"--duration={duration}"
    ).strip()
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    if ca is None and cluster.get("certificate-authority"):
        ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": cluster["server"], "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [
            {
                "name": account,
                "context": {"cluster": "local", "user": account, "namespace": namespace},
            }
        ],
        "current-context": account,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


@dataclass
class OperatorProcess:
    """The operator running as a child process, with its own ports and log file."""

    kubeconfig: Path
    pools_file: Path
    log_path: Path
    namespaces: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    resync_seconds: float = 60.0
    metrics_port: int = 0
    health_port: int = 0
    readiness_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    # Image mode: run the operator from this operator image (dflash_dev.images.operator_run).
    image: str | None = None

    def start(self) -> OperatorProcess:
        self.metrics_port = free_port()
        self.health_port = free_port({self.metrics_port})
        self.readiness_port = free_port({self.metrics_port, self.health_port})
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "DFLASH_POOLS_FILE": str(self.pools_file),
            "DFLASH_NAMESPACES": ",".join(self.namespaces),
            "DFLASH_METRICS_PORT": str(self.metrics_port),
            "DFLASH_HEALTH_PORT": str(self.health_port),
            "DFLASH_READINESS_PORT": str(self.readiness_port),
            "DFLASH_BIND_ADDRESS": "127.0.0.1",
            "DFLASH_RESYNC_SECONDS": str(self.resync_seconds),
            "DFLASH_LOG_FORMAT": "text",
            **local_settings(),
            **self.env,
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(venv_bin() / "python"), "-m", "dflash_operator.main"]
        if self.image is not None:
            from dflash_dev.images.engine import detect_engine
            from dflash_dev.images.operator_run import operator_image_launch

            settings = {k: v for k, v in env.items() if k.startswith("DFLASH_")}
            workdir = self.log_path.with_suffix("")
            argv = operator_image_launch(
                detect_engine(), self.image, workdir, self.kubeconfig, self.pools_file,
                settings, name=f"operator-{self.health_port}",
            )  # fmt: skip
            env = {"PATH": os.environ.get("PATH", "")}
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> OperatorProcess:
        """Until /healthz answers (kopf is up and its startup handlers ran)."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the operator exited early:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the operator was not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())

    def readyz(self) -> tuple[int, str]:
        """GET /readyz: the status code and the body (why not ready)."""
        url = f"http://127.0.0.1:{self.readiness_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return int(answer.status), str(answer.read().decode())
        except urllib.error.HTTPError as error:
            return int(error.code), str(error.read().decode())

    def kill(self) -> int | None:
        """SIGKILL, like an OOM kill or a node loss; returns the exit status."""
        if self.process is None:
            return None
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.process is None:
            return None
        try:
            return self._stop(timeout)
        finally:
            if self.image is not None:
                from dflash_dev.images.engine import detect_engine
                from dflash_dev.images.rootfs import NAME_PREFIX, remove_rootfs

                remove_rootfs(detect_engine(), f"{NAME_PREFIX}operator-{self.health_port}")

    def _stop(self, timeout: float) -> int | None:
        assert self.process is not None
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return self.kill()
        return self.process.returncode

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def prepare(admin_kubeconfig: Path, workdir: Path, *helm_args: str) -> tuple[Path, Path]:
    """Install the chart's RBAC; write the token kubeconfig and the pools file under workdir."""
    install(admin_kubeconfig, *helm_args)
    kubeconfig = token_kubeconfig(admin_kubeconfig, workdir / "operator.kubeconfig")
    pools = workdir / "pools.yaml"
    pools.write_text(yaml.safe_dump(chart_pools(*helm_args)))
    return kubeconfig, pools


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_dev.operator_local",
        description="Run the operator in the foreground on the local cluster with the chart's RBAC.",
    )
    parser.add_argument(
        "--namespace", action="append", default=[], help="watch only these (default: all)"
    )
    parser.add_argument(
        "--set", action="append", default=[], help="helm --set for the chart values"
    )
    args = parser.parse_args(argv)
    admin = kubeconfig_path()
    if not admin.is_file():
        print("error: the local cluster is not up; run make cluster-up first", file=sys.stderr)
        return 1
    workdir = state_root() / "operator"
    helm_args = [item for value in args.set for item in ("--set", value)]
    kubeconfig, pools = prepare(admin, workdir, *helm_args)
    print(f"operator kubeconfig (ServiceAccount {NAMESPACE}/{RELEASE}): {kubeconfig}")
    print(f"pools: {pools}; metrics on :9090/metrics, liveness on :8080/healthz")
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "DFLASH_POOLS_FILE": str(pools),
        "DFLASH_NAMESPACES": ",".join(args.namespace),
        "DFLASH_BIND_ADDRESS": "127.0.0.1",
        "DFLASH_LOG_FORMAT": "text",
        **local_settings(),
    }
    python = str(venv_bin() / "python")
    # Replace this process: Ctrl-C and signals go straight to the operator.
    os.execve(python, [python, "-m", "dflash_operator.main"], env)  # noqa: S606
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())


# --- counting the operator's API requests (benchmarks) ------------------------------------------
# API Priority and Fairness classifies every request by user; two FlowSchemas that match only
# the operator's ServiceAccount make the API server count its writes and all its requests in
# `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}`, even on a shared cluster.
WRITES_SCHEMA = "dflash-operator-bench-writes"
ALL_SCHEMA = "dflash-operator-bench-all"
WRITE_VERBS = ["create", "update", "patch", "delete", "deletecollection"]


def _flow_schema(name: str, precedence: int, verbs: list[str]) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "subjects": [
            {"kind": "ServiceAccount", "serviceAccount": {"name": RELEASE, "namespace": NAMESPACE}}
        ],
        "resourceRules": [
            {
                "verbs": verbs,
                "apiGroups": ["*"],
                "resources": ["*"],
                "namespaces": ["*"],
                "clusterScope": True,
            }
        ],
    }
    if verbs == ["*"]:
        rule["nonResourceRules"] = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "matchingPrecedence": precedence,
            "priorityLevelConfiguration": {"name": "workload-low"},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [rule],
        },
    }


def install_request_counters(admin_kubeconfig: Path) -> None:
    """Writes match the first schema (lower precedence wins), everything else the second."""
    schemas = [_flow_schema(WRITES_SCHEMA, 150, WRITE_VERBS), _flow_schema(ALL_SCHEMA, 160, ["*"])]
    kubectl(
        admin_kubeconfig,
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        input=yaml.safe_dump_all(schemas),
    )


def request_counts(admin_kubeconfig: Path) -> tuple[int, int]:
    """(write requests, all requests) the operator's account sent since the schemas exist."""
    counts = {WRITES_SCHEMA: 0, ALL_SCHEMA: 0}
    for line in kubectl(admin_kubeconfig, "get", "--raw", "/metrics").splitlines():
        if not line.startswith("apiserver_flowcontrol_dispatched_requests_total{"):
            continue
        for schema in counts:
            if f'flow_schema="{schema}"' in line:
                counts[schema] += int(float(line.rsplit(" ", 1)[1]))
    writes = counts[WRITES_SCHEMA]
    return writes, writes + counts[ALL_SCHEMA]


def peak_rss_bytes(pid: int) -> int:
    """The highest resident memory the process ever had (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# --- a throw-away namespace with an operator in it (benchmarks) -------------------------------
# Stage pods of benchmark runs select no node: they stay Pending, so they use no capacity of
# the shared fake nodes while the operator's work (first child, status) is measured.
BENCH_POOL = "bench-unschedulable"


def bench_pools() -> dict[str, Any]:
    pools = chart_pools()
    pools["nodePools"][BENCH_POOL] = {"nodeSelector": {"dflash.dev/node-pool": "none"}}
    return pools


def bench_run(name: str) -> dict[str, Any]:
    """A DFlashRun whose first child is a one-shard regeneration Job on the bench pool."""
    return {
        "apiVersion": "dflash.dev/v1alpha1",
        "kind": "DFlashRun",
        "metadata": {"name": name},
        "spec": {
            "target": {"model": "Qwen/Qwen3-8B"},
            "data": {
                "sources": [
                    {"name": "chat", "uri": "s3://datasets/chat.jsonl", "format": "openai-messages"}
                ]
            },
            # No canary: the first child is the regeneration Job itself.
            "regeneration": {
                "shards": 1,
                "nodePool": BENCH_POOL,
                "canary": {"samplesPerSource": 0},
            },
            "audit": {"nodePool": BENCH_POOL},
            "tokenization": {"nodePool": BENCH_POOL},
            "training": {"nodePool": BENCH_POOL},
            "evaluation": {"nodePool": BENCH_POOL},
            "storage": {"bucket": "artifacts"},
        },
    }


def bench_job(name: str) -> dict[str, Any]:
    """The baseline: a plain one-pod Job, as the Job controller turns it into a pod."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"dflash.dev/node-pool": "none"},
                    "containers": [{"name": "main", "image": "busybox", "args": ["true"]}],
                }
            }
        },
    }


@dataclass
class BenchEnvironment:
    admin: Path
    namespace: str
    operator: OperatorProcess


def start_bench_environment(
    workdir: Path, namespace: str, resync_seconds: float = 60.0
) -> BenchEnvironment:
    """Chart RBAC, request counters, a fresh namespace, and an operator watching only it."""
    admin = kubeconfig_path()
    kubeconfig, _pools = prepare(admin, workdir)
    install_request_counters(admin)
    kubectl(admin, "create", "namespace", namespace)
    pools_file = workdir / "bench-pools.yaml"
    pools_file.write_text(yaml.safe_dump(bench_pools()))
    process = OperatorProcess(
        kubeconfig=kubeconfig,
        pools_file=pools_file,
        log_path=workdir / "operator.log",
        namespaces=(namespace,),
        resync_seconds=resync_seconds,
    ).start()
    process.wait_ready()
    return BenchEnvironment(admin, namespace, process)


def stop_bench_environment(env: BenchEnvironment) -> None:
    env.operator.stop()
    kubectl(env.admin, "delete", "namespace", env.namespace, "--wait=false")


class FirstSeen:
    """Records when each object of a kind first appears in a namespace (a watch thread)."""

    def __init__(self, admin: Path, namespace: str, kind: str) -> None:
        import threading

        from kubernetes import client, config, watch

        self.times: dict[str, float] = {}
        self._lock = threading.Condition()
        self._watch = watch.Watch()
        api = config.new_client_from_config(config_file=str(admin))
        lister = {
            "jobs": client.BatchV1Api(api).list_namespaced_job,
            "pods": client.CoreV1Api(api).list_namespaced_pod,
        }[kind]

        def run() -> None:
            try:
                for event in self._watch.stream(lister, namespace, timeout_seconds=3600):
                    name = event["object"].metadata.name
                    with self._lock:
                        self.times.setdefault(name, time.monotonic())
                        self._lock.notify_all()
            except Exception:  # noqa: S110 - stop() closes the stream under the reader
                pass

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        time.sleep(0.5)  # let the watch start before anything is created

    def wait(self, predicate: Any, timeout: float) -> bool:
        """Until predicate(times) is true; False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self.times):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def stop(self) -> None:
        self._watch.stop()
