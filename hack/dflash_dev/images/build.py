"""`make images` and `make base-images`: build the three images, or the stand-ins of their
bases, with whichever container engine is here (engine.py), and report each build's time and
size. The bases are the Dockerfiles' ARG defaults (the upstream images); a stand-in is tagged
with the same name, so the Dockerfiles build on it unchanged (docs/images.md)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dflash_dev.errors import DevError
from dflash_dev.paths import REPO_ROOT, state_root

from .engine import (
    Engine,
    build_argv,
    build_env,
    build_temp_dirs,
    image_exists,
    image_size,
    remove_containers,
    working_containers,
)

IMAGES = ("operator", "trainer", "regen")
IMAGES_DIR = REPO_ROOT / "images"
PROXY_CA_SECRET = "proxy-ca"  # noqa: S105 - the build secret's id, not a secret
_ARG = re.compile(r"^ARG\s+([A-Z_]+)=(\S+)\s*$", re.MULTILINE)
# Which stand-in (images/base/<name>/Dockerfile) replaces the image each base argument names.
STAND_INS = {"UV_IMAGE": "uv", "PYTHON_BASE": "python", "CUDA_BASE": "cuda", "VLLM_BASE": "vllm"}
# The order they build in (the vLLM stand-in builds on the uv and CUDA ones).
STAND_IN_ORDER = ("UV_IMAGE", "PYTHON_BASE", "CUDA_BASE", "VLLM_BASE")
DEBIAN_SUITE = "bookworm"
ROOTFS_TAR = f"debian-{DEBIAN_SUITE}.tar"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"


def dockerfile(image: str) -> Path:
    return IMAGES_DIR / image / "Dockerfile"


def base_args(path: Path) -> dict[str, str]:
    """The `ARG NAME=default` lines before the first FROM: the bases and their defaults."""
    head = path.read_text().split("\nFROM ", 1)[0]
    return dict(_ARG.findall(head))


def all_base_args() -> dict[str, str]:
    """Every base argument of the three Dockerfiles (they must agree on shared ones)."""
    found: dict[str, str] = {}
    for image in IMAGES:
        for name, value in base_args(dockerfile(image)).items():
            if found.setdefault(name, value) != value:
                raise DevError(
                    f"{dockerfile(image)}: ARG {name}={value}, but another Dockerfile says "
                    f"{found[name]}; make them agree"
                )
    return found


def strip_digest(ref: str) -> str:
    """`name:tag@sha256:...` -> `name:tag`: what a stand-in can be tagged as."""
    return ref.split("@", 1)[0]


def qualified(ref: str) -> str:
    """Docker's normalization: `python:3` -> `docker.io/library/python:3`, `vllm/x` ->
    `docker.io/vllm/x`. A stand-in is tagged so, or Buildah would tag it `localhost/...`."""
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if rest else f"docker.io/library/{ref}"


def image_ref(image: str, registry: str, tag: str) -> str:
    return f"{registry.rstrip('/')}/dflash-{image}:{tag}"


# What the images' build steps mount from the build context (.dockerignore lets in no more).
LOCK_FILES = (
    "uv.lock",
    "pyproject.toml",
    "operator/pyproject.toml",
    "trainer/pyproject.toml",
    "hack/pyproject.toml",
    "memplan/pyproject.toml",
    "images/regen/requirements.txt",
)
SOURCE_DIRS = ("operator/dflash_operator", "trainer/dflash_trainer", "memplan/dflash_memplan")


def context_digests(root: Path = REPO_ROOT) -> dict[str, str]:
    """LOCK_DIGEST and SOURCES_DIGEST: sha256 of what the build steps mount, so a change of
    them invalidates those steps' cache on every engine (Buildah keys a RUN on its text and
    arguments, not on its mounts' content)."""
    lock = hashlib.sha256()
    for name in LOCK_FILES:
        path = root / name
        if path.is_file():
            lock.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    sources = hashlib.sha256()
    for folder in SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                sources.update(
                    str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0"
                )
    return {"LOCK_DIGEST": lock.hexdigest(), "SOURCES_DIGEST": sources.hexdigest()}


def proxy_ca_file(explicit: str | None, scratch: Path) -> tuple[Path, str]:
    """The CA bundle the build trusts for downloads (the secret `proxy-ca`): PROXY_CA, else
    this machine's SSL_CERT_FILE, else an empty file (the images' own trust store is used)."""
    for source, value in (
        ("PROXY_CA", explicit),
        ("SSL_CERT_FILE", os.environ.get("SSL_CERT_FILE")),
    ):
        if value:
            path = Path(value)
            if not path.is_file():
                raise DevError(f"{source}={value}: no such file; give a PEM CA bundle")
            return path, f"{source}={value}"
    empty = scratch / "no-proxy-ca.pem"
    empty.write_text("")
    return empty, "none"


@dataclass(frozen=True)
class Built:
    ref: str
    seconds: float
    size: int


