"""The operator run from its image (the demo's and the image e2e's image mode): the launch of
`dflash-operator` from the operator image's root filesystem, as its USER, with a read-only
root, /tmp a tmpfs, and its kubeconfig and pools file mounted read-only at
/etc/dflash-operator/ (where the chart's Deployment mounts the pools ConfigMap)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .engine import Engine, image_config
from .launch import Mount, build_command, build_spec, launcher_argv, resolve_user
from .rootfs import create_rootfs

CONFIG_DIR = "/etc/dflash-operator"


def operator_image_launch(
    engine: Engine,
    image: str,
    workdir: Path,
    kubeconfig: Path,
    pools: Path,
    env: dict[str, str],
    name: str = "demo-operator",
) -> list[str]:
    """The argv that starts the operator from `image` (a tracked process runs it). `env` is the
    operator's own settings (DFLASH_*); KUBECONFIG and DFLASH_POOLS_FILE point into the mount."""
    config = image_config(engine, image)
    rootfs = create_rootfs(engine, image, name)
    uid, gid = resolve_user(config, rootfs.path, None, None)
    workdir.mkdir(parents=True, exist_ok=True)
    mounted = workdir / "operator-image"
    shutil.rmtree(mounted, ignore_errors=True)
    mounted.mkdir(parents=True)
    for source, target in ((kubeconfig, "kubeconfig"), (pools, "pools.yaml")):
        copy = mounted / target
        shutil.copyfile(source, copy)
        copy.chmod(0o400)
        os.chown(copy, uid, gid)
    own = {
        **env,
        "KUBECONFIG": f"{CONFIG_DIR}/kubeconfig",
        "DFLASH_POOLS_FILE": f"{CONFIG_DIR}/pools.yaml",
    }
    spec = build_spec(
        image=image, rootfs=rootfs.path, argv=build_command(config, [], []),
        env={**config.env, **own},
        mounts=[Mount("/tmp", tmpfs=True), Mount(CONFIG_DIR, str(mounted), readonly=True)],  # noqa: S108 - the container's /tmp
        uid=uid, gid=gid, cwd=config.working_dir or "/", readonly_root=True,
    )  # fmt: skip
    spec_file = workdir / "operator-image.json"
    spec_file.write_text(json.dumps(spec))
    return launcher_argv(spec_file)
