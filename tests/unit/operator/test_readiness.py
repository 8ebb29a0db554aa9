"""What Ready means (`readiness.py`): the PyTorchJob CRD exists, is established and serves v1;
each other case answers why not. The endpoint itself: a fake check, a real HTTP request."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
from dflash_operator.api.spec_training import Launcher
from dflash_operator.readiness import Readiness, ReadinessServer, build_readiness, check_training

INSTALL = "install the Kubeflow training-operator v1.9"


def crd(established: str = "True", served: bool = True) -> dict[str, Any]:
    return {
        "spec": {"versions": [{"name": "v1", "served": served, "storage": True}]},
        "status": {"conditions": [{"type": "Established", "status": established}]},
    }


@pytest.mark.parametrize(
    ("observed", "ready", "says"),
    [
        (crd(), True, "ready: PyTorchJob CRD pytorchjobs.kubeflow.org is established"),
        (None, False, f"PyTorchJob CRD pytorchjobs.kubeflow.org not installed: {INSTALL}"),
        (crd(established="False"), False, "is installed but not established yet"),
        ({"spec": {}}, False, "is installed but not established yet"),
        (crd(served=False), False, f"does not serve version v1: {INSTALL}"),
    ],
    ids=["established", "missing", "not-established", "no-status", "v1-not-served"],
)
def test_ready_only_when_the_pytorchjob_crd_is_established_and_serves_v1(
    observed: dict[str, Any] | None, ready: bool, says: str
) -> None:
    result = build_readiness(observed)
    assert result.ready is ready
    assert says in result.reason


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def test_the_endpoint_answers_503_with_the_reason_and_200_when_ready() -> None:
    calls: list[Readiness] = []
    answers = iter([Readiness(False, "not yet"), Readiness(True, "ready: yes")])

    def check() -> Readiness:
        calls.append(next(answers))
        return calls[-1]

    server = ReadinessServer("127.0.0.1", 0, check, cache_seconds=0.0).start()
    try:
        assert get(server.port, "/readyz") == (503, "not yet\n")
        assert get(server.port, "/readyz") == (200, "ready: yes\n")
        assert get(server.port, "/healthz")[0] == 404
    finally:
        server.stop()


def test_probes_within_the_cache_time_share_one_check() -> None:
    checks: list[int] = []

    def check() -> Readiness:
        checks.append(1)
        return Readiness(True, "ready")

    server = ReadinessServer("127.0.0.1", 0, check, cache_seconds=60.0)
    try:
        assert server.readiness() == server.readiness() == Readiness(True, "ready")
        assert len(checks) == 1
    finally:
        server.stop()


class CrdLister:
    """The API server's CRD list, narrowed to one name as `check_crd` asks."""

    def __init__(self, crds: dict[str, dict[str, Any]]) -> None:
        self.crds = crds

    def request(self, method: str, path: str, query: dict[str, str], kind: str) -> dict[str, Any]:
        name = query["fieldSelector"].removeprefix("metadata.name=")
        return {"items": [self.crds[name]] if name in self.crds else []}


def trainjob_crd() -> dict[str, Any]:
    return {
        "spec": {"versions": [{"name": "v1alpha1", "served": True, "storage": True}]},
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }


@pytest.mark.parametrize(
    ("installed", "default", "ready", "says"),
    [
        ({"trainjobs.trainer.kubeflow.org"}, Launcher.AUTO, True, "ready: TrainJob CRD"),
        ({"pytorchjobs.kubeflow.org"}, Launcher.AUTO, True, "ready: PyTorchJob CRD"),
        (set(), Launcher.AUTO, False,
         "TrainJob CRD trainjobs.trainer.kubeflow.org not installed: install Kubeflow Trainer "
         "v2.3; PyTorchJob CRD pytorchjobs.kubeflow.org not installed"),
        ({"pytorchjobs.kubeflow.org"}, Launcher.TRAINJOB, False, "TrainJob CRD"),
        ({"trainjobs.trainer.kubeflow.org"}, Launcher.PYTORCHJOB, False, "PyTorchJob CRD"),
    ],
    ids=["auto-trainer", "auto-training-operator", "auto-neither", "trainjob", "pytorchjob"],
)  # fmt: skip
def test_ready_when_a_backend_the_default_launcher_may_use_is_established(
    installed: set[str], default: Launcher, ready: bool, says: str
) -> None:
    crds = {"trainjobs.trainer.kubeflow.org": trainjob_crd(), "pytorchjobs.kubeflow.org": crd()}
    kube = CrdLister({name: body for name, body in crds.items() if name in installed})
    result = check_training(kube, default)  # type: ignore[arg-type]
    assert result.ready is ready
    assert says in result.reason