def _build(
    engine: Engine,
    path: Path,
    ref: str,
    context: Path,
    build_args: dict[str, str],
    secrets: dict[str, Path],
) -> Built:
    argv = build_argv(engine, path, ref, context, build_args, secrets)
    print(f"building {ref} from {path.relative_to(REPO_ROOT)} with {engine.kind}", flush=True)
    before, temp_before = working_containers(engine), build_temp_dirs()
    started = time.monotonic()
    try:
        result = subprocess.run(argv, env=build_env(engine), cwd=REPO_ROOT, check=False)
    finally:
        # Buildah 1.28 keeps the working containers of stages only mounted (`--mount=from=`)
        # and of interrupted builds (each holds a writable layer), and an interrupted commit
        # leaves its layer blob in /var/tmp. Remove this build's.
        remove_containers(
            engine, working_containers(engine) - before, build_temp_dirs() - temp_before
        )
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise DevError(f"building {ref} failed (exit {result.returncode}): {' '.join(argv)}")
    return Built(ref, seconds, image_size(engine, ref))


def _stand_in_overrides(engine: Engine, args: dict[str, str]) -> dict[str, str]:
    """A base pinned by digest cannot be a local stand-in (its digest differs): where the
    digest-less tag is a local stand-in, build on that tag instead, and say so."""
    overrides = {}
    for name, ref in args.items():
        bare = strip_digest(ref)
        if bare != ref and image_exists(engine, bare) and not image_exists(engine, ref):
            print(f"  {name}: {ref} is not here; building on the local {bare} (a stand-in)")
            overrides[name] = bare
    return overrides


def build_images(
    engine: Engine, images: list[str], registry: str, tag: str, proxy_ca: str | None
) -> list[Built]:
    unknown = [i for i in images if i not in IMAGES]
    if unknown:
        raise DevError(
            f"IMAGES={' '.join(images)}: unknown {unknown}; accepted: {', '.join(IMAGES)}"
        )
    built = []
    with tempfile.TemporaryDirectory(prefix="dflash-images-") as scratch:
        ca, said = proxy_ca_file(proxy_ca, Path(scratch))
        print(f"container engine: {engine.kind} ({engine.binary}); proxy CA: {said}")
        digests = context_digests()
        for image in images:
            path = dockerfile(image)
            build_args = {**_stand_in_overrides(engine, base_args(path)), **digests}
            ref = image_ref(image, registry, tag)
            built.append(_build(engine, path, ref, REPO_ROOT, build_args, {PROXY_CA_SECRET: ca}))
    record(built, "images")
    return built


# ---------------------------------------------------------------- stand-ins of the bases
def base_context() -> Path:
    return state_root() / "base-images"


def _debian_rootfs(context: Path, mirror: str) -> Path:
    """A minimal Debian (mmdebstrap, from the Debian archive) as a tarball."""
    tar = context / ROOTFS_TAR
    if tar.is_file():
        return tar
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise DevError(
            "make base-images needs mmdebstrap to build the Debian root filesystem of the "
            "stand-ins (Debian: apt-get install mmdebstrap)"
        )
    print(f"building a Debian {DEBIAN_SUITE} root filesystem with mmdebstrap from {mirror}")
    partial = tar.with_suffix(".partial.tar")
    subprocess.run(
        [mmdebstrap, "--variant=minbase", "--include=ca-certificates", DEBIAN_SUITE, str(partial), mirror],
        check=True,
    )  # fmt: skip
    partial.replace(tar)
    return tar


