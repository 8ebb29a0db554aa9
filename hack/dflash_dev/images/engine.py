"""The container engine that builds and stores images: Docker with BuildKit, Podman or Buildah,
whichever answers first (or the one named by `make images DOCKER=...`), and the few things
the rest of the tooling asks of it: build, is an image here, its size, its config."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_dev.errors import DevError

# Tried in this order when none is named.
ENGINES = ("docker", "podman", "buildah")
# Buildah and Podman run RUN steps with an OCI runtime by default; chroot isolation works as
# root on machines where runc cannot create namespaces (this project's development machines).
DEFAULT_ISOLATION = "chroot"
INFO_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Engine:
    """A container engine: `kind` is docker, podman or buildah; `binary` what runs it."""

    kind: str
    binary: str

    @property
    def stores_locally(self) -> bool:
        """Podman and Buildah share containers-storage, whose root filesystems we can mount."""
        return self.kind in ("podman", "buildah")


def _kind_of(binary: str) -> str:
    name = Path(binary).name
    for kind in ENGINES:
        if name.startswith(kind):
            return kind
    raise DevError(
        f"DOCKER={binary}: unknown container engine; accepted: docker, podman, buildah "
        "(a name or a path)"
    )


def _probe(binary: str) -> str:
    """Docker must reach its daemon (`info`); Buildah and Podman need none (`version`: their
    `info` waits on the storage lock while a build commits)."""
    return "info" if Path(binary).name.startswith("docker") else "version"


def _answers(binary: str) -> bool:
    found = shutil.which(binary)
    if found is None:
        return False
    try:
        result = subprocess.run(
            [found, _probe(binary)], capture_output=True, timeout=INFO_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def detect_engine(requested: str | None = None) -> Engine:
    """The named engine if it answers `info`, else the first of ENGINES that does."""
    candidates = [requested] if requested else list(ENGINES)
    for binary in candidates:
        if _answers(binary):
            return Engine(_kind_of(binary), shutil.which(binary) or binary)
    tried = ", ".join(f"'{c} {_probe(c)}'" for c in candidates)
    raise DevError(
        f"no container engine answers {tried}, so no image was built. Install one (Debian: "
        "apt-get install buildah, or podman; or run a Docker daemon with BuildKit) or name it "
        "with DOCKER=podman|buildah|docker"
    )


def build_argv(
    engine: Engine,
    dockerfile: Path,
    tag: str,
    context: Path,
    build_args: dict[str, str] | None = None,
    secrets: dict[str, Path] | None = None,
) -> list[str]:
    """The engine's build command line (same flags for all three: -f, -t, --build-arg, --secret)."""
    if engine.kind == "docker":
        argv = [engine.binary, "build"]
    elif engine.kind == "podman":
        argv = [engine.binary, "build", "--layers"]
    else:
        argv = [engine.binary, "build", "--layers"]
    if engine.kind in ("podman", "buildah") and "BUILDAH_ISOLATION" not in os.environ:
        argv.append(f"--isolation={DEFAULT_ISOLATION}")
    argv += ["-f", str(dockerfile), "-t", tag]
    for name, value in sorted((build_args or {}).items()):
        argv += ["--build-arg", f"{name}={value}"]
    for name, path in sorted((secrets or {}).items()):
        argv += ["--secret", f"id={name},src={path}"]
    argv.append(str(context))
    return argv


def build_env(engine: Engine) -> dict[str, str]:
    """Docker builds with BuildKit (the Dockerfiles use RUN --mount)."""
    env = dict(os.environ)
    if engine.kind == "docker":
        env["DOCKER_BUILDKIT"] = "1"
    return env


def _inspect(engine: Engine, ref: str) -> dict[str, Any] | None:
    if engine.kind == "buildah":
        argv = [engine.binary, "inspect", "--type", "image", ref]
    else:
        argv = [engine.binary, "image", "inspect", ref]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return None
    data = json.loads(result.stdout)
    found: dict[str, Any] = data[0] if isinstance(data, list) else data
    return found


