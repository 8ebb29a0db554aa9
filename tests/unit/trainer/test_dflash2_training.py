"""DFlash2 in the trainer: the chunked loss adds the selector's term exactly, the selector's
targets are the verifier's argmax, and a fresh DFlash2 trains from DFlash's loss."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.dflash2_selector import CandidateSelector
from dflash_trainer.train.anchors import build_slot_weights
from dflash_trainer.train.config import TrainConfig
from dflash_trainer.train.distributed import init_distributed
from dflash_trainer.train.loss import SelectorTerm, build_block_loss
from dflash_trainer.train.selector_loss import build_selector_loss
from dflash_trainer.train.trainer import Trainer
from dflash_trainer.train.verifier_targets import build_verifier_argmax
from torch.nn import functional

DFLASH2 = {"selector_rank": 8, "selector_top_k": 4, "conv_group_size": 16}


def test_the_chunked_loss_is_the_unary_ce_plus_the_weighted_selector_loss_on_full_logits() -> None:
    torch.manual_seed(0)
    vocab, hidden_size, block = 32, 8, 4
    selector = CandidateSelector(vocab, hidden_size, rank=4, top_k=5)
    hidden = torch.randn(2, 3 * block, hidden_size, requires_grad=True)
    lm_head = torch.randn(vocab, hidden_size)
    labels = torch.randint(0, vocab, (2, 3 * block))
    targets = torch.randint(0, vocab, (2, 3 * block))
    predecessors = torch.randint(0, vocab, (2, 3 * block))
    weights = build_slot_weights(block, 4.0).repeat(2, 3)
    weights[1, -block:] = 0.0  # a padded block
    term = SelectorTerm(selector, predecessors, targets, weight=0.5)
    parts = build_block_loss(
        hidden,
        lm_head,
        labels,
        weights,
        block_size=block,
        normaliser=7.0,
        chunk_tokens=3,
        selector_term=term,
    )
    # By hand: every scored row at once, full logits, no chunking.
    scored = weights.reshape(-1) > 0
    rows = hidden.reshape(-1, hidden_size)[scored]
    logits = rows @ lm_head.T
    unary = (
        functional.cross_entropy(logits, labels.reshape(-1)[scored], reduction="none")
        * weights.reshape(-1)[scored]
    ).sum() / 7.0
    selector_parts = build_selector_loss(
        selector,
        rows,
        logits,
        predecessors.reshape(-1)[scored],
        targets.reshape(-1)[scored],
        weights.reshape(-1)[scored],
        normaliser=7.0,
    )
    expected = unary + 0.5 * selector_parts.scaled_loss
    torch.testing.assert_close(parts.scaled_loss, expected)
    assert parts.selector is not None
    torch.testing.assert_close(parts.selector.weighted_ce, selector_parts.weighted_ce)
    assert int(parts.selector.recall) == int(selector_parts.recall)
    assert int(parts.selector.correct) == int(selector_parts.correct)
    # The gradients too: the checkpointed chunks recompute the same top-K in backward.
    grads = torch.autograd.grad(parts.scaled_loss, [hidden, selector.successor_codebook])
    expected_grads = torch.autograd.grad(expected, [hidden, selector.successor_codebook])
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


def test_the_selector_target_is_the_verifiers_argmax_one_position_before_each_slot() -> None:
    torch.manual_seed(1)
    final = torch.randn(2, 10, 4)
    lm_head = torch.randn(16, 4)
    anchors = torch.tensor([[2, 5], [0, 6]])
    labels = torch.randint(0, 16, (2, 6))
    weights = build_slot_weights(3, 4.0).repeat(2, 2)
    weights[1, 3:] = 0.0
    got = build_verifier_argmax(
        final, lm_head, anchors, labels, weights, block_size=3, chunk_tokens=2
    )
    for b in range(2):
        for n in range(2):
            for k in range(3):
                slot = n * 3 + k
                if weights[b, slot] == 0:
                    assert got[b, slot] == labels[b, slot]
                else:
                    position = int(anchors[b, n]) + k - 1
                    assert got[b, slot] == int((lm_head @ final[b, position]).argmax())


def run_one_step(cfg: dict[str, Any], copy_from: Trainer | None = None) -> Trainer:
    trainer = Trainer(TrainConfig.model_validate(cfg), init_distributed(5))
    if copy_from is not None:
        missing, unexpected = trainer.model.load_state_dict(
            copy_from.model.state_dict(), strict=False
        )
        assert not unexpected
        assert all("conv" in name or "candidate_selector" in name for name in missing)
    trainer.train_steps()
    return trainer


def test_a_fresh_dflash2_trains_from_exactly_dflashs_unary_loss(
    tmp_path: Path,
    quick_config: Callable[..., dict[str, Any]],
    metrics_reader: Callable[[Path], list[dict[str, Any]]],
) -> None:
    common: dict[str, Any] = {
        "optim": {"lr": 3e-3, "max_steps": 1, "warmup_ratio": 0.0},
        "checkpoint": {"resume": False, "every_steps": 1000},
    }
    dflash = quick_config(**common, run_root=str(tmp_path / "dflash"))
    dflash["logging"]["metrics_file"] = str(tmp_path / "dflash.jsonl")
    dflash2 = quick_config(**common, run_root=str(tmp_path / "dflash2"))
    dflash2["logging"]["metrics_file"] = str(tmp_path / "dflash2.jsonl")
    dflash2["drafter"]["dflash2"] = DFLASH2
    first = Trainer(TrainConfig.model_validate(dflash), init_distributed(5))
    second = run_one_step(dflash2, copy_from=first)
    assert isinstance(second.model, DFlash2Drafter)
    first.train_steps()
    [plain] = metrics_reader(tmp_path / "dflash.jsonl")
    [both] = metrics_reader(tmp_path / "dflash2.jsonl")
    assert both["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    assert both["accuracy"] == plain["accuracy"]
    assert "selectorLoss" not in plain
    assert both["selectorLoss"] > 0
    assert 0.0 <= both["selectorRecall"] <= 1.0
    assert 0.0 <= both["selectorAccuracy"] <= both["selectorRecall"]


@pytest.mark.slow
def test_dflash2_training_lowers_both_losses_and_raises_the_selectors_accuracy(
    tmp_path: Path,
    quick_config: Callable[..., dict[str, Any]],
    metrics_reader: Callable[[Path], list[dict[str, Any]]],
) -> None:
    steps = 30
    cfg = quick_config(
        drafter={"dflash2": DFLASH2},
        data={
            "self_distill": {"samples": 32, "prompt_tokens": 8, "answer_tokens": 20},
            "batch_size": 8,
        },
        optim={"lr": 3e-3, "max_steps": steps, "warmup_ratio": 0.0},
        checkpoint={"resume": False, "every_steps": 1000},
    )
    run_one_step(cfg)
    metrics = metrics_reader(tmp_path / "metrics.jsonl")
    assert len(metrics) == steps
    for key in ("loss", "selectorLoss"):
        first = np.mean([m[key] for m in metrics[:5]])
        last = np.mean([m[key] for m in metrics[-5:]])
        assert last < first - 0.2, f"{key} went from {first:.3f} to {last:.3f}"
    assert np.mean([m["selectorAccuracy"] for m in metrics[-5:]]) > np.mean(
        [m["selectorAccuracy"] for m in metrics[:5]]
    )
