"""The operator's readiness endpoint: `GET /readyz` on its own port (kopf's liveness server owns
the health port and answers only `/healthz`). Ready means the CRD of a training backend the
operator may use by default is established (TrainJob or PyTorchJob under `auto`), on the leader
and on standbys alike; the answer's body says why not. Liveness: `leadership.py`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dflash_operator.api.spec_training import Launcher
from dflash_operator.runtime.kube import RESOURCES, Kube, KubeError

log = logging.getLogger(__name__)
PATH = "/readyz"
PYTORCHJOB_CRD = "pytorchjobs.kubeflow.org"
# The version the operator creates and watches PyTorchJobs as.
SERVED_VERSION = RESOURCES["PyTorchJob"].version
INSTALL = "install the Kubeflow training-operator v1.9"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# Every replica is probed every few seconds: one answer serves the probes of this long (the
# operator may list CRDs but not get one, hence a list narrowed to the name).
CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str


@dataclass(frozen=True)
class TrainingCrd:
    """The CRD of one training backend: its name, kind, the version the operator uses, and
    what to install when it is missing."""

    name: str
    kind: str
    version: str
    install: str


BACKEND_CRDS = {
    Launcher.PYTORCHJOB: TrainingCrd(PYTORCHJOB_CRD, "PyTorchJob", SERVED_VERSION, INSTALL),
    Launcher.TRAINJOB: TrainingCrd(
        "trainjobs.trainer.kubeflow.org", "TrainJob", RESOURCES["TrainJob"].version,
        "install Kubeflow Trainer v2.3",
    ),
}  # fmt: skip
# auto: either backend will do, TrainJob first (as plan/launcher.py prefers it).
AUTO_BACKENDS = (Launcher.TRAINJOB, Launcher.PYTORCHJOB)


def build_readiness(
    crd: Mapping[str, Any] | None, target: TrainingCrd = BACKEND_CRDS[Launcher.PYTORCHJOB]
) -> Readiness:
    """Ready when the CRD exists, its Established condition is True and it serves the version
    the operator creates (a CRD that no longer serves it answers 404, like a missing one)."""
    kind, name, version = target.kind, target.name, target.version
    if crd is None:
        return Readiness(False, f"{kind} CRD {name} not installed: {target.install}")
    conditions = crd.get("status", {}).get("conditions") or []
    if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
        return Readiness(False, f"{kind} CRD {name} is installed but not established yet")
    versions = crd.get("spec", {}).get("versions") or []
    if not any(v.get("name") == version and v.get("served") for v in versions):
        return Readiness(
            False, f"{kind} CRD {name} does not serve version {version}: {target.install}"
        )
    return Readiness(True, f"ready: {kind} CRD {name} is established")


def check_training(kube: Kube, default: Launcher) -> Readiness:
    """Ready when a backend the default launcher may pick is established (auto: either)."""
    options = AUTO_BACKENDS if default == Launcher.AUTO else (default,)
    results = [check_crd(kube, BACKEND_CRDS[option]) for option in options]
    ready = next((result for result in results if result.ready), None)
    return ready or Readiness(False, "; ".join(result.reason for result in results))


def check_crd(kube: Kube, target: TrainingCrd = BACKEND_CRDS[Launcher.PYTORCHJOB]) -> Readiness:
    """Read the CRD from the API server (not ready when the server does not answer)."""
    name = target.name
    try:
        answer = kube.request(
            "GET", CRDS, query={"fieldSelector": f"metadata.name={name}"},
            kind="CustomResourceDefinition",
        )  # fmt: skip
    except KubeError as error:
        return Readiness(False, f"cannot read CRD {name} from the API server: {error}")
    items = answer.get("items") or []
    return build_readiness(items[0] if items else None, target)


class ReadinessServer:
    """`/readyz` in a background thread: 200 when ready, 503 with the reason otherwise."""

    def __init__(
        self,
        address: str,
        port: int,
        check: Callable[[], Readiness],
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        self._check = check
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._last: tuple[float, Readiness] | None = None
        self._server = ThreadingHTTPServer((address, port), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="readiness", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def readiness(self) -> Readiness:
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < self._cache_seconds:
                return self._last[1]
            result = self._check()
            if self._last is None or self._last[1] != result:
                # The kubelet's event shows only the status code: the reason goes to the log.
                log.log(logging.INFO if result.ready else logging.WARNING, "%s", result.reason)
            self._last = (now, result)
            return result

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != PATH:
                    self.send_response(404)
                    self.end_headers()
                    return
                result = server.readiness()
                body = (result.reason + "\n").encode()
                self.send_response(200 if result.ready else 503)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                return

        return Handler

    def start(self) -> ReadinessServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()  # waits for serve_forever, which never returns unstarted
        self._server.server_close()