def image_exists(engine: Engine, ref: str) -> bool:
    return _inspect(engine, ref) is not None


@dataclass(frozen=True)
class ImageConfig:
    """What a container runtime takes from an image: user, env, working dir, entrypoint, cmd."""

    user: str
    env: dict[str, str]
    working_dir: str
    entrypoint: list[str]
    cmd: list[str]
    labels: dict[str, str]


def image_config(engine: Engine, ref: str) -> ImageConfig:
    """The image's OCI config; DevError naming the image when it is not in local storage."""
    data = _inspect(engine, ref)
    if data is None:
        raise DevError(
            f"image {ref} is not in the local storage of {engine.kind}: build it with "
            "`make images` (and `make base-images` first where its base registries are "
            "unreachable)"
        )
    if engine.kind == "buildah":
        config = (data.get("OCIv1") or {}).get("config") or {}
    else:
        config = data.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    return ImageConfig(
        user=str(config.get("User") or ""),
        env=env,
        working_dir=str(config.get("WorkingDir") or ""),
        entrypoint=list(config.get("Entrypoint") or []),
        cmd=list(config.get("Cmd") or []),
        labels=dict(config.get("Labels") or {}),
    )


def _storage_root(engine: Engine) -> Path:
    result = subprocess.run(
        [engine.binary, "info", "--format", "{{.store.GraphRoot}}"]
        if engine.kind == "buildah"
        else [engine.binary, "info", "--format", "{{.Store.GraphRoot}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(result.stdout.strip())


def image_size(engine: Engine, ref: str) -> int:
    """Bytes of the image's layers, uncompressed (the sum of each layer's diff size)."""
    if engine.kind == "docker":
        argv = [engine.binary, "image", "inspect", "--format", "{{.Size}}", ref]
        result = subprocess.run(argv, capture_output=True, text=True, check=True)
        return int(result.stdout.strip())
    data = _inspect(engine, ref)
    if data is None:
        raise DevError(f"image {ref} is not in the local storage of {engine.kind}")
    image_id = str(data.get("FromImageID") or data.get("Id") or "")
    root = _storage_root(engine)
    images = json.loads((root / "overlay-images" / "images.json").read_text())
    layers = {
        layer["id"]: layer
        for layer in json.loads((root / "overlay-layers" / "layers.json").read_text())
    }
    top = next(image["layer"] for image in images if image["id"] == image_id)
    size = 0
    while top:
        layer = layers[top]
        size += int(layer.get("diff-size") or 0)
        top = layer.get("parent")
    return size


def working_containers(engine: Engine) -> set[str]:
    """IDs of Buildah's working containers (Buildah leaves some behind after a build)."""
    if engine.kind != "buildah":
        return set()
    result = subprocess.run(
        [engine.binary, "containers", "--quiet", "--notruncate"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return set(result.stdout.split())


def other_builds_running() -> bool:
    """Another Buildah/Podman build on this machine (its working containers are not ours)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        program = Path(words[0].decode(errors="replace")).name if words else ""
        if program in ("buildah", "podman") and any(w in (b"build", b"bud") for w in words[1:3]):
            return True
    return False


def build_temp_dirs() -> set[Path]:
    """Buildah's and Podman's temporary dirs (layer blobs while committing: as large as the
    layer) under TMPDIR or /var/tmp; an interrupted build leaves them behind."""
    root = Path(os.environ.get("TMPDIR", "/var/tmp"))  # noqa: S108 - containers' default
    return {
        p for p in root.glob("*") if p.is_dir() and re.fullmatch(r"(buildah|storage)\d+", p.name)
    }


def remove_containers(engine: Engine, ids: set[str], temp_dirs: set[Path] | None = None) -> None:
    """Remove the working containers and temporary dirs a build left behind, unless another
    build runs (then they may be its own: the next build alone cleans up)."""
    if other_builds_running():
        return
    if ids:
        subprocess.run([engine.binary, "rm", *sorted(ids)], capture_output=True, check=False)
    for folder in temp_dirs or set():
        shutil.rmtree(folder, ignore_errors=True)
