"""The local store answers a failed write, read or listing with a StorageError that names the
path and the cause (never a raw OSError), as the S3 store does."""

from __future__ import annotations

from pathlib import Path

import pytest
from dflash_trainer.data.errors import is_user_fixable
from dflash_trainer.storage import LocalStore, StorageError


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A plain file where a folder would have to be: every write below it fails."""
    path = tmp_path / "not-a-folder"
    path.write_text("x")
    return path


def test_a_write_below_a_file_raises_a_storage_error_naming_the_path_and_the_cause(
    blocked: Path,
) -> None:
    target = str(blocked / "sub" / "report.json")

    with pytest.raises(StorageError) as error:
        LocalStore().write_bytes(target, b"{}")

    assert not isinstance(error.value, OSError)
    assert target in str(error.value)
    assert "writing" in str(error.value)
    assert "Not a directory" in str(error.value) or "exists" in str(error.value)


def test_an_upload_that_cannot_be_written_raises_a_storage_error_and_leaves_no_temp_file(
    tmp_path: Path,
) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(b"w" * 1024)
    folder = tmp_path / "final"
    folder.mkdir()
    destination = folder / "model.safetensors"
    destination.mkdir()  # a folder in the way: the final rename fails

    with pytest.raises(StorageError, match=r"uploading .*model.safetensors failed"):
        LocalStore().upload_file(source, str(destination))

    assert [p.name for p in folder.iterdir()] == ["model.safetensors"]


def test_uploading_a_missing_local_file_raises_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="No such file"):
        LocalStore().upload_file(tmp_path / "missing.bin", str(tmp_path / "out.bin"))


def test_reading_a_missing_file_still_says_it_does_not_exist(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing.json")

    with pytest.raises(StorageError) as error:
        LocalStore().read_bytes(missing)

    assert str(error.value) == f"{missing} does not exist"
    assert is_user_fixable(error.value)


def test_reading_below_a_file_raises_a_storage_error(blocked: Path) -> None:
    with pytest.raises(StorageError, match=r"reading .* failed: Not a directory"):
        LocalStore().read_bytes(str(blocked / "x.json"))
