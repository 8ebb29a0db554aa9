"""Cluster DNS names in env, resolved as a pod's resolver and cluster DNS would: the search
path in order, a Service to a pod it selects, a pod's `<hostname>.<subdomain>` only under a
headless Service of that name that selects it, and the rendezvous port remapped to the target
pod's host port. The cluster is a table (the cluster test is
tests/integration/executor/test_trainjob.py)."""

from __future__ import annotations

from typing import Any

import pytest
from dflash_dev.executor.addresses import HostPorts, ServiceResolver, Target, resolve_addresses
from dflash_dev.executor.dns import PodRecord, ServiceRecord, build_queries, candidate_records
from dflash_dev.executor.errors import WaitInterruptedError
from dflash_dev.executor.kube import ApiException

NS = "team"
ME = Target("127.0.0.9", "uid-me", "local-1")
JOBSET = {"jobset.sigs.k8s.io/jobset-name": "run-train"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # A single label: a Service of the pod's namespace (the only shape it can be).
        ("ddp-master-0", [ServiceRecord("ddp-master-0", NS)]),
        # Two labels: first <hostname>.<subdomain> in the pod's namespace, then <svc>.<ns>.
        ("run-train-node-0-0.run-train",
         [PodRecord("run-train-node-0-0", "run-train", NS),
          ServiceRecord("run-train-node-0-0", "run-train")]),
        ("h.sub.other", [PodRecord("h", "sub", "other")]),
        ("h.sub.other.svc", [PodRecord("h", "sub", "other")]),
        ("h.sub.other.svc.cluster.local", [PodRecord("h", "sub", "other")]),
        ("svc.other.svc.cluster.local.", [ServiceRecord("svc", "other")]),
        ("svc.other.svc", [PodRecord("svc", "other", "svc"), ServiceRecord("svc", "other")]),
        ("example.com", [PodRecord("example", "com", NS), ServiceRecord("example", "com")]),
        ("s3.amazonaws.com", [PodRecord("s3", "amazonaws", "com")]),
        ("a.b.c.d", []),
        ("127.0.0.1", []),
        ("::1", []),
        ("host:23456", []),
        ("Not_A_Name", []),
        ("", []),
    ],
)  # fmt: skip
def test_a_name_is_looked_up_as_a_pods_resolver_would_in_search_order(
    value: str, expected: list[object]
) -> None:
    assert candidate_records(value, NS) == expected


def test_ndots_5_tries_a_name_with_five_dots_as_it_is_first() -> None:
    assert build_queries("a.b", NS) == [
        f"a.b.{NS}.svc.cluster.local", "a.b.svc.cluster.local", "a.b.cluster.local", "a.b"
    ]  # fmt: skip
    full = "h.s.ns.svc.cluster.local"
    assert build_queries(full, NS)[0] == full
    assert build_queries(full + ".", NS) == [full]


def pod(name: str, ip: str | None, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    status = {"phase": "Running", **({"podIP": ip} if ip else {})}
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels},
        "spec": {"nodeName": "local-0", **spec},
        "status": status,
    }


def headless(name: str, selector: dict[str, str], cluster_ip: str = "None") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"clusterIP": cluster_ip, "selector": selector}}


