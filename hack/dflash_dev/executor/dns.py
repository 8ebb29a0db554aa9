"""Cluster DNS names as a pod's resolver looks them up: kubelet's search path and `ndots:5`,
and the two record shapes of the cluster domain that name pods (a Service, and a pod's
`<hostname>.<subdomain>` under a headless Service). Pure; `addresses.py` does the lookups.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

# kubelet's --cluster-domain on every real cluster we target (and the local one).
CLUSTER_DOMAIN = "cluster.local"
SERVICE_ZONE = f"svc.{CLUSTER_DOMAIN}"
# kubelet writes `options ndots:5` into a ClusterFirst pod's resolv.conf: a name with fewer
# dots is tried with each search domain first, and as it is only after them.
NDOTS = 5
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class ServiceRecord:
    """`<service>.<namespace>.svc.cluster.local`: the pods the Service selects."""

    service: str
    namespace: str


@dataclass(frozen=True)
class PodRecord:
    """`<hostname>.<subdomain>.<namespace>.svc.cluster.local`: the pod whose spec.hostname and
    spec.subdomain are these, published by the headless Service named `<subdomain>`."""

    hostname: str
    subdomain: str
    namespace: str


Record = ServiceRecord | PodRecord


def search_path(namespace: str) -> tuple[str, ...]:
    """The search domains kubelet gives a pod of `namespace` (dnsPolicy ClusterFirst)."""
    return (f"{namespace}.{SERVICE_ZONE}", SERVICE_ZONE, CLUSTER_DOMAIN)


def build_queries(name: str, namespace: str) -> list[str]:
    """The fully qualified names a pod's resolver asks for, in order (glibc's rules: a name
    ending in a dot is absolute; one with at least `ndots` dots is tried as it is first)."""
    if name.endswith("."):
        return [name[:-1]]
    searched = [f"{name}.{domain}" for domain in search_path(namespace)]
    return [name, *searched] if name.count(".") >= NDOTS else [*searched, name]


def parse_record(fqdn: str) -> Record | None:
    """The record a fully qualified name of the cluster domain names, else None (a name
    outside it, or of a shape that names no pod: `<service>.<ns>.svc...` or
    `<hostname>.<subdomain>.<ns>.svc...`)."""
    suffix = f".{SERVICE_ZONE}"
    if not fqdn.endswith(suffix):
        return None
    labels = fqdn[: -len(suffix)].split(".")
    if not all(DNS_LABEL.match(label) for label in labels):
        return None
    if len(labels) == 2:
        return ServiceRecord(labels[0], labels[1])
    if len(labels) == 3:
        return PodRecord(labels[0], labels[1], labels[2])
    return None


def candidate_records(value: str, namespace: str) -> list[Record]:
    """The cluster records `value` may name, in the order a pod in `namespace` looks them up
    (the first that exists answers). Empty for an IP address or a value that is no DNS name."""
    name = value.strip().lower()
    if not name or _is_ip(name) or not all(DNS_LABEL.match(p) for p in name.rstrip(".").split(".")):
        return []
    records: list[Record] = []
    for fqdn in build_queries(name, namespace):
        record = parse_record(fqdn)
        if record is not None and record not in records:
            records.append(record)
    return records


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
