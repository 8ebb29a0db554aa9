"""The demo's environment: control plane, S3, process executor, the operator (with the chart's
RBAC, its cpu pool pointed at the executor's nodes through chart values) and the S3 Secret.

Every `ensure_*` is idempotent: a second `make demo` reuses what runs. The operator runs as a
tracked background process under `<state>/demo/`, so `make down` stops it with the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dflash_dev import cluster, executor_service, operator_local, procs, s3capacity, s3server
from dflash_dev.errors import DevError
from dflash_dev.executor.config import INSTANCE_LABEL, TAINT
from dflash_dev.images.build import image_ref
from dflash_dev.images.engine import detect_engine, image_exists
from dflash_dev.images.operator_run import operator_image_launch
from dflash_dev.images.rootfs import NAME_PREFIX, remove_rootfs
from dflash_dev.nodes import POOL_LABEL
from dflash_dev.paths import state_root, venv_bin
from dflash_dev.ports import free_port

OPERATOR = "operator"
OPERATOR_READY_SECONDS = 90.0
SECRET_NAME = "dflash-s3"  # noqa: S105 - a Secret name; examples/tiny-cpu.yaml storage.credentialsSecretRef.name
# The pool every stage of examples/tiny-cpu.yaml names.
DEMO_POOL = "cpu"
EXECUTOR_POOL_VALUE = "local"
EXECUTOR_TOLERATION = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
# Env of every pod of the pool. One thread per process: two training pods share two cores,
# and torch's default (all cores each) oversubscribes them. No pod may reach the Hub.
POOL_ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def demo_dir() -> Path:
    return state_root() / "demo"


# ---------------------------------------------------------------- pools (chart values)
def build_pool_values(
    node_selector: dict[str, str | None], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Chart values that put the `cpu` pool on executor nodes. A `None` label removes the
    chart's own selector entry (Helm deletes keys set to null). `env` goes over POOL_ENV."""
    return {
        "nodePools": {
            DEMO_POOL: {
                "nodeSelector": node_selector,
                "tolerations": [EXECUTOR_TOLERATION],
                "env": {**POOL_ENV, **(env or {})},
            }
        }
    }


