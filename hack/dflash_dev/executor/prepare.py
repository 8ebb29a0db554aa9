"""Everything one container start needs, resolved like kubelet does before it creates a
container: env (Secrets, ConfigMaps, downward API), the sandbox with its volumes, container
paths rewritten, Service names resolved to pod IPs, and the base env an image would bring."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from .addresses import Target, resolve_addresses
from .config import HOST_IP
from .context import Context
from .env import PodFacts, resolve_env
from .image_mode import ImageStart, build_image_env, prepare_image_start
from .kube import Obj
from .process import CONTAINER_ENV, DEFAULT_PATH
from .sandbox import Sandbox, SandboxBuilder, sandbox_root, write_kubeconfig

HTTPS_PORT = 443


@dataclass
class Prepared:
    env: dict[str, str]
    sandbox: Sandbox
    cwd: Path
    image: ImageStart | None = None  # image mode: how the container starts from its image


def prepare_start(
    ctx: Context,
    pod: Obj,
    pod_ip: str,
    sandbox: Sandbox | None,
    interrupted: Callable[[float], bool],
) -> Prepared:
    """Resolve a start of the pod's first container; build the sandbox on the first start.

    Raises VolumeMountError (a volume's Secret or ConfigMap, or a key of one, is missing),
    PodConfigError (an env reference is missing: the caller waits and retries) and
    WaitInterruptedError (the pod was deleted while a Service had no pod IP yet).
    """
    meta, container = pod["metadata"], pod["spec"]["containers"][0]
    facts = PodFacts(pod, pod_ip, HOST_IP, ctx.allocatable)
    if sandbox is None:  # volumes first, as kubelet: a missing one is FailedMount, not env's error
        root = sandbox_root(ctx.pods_dir, meta["namespace"], meta["name"], meta["uid"])
        builder = SandboxBuilder(ctx.objects, facts)
        sandbox = builder.build(root, container)
        env = resolve_env(facts, container, ctx.objects.secret_text, ctx.objects.config_map_text)
        builder.mount(sandbox, container, env)
    else:
        env = resolve_env(facts, container, ctx.objects.secret_text, ctx.objects.config_map_text)
    if ctx.engine is None:
        env = {k: sandbox.rewrite(v) for k, v in env.items()}
    env = resolve_addresses(
        env,
        meta["namespace"],
        Target(pod_ip, meta["uid"], pod["spec"].get("nodeName", "")),
        ctx.resolver,
        ctx.ports,
        is_ours=lambda target: target.node_name in ctx.node_names,
        interrupted=interrupted,
    )
    if ctx.engine is not None:
        image = prepare_image_start(ctx.engine, ctx.cfg.instance, pod, sandbox)
        full = build_image_env(image.config, runtime_env(ctx, pod, sandbox), env)
        return Prepared(full, sandbox, sandbox.root, image)
    full = {**base_env(ctx, pod, sandbox), **env}  # the container's own env wins
    return Prepared(full, sandbox, sandbox.working_dir(container.get("workingDir")))


def runtime_env(ctx: Context, pod: Obj, sandbox: Sandbox) -> dict[str, str]:
    """Image mode: what kubelet adds over the image's env (HOSTNAME, the API's address, the
    container marker). The ServiceAccount token is mounted at its real path, so in-cluster
    configuration works as in a cluster: no KUBECONFIG."""
    server = urlparse(ctx.kube.server)
    port = str(server.port or HTTPS_PORT)
    env = {
        "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
        CONTAINER_ENV: str(sandbox.root),
        "KUBERNETES_SERVICE_HOST": server.hostname or HOST_IP,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
    }
    env.update({k: os.environ[k] for k in ctx.cfg.pass_env if k in os.environ})
    return env


def base_env(ctx: Context, pod: Obj, sandbox: Sandbox) -> dict[str, str]:
    """What the image and kubelet would add: PATH (venv first), HOME, HOSTNAME, the API's
    address, and KUBECONFIG for the pod's own ServiceAccount when its token is mounted.
    Nothing else of the executor's environment leaks in (it holds admin credentials)."""
    cfg = ctx.cfg
    server = urlparse(ctx.kube.server)
    port = str(server.port or HTTPS_PORT)
    env = {
        "PATH": f"{cfg.python.parent}:{DEFAULT_PATH}",
        "HOME": str(sandbox.home),
        "TMPDIR": str(sandbox.tmp),
        "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
        "LANG": "C.UTF-8",
        CONTAINER_ENV: str(sandbox.root),
        "KUBERNETES_SERVICE_HOST": server.hostname or HOST_IP,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
    }
    env.update({k: os.environ[k] for k in cfg.pass_env if k in os.environ})
    sa_dir = sandbox.service_account_dir
    if sa_dir is not None:
        namespace = pod["metadata"]["namespace"]
        write_kubeconfig(sandbox.kubeconfig, ctx.kube.server, sa_dir, namespace)
        env["KUBECONFIG"] = str(sandbox.kubeconfig)
    return env
