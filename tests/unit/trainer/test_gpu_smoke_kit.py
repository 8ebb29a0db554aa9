"""The GPU smoke kit (bench/gpu_smoke_kit.py): pyarrow's wheel thinned to what the smoke loads
still installs with pip and says what it is; the kit installs without pip too; it carries only
what dflash-trainer declares. Building a real kit needs PyPI: docs/benchmarks.md has the run."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
# Members of the real pyarrow 26.0.1 cp312 wheel, with what the kit must do with each.
KEPT = [
    "pyarrow/__init__.py", "pyarrow/fs.py", "pyarrow/flight.py", "pyarrow/libarrow.so.2600",
    "pyarrow/libparquet.so.2600", "pyarrow/libarrow_substrait.so.2600",
    "pyarrow/libarrow_dataset.so.2600", "pyarrow/libarrow_compute.so.2600",
    "pyarrow/lib.cpython-312-x86_64-linux-gnu.so", "pyarrow/_fs.cpython-312-x86_64-linux-gnu.so",
    "pyarrow/_parquet.cpython-312-x86_64-linux-gnu.so", "pyarrow/libarrow_python.so.2600",
]  # fmt: skip
DROPPED = [
    "pyarrow/libarrow_flight.so.2600", "pyarrow/_flight.cpython-312-x86_64-linux-gnu.so",
    "pyarrow/libarrow_s3.so.2600", "pyarrow/_s3fs.cpython-312-x86_64-linux-gnu.so",
    "pyarrow/_orc.cpython-312-x86_64-linux-gnu.so", "pyarrow/include/arrow/api.h",
    "pyarrow/tests/test_array.py", "pyarrow/src/arrow/python/common.cc",
]  # fmt: skip


def load_kit() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_smoke_kit", REPO / "bench" / "gpu_smoke_kit.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke_kit"] = module
    spec.loader.exec_module(module)
    return module


kit = load_kit()


def fake_wheel(folder: Path, name: str = "pyarrow", version: str = "26.0.1") -> Path:
    path = folder / f"{name}-{version}-cp312-cp312-manylinux_2_28_x86_64.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        for member in [*KEPT, *DROPPED]:
            wheel.writestr(member, f"# {member}\n")
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp312-cp312-manylinux_2_28_x86_64\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.parametrize("member", KEPT)
def test_the_thinning_keeps_what_pyarrow_loads(member: str) -> None:
    assert not kit.PYARROW_DROPPED.match(member)


@pytest.mark.parametrize("member", DROPPED)
def test_the_thinning_drops_what_the_smoke_never_loads(member: str) -> None:
    assert kit.PYARROW_DROPPED.match(member)


def test_a_thinned_wheel_is_renamed_recorded_and_installs_with_pip(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    thin = kit.build_thin_wheel(fake_wheel(tmp_path), out, kit.PYARROW_DROPPED)
    assert thin.name.startswith("pyarrow-26.0.1+smokekit-cp312")
    with zipfile.ZipFile(thin) as wheel:
        names = set(wheel.namelist())
        record = wheel.read("pyarrow-26.0.1+smokekit.dist-info/RECORD").decode()
        metadata = wheel.read("pyarrow-26.0.1+smokekit.dist-info/METADATA").decode()
    assert set(KEPT) <= names and not set(DROPPED) & names
    assert "Version: 26.0.1+smokekit" in metadata
    recorded = {line.split(",")[0] for line in record.splitlines()}
    assert recorded == names
    python = shutil.which("python3")
    if python is None or not kit.has_pip(python):
        pytest.skip("no python3 with pip here")
    done = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
         str(tmp_path / "site"), "--disable-pip-version-check", "--no-compile",
         "--ignore-requires-python", "--platform", "manylinux_2_28_x86_64", "--python-version",
         "3.12", "--only-binary", ":all:", str(thin)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "pyarrow" / "libparquet.so.2600").exists()


def test_the_kit_installs_without_pip_by_unpacking_its_wheels(tmp_path: Path) -> None:
    folder = tmp_path / "kit"
    folder.mkdir()
    wheel = fake_wheel(folder, "xxhash", "4.1.0")
    files = kit.describe(folder)
    (folder / kit.MANIFEST).write_text(json.dumps({"files": [f.__dict__ for f in files]}))

    how = kit.install_kit(folder, tmp_path / "site", python="/nonexistent/python")

    assert how == "unpacked (no pip)"
    assert (tmp_path / "site" / "pyarrow" / "fs.py").exists()
    wheel.write_bytes(wheel.read_bytes() + b"x")
    with pytest.raises(kit.KitError, match="sha256 is not the kit's"):
        kit.install_kit(folder, tmp_path / "site2", python="/nonexistent/python")


def test_the_kit_carries_only_what_dflash_trainer_declares() -> None:
    project = tomllib.loads((REPO / "trainer" / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    # pydantic's own, and typing_extensions (which pydantic-core needs at >= 4.14)
    transitive = {"pydantic-core", "annotated-types", "typing-inspection", "typing-extensions"}
    assert set(kit.THIRD_PARTY) - transitive <= declared
    assert set(kit.OURS) == {"dflash-trainer", "dflash-memplan"}
    assert kit.BUDGET_BYTES == 50 << 20


def test_the_kit_carries_typing_extensions_for_pydantic_core() -> None:
    """The GPU machine's typing_extensions may be older than pydantic-core accepts (< 4.14):
    the kit's own, first on PYTHONPATH, is the one imported."""
    assert "typing-extensions" in kit.THIRD_PARTY
    assert any(p.startswith("typing-extensions==4.1") for p in kit.STANDIN_IMAGE_PACKAGES)