class FakeKube:
    """GET of Services by name and pods by label selector, from tables."""

    def __init__(self, services: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.services = {s["metadata"]["name"]: s for s in services}
        self.pods = pods

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        if "/services/" in path:
            name = path.rsplit("/", 1)[1]
            if name not in self.services:
                raise ApiException(status=404)
            return self.services[name]
        wanted = dict(kv.split("=") for kv in query["labelSelector"].split(","))
        selected = [p for p in self.pods if wanted.items() <= p["metadata"]["labels"].items()]
        return {"items": selected}


def resolve(kube: FakeKube, value: str, wait: bool = False) -> Target | None:
    resolver = ServiceResolver(kube)  # type: ignore[arg-type]
    return resolver.resolve(value, NS, ME, wait_for_record=wait, interrupted=lambda _seconds: True)


RANK_0 = pod("run-train-node-0-0-abcde", "127.0.0.5", JOBSET,
             hostname="run-train-node-0-0", subdomain="run-train")  # fmt: skip
RANK_1 = pod("run-train-node-0-1-fghij", "127.0.0.6", JOBSET,
             hostname="run-train-node-0-1", subdomain="run-train")  # fmt: skip
MASTER_ADDR = "run-train-node-0-0.run-train"


@pytest.mark.parametrize(
    "value",
    [MASTER_ADDR, f"{MASTER_ADDR}.{NS}", f"{MASTER_ADDR}.{NS}.svc",
     f"{MASTER_ADDR}.{NS}.svc.cluster.local"],
)  # fmt: skip
def test_a_pods_hostname_under_its_headless_service_resolves_to_that_pod(value: str) -> None:
    kube = FakeKube([headless("run-train", JOBSET)], [RANK_1, RANK_0])
    assert resolve(kube, value) == Target("127.0.0.5", "uid-run-train-node-0-0-abcde", "local-0")


@pytest.mark.parametrize(
    ("services", "why"),
    [
        ([], "no Service named as the subdomain"),
        ([headless("run-train", JOBSET, cluster_ip="10.96.0.12")], "the Service is not headless"),
        ([headless("run-train", {"app": "other"})], "the Service does not select the pod"),
        ([headless("run-train", {})], "the Service has no selector"),
    ],
)
def test_a_pods_hostname_does_not_resolve_where_cluster_dns_has_no_record(
    services: list[dict[str, Any]], why: str
) -> None:
    kube = FakeKube(services, [RANK_0, RANK_1])
    assert resolve(kube, MASTER_ADDR) is None, why


def test_a_hostname_without_a_pod_or_of_a_finished_pod_has_no_record() -> None:
    finished = {**RANK_0, "status": {"phase": "Failed", "podIP": "127.0.0.5"}}
    assert resolve(FakeKube([headless("run-train", JOBSET)], [RANK_1]), MASTER_ADDR) is None
    assert resolve(FakeKube([headless("run-train", JOBSET)], [finished]), MASTER_ADDR) is None


def test_the_pod_itself_resolves_to_its_own_ip_before_its_status_has_one() -> None:
    me = pod("me-pod", None, JOBSET, hostname="run-train-node-0-0", subdomain="run-train")
    me["metadata"]["uid"] = ME.uid
    assert resolve(FakeKube([headless("run-train", JOBSET)], [me]), MASTER_ADDR) == ME


def test_a_pod_record_comes_before_a_service_of_the_same_name_as_in_the_search_path() -> None:
    other_ns_service = {"metadata": {"name": "run-train-node-0-0"},
                        "spec": {"clusterIP": "10.96.0.3", "selector": {"app": "x"}}}  # fmt: skip
    kube = FakeKube([headless("run-train", JOBSET), other_ns_service], [RANK_0])
    target = resolve(kube, MASTER_ADDR)
    assert target is not None and target.ip == "127.0.0.5"


def test_a_service_resolves_to_a_pod_it_selects_and_one_without_selector_is_left_alone() -> None:
    master = pod("ddp-master-0", "127.0.0.7", {"role": "master"})
    service = {"metadata": {"name": "ddp-master-0"},
               "spec": {"clusterIP": "None", "selector": {"role": "master"}}}  # fmt: skip
    external = {"metadata": {"name": "external"}, "spec": {"clusterIP": "10.96.0.4"}}
    kube = FakeKube([service, external], [master])
    assert resolve(kube, "ddp-master-0") == Target("127.0.0.7", "uid-ddp-master-0", "local-0")
    assert resolve(kube, "external") is None


def test_a_rendezvous_address_waits_for_its_record_and_stops_when_the_pod_is_deleted() -> None:
    with pytest.raises(WaitInterruptedError):
        resolve(FakeKube([], []), MASTER_ADDR, wait=True)


def test_the_rendezvous_port_of_a_trainjob_follows_its_address_to_the_masters_host_port() -> None:
    kube = FakeKube([headless("run-train", JOBSET)], [RANK_0, RANK_1])
    resolver = ServiceResolver(kube)  # type: ignore[arg-type]
    ports = HostPorts()
    env = {"PET_MASTER_ADDR": MASTER_ADDR, "PET_MASTER_PORT": "29500", "PET_NNODES": "2"}

    def resolved(is_ours: bool) -> dict[str, str]:
        return resolve_addresses(env, NS, ME, resolver, ports, lambda _t: is_ours,
                                 interrupted=lambda _s: True)  # fmt: skip

    ours = resolved(is_ours=True)
    host_port = ports.port_for("uid-run-train-node-0-0-abcde", 29500)
    assert ours == {"PET_MASTER_ADDR": "127.0.0.5", "PET_MASTER_PORT": str(host_port),
                    "PET_NNODES": "2"}  # fmt: skip
    # A master another executor runs listens on its own machine: its port stays.
    assert resolved(is_ours=False)["PET_MASTER_PORT"] == "29500"
