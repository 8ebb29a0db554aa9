"""The GPU smoke kit: what an air-gapped GPU machine with a preinstalled torch and transformers
needs, beyond what it has, to run `bench/gpu_smoke.sh`, as wheels in one folder.

    python bench/gpu_smoke_kit.py build DIR     (bench/gpu_smoke.sh --kit DIR; needs PyPI)
    python bench/gpu_smoke_kit.py install DIR   (bench/gpu_smoke.sh --offline DIR; no network)
    python bench/gpu_smoke_kit.py standin DIR --python python3.12
                                                a stand-in for that machine, to rehearse on CPU

The machine it is made for (issue 23): Python 3.12 on x86-64 Linux, torch 2.11 and
transformers 5.17 with their own dependencies, and no vllm, fla or pydantic. The kit holds our
two wheels (dflash-trainer, dflash-memplan) and the third-party wheels the smoke imports that
such a machine lacks, at uv.lock's versions; everything else dflash-trainer declares is
imported only by stages the smoke does not run (S3, audits' plots, the in-cluster status patch).
pyarrow's wheel (52.5 MiB) alone is over the budget: the kit carries it without the parts the
smoke never loads (Flight, S3, ORC, C++ headers and sources, tests), its RECORD rewritten, as
version `<v>+smokekit`. The whole kit must stay within `BUDGET_BYTES`.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_BYTES = 50 << 20
PYTHON_VERSION = "3.12"
# pip download's tags for the GPU machine: CPython 3.12, glibc x86-64.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# Imported by the smoke's stages and absent from a torch 2.11 + transformers 5.17 machine.
THIRD_PARTY = (
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection",  # configs, sources
    "pyarrow",  # Parquet shards: regeneration, tokenization, training, evaluation
    "xxhash",  # the canary's answer keys (regeneration)
    # pydantic-core needs typing_extensions >= 4.14 (TypeAliasType, Sentinel); the machine's own
    # may be older, and the kit's site comes first on PYTHONPATH.
    "typing-extensions",
)  # fmt: skip
OURS = ("dflash-trainer", "dflash-memplan")
# Members of pyarrow's wheel the smoke never loads (pyarrow.fs imports S3 and Flight lazily
# and carries on without them).
PYARROW_DROPPED = re.compile(
    r"^pyarrow/(include/|tests/|src/|.*(flight|_s3|s3fs|gandiva|_orc).*\.(so[.\d]*|pyx|pxd|pxi)$)"
)
KIT_SUFFIX = "smokekit"
# The stand-in: the GPU machine's torch and transformers, their pure dependencies, and (to load
# torch 2.11 on a CPU machine without its 3 GB of CUDA 13.0 wheels) uv.lock's CUDA 13 wheels,
# which carry the same sonames, plus the libcurand that torch 2.11 loads and 2.15 does not.
STANDIN = {"torch": "2.11.0", "transformers": "5.17.0"}
TORCH_PURE_DEPS = ("filelock", "sympy", "networkx", "jinja2", "fsspec", "setuptools")
# The GPU image's other packages the stages care about (issue 29): psutil turns transformers'
# continuous batching on, numpy 2.5 (Python 3.12 only), the triton torch 2.11 ships with, and a
# typing_extensions too old for pydantic-core (the kit must carry its own).
STANDIN_IMAGE_PACKAGES = ("psutil", "numpy==2.5.2", "triton==3.6.0", "typing-extensions==4.12.2")
STANDIN_CURAND = "nvidia-curand==10.4.0.35"
STANDIN_ABSENT = ("pydantic", "pydantic-core", "pyarrow", "vllm", "flash-linear-attention")
EXCLUDE_NEWER = "2026-12-03T00:00:00Z"
MANIFEST = "kit.json"


class KitError(RuntimeError):
    pass


@dataclass(frozen=True)
class KitFile:
    name: str
    size: int
    sha256: str


def _run(argv: list[str], cwd: Path = REPO) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KitError(f"{' '.join(argv[:4])} ... failed:\n{done.stderr.strip()[-1500:]}")
    return done.stdout


def uv_binary() -> str:
    return shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")


def locked_versions(names: tuple[str, ...]) -> dict[str, str]:
    """uv.lock's version of each name (the trainer's resolution)."""
    text = _run([uv_binary(), "export", "--locked", "--package", "dflash-trainer", "--no-dev",
                 "--no-emit-workspace", "--no-hashes", "--format", "requirements.txt"])  # fmt: skip
    pins = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", text, re.MULTILINE))
    found = {name: pins.get(name) for name in names}
    missing = [name for name, version in found.items() if version is None]
    if missing:
        raise KitError(f"uv.lock pins none of {missing} for dflash-trainer")
    return {name: str(version) for name, version in found.items()}


def _record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def build_thin_wheel(source: Path, out_dir: Path, dropped: re.Pattern[str]) -> Path:
    """A copy of the wheel without the members `dropped` matches, versioned `<v>+smokekit`,
    with a RECORD of the members it keeps (pip checks each against it)."""
    name, version, rest = source.name.split("-", 2)
    kit_version = f"{version}+{KIT_SUFFIX}"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{kit_version}.dist-info/"
    target = out_dir / f"{name}-{kit_version}-{rest}"
    records: list[list[str]] = []
    with (
        zipfile.ZipFile(source) as wheel,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as thin,
    ):
        for info in wheel.infolist():
            member = info.filename
            if dropped.match(member) or member == f"{old_info}RECORD":
                continue
            data = wheel.read(member)
            if member.startswith(old_info):
                member = new_info + member[len(old_info) :]
                if member.endswith("METADATA"):
                    data = re.sub(rb"(?m)^Version: .*$", f"Version: {kit_version}".encode(), data)
            thin.writestr(member, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            records.append(_record_line(member, data))
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([*records, [f"{new_info}RECORD", "", ""]])
        thin.writestr(f"{new_info}RECORD", buffer.getvalue())
    return target


def has_pip(python: str) -> bool:
    try:
        done = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False)
    except OSError:
        return False
    return done.returncode == 0


def pip_python() -> str:
    """A Python with pip to download with (uv's venvs have none: then the system's)."""
    for python in (sys.executable, shutil.which("python3") or ""):
        if python and has_pip(python):
            return python
    raise KitError("no Python with pip here to download wheels with (python3 -m pip)")


def download(pins: dict[str, str], out_dir: Path) -> list[Path]:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    _run([pip_python(), "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary",
          ":all:", "--python-version", PYTHON_VERSION, "--implementation", "cp", *platforms,
          "--dest", str(out_dir), *(f"{n}=={v}" for n, v in pins.items())])  # fmt: skip
    return sorted(out_dir.glob("*.whl"))


def build_ours(out_dir: Path) -> list[Path]:
    for package in OURS:
        _run([uv_binary(), "build", "--quiet", "--wheel", "--package", package,
              "--out-dir", str(out_dir)])  # fmt: skip
    return sorted(out_dir.glob("dflash_*.whl"))


def describe(folder: Path) -> list[KitFile]:
    return [
        KitFile(p.name, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.glob("*.whl"))
    ]


def build_kit(kit: Path) -> list[KitFile]:
    """Download, thin and check; writes `kit/*.whl` and `kit/kit.json`."""
    if kit.exists() and any(kit.iterdir()):
        raise KitError(f"{kit} is not empty: give a new folder")
    kit.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        for wheel in download(locked_versions(THIRD_PARTY), raw):
            if wheel.name.startswith("pyarrow-"):
                build_thin_wheel(wheel, kit, PYARROW_DROPPED)
            else:
                shutil.copy2(wheel, kit / wheel.name)
    build_ours(kit)
    files = describe(kit)
    total = sum(f.size for f in files)
    (kit / MANIFEST).write_text(json.dumps({
        "python": PYTHON_VERSION, "platforms": PLATFORMS, "budget_bytes": BUDGET_BYTES,
        "total_bytes": total, "assumes": "torch >= 2.11 and transformers >= 5.17 installed",
        "files": [f.__dict__ for f in files],
    }, indent=2) + "\n")  # fmt: skip
    if total > BUDGET_BYTES:
        raise KitError(f"the kit is {total / 2**20:.2f} MiB, over its {BUDGET_BYTES >> 20} MiB")
    return files


def install_kit(kit: Path, site: Path, python: str = sys.executable) -> str:
    """`pip install --no-index` of every wheel of the kit into `site` (a --target folder put on
    PYTHONPATH by gpu_smoke.sh: the machine's own packages are left as they are). Without pip,
    the wheels are unpacked there (none of them has scripts or data files). Returns how."""
    manifest = json.loads((kit / MANIFEST).read_text())
    wheels = [kit / entry["name"] for entry in manifest["files"]]
    for entry, path in zip(manifest["files"], wheels, strict=True):
        if hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            raise KitError(f"{path}: its sha256 is not the kit's: copy the kit again")
    if has_pip(python):
        _run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
              "--disable-pip-version-check", "--target", str(site),
              *(str(w) for w in wheels)])  # fmt: skip
        return "pip install --no-index"
    site.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    return "unpacked (no pip)"


def locked_cuda_pins() -> list[str]:
    text = _run([uv_binary(), "export", "--locked", "--package", "dflash-trainer", "--no-dev",
                 "--no-emit-workspace", "--no-hashes", "--format", "requirements.txt"])  # fmt: skip
    return re.findall(r"^(nvidia-[A-Za-z0-9_.\-]+==[^\s;]+)", text, re.MULTILINE)


def build_standin(root: Path, python: str) -> Path:
    """A virtual environment standing in for the GPU machine (Python 3.12, torch 2.11,
    transformers 5.17, STANDIN_IMAGE_PACKAGES, none of STANDIN_ABSENT); returns its python."""
    if root.exists():
        raise KitError(f"{root} exists: give a new folder")
    _run([python, "-m", "venv", str(root)])
    venv_python = str(root / "bin" / "python")
    uv = uv_binary()
    _run([uv, "pip", "install", "--quiet", "--python", venv_python, "--no-deps",
          f"torch=={STANDIN['torch']}", STANDIN_CURAND, *locked_cuda_pins()])  # fmt: skip
    _run([uv, "pip", "install", "--quiet", "--python", venv_python, "--exclude-newer",
          EXCLUDE_NEWER, f"transformers=={STANDIN['transformers']}", *TORCH_PURE_DEPS,
          *STANDIN_IMAGE_PACKAGES])  # fmt: skip
    _run([uv, "pip", "uninstall", "--quiet", "--python", venv_python, *STANDIN_ABSENT])
    return Path(venv_python)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("build", "install", "standin"))
    parser.add_argument("kit", type=Path, help="the kit folder")
    parser.add_argument("--site", type=Path, help="install: the --target folder")
    parser.add_argument("--python", default="python3.12", help="standin: a Python 3.12")
    args = parser.parse_args(argv)
    try:
        if args.action == "build":
            files = build_kit(args.kit)
            for f in files:
                print(f"{f.size / 2**20:8.2f} MiB  {f.name}")
            total = sum(f.size for f in files)
            print(f"{total / 2**20:8.2f} MiB  in all ({total} bytes; budget "
                  f"{BUDGET_BYTES >> 20} MiB), {args.kit / MANIFEST}")  # fmt: skip
        elif args.action == "standin":
            print(build_standin(args.kit, args.python))
        else:
            how = install_kit(args.kit, args.site or args.kit / "site")
            print(f"kit installed into {args.site or args.kit / 'site'} ({how})")
    except (KitError, OSError, json.JSONDecodeError) as exc:
        print(f"gpu-smoke kit: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
