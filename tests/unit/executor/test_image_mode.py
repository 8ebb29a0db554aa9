"""Image mode's pure rules: Kubernetes' command/args over ENTRYPOINT/CMD, the user a container
runs as, and the environment order (image, runtime, container)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dflash_dev.errors import DevError
from dflash_dev.executor.image_mode import build_image_env
from dflash_dev.images.engine import ImageConfig
from dflash_dev.images.launch import build_command, resolve_user


def config(**overrides: object) -> ImageConfig:
    base: dict[str, object] = {
        "user": "65532:65532", "env": {"PATH": "/opt/venv/bin:/usr/bin", "HOME": "/tmp"},
        "working_dir": "/tmp", "entrypoint": ["dflash-operator"], "cmd": ["--help"], "labels": {},
    }  # fmt: skip
    base.update(overrides)
    return ImageConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        ([], [], ["dflash-operator", "--help"]),  # ENTRYPOINT + CMD
        ([], ["--version"], ["dflash-operator", "--version"]),  # args replace CMD
        (["python", "-m", "x"], [], ["python", "-m", "x"]),  # command replaces both
        (["python"], ["-m", "x"], ["python", "-m", "x"]),
    ],
)
def test_command_and_args_replace_entrypoint_and_cmd_as_kubernetes_does(
    command: list[str], args: list[str], expected: list[str]
) -> None:
    assert build_command(config(), command, args) == expected


def test_an_image_with_an_empty_entrypoint_runs_the_pods_args() -> None:
    assert build_command(config(entrypoint=[], cmd=["python3"]), [], ["python3", "-m", "m"]) == [
        "python3", "-m", "m",
    ]  # fmt: skip


def test_the_pods_run_as_user_wins_over_the_images_user(tmp_path: Path) -> None:
    assert resolve_user(config(), tmp_path, None, None) == (65532, 65532)
    assert resolve_user(config(), tmp_path, 1000, 2000) == (1000, 2000)
    assert resolve_user(config(user=""), tmp_path, None, None) == (0, 0)
    assert resolve_user(config(user="123"), tmp_path, None, None) == (123, 123)


def test_a_user_name_is_looked_up_in_the_images_passwd(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text(
        "root:x:0:0::/root:/bin/sh\napp:x:1001:1002::/:/bin/sh\n"
    )
    assert resolve_user(config(user="app"), tmp_path, None, None) == (1001, 1002)
    with pytest.raises(DevError, match="no such user"):
        resolve_user(config(user="ghost"), tmp_path, None, None)


def test_the_containers_env_wins_over_the_runtimes_over_the_images() -> None:
    env = build_image_env(
        config(), {"HOSTNAME": "pod", "HOME": "/runtime"}, {"HOME": "/own", "X": "1"}
    )
    assert env["PATH"] == "/opt/venv/bin:/usr/bin"
    assert env["HOSTNAME"] == "pod"
    assert env["HOME"] == "/own"
    assert env["X"] == "1"


def test_an_image_without_path_gets_the_runtimes_default() -> None:
    env = build_image_env(config(env={}), {}, {})
    assert env["PATH"].startswith("/usr/local/sbin:/usr/local/bin")


def test_mount_points_resolve_symlinks_inside_the_image_root(tmp_path: Path) -> None:
    """Debian's /var/run -> /run: the ServiceAccount token's mount point must be the image's
    /run/secrets/..., never this machine's (a link followed from outside the root)."""
    from dflash_dev.images.chroot import resolve_in_root

    root = tmp_path / "rootfs"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")
    (root / "opt").mkdir()
    (root / "opt" / "rel").symlink_to("../run")
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert resolve_in_root(root, token) == root / "run/secrets/kubernetes.io/serviceaccount"
    assert resolve_in_root(root, "/opt/rel/x") == root / "run" / "x"
    assert resolve_in_root(root, "/../../etc/passwd") == root / "etc" / "passwd"
