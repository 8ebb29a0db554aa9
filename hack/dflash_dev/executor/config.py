"""The executor's settings and the names it puts on the cluster (labels, taint, annotations).

Everything tunable is here, with kubelet's defaults where kubelet has one; the CLI fills it.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from dflash_dev.errors import DevError

EXECUTOR_LABEL = "dflash.dev/executor"
EXECUTOR_VALUE = "local"
# Two executors (the developer's and a test session's) can serve one cluster; each labels its
# nodes with its own instance name so a test can pin its pods to its own executor.
INSTANCE_LABEL = "dflash.dev/executor-instance"
LOCAL_POOL = "local"  # the value of dflash_dev.nodes.POOL_LABEL on executor nodes
TAINT = {"key": EXECUTOR_LABEL, "value": EXECUTOR_VALUE, "effect": "NoSchedule"}
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
# Written on each Lease so a second executor can tell that a node is already served.
HOLDER_ANNOTATION = "dflash.dev/executor-id"

# kubelet's crash-loop back-off: 10 s doubling to 5 min, reset after 10 min of clean running.
BACKOFF_INITIAL_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
DEFAULT_POD_CIDR = "127.0.0.0/24"
DEFAULT_NODES = 2
# The node's address, and what a pod sees as its hostIP.
HOST_IP = "127.0.0.1"
READY_FILE = "executor.json"
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


@dataclass(frozen=True)
class ExecutorConfig:
    """One executor process: which cluster, which nodes, where state goes, how pods run."""

    kubeconfig: Path
    state_dir: Path
    python: Path
    nodes: int = DEFAULT_NODES
    node_prefix: str = "local"
    pod_cidr: str = DEFAULT_POD_CIDR
    cpu: str | None = None  # None: derived from this machine (see nodes.node_capacity)
    memory: str | None = None
    gpus: int = 0
    delete_nodes_on_exit: bool = False
    backoff_initial: float = BACKOFF_INITIAL_SECONDS
    backoff_max: float = BACKOFF_MAX_SECONDS
    pass_env: tuple[str, ...] = field(default_factory=tuple)
    exit_with_pid: int | None = None
    # Image mode: each pod runs from its image's root filesystem (image_mode.py); needs root
    # and Buildah or Podman with the images in local storage.
    from_images: bool = False

    @property
    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}-{i}" for i in range(self.nodes)]

    @property
    def instance(self) -> str:
        return self.node_prefix

    def validate(self) -> None:
        """Raise DevError naming the flag, the value and what is accepted."""
        if not self.kubeconfig.is_file():
            raise DevError(
                f"--kubeconfig {self.kubeconfig}: no such file; start the cluster with "
                "`make cluster-up` and pass $(make -s kubeconfig)"
            )
        if self.from_images and os.geteuid() != 0:
            raise DevError(
                "--from-images: running pods from image root filesystems (chroot, mounts) "
                "needs root; run the executor as root or without --from-images"
            )
        if not (self.python.is_file() and os.access(self.python, os.X_OK)):
            raise DevError(
                f"--python {self.python}: not an executable file; pass the project's venv "
                "interpreter, e.g. .venv/bin/python (run `make venv` first)"
            )
        if not 1 <= self.nodes <= 64:
            raise DevError(f"--nodes {self.nodes}: must be between 1 and 64")
        if not DNS_LABEL.match(self.node_prefix):
            raise DevError(
                f"--node-prefix {self.node_prefix!r}: must be a lowercase DNS label of at "
                "most 42 characters (letters, digits, '-')"
            )
        try:
            network = ipaddress.ip_network(self.pod_cidr)
        except ValueError as exc:
            raise DevError(f"--pod-cidr {self.pod_cidr!r}: {exc}") from None
        if not (isinstance(network, ipaddress.IPv4Network) and network.subnet_of(LOOPBACK)):
            raise DevError(
                f"--pod-cidr {self.pod_cidr}: must be an IPv4 range inside 127.0.0.0/8 "
                "(every 127.x address is local on Linux), e.g. 127.0.0.0/24"
            )
        if network.num_addresses < 4:
            raise DevError(f"--pod-cidr {self.pod_cidr}: too small, use at least a /30")
        if self.gpus < 0:
            raise DevError(f"--gpus {self.gpus}: must be 0 or more")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise DevError(
                f"--backoff {self.backoff_initial}/{self.backoff_max}: need 0 < initial <= max"
            )


def ready_file(state_dir: Path) -> Path:
    """Written (pid, nodes, instance) once the executor serves its nodes; removed at stop."""
    return state_dir / READY_FILE
