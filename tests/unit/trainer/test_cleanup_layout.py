"""The cleanup stage reads the checkpoint layout without importing torch: its copy of the
layout must match the checkpoint module's, or DeleteIntermediate would delete the newest one."""

from __future__ import annotations

from pathlib import Path

from dflash_trainer import cleanup
from dflash_trainer.storage import LocalStore
from dflash_trainer.train import checkpoint


def test_cleanup_reads_checkpoints_as_the_checkpoint_module_writes_them() -> None:
    assert cleanup.COMMIT_FILE == checkpoint.COMMIT_FILE
    assert cleanup.STEP_FOLDER.match(checkpoint.step_dir_name(12000).rstrip("/"))


def test_delete_intermediate_keeps_the_newest_committed_checkpoint_not_the_newest_partial_one(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "run")
    store = LocalStore()
    for key in (
        "final/model.safetensors",
        f"checkpoints/{checkpoint.step_dir_name(10)}/{checkpoint.COMMIT_FILE}",
        f"checkpoints/{checkpoint.step_dir_name(20)}/{checkpoint.COMMIT_FILE}",
        f"checkpoints/{checkpoint.step_dir_name(30)}/drafter.safetensors",
    ):
        store.write_bytes(f"{root}/{key}", b"x")

    plan = cleanup.build_cleanup_plan(store, root, cleanup.DELETE_INTERMEDIATE)

    kept = f"checkpoints/{checkpoint.step_dir_name(20).rstrip('/')}/"
    assert kept in plan.kept
    assert sorted(g.name for g in plan.delete) == [
        f"checkpoints/{checkpoint.step_dir_name(10).rstrip('/')}/",
        f"checkpoints/{checkpoint.step_dir_name(30).rstrip('/')}/",
    ]