def executor_pool_values(
    instance: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Every executor node (`make executor-up`), or only one executor instance's (tests)."""
    if instance is None:
        return build_pool_values({POOL_LABEL: EXECUTOR_POOL_VALUE}, env)
    return build_pool_values({POOL_LABEL: None, INSTANCE_LABEL: instance}, env)


def write_values(values: dict[str, Any], path: Path) -> list[str]:
    """The values as a file; returns the helm arguments that use it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values))
    return ["-f", str(path)]


def write_pools_file(values: dict[str, Any], path: Path) -> Path:
    """The pools file the chart renders with these values (what the operator reads)."""
    helm_args = write_values(values, path.with_name(path.stem + "-values.yaml"))
    path.write_text(yaml.safe_dump(operator_local.chart_pools(*helm_args)))
    return path


# ---------------------------------------------------------------- secrets and namespaces
def build_s3_secret(name: str, namespace: str, info: s3server.S3Info) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": {
            "AWS_ACCESS_KEY_ID": info.access_key,
            "AWS_SECRET_ACCESS_KEY": info.secret_key,
        },
    }


def ensure_s3_secret(admin: Path, namespace: str, info: s3server.S3Info) -> None:
    """The run's credentials Secret, applied from stdin: the keys never reach argv or logs."""
    secret = build_s3_secret(SECRET_NAME, namespace, info)
    operator_local.kubectl(admin, "apply", "-f", "-", input=json.dumps(secret))


# ---------------------------------------------------------------- the operator process
@dataclass(frozen=True)
class OperatorHandle:
    pid: int
    log: Path
    health_url: str


def _operator_info() -> Path:
    return demo_dir() / "operator.json"


def running_operator(
    namespaces: tuple[str, ...], from_image: str | None = None
) -> OperatorHandle | None:
    tracked = procs.read_tracked(demo_dir(), OPERATOR)
    if tracked is None or not tracked.is_alive():
        return None
    try:
        info = json.loads(_operator_info().read_text())
    except (OSError, ValueError):
        return None
    started_as = (info.get("namespaces"), info.get("image"), info.get("settings"))
    if started_as != (list(namespaces), from_image, operator_local.local_settings()):
        # Started for other namespaces, image or training settings (or cluster-wide, or on the
        # PyTorchJob path, by an older demo): replace it.
        stop_operator()
        return None
    return OperatorHandle(tracked.pid, tracked.log, str(info["health_url"]))


def _wait_healthy(handle: OperatorHandle) -> None:
    deadline = time.monotonic() + OPERATOR_READY_SECONDS
    while time.monotonic() < deadline:
        tracked = procs.read_tracked(demo_dir(), OPERATOR)
        if tracked is None or not tracked.is_alive():
            raise DevError(
                f"the operator exited at start ({handle.log}):\n{procs.tail(handle.log)}"
            )
        try:
            with urllib.request.urlopen(handle.health_url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise DevError(
        f"the operator was not healthy after {OPERATOR_READY_SECONDS:.0f}s:\n{procs.tail(handle.log)}"
    )


def ensure_operator(
    admin: Path,
    values: dict[str, Any],
    namespaces: tuple[str, ...],
    from_image: str | None = None,
) -> OperatorHandle:
    """The chart's CRD, RBAC and pools (with `values`) installed; the operator running as the
    chart's ServiceAccount, never admin, watching only `namespaces` (the chart's
    `operator.watchNamespaces`): on a shared cluster it never acts on another operator's runs,
    for example those of `make test` started while the demo's operator still runs.
    `from_image`: run it from that operator image (image mode), not from the venv."""
    workdir = demo_dir()
    helm_args = write_values(values, workdir / "values.yaml")
    running = running_operator(namespaces, from_image)
    kubeconfig, pools = operator_local.prepare(admin, workdir, *helm_args)
    if running is not None:
        return running
    metrics_port = free_port()
    health_port = free_port({metrics_port})
    settings = {
        "DFLASH_METRICS_PORT": str(metrics_port),
        "DFLASH_HEALTH_PORT": str(health_port),
        "DFLASH_BIND_ADDRESS": "127.0.0.1",
        "DFLASH_LOG_FORMAT": "text",
        "DFLASH_NAMESPACES": ",".join(namespaces),
        **operator_local.local_settings(),
    }
    if from_image is not None:
        engine = detect_engine()
        argv = operator_image_launch(engine, from_image, workdir, kubeconfig, pools, settings)
        env = {"PATH": os.environ.get("PATH", "")}
    else:
        argv = [str(venv_bin() / "python"), "-m", "dflash_operator.main"]
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "DFLASH_POOLS_FILE": str(pools),
            **settings,
        }
    tracked = procs.start(workdir, OPERATOR, argv, env=env)
    handle = OperatorHandle(tracked.pid, tracked.log, f"http://127.0.0.1:{health_port}/healthz")
    info = {
        "health_url": handle.health_url,
        "namespaces": list(namespaces),
        "image": from_image,
        "settings": operator_local.local_settings(),
    }
    _operator_info().write_text(json.dumps(info))
    _wait_healthy(handle)
    return handle


def stop_operator() -> bool:
    stopped = procs.stop(demo_dir(), OPERATOR)
    if (demo_dir() / "operator-image.json").is_file():  # it ran from the operator image
        with contextlib.suppress(DevError):
            remove_rootfs(detect_engine(), NAME_PREFIX + "demo-operator")
        (demo_dir() / "operator-image.json").unlink()
    return stopped


# ---------------------------------------------------------------- everything
@dataclass(frozen=True)
class DemoImages:
    """Image mode: the images the operator and the stages run from (`make images` tags)."""

    operator: str
    trainer: str
    regen: str


def demo_images(registry: str, tag: str) -> DemoImages:
    """The built images, checked to be here; the operator's default stage images must be
    these (it names ghcr.io/dflash-dev/dflash-<image>:<its version>)."""
    engine = detect_engine()
    refs = {name: image_ref(name, registry, tag) for name in ("operator", "trainer", "regen")}
    missing = [ref for ref in refs.values() if not image_exists(engine, ref)]
    if missing:
        raise DevError(
            f"not built: {', '.join(missing)}; run `make images` (`make base-images` first "
            "where the bases' registries are unreachable)"
        )
    return DemoImages(**refs)


@dataclass(frozen=True)
class DemoEnvironment:
    admin: Path
    s3: s3server.S3Info
    operator: OperatorHandle
    executor_nodes: tuple[str, ...]
    executor_state: Path


def ensure_environment(
    namespace: str, say: Any = print, images: DemoImages | None = None
) -> DemoEnvironment:
    """Cluster, S3, executor, operator (watching `namespace` only): each started unless it
    already runs. With `images` (`make demo FROM_IMAGES=1`), the operator runs from the operator
    image and every pod from the image the operator gives its stage."""
    started = time.monotonic()
    info = cluster.up()
    say(
        f"control plane up ({time.monotonic() - started:.0f}s): export KUBECONFIG={info.kubeconfig}"
    )
    s3 = s3server.up()
    topology, disk = s3server.topology(s3), s3server.disk(s3)
    room = ""
    if topology is not None and disk is not None:
        room = (
            f": {topology.free_slots} of {topology.max_slots} volume slots of "
            f"{s3capacity.VOLUME_SIZE_MB} MiB free, {s3capacity.format_gib(disk.free)} free disk"
        )
    say(f"S3 (SeaweedFS) up at {s3.endpoint_url}{room}")
    executor = executor_service.executor_up(nodes=2, from_images=images is not None)
    how = "from their images' root filesystems" if images else "as local processes"
    say(f"process executor up: nodes {', '.join(executor['nodes'])} run pods {how}")
    admin = Path(info.kubeconfig)
    operator = ensure_operator(
        admin, executor_pool_values(), (namespace,), images.operator if images else None
    )
    say(
        f"operator up (pid {operator.pid}, chart RBAC, namespace {namespace}, pool {DEMO_POOL} -> "
        f"executor nodes{', from ' + images.operator if images else ''}); log {operator.log}"
    )
    return DemoEnvironment(
        admin, s3, operator, tuple(executor["nodes"]), Path(executor["state_dir"])
    )
