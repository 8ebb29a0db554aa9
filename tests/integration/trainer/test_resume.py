"""Kill the trainer at a random step and resume from S3: the loss curve continues exactly.
A corrupted newest checkpoint falls back to the previous one."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_trainer.storage import join_uri, store_for

MAX_STEPS = 30
POLL_SECONDS = 0.005


def start_training(config: dict[str, Any], folder: Path, name: str) -> subprocess.Popen[str]:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dflash_trainer.train",
            "--config",
            str(path),
            "--termination-log",
            str(folder / f"{name}.result.json"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> str:
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return err


@pytest.mark.slow
def test_a_killed_run_resumes_from_s3_with_the_same_next_step_loss(
    s3_prefix: str,
    tmp_path: Path,
    resumable_config: Callable[[str, Path, int], dict[str, Any]],
    metrics_reader: Callable[[Path], list[dict[str, Any]]],
) -> None:
    root = s3_prefix
    reference = resumable_config(join_uri(root, "reference"), tmp_path / "ref.jsonl", MAX_STEPS)
    finish(start_training(reference, tmp_path, "reference"))
    expected = {m["step"]: m["loss"] for m in metrics_reader(tmp_path / "ref.jsonl")}

    kill_at = random.Random(os.getpid()).randint(6, 18)
    killed = resumable_config(join_uri(root, "killed"), tmp_path / "killed.jsonl", MAX_STEPS)
    process = start_training(killed, tmp_path, "killed")
    while len(metrics_reader(tmp_path / "killed.jsonl")) < kill_at:
        assert process.poll() is None, f"the run ended before step {kill_at}"
        time.sleep(POLL_SECONDS)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = len(metrics_reader(tmp_path / "killed.jsonl"))

    log = finish(start_training(killed, tmp_path, "resumed"))
    resumed = metrics_reader(tmp_path / "killed.jsonl")[done_before:]
    first = resumed[0]["step"]
    assert f"resumed from step {first - 1}" in log, f"killed at {done_before}; {log[-2000:]}"
    assert 4 <= first - 1 <= done_before  # from a checkpoint taken before the kill
    assert [m["step"] for m in resumed] == list(range(first, MAX_STEPS + 1))
    for m in resumed:
        assert m["loss"] == pytest.approx(expected[m["step"]], rel=1e-6, abs=1e-7), m["step"]


@pytest.mark.slow
def test_a_corrupted_newest_checkpoint_in_s3_falls_back_to_the_previous_one(
    s3_prefix: str,
    tmp_path: Path,
    resumable_config: Callable[[str, Path, int], dict[str, Any]],
    metrics_reader: Callable[[Path], list[dict[str, Any]]],
) -> None:
    config = resumable_config(join_uri(s3_prefix, "run"), tmp_path / "run.jsonl", 12)
    config["checkpoint"]["keep_last"] = 3  # steps 4, 8 and 12 stay
    finish(start_training(config, tmp_path, "first"))
    expected = {m["step"]: m["loss"] for m in metrics_reader(tmp_path / "run.jsonl")}
    newest = join_uri(s3_prefix, "run", "checkpoints", "step-000000012", "drafter.safetensors")
    store = store_for(newest)
    data = bytearray(store.read_bytes(newest))
    data[len(data) // 2] ^= 0xFF
    store.write_bytes(newest, bytes(data))

    config["logging"]["metrics_file"] = str(tmp_path / "again.jsonl")
    log = finish(start_training(config, tmp_path, "again"))
    assert "step-000000012 is unusable" in log and "sha256" in log
    assert "resumed from step 8" in log
    resumed = metrics_reader(tmp_path / "again.jsonl")
    assert [m["step"] for m in resumed] == [9, 10, 11, 12]
    for m in resumed:
        assert m["loss"] == pytest.approx(expected[m["step"]], rel=1e-6, abs=1e-7), m["step"]