def _uv_binaries(context: Path, version: str) -> None:
    """/uv and /uvx of the uv image, from the uv wheel on PyPI (the same binaries)."""
    if (context / "uv").is_file() and (context / "uvx").is_file():
        found = subprocess.run(
            [context / "uv", "--version"], capture_output=True, text=True, check=False
        )
        if found.stdout.split()[1:2] == [version]:
            return
    with tempfile.TemporaryDirectory(prefix="dflash-uv-") as folder:
        pip = [shutil.which("python3") or "python3", "-m", "pip"]
        subprocess.run(
            [*pip, "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--platform", "manylinux_2_17_x86_64", "-d", folder, f"uv=={version}"],
            check=True,
        )  # fmt: skip
        wheel = next(Path(folder).glob(f"uv-{version}-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(("/scripts/uv", "/scripts/uvx")):
                    out = context / Path(name).name
                    out.write_bytes(archive.read(name))
                    out.chmod(0o755)


# The vLLM image's Python. Debian packages no CPython 3.12 any more and python-build-standalone
# is downloaded from GitHub, so the stand-in takes a 3.12 of this machine (a pyenv or
# distribution build), named by PYTHON312 or found here.
VLLM_PYTHON = "3.12"
PYTHON_CANDIDATES = (
    "python3.12",
    "~/.pyenv/versions/3.12*/bin/python3.12",
    "/opt/python3.12/bin/python3.12",
)


def find_python312(explicit: str | None) -> Path:
    """The install prefix of the CPython 3.12 the vLLM stand-in carries."""
    candidates = [explicit] if explicit else list(PYTHON_CANDIDATES)
    for candidate in candidates:
        pattern = str(Path(candidate).expanduser())
        matches = sorted(Path("/").glob(pattern.lstrip("/"))) if "*" in pattern else []
        found = matches[-1] if matches else shutil.which(pattern) if "*" not in pattern else None
        if found and Path(found).is_file():
            said = subprocess.run(
                [str(found), "-c", "import sys; print(sys.version_info[0], sys.version_info[1], sys.base_prefix)"],
                capture_output=True, text=True, check=False,
            ).stdout.split()  # fmt: skip
            version = ".".join(said[:2])
            if version == VLLM_PYTHON:
                return Path(said[2])  # the install prefix (a pyenv shim resolves to it too)
            if explicit:
                raise DevError(
                    f"PYTHON312={explicit}: is Python {version or '?'}, not {VLLM_PYTHON}"
                )
    raise DevError(
        f"the vLLM stand-in needs a CPython {VLLM_PYTHON} of this machine (the vLLM image's "
        f"Python; Debian no longer packages it): set PYTHON312=/path/to/python{VLLM_PYTHON} "
        "(a pyenv or distribution build with shared libpython)"
    )


def _python312_tar(context: Path, prefix: Path) -> None:
    """The prefix (bin, lib, include), without its tests and installed packages."""
    tar = context / "python312.tar"
    excluded = (
        f"lib/python{VLLM_PYTHON}/test",
        f"lib/python{VLLM_PYTHON}/site-packages",
        "__pycache__",
    )
    import tarfile

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if any(part in info.name for part in excluded) else info

    with tarfile.open(tar, "w") as archive:
        for part in ("bin", "lib", "include"):
            archive.add(prefix / part, arcname=part, filter=keep)
    print(f"the vLLM stand-in's Python: {prefix} ({tar.stat().st_size / 1e6:.0f} MB)")


def _constraints(context: Path) -> None:
    """vLLM's dependencies at the regen requirements' pins (name==version, no hashes)."""
    text = (IMAGES_DIR / "regen" / "requirements.txt").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.\-]+(?:\[[^\]]*\])?==[^\s;\\]+)", text, re.MULTILINE)
    (context / "constraints.txt").write_text("\n".join(pins) + "\n")


def build_base_images(
    engine: Engine,
    proxy_ca: str | None,
    mirror: str,
    rebuild: bool | list[str] = False,
    python312: str | None = None,
    images: list[str] | None = None,
) -> list[Built]:
    """Every stand-in the `images` need that is not here yet (all with `rebuild`), tagged as
    the upstream base."""
    args = all_base_args()
    needed = {name for image in images or IMAGES for name in base_args(dockerfile(image))}
    if "VLLM_BASE" in needed:
        needed |= set(base_args(IMAGES_DIR / "base" / "vllm" / "Dockerfile"))
    context = base_context()
    context.mkdir(parents=True, exist_ok=True)
    built = []
    with tempfile.TemporaryDirectory(prefix="dflash-base-") as scratch:
        ca, said = proxy_ca_file(proxy_ca, Path(scratch))
        print(f"container engine: {engine.kind} ({engine.binary}); proxy CA: {said}")
        for name in (n for n in STAND_IN_ORDER if n in needed):
            ref = qualified(strip_digest(args[name]))
            again = rebuild is True or (isinstance(rebuild, list) and STAND_INS[name] in rebuild)
            if image_exists(engine, ref) and not again:
                print(
                    f"{ref}: here already (make base-images REBUILD=1 builds it again, REBUILD=vllm that one)"
                )
                continue
            if name in ("PYTHON_BASE", "CUDA_BASE"):
                _debian_rootfs(context, mirror)
            elif name == "UV_IMAGE":
                _uv_binaries(context, ref.rsplit(":", 1)[1])
            else:
                _constraints(context)
                _python312_tar(context, find_python312(python312))
            build_args = {}
            if name == "VLLM_BASE":
                build_args = {
                    "UV_IMAGE": strip_digest(args["UV_IMAGE"]),
                    "CUDA_BASE": strip_digest(args["CUDA_BASE"]),
                    "VLLM_VERSION": ref.rsplit(":v", 1)[1],
                }
            path = IMAGES_DIR / "base" / STAND_INS[name] / "Dockerfile"
            built.append(_build(engine, path, ref, context, build_args, {PROXY_CA_SECRET: ca}))
    # The root filesystem is only an input of the stand-ins built above: no need to keep it.
    for done in (ROOTFS_TAR, "python312.tar"):
        (context / done).unlink(missing_ok=True)
    record(built, "base-images")
    return built


def record(built: list[Built], what: str) -> None:
    """Print a table, and append it to .local/images/builds.jsonl (docs/benchmarks.md)."""
    if not built:
        return
    print(f"\n{'image':58} {'size':>9} {'build':>8}")
    for item in built:
        print(f"{item.ref:58} {item.size / 1e9:7.2f}GB {item.seconds:7.0f}s")
    log = state_root() / "images" / "builds.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        for item in built:
            entry = {
                "what": what,
                "ref": item.ref,
                "seconds": round(item.seconds, 1),
                "bytes": item.size,
            }
            out.write(
                json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **entry})
                + "\n"
            )
