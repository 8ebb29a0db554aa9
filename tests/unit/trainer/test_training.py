"""Online training on tiny targets: the loss goes down, data is read as the contract says,
and the stream of rows is sharded and resumable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dflash_trainer.train.batches import (
    DataCursor,
    DataError,
    is_holdout,
    rank_micro_batches,
    read_tokenized,
    split_holdout,
)
from dflash_trainer.train.config import TrainConfig
from dflash_trainer.train.distributed import DistEnv, init_distributed
from dflash_trainer.train.trainer import Trainer

STEPS = 50


def single_process() -> DistEnv:
    return init_distributed(timeout_minutes=5)


def losses_of(cfg: dict[str, Any], metrics: Callable[[Path], list[dict[str, Any]]]) -> list[float]:
    config = TrainConfig.model_validate(cfg)
    Trainer(config, single_process()).train_steps()
    assert config.logging.metrics_file
    return [m["loss"] for m in metrics(Path(config.logging.metrics_file))]


@pytest.mark.parametrize("target", ["tiny_qwen3_config", "tiny_hybrid_config"])
def test_the_loss_decreases_over_50_steps(
    target: str,
    request: pytest.FixtureRequest,
    quick_config: Callable[..., dict[str, Any]],
    metrics_reader: Callable[[Path], list[dict[str, Any]]],
) -> None:
    cfg = quick_config(
        target={"config": request.getfixturevalue(target)},
        data={
            "self_distill": {"samples": 32, "prompt_tokens": 8, "answer_tokens": 20},
            "batch_size": 8,
        },
        optim={"lr": 3e-3, "max_steps": STEPS, "warmup_ratio": 0.0},
        checkpoint={"resume": False, "every_steps": 1000},
    )
    losses = losses_of(cfg, metrics_reader)
    assert len(losses) == STEPS
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < first - 0.2, f"loss went from {first:.3f} to {last:.3f}"


def test_training_reads_the_shards_listed_in_the_manifest_and_skips_held_out_rows(
    tmp_path: Path,
    tokenized_writer: Callable[..., Path],
) -> None:
    rng = np.random.default_rng(0)
    rows = [(rng.integers(0, 500, 20).tolist(), [0] * 6 + [1] * 14) for _ in range(100)]
    folder = tokenized_writer(tmp_path / "tokenized", rows, shard_rows=30)
    data = read_tokenized(str(folder))
    assert len(data) == 100
    tokens, mask = data.row(42, max_len=64)
    assert tokens.tolist() == rows[42][0] and mask.tolist() == rows[42][1]
    train, held = split_holdout(data, 0.2)
    assert len(train) + len(held) == 100 and 5 < len(held) < 40
    assert all(is_holdout(str(i), 0.2) for i in held.ids)
    assert not any(is_holdout(str(i), 0.2) for i in train.ids)
    assert train.row(0, 64)[0].tolist() == rows[int(str(train.ids[0]).split("-")[1])][0]


def test_a_tokenized_folder_without_its_manifest_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "tokenized").mkdir()
    with pytest.raises(DataError, match=r"no readable _SUCCESS.json; the tokenize stage"):
        read_tokenized(str(tmp_path / "tokenized"))


def test_ranks_split_each_global_batch_into_disjoint_micro_batches() -> None:
    rows = np.arange(100, 116)
    parts = [
        rank_micro_batches(rows, batch_size=2, world_size=4, rank=r, grad_accum=2) for r in range(4)
    ]
    flat = sorted(int(i) for rank in parts for micro in rank for i in micro)
    assert flat == list(range(100, 116))
    single = rank_micro_batches(rows, batch_size=4, world_size=2, rank=0, grad_accum=1)
    assert single[0].tolist() == [100, 101, 102, 103]


def test_the_row_stream_resumes_from_its_position_and_reshuffles_each_epoch() -> None:
    first = DataCursor(num_rows=10, global_batch=4, seed=1)
    batches = [first.next_global_batch() for _ in range(5)]
    assert [epoch for epoch, _ in batches] == [0, 0, 1, 1, 2]  # 2 full batches per epoch
    assert not np.array_equal(batches[0][1], batches[2][1])
    resumed = DataCursor(num_rows=10, global_batch=4, seed=1)
    replay = DataCursor(num_rows=10, global_batch=4, seed=1)
    for _ in range(3):
        replay.next_global_batch()
    resumed.restore(replay.state())
    assert np.array_equal(resumed.next_global_batch()[1], batches[3][1])
