"""pytest fixtures for the real local control plane and S3 server (one of each per session),
and a local Hugging Face Hub (one per test).

`cluster` reuses a running cluster when KUBECONFIG points at one that answers /readyz (or when
this checkout's cluster is already up); otherwise it starts one and stops it at session end. It
serves the training backends of $DFLASH_CLUSTER_BACKENDS (both by default); `cluster_backends`
restarts it with other backends for one test.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import binaries, hub_server, s3capacity, s3server, watchdog
from . import cluster as local_cluster
from .errors import DevError

# The state name of `full_s3`'s server (s3server.up/down).
FULL_S3_NAME = "s3-full"

NAMESPACE_READY_SECONDS = 30.0


@dataclass
class ClusterHandle:
    kubeconfig: Path
    started_here: bool
    _api: Any = field(default=None, repr=False)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(binaries.cached_path("kubectl")), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            argv, input=input, text=True, capture_output=True, check=False, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
            )
        return result

    @property
    def api(self) -> Any:
        """A kubernetes.client.ApiClient for this cluster (admin)."""
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig)}


@dataclass
class S3Handle:
    info: s3server.S3Info
    started_here: bool

    @property
    def endpoint_url(self) -> str:
        return self.info.endpoint_url

    @property
    def access_key(self) -> str:
        return self.info.access_key

    @property
    def secret_key(self) -> str:
        return self.info.secret_key

    @property
    def region(self) -> str:
        return self.info.region

    @property
    def bucket(self) -> str:
        return self.info.bucket

    @property
    def env(self) -> dict[str, str]:
        return self.info.env()

    def client(self) -> Any:
        return self.info.client()


def _guard(component: str, down: Callable[[], object]) -> subprocess.Popen[bytes]:
    """Stop `component` when this session ends: atexit for a crash inside Python, and a
    watchdog process for a session that is killed outright (SIGKILL, CI timeout)."""
    atexit.register(down)
    return watchdog.spawn(os.getpid(), [component])


def _reachable(kubeconfig: Path) -> bool:
    if not kubeconfig.is_file() or not binaries.cached_path("kubectl").exists():
        return False
    result = subprocess.run(
        [
            str(binaries.cached_path("kubectl")),
            f"--kubeconfig={kubeconfig}",
            "get",
            "--raw",
            "/readyz",
            "--request-timeout=3s",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterHandle]:
    external = os.environ.get("KUBECONFIG")
    if (
        external
        and Path(external) != local_cluster.kubeconfig_path()
        and _reachable(Path(external))
    ):
        yield ClusterHandle(Path(external), started_here=False)
        return
    was_up = local_cluster.is_healthy()
    try:
        info = local_cluster.up()
    except DevError as exc:
        pytest.fail(f"the local control plane could not start: {exc}", pytrace=False)
    started = not was_up and not os.environ.get("DFLASH_KEEP_CLUSTER")
    guard = _guard("cluster", local_cluster.down) if started else None
    yield ClusterHandle(Path(info.kubeconfig), started_here=started)
    if started:
        local_cluster.down()
    if guard:
        guard.terminate()


@pytest.fixture
def cluster_backends(cluster: ClusterHandle) -> Iterator[Callable[[str], ClusterHandle]]:
    """`cluster_backends("trainer")` (or "training-operator", or both comma-separated) restarts
    the local cluster serving only those training backends and returns its handle; after the
    test, the session's cluster is restarted with the backends it had. A cluster this checkout
    did not start (an external KUBECONFIG) cannot be restarted: the test is skipped."""
    if cluster.kubeconfig != local_cluster.kubeconfig_path():
        pytest.skip(f"needs the local control plane to restart; KUBECONFIG is {cluster.kubeconfig}")
    info = local_cluster.read_info()
    before = tuple(info.backends) if info else local_cluster.requested_backends()
    changed: list[bool] = []

    def restart(backends: str) -> ClusterHandle:
        try:
            started = local_cluster.up(backends)
        except DevError as exc:
            pytest.fail(f"the local control plane could not restart: {exc}", pytrace=False)
        changed.append(tuple(started.backends) != before)
        cluster._api = None  # the apiserver's port changed
        return ClusterHandle(Path(started.kubeconfig), started_here=False)

    yield restart
    if any(changed):
        local_cluster.up(before)
        cluster._api = None


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Handle]:
    was_up = s3server.status() is not None
    try:
        info = s3server.up()
    except DevError as exc:
        pytest.fail(f"the S3 server could not start: {exc}", pytrace=False)
    started = not was_up and not os.environ.get("DFLASH_KEEP_S3")
    guard = _guard("s3", s3server.down) if started else None
    yield S3Handle(info, started_here=started)
    if started:
        s3server.down()
    if guard:
        guard.terminate()


# The most S3 volume slots in use after any test of this session (every bucket the suite made
# and the data in them): checked against what 10 GiB of free disk hold (s3capacity.py).
_SLOTS_PEAK: dict[str, int] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """After each test that uses S3, before its fixtures clean up (buckets deleted)."""
    yield
    if "s3" in getattr(item, "fixturenames", ()):
        _record_slots()


def _record_slots() -> None:
    info = s3server.read_info()
    topology = s3server.topology(info) if info is not None else None
    if topology is not None:
        used = topology.max_slots - topology.free_slots
        if used > _SLOTS_PEAK.get("used", -1):
            _SLOTS_PEAK.update(used=used, max=topology.max_slots)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "used" in _SLOTS_PEAK:
        terminalreporter.write_line(_slots_line())


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _SLOTS_PEAK.get("used", 0) > s3capacity.SLOTS_AT_BUDGET and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nerror: {_slots_line()}: more than 10 GiB of free disk hold")


def _slots_line() -> str:
    return (
        f"S3 volume slots: at most {_SLOTS_PEAK['used']} in use (of {_SLOTS_PEAK['max']} on this "
        f"disk; {s3capacity.SLOTS_AT_BUDGET} of {s3capacity.VOLUME_SIZE_MB} MiB fit in "
        f"{s3capacity.format_gib(s3capacity.BUDGET_FREE_BYTES)} free)"
    )


@pytest.fixture
def s3_prefix(s3: S3Handle, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh `s3://<bucket>/tests/<id>` prefix; the S3 env is exported for the test."""
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return f"s3://{s3.bucket}/tests/{secrets.token_hex(6)}"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[hub_server.HubServer]:
    """A local Hub (`hub_server`) for this test: HF_ENDPOINT points at it, HF_HUB_OFFLINE and
    HF_TOKEN are unset and HF_HOME is private, so nothing reaches huggingface.co or reads a
    token of the machine. `hub.add_repo("org/name", folder)` serves a folder; `hub.served`
    counts the content bytes sent per file."""
    server = hub_server.HubServer().start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    try:
        yield server
    finally:
        server.stop()


def _namespace_name(node_name: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"t-{stem}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(cluster: ClusterHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount ready), deleted after the test."""
    name = _namespace_name(request.node.name)
    cluster.kubectl("create", "namespace", name)
    deadline = time.monotonic() + NAMESPACE_READY_SECONDS
    while cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode:
        if time.monotonic() > deadline:
            raise AssertionError(f"namespace {name}: default ServiceAccount never appeared")
        time.sleep(0.2)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def full_s3() -> Iterator[s3server.S3Info]:
    """A real SeaweedFS with one volume slot, already taken by another bucket: no room for a
    new bucket (the refusal a small disk gives)."""
    info = s3server.up(name=FULL_S3_NAME, volume_max=1)
    client = info.client()
    client.create_bucket(Bucket="filler")
    client.put_object(Bucket="filler", Key="taken", Body=b"x")
    yield info
    s3server.down(FULL_S3_NAME)
