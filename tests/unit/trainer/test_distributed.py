"""A 2-process gloo run (torchrun) trains exactly like 1 process with the same global batch,
including a step where one rank has no valid anchor at all (a known DDP deadlock elsewhere)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from dflash_trainer.train.config import TrainConfig
from dflash_trainer.train.distributed import init_distributed
from dflash_trainer.train.trainer import Trainer

STEPS = 4
# Rows 2 and 3 (rank 1's half of the first global batch) have nothing supervised.
UNSUPERVISED_ROWS = (2, 3)


def tokenized_rows() -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(16):
        length = int(rng.integers(12, 25))
        mask = [0] * 4 + [1] * (length - 4)
        if i in UNSUPERVISED_ROWS:
            mask = [0] * length
        rows.append((rng.integers(0, 500, length).tolist(), mask))
    return rows


def run_torchrun(config: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """`torchrun --nproc-per-node 2 -m dflash_trainer.train` on gloo (one thread each)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--standalone",
            "-m",
            "dflash_trainer.train",
            "--config",
            str(config),
            "--termination-log",
            str(folder / "result.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "checkpointing", "dflash2"),
    [
        ("ddp", False, False),
        ("fsdp2", False, False),
        ("fsdp2", True, False),
        ("ddp", False, True),
        ("fsdp2", False, True),
    ],
    ids=["ddp", "fsdp2", "fsdp2-activation-checkpointing", "ddp-dflash2", "fsdp2-dflash2"],
)
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(
    tmp_path: Path,
    strategy: str,
    checkpointing: bool,
    dflash2: bool,
    quick_config: Callable[..., dict[str, Any]],
    tokenized_writer: Callable[..., Path],
    metrics_reader: Callable[[Path], list[dict[str, Any]]],
) -> None:
    folder = tokenized_writer(tmp_path / "tokenized", tokenized_rows())
    common: dict[str, Any] = {
        "data": {
            "tokenized_uri": str(folder),
            "self_distill": None,
            "shuffle": False,
            "max_seq_len": 32,
        },
        "optim": {"lr": 1e-2, "max_steps": STEPS, "warmup_ratio": 0.0},
        "distributed": {"strategy": strategy},
        "checkpoint": {"every_steps": 1000, "resume": False},
        "drafter": {"activation_checkpointing": checkpointing},
    }
    if dflash2:
        # The selector's codebooks are their own FSDP2 unit; rank 1's first micro-batch has no
        # scored slot and must still gather and reduce them.
        common["drafter"]["dflash2"] = {"selector_rank": 8, "selector_top_k": 4}
    one = quick_config(**common, run_root=str(tmp_path / "one"))
    one["data"]["batch_size"] = 4
    one["logging"]["metrics_file"] = str(tmp_path / "one.jsonl")
    Trainer(TrainConfig.model_validate(one), init_distributed(5)).train_steps()

    two = quick_config(**common, run_root=str(tmp_path / "two"))
    two["data"]["batch_size"] = 2
    two["logging"]["metrics_file"] = str(tmp_path / "two.jsonl")
    config = tmp_path / "two.yaml"
    config.write_text(yaml.safe_dump(two))
    done = run_torchrun(config, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    single = [m["loss"] for m in metrics_reader(tmp_path / "one.jsonl")]
    double = [m["loss"] for m in metrics_reader(tmp_path / "two.jsonl")]
    assert len(single) == len(double) == STEPS
    np.testing.assert_allclose(double, single, rtol=1e-4)
    assert metrics_reader(tmp_path / "two.jsonl")[0]["anchors"] > 0
    if dflash2:
        selector_single = [m["selectorLoss"] for m in metrics_reader(tmp_path / "one.jsonl")]
        selector_double = [m["selectorLoss"] for m in metrics_reader(tmp_path / "two.jsonl")]
        np.testing.assert_allclose(selector_double, selector_single, rtol=1e-4)


@pytest.mark.slow
def test_two_processes_resume_from_rank_0s_checkpoint_and_continue_the_same_losses(
    tmp_path: Path,
    quick_config: Callable[..., dict[str, Any]],
    metrics_reader: Callable[[Path], list[dict[str, Any]]],
) -> None:
    cfg = quick_config(
        run_root=str(tmp_path / "run"),
        data={"batch_size": 2},
        optim={"lr": 1e-2, "max_steps": 6, "warmup_ratio": 0.0},
        checkpoint={"every_steps": 3, "keep_last": 3},
    )
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(cfg))
    first = run_torchrun(config, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = {m["step"]: m["loss"] for m in metrics_reader(Path(cfg["logging"]["metrics_file"]))}
    # As if the job died right after committing step 3: step 6 never happened.
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-000000006")
    again = run_torchrun(config, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from step 3" in again.stderr
    after = metrics_reader(Path(cfg["logging"]["metrics_file"]))[len(before) :]
    assert [m["step"] for m in after] == [4, 5, 6]
    np.testing.assert_allclose(
        [m["loss"] for m in after], [before[s] for s in (4, 5, 6)], rtol=1e-6
    )
