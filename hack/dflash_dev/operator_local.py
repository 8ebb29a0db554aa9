"""Run the DFlash operator as a local process against the local control plane, with the Helm
chart's RBAC (never cluster-admin): render the chart, apply the CRD, the RBAC and the pools
ConfigMap, mint a token for the chart's ServiceAccount, write a kubeconfig with it.

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
# The chart's RBAC, the pools ConfigMap, and what the operator needs to authenticate.
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap")
TOKEN_DURATION = "48h"  # noqa: S105 - a lifetime, not a secret
READY_TIMEOUT_SECONDS = 60.0
FIELD_MANAGER = "dflash-dev"


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
    kubectl(
        admin_kubeconfig,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/dflashruns.dflash.dev",
    )
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
    kubectl(
        admin_kubeconfig, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-",
        input=yaml.safe_dump_all(manifests),
    )  # fmt: skip
    return manifests


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
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        self.metrics_port = free_port()
        self.health_port = free_port({self.metrics_port})
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "DFLASH_POOLS_FILE": str(self.pools_file),
            "DFLASH_NAMESPACES": ",".join(self.namespaces),
            "DFLASH_METRICS_PORT": str(self.metrics_port),
            "DFLASH_HEALTH_PORT": str(self.health_port),
            "DFLASH_BIND_ADDRESS": "127.0.0.1",
            "DFLASH_RESYNC_SECONDS": str(self.resync_seconds),
            "DFLASH_LOG_FORMAT": "text",
            **self.env,
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [str(venv_bin() / "python"), "-m", "dflash_operator.main"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
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
    }
    python = str(venv_bin() / "python")
    # Replace this process: Ctrl-C and signals go straight to the operator.
    os.execve(python, [python, "-m", "dflash_operator.main"], env)  # noqa: S606
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
