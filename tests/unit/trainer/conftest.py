"""Fixtures of the trainer tests: tiny random targets built from configs, tokenized shards,
and a quick training config. Nothing is downloaded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from dflash_trainer.model.target import TargetParts, load_target

# A 6-layer hidden-64 vocab-512 Qwen3: the shape of the calibration in reference/dflash.md.
TINY_QWEN3: dict[str, Any] = {
    "model_type": "qwen3",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
}
# The Gated-DeltaNet hybrid (qwen3_5): linear-attention layers plus one full-attention layer.
TINY_HYBRID: dict[str, Any] = {
    "model_type": "qwen3_5_text",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "max_position_embeddings": 512,
}


def build_tiny_target(config: dict[str, Any], seed: int = 0) -> TargetParts:
    return load_target(
        path=None,
        config=config,
        seed=seed,
        dtype="float32",
        device=torch.device("cpu"),
        cache_dir=Path("/nonexistent"),
    )


@pytest.fixture(scope="session")
def tiny_qwen3() -> TargetParts:
    return build_tiny_target(TINY_QWEN3)


@pytest.fixture(scope="session")
def tiny_hybrid() -> TargetParts:
    return build_tiny_target(TINY_HYBRID)


def write_tokenized_shards(
    folder: Path, rows: list[tuple[list[int], list[int]]], shard_rows: int = 64
) -> Path:
    """Write rows `(input_ids, loss_mask)` as contract-section-4 Parquet + `_SUCCESS.json`."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for n, start in enumerate(range(0, len(rows), shard_rows)):
        chunk = rows[start : start + shard_rows]
        table = pa.table(
            {
                "id": [f"sample-{start + i}" for i in range(len(chunk))],
                "source": ["test"] * len(chunk),
                "input_ids": pa.array([ids for ids, _ in chunk], type=pa.list_(pa.int32())),
                "loss_mask": pa.array([mask for _, mask in chunk], type=pa.list_(pa.int8())),
                "seq_len": pa.array([len(ids) for ids, _ in chunk], type=pa.int32()),
            }
        )
        name = f"shard-{n:05d}.parquet"
        pq.write_table(table, folder / name)
        shards.append({"path": name, "rows": len(chunk)})
    (folder / "_SUCCESS.json").write_text(json.dumps({"shards": shards, "samples": len(rows)}))
    return folder


@pytest.fixture
def quick_config(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """A training config dict for a few-second CPU run on self-distilled data."""

    def build(**sections: Any) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "run_root": str(tmp_path / "run"),
            "seed": 0,
            "target": {"config": dict(TINY_QWEN3)},
            "drafter": {"num_layers": 2, "block_size": 4, "mask_token_id": 511},
            "data": {
                "self_distill": {"samples": 32, "prompt_tokens": 8, "answer_tokens": 16},
                "max_seq_len": 64,
                "batch_size": 4,
            },
            "objective": {"anchors_per_sequence": 64, "gamma": 4.0},
            "optim": {"lr": 3e-3, "max_steps": 6, "warmup_ratio": 0.0},
            "checkpoint": {"every_steps": 100},
            "logging": {"every_steps": 1, "metrics_file": str(tmp_path / "metrics.jsonl")},
        }
        for section, values in sections.items():
            if isinstance(values, dict) and isinstance(cfg.get(section), dict):
                cfg[section] = {**cfg[section], **values}
            else:
                cfg[section] = values
        return cfg

    return build


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def tiny_qwen3_config() -> dict[str, Any]:
    return dict(TINY_QWEN3)


@pytest.fixture
def tiny_hybrid_config() -> dict[str, Any]:
    return dict(TINY_HYBRID)


@pytest.fixture
def tokenized_writer() -> Callable[..., Path]:
    return write_tokenized_shards


@pytest.fixture
def metrics_reader() -> Callable[[Path], list[dict[str, Any]]]:
    return read_metrics
