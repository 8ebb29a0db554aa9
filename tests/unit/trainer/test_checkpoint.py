"""Checkpoint commit records, verification on resume, fallback, and retention (local folder;
the same code against S3 is in tests/integration/trainer)."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dflash_trainer.storage import StorageError
from dflash_trainer.train import checkpoint as ckpt


def save(root: Path, step: int, keep_last: int = 5, rng: dict[str, Any] | None = None) -> None:
    folder = ckpt.staging_folder(step)
    ckpt.write_checkpoint_files(
        folder,
        weights={"fc.weight": torch.full((2, 2), float(step))},
        optimizer={"state": {}, "param_groups": [{"lr": 0.1, "params": ["fc.weight"]}]},
        rng=[rng or ckpt.capture_rng_state()],
        state={"step": step, "data": {"epoch": 0, "offset": step * 4}},
    )
    uploader = ckpt.CheckpointUploader(str(root), keep_last)
    uploader.submit(folder, step)
    uploader.wait()


def test_a_commit_record_lists_every_file_with_its_sha256(tmp_path: Path) -> None:
    save(tmp_path, 3)
    record = json.loads((tmp_path / "step-000000003" / "COMMITTED.json").read_text())
    assert [f["path"] for f in record["files"]] == list(ckpt.CHECKPOINT_FILES)
    assert all(len(f["sha256"]) == 64 and f["bytes"] > 0 for f in record["files"])


def test_resume_takes_the_newest_committed_checkpoint(tmp_path: Path) -> None:
    for step in (2, 4, 6):
        save(tmp_path, step)
    found = ckpt.find_latest_checkpoint(str(tmp_path), tmp_path / "dl")
    assert found is not None and found.step == 6
    assert found.state["data"] == {"epoch": 0, "offset": 24}
    assert torch.equal(found.weights()["fc.weight"], torch.full((2, 2), 6.0))
    assert found.optimizer()["param_groups"][0]["lr"] == 0.1


def test_a_corrupted_newest_checkpoint_falls_back_to_the_previous_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save(tmp_path, 2)
    save(tmp_path, 4)
    weights = tmp_path / "step-000000004" / "drafter.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        found = ckpt.find_latest_checkpoint(str(tmp_path), tmp_path / "dl")
    assert found is not None and found.step == 2
    assert "step-000000004 is unusable" in caplog.text and "sha256" in caplog.text


def test_a_checkpoint_without_its_commit_record_does_not_exist(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save(tmp_path, 2)
    save(tmp_path, 4)
    (tmp_path / "step-000000004" / "COMMITTED.json").unlink()
    with caplog.at_level(logging.WARNING):
        found = ckpt.find_latest_checkpoint(str(tmp_path), tmp_path / "dl")
    assert found is not None and found.step == 2
    assert "interrupted save" in caplog.text


def test_no_checkpoint_means_a_fresh_start(tmp_path: Path) -> None:
    assert ckpt.find_latest_checkpoint(str(tmp_path / "empty"), tmp_path / "dl") is None


def test_only_the_newest_k_committed_checkpoints_are_kept(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        save(tmp_path, step, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000003", "step-000000004"]


def test_rng_states_round_trip_through_a_weights_only_load(tmp_path: Path) -> None:
    state = ckpt.capture_rng_state()
    expected = (torch.rand(3).tolist(), float(np.random.rand()), random.random())
    save(tmp_path, 1, rng=state)
    found = ckpt.find_latest_checkpoint(str(tmp_path), tmp_path / "dl")
    assert found is not None
    ckpt.restore_rng_state(found.rng()[0])
    assert (torch.rand(3).tolist(), float(np.random.rand()), random.random()) == expected


def test_a_failed_upload_is_a_warning_until_the_final_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the checkpoint folder should be")
    uploader = ckpt.CheckpointUploader(str(blocker / "checkpoints"), keep_last=2)
    for step in (1, 2):
        folder = ckpt.staging_folder(step)
        ckpt.write_checkpoint_files(
            folder, weights={"w": torch.zeros(1)}, optimizer={}, rng=[], state={"step": step}
        )
        with caplog.at_level(logging.WARNING):
            uploader.submit(folder, step)
    assert "a checkpoint upload failed" in caplog.text and "step 2 retries" in caplog.text
    with pytest.raises(StorageError, match="not-a-folder"):
        uploader.wait()
