"""Pod networking without a network: a loopback IP per pod, Service names resolved to the IP of
the pod they select (there is no cluster DNS), and host ports for torch's rendezvous port.

Why host ports: torch's TCPStore listens on the wildcard address, so two PyTorchJob masters on
one machine cannot both bind 23456 even on different loopback IPs. MASTER_PORT/PET_MASTER_PORT
are therefore mapped, per target pod, to a free host port that every peer agrees on.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from dflash_dev.ports import free_port

from .config import HOST_IP
from .errors import PodConfigError, WaitInterruptedError
from .kube import Kube, Obj, is_status, namespaced

log = logging.getLogger(__name__)

# (address variable, port variable) pairs whose port is remapped with the address: the
# rendezvous env the training-operator injects, read by torch.distributed and torchrun.
RENDEZVOUS_ENV = (("MASTER_ADDR", "MASTER_PORT"), ("PET_MASTER_ADDR", "PET_MASTER_PORT"))
# Other variables named like an address are resolved only if their value names a Service.
ADDRESS_SUFFIXES = ("_ADDR", "_HOST", "_HOSTNAME")
# The training-operator creates a job's Services together with its pods; give it this long.
SERVICE_APPEAR_SECONDS = 60.0
POLL_SECONDS = 0.5
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class PoolExhaustedError(PodConfigError):
    """No free pod IP: the pod waits (ContainerCreating) until another pod ends."""

    reason = "ContainerCreating"


class LoopbackPool:
    """Hands out loopback addresses; a released one goes to the back of the queue so that it
    is not reused while the old pod's sockets may still linger in TIME_WAIT."""

    def __init__(self, cidr: str) -> None:
        network = ipaddress.IPv4Network(cidr)
        self._free = collections.deque(str(ip) for ip in network.hosts() if str(ip) != HOST_IP)
        self._size = len(self._free)
        self._lock = threading.Lock()

    def acquire(self, preferred: str | None = None) -> str:
        """A free address; `preferred` when it is free (a pod keeps its IP across an
        executor restart, as a pod's IP never changes in Kubernetes)."""
        with self._lock:
            if preferred is not None and preferred in self._free:
                self._free.remove(preferred)
                return preferred
            if not self._free:
                raise PoolExhaustedError(
                    f"no free pod IP: all {self._size} addresses of --pod-cidr are in use; "
                    "waiting for a pod to end"
                )
            return self._free.popleft()

    def release(self, ip: str) -> None:
        with self._lock:
            if ip not in self._free:
                self._free.append(ip)


class HostPorts:
    """(pod uid, container port) -> a host port, allocated on first use, freed with the pod."""

    def __init__(self) -> None:
        self._ports: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def port_for(self, uid: str, container_port: int) -> int:
        with self._lock:
            key = (uid, container_port)
            if key not in self._ports:
                self._ports[key] = free_port(set(self._ports.values()))
            return self._ports[key]

    def release(self, uid: str) -> None:
        with self._lock:
            for key in [k for k in self._ports if k[0] == uid]:
                del self._ports[key]


def parse_service_name(value: str, namespace: str) -> tuple[str, str] | None:
    """(service, namespace) for `svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`."""
    parts = value.strip().split(".")
    if not all(DNS_LABEL.match(p) for p in parts):
        return None
    if len(parts) == 1:
        return parts[0], namespace
    if len(parts) == 2 or (len(parts) == 3 and parts[2] == "svc"):
        return parts[0], parts[1]
    if len(parts) == 5 and parts[2:] == ["svc", "cluster", "local"]:
        return parts[0], parts[1]
    return None


@dataclass(frozen=True)
class Target:
    """The pod a Service name resolved to."""

    ip: str
    uid: str
    node_name: str


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class ServiceResolver:
    """Resolves a Service name to the IP of a live pod it selects, waiting for one to have it."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def resolve(
        self,
        value: str,
        namespace: str,
        me: Target,
        *,
        wait_for_service: bool,
        interrupted: Callable[[float], bool],
    ) -> Target | None:
        """The selected pod (`me` when it selects this very pod), or None when `value` names no
        Service (or one without a selector). Raises WaitInterruptedError when `interrupted` says so."""
        parsed = parse_service_name(value, namespace)
        if parsed is None:
            return None
        service_name, service_ns = parsed
        waited = 0.0
        while True:
            service = self._service(service_ns, service_name)
            if service is not None:
                break
            if not wait_for_service or waited >= SERVICE_APPEAR_SECONDS:
                return None
            if interrupted(POLL_SECONDS):
                raise WaitInterruptedError
            waited += POLL_SECONDS
        selector = (service.get("spec") or {}).get("selector") or {}
        if not selector:
            return None
        announced = False
        while True:
            target = self._pick(service_ns, selector, me)
            if target is not None:
                return target
            if not announced:
                log.info(
                    "waiting for a pod of Service %s/%s to get an IP", service_ns, service_name
                )
                announced = True
            if interrupted(POLL_SECONDS):
                raise WaitInterruptedError

    def _service(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.kube.get(namespaced(namespace, "services", name))
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise

    def _pick(self, namespace: str, selector: dict[str, str], me: Target) -> Target | None:
        pods = self.kube.get(namespaced(namespace, "pods"), labelSelector=_selector(selector))
        live = [
            p
            for p in pods.get("items") or []
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if any(p["metadata"]["uid"] == me.uid for p in live):
            return me
        for pod in sorted(live, key=lambda p: p["metadata"]["name"]):
            ip = (pod.get("status") or {}).get("podIP")
            if ip:
                return Target(ip, pod["metadata"]["uid"], pod["spec"].get("nodeName", ""))
        return None


def resolve_addresses(
    env: dict[str, str],
    namespace: str,
    me: Target,
    resolver: ServiceResolver,
    ports: HostPorts,
    is_ours: Callable[[Target], bool],
    interrupted: Callable[[float], bool],
) -> dict[str, str]:
    """`env` with Service names replaced by pod IPs, and rendezvous ports of pods this
    executor runs replaced by their host ports. Raises WaitInterruptedError (pod deleted meanwhile)."""
    pairs = dict(RENDEZVOUS_ENV)
    resolved = dict(env)
    for name, value in env.items():
        if name not in pairs and not name.endswith(ADDRESS_SUFFIXES):
            continue
        if name.startswith("KUBERNETES_"):
            continue
        target = resolver.resolve(
            value, namespace, me, wait_for_service=name in pairs, interrupted=interrupted
        )
        if target is None:
            continue
        resolved[name] = target.ip
        port_name = pairs.get(name)
        port = env.get(port_name or "", "")
        if port_name and port.isdigit() and is_ours(target):
            resolved[port_name] = str(ports.port_for(target.uid, int(port)))
    return resolved
