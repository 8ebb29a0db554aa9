"""Pod networking without a network: a loopback IP per pod, cluster DNS names in env resolved
to the IP of the pod behind them (there is no cluster DNS: `dns.py` says which names a pod's
resolver tries), and host ports for torch's rendezvous port.

Two record shapes name pods: a Service (`svc`, `svc.ns`, ...: a live pod it selects, as a
PyTorchJob's MASTER_ADDR) and a pod's `<hostname>.<subdomain>` under the headless Service
named `<subdomain>` (a JobSet's pods, as a TrainJob's PET_MASTER_ADDR `<job>-node-0-0.<job>`).

Why host ports: torch's TCPStore listens on the wildcard address, so two rendezvous masters on
one machine cannot both bind 29500 even on different loopback IPs. MASTER_PORT/PET_MASTER_PORT
are therefore mapped, per target pod, to a free host port that every peer agrees on.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from dflash_dev.ports import free_port

from .config import HOST_IP
from .dns import Record, ServiceRecord, candidate_records
from .errors import PodConfigError, WaitInterruptedError
from .kube import Kube, Obj, is_status, namespaced

log = logging.getLogger(__name__)

# (address variable, port variable) pairs whose port is remapped with the address: the
# rendezvous env the training-operator (MASTER_*, PET_MASTER_*) and Kubeflow Trainer's torch
# plugin (PET_MASTER_*) inject, read by torch.distributed and torchrun.
RENDEZVOUS_ENV = (("MASTER_ADDR", "MASTER_PORT"), ("PET_MASTER_ADDR", "PET_MASTER_PORT"))
# Other variables named like an address are resolved only if their value names a record.
ADDRESS_SUFFIXES = ("_ADDR", "_HOST", "_HOSTNAME")
# The training-operator creates a job's Services together with its pods, JobSet its headless
# Service before its Jobs' pods: give a rendezvous address's record this long to appear.
RECORD_APPEAR_SECONDS = 60.0
POLL_SECONDS = 0.5


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


@dataclass(frozen=True)
class Target:
    """The pod a name resolved to."""

    ip: str
    uid: str
    node_name: str


@dataclass(frozen=True)
class Answer:
    """A record that exists: the pods behind it are those `selector` selects in `namespace`
    and `matches` accepts (every one for a Service, the one with the hostname for a pod)."""

    what: str
    namespace: str
    selector: dict[str, str]
    hostname: tuple[str, str] | None = None  # (hostname, subdomain) of a pod record

    def matches(self, pod: Obj) -> bool:
        if self.hostname is None:
            return True
        spec = pod.get("spec") or {}
        return (spec.get("hostname"), spec.get("subdomain")) == self.hostname


# A record that exists but names no pod the executor can give (a Service without a selector:
# cluster DNS answers with its cluster IP, which nothing serves here): the value stays as it is.
UNUSABLE = Answer("", "", {})


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _is_live(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get(
        "phase"
    ) not in ("Succeeded", "Failed")


class ServiceResolver:
    """Resolves a cluster DNS name (dns.py: a Service, or a pod's hostname under a headless
    Service) to the IP of a live pod behind it, waiting for that pod to have one."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def resolve(
        self,
        value: str,
        namespace: str,
        me: Target,
        *,
        wait_for_record: bool,
        interrupted: Callable[[float], bool],
    ) -> Target | None:
        """The pod behind the first record of `value` that exists, in the pod's search order
        (`me` when that is this very pod); None when no record exists (after waiting up to
        RECORD_APPEAR_SECONDS when `wait_for_record`) or the record names no pod.
        A pod record exists once its pod does; its IP is then waited for, where a real
        resolver answers NXDOMAIN until the EndpointSlice has it and the program retries.
        Raises WaitInterruptedError when `interrupted` says so."""
        records = candidate_records(value, namespace)
        if not records:
            return None
        waited = 0.0
        while True:
            answer = self._first_answer(records)
            if answer is not None:
                break
            if not wait_for_record or waited >= RECORD_APPEAR_SECONDS:
                return None
            if interrupted(POLL_SECONDS):
                raise WaitInterruptedError
            waited += POLL_SECONDS
        if answer is UNUSABLE:
            return None
        announced = False
        while True:
            target = self._pick(answer, me)
            if target is not None:
                return target
            if not announced:
                log.info("waiting for a pod of %s to get an IP", answer.what)
                announced = True
            if interrupted(POLL_SECONDS):
                raise WaitInterruptedError

    def _first_answer(self, records: list[Record]) -> Answer | None:
        for record in records:
            answer = self._answer(record)
            if answer is not None:
                return answer
        return None

    def _answer(self, record: Record) -> Answer | None:
        """What cluster DNS answers for one record; None where it answers NXDOMAIN."""
        if isinstance(record, ServiceRecord):
            service = self._service(record.namespace, record.service)
            if service is None:
                return None
            selector = (service.get("spec") or {}).get("selector") or {}
            if not selector:
                return UNUSABLE
            return Answer(
                f"Service {record.namespace}/{record.service}", record.namespace, selector
            )
        # A pod's hostname record exists only under a headless Service named as its subdomain
        # that selects it (the EndpointSlice controller publishes the hostname there).
        service = self._service(record.namespace, record.subdomain)
        spec = (service or {}).get("spec") or {}
        if service is None or spec.get("clusterIP") != "None" or not spec.get("selector"):
            return None
        answer = Answer(
            f"pod {record.hostname}.{record.subdomain} in {record.namespace}",
            record.namespace,
            dict(spec["selector"]),
            (record.hostname, record.subdomain),
        )
        return answer if self._selected(answer) else None

    def _service(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.kube.get(namespaced(namespace, "services", name))
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise

    def _selected(self, answer: Answer) -> list[Obj]:
        """The live pods behind the answer, with or without an IP yet."""
        pods = self.kube.get(
            namespaced(answer.namespace, "pods"), labelSelector=_selector(answer.selector)
        )
        return [p for p in pods.get("items") or [] if _is_live(p) and answer.matches(p)]

    def _pick(self, answer: Answer, me: Target) -> Target | None:
        live = self._selected(answer)
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
    """`env` with cluster DNS names replaced by pod IPs, and rendezvous ports of pods this
    executor runs replaced by their host ports. Raises WaitInterruptedError (pod deleted meanwhile)."""
    pairs = dict(RENDEZVOUS_ENV)
    resolved = dict(env)
    for name, value in env.items():
        if name not in pairs and not name.endswith(ADDRESS_SUFFIXES):
            continue
        if name.startswith("KUBERNETES_"):
            continue
        target = resolver.resolve(
            value, namespace, me, wait_for_record=name in pairs, interrupted=interrupted
        )
        if target is None:
            continue
        resolved[name] = target.ip
        port_name = pairs.get(name)
        port = env.get(port_name or "", "")
        if port_name and port.isdigit() and is_ours(target):
            resolved[port_name] = str(ports.port_for(target.uid, int(port)))
    return resolved
