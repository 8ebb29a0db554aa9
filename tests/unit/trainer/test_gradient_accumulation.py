"""Gradient accumulation over 2 gloo processes (torchrun): the gradients are reduced once per
optimizer step, not once per micro-batch (FSDP2's reduce-scatter, DDP's all-reduce), and the
gradients the optimizer sees equal those of one process taking the whole global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

WORKER = Path(__file__).with_name("accumulation_worker.py")
CASES = ["fsdp2-1", "fsdp2-4", "ddp-1", "ddp-4"]
# The collective that carries the gradients: FSDP2 reduce-scatters, DDP all-reduces buckets.
GRADIENT_COLLECTIVE = {"fsdp2": "c10d::_reduce_scatter_base_", "ddp": "c10d::allreduce_"}


def run_worker(
    config: Path, out: Path, cases: list[str], processes: int
) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    launcher = (
        ["-m", "torch.distributed.run", "--nproc-per-node", str(processes), "--standalone"]
        if processes > 1
        else []
    )
    return subprocess.run(
        [sys.executable, *launcher, str(WORKER), str(config), str(out), *cases],
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from .conftest import write_tokenized_shards

    root = tmp_path_factory.mktemp("accumulation")
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(8):
        length = int(rng.integers(12, 25))
        rows.append((rng.integers(0, 500, length).tolist(), [0] * 4 + [1] * (length - 4)))
    tokenized = write_tokenized_shards(root / "tokenized", rows)
    cfg: dict[str, Any] = {
        "run_root": str(root / "run"),
        "target": {"config": json.loads(json.dumps(_tiny_qwen3()))},
        "drafter": {"num_layers": 2, "block_size": 4, "mask_token_id": 511},
        "data": {"tokenized_uri": str(tokenized), "shuffle": False, "max_seq_len": 32},
        "objective": {"anchors_per_sequence": 8, "gamma": 4.0},
        "optim": {"max_steps": 1, "warmup_ratio": 0.0},
        "checkpoint": {"every_steps": 1000, "resume": False},
    }
    config = root / "train.yaml"
    config.write_text(yaml.safe_dump(cfg))
    one = run_worker(config, root / "one", ["ddp-1"], processes=1)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_worker(config, root / "two", CASES, processes=2)
    assert two.returncode == 0, two.stderr[-3000:]
    return root


def _tiny_qwen3() -> dict[str, Any]:
    from .conftest import TINY_QWEN3

    return dict(TINY_QWEN3)


def collectives(results: Path, case: str) -> dict[str, int]:
    return dict(json.loads((results / "two" / f"{case}.json").read_text()))


def gradients(path: Path) -> dict[str, torch.Tensor]:
    return dict(torch.load(path, weights_only=True))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp2", "ddp"])
def test_gradients_are_reduced_once_per_optimizer_step_whatever_the_accumulation(
    results: Path, strategy: str
) -> None:
    name = GRADIENT_COLLECTIVE[strategy]
    single = collectives(results, f"{strategy}-1")
    accumulated = collectives(results, f"{strategy}-4")

    assert single.get(name, 0) > 0, single
    # 4 micro-batches, and still the collectives of one: no reduction per micro-batch.
    assert accumulated.get(name, 0) == single[name], (single, accumulated)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_accumulated_gradients_equal_those_of_one_process_with_the_whole_batch(
    results: Path, case: str
) -> None:
    reference = gradients(results / "one" / "ddp-1.pt")
    got = gradients(results / "two" / f"{case}.pt")

    assert got.keys() == reference.keys()
    assert reference, "no gradient recorded"
    for name, tensor in reference.items():
        assert tensor.abs().sum() > 0, name
        torch.testing.assert_close(got[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


def test_the_cases_cover_both_strategies_with_and_without_accumulation() -> None:
    strategies: Callable[[str], str] = lambda case: case.split("-")[0]  # noqa: E731
    assert {strategies(c) for c in CASES} == set(GRADIENT_COLLECTIVE)
    assert {c.split("-")[1] for c in CASES} == {"1", "4"}
