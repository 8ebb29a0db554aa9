"""The process's side of leader election: which Lease, under which identity, a /healthz that
answers while standing by, and what happens when the lease is lost (`runtime/leader.py` holds
the election itself)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dflash_operator.config import ConfigError, OperatorConfig
from dflash_operator.runtime.leader import LeaseSettings

log = logging.getLogger(__name__)
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# The exit code of an instance that lost its lease: the kubelet restarts it as a standby.
EXIT_LOST_LEASE = 3


def process_identity() -> str:
    """Who this operator process is, for kopf (`kopf.run(identity=...)`): the pod's name, else
    the host's, and the pid. Never kopf's default, `getpass.getuser()`: the image runs as a
    numeric UID with no passwd entry (65532), where that raises KeyError at start."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}@{os.getpid()}"


def lease_settings(config: OperatorConfig) -> LeaseSettings:
    namespace = config.lease_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace and SERVICE_ACCOUNT_NAMESPACE.exists():
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    if not namespace:
        raise ConfigError(
            "--leader-election needs the Lease's namespace: set --lease-namespace / "
            "DFLASH_LEASE_NAMESPACE or POD_NAMESPACE (the chart sets it from the pod)"
        )
    # Unique even when a restarted pod keeps its name (client-go appends a UUID too).
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return LeaseSettings(
        name=config.lease_name,
        namespace=namespace,
        identity=f"{base}_{uuid.uuid4().hex[:8]}",
        duration=config.lease_duration,
        renew_deadline=config.lease_renew_deadline,
        retry_period=config.lease_retry_period,
    )


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"standing by\n")

    def log_message(self, *_: object) -> None:
        return


@contextmanager
def standby_health(config: OperatorConfig) -> Iterator[None]:
    """/healthz answers 200 while this instance stands by (kopf's own endpoint takes over the
    port once it leads), so the kubelet does not restart a healthy standby."""
    if not config.health_port:
        yield
        return
    server = ThreadingHTTPServer((config.bind_address, config.health_port), _Healthy)
    thread = threading.Thread(target=server.serve_forever, name="standby-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def exit_on_lost_lease() -> None:
    """Stop acting at once: another instance may lead as soon as the lease runs out."""
    log.error("lost the leader lease (not renewed in time); exiting so that one instance acts")
    logging.shutdown()
    os._exit(EXIT_LOST_LEASE)
