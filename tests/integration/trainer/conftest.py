"""Fixtures of the trainer integration tests: a quick training config on a tiny target."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture
def resumable_config() -> Callable[[str, Path, int], dict[str, Any]]:
    """A run long enough (~50 ms a step) to be killed in the middle, checkpointing often."""

    def build(run_root: str, metrics: Path, max_steps: int) -> dict[str, Any]:
        return {
            "run_root": run_root,
            "seed": 3,
            "target": {"config": dict(TINY_QWEN3)},
            "drafter": {"num_layers": 2, "block_size": 4, "mask_token_id": 511},
            "data": {
                "self_distill": {"samples": 64, "prompt_tokens": 8, "answer_tokens": 32},
                "max_seq_len": 64,
                "batch_size": 8,
            },
            "objective": {"anchors_per_sequence": 64, "gamma": 4.0},
            "optim": {"lr": 3e-3, "max_steps": max_steps, "warmup_ratio": 0.1},
            "checkpoint": {"every_steps": 4, "keep_last": 2},
            "logging": {"every_steps": 1, "metrics_file": str(metrics)},
        }

    return build


@pytest.fixture
def metrics_reader() -> Callable[[Path], list[dict[str, Any]]]:
    def read(path: Path) -> list[dict[str, Any]]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    return read
