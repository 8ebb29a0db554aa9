"""A drafter cannot learn what its mask hides: on unpredictable (random) tokens it stays at
chance, while the same loop with a leaky mask learns to copy the answer (the control)."""

from __future__ import annotations

import pytest
import torch
from dflash_trainer.model.block_attention import BlockLayout
from dflash_trainer.model.config import build_drafter_config
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts, load_target
from dflash_trainer.train.anchors import build_anchor_candidates, build_draft_batch
from dflash_trainer.train.loss import build_block_loss

VOCAB = 64
BLOCK = 4
STEPS = 90
SMALL_TARGET = {
    "model_type": "qwen3",
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
}


class SeesLaterContext(BlockLayout):
    """Bug: context up to the end of the block (`kv < anchor + B`) instead of `kv < anchor`."""

    def visible(self, b, q_idx, kv_idx, window):  # type: ignore[no-untyped-def]
        anchor = self.anchors[b, q_idx // self.block_size]
        leak = (kv_idx < self.context_len) & (kv_idx < anchor + self.block_size)
        return super().visible(b, q_idx, kv_idx, window) | leak


class SeesOtherBlocks(BlockLayout):
    """Bug: blocks see each other (anchors closer than B leak their tokens)."""

    def visible(self, b, q_idx, kv_idx, window):  # type: ignore[no-untyped-def]
        return super().visible(b, q_idx, kv_idx, window) | (kv_idx >= self.context_len)


def train_on_random_tokens(target: TargetParts, layout_kind: type[BlockLayout]) -> float:
    """Final-steps accuracy of a 1-layer drafter trained on uniformly random sequences."""
    cfg = build_drafter_config(
        target.config, num_layers=1, block_size=BLOCK, target_layer_ids=[1], mask_token_id=VOCAB - 1
    )
    taps = TargetTaps(target, cfg.target_layer_ids)
    torch.manual_seed(0)
    drafter = DFlashDrafter(cfg)
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    correct = count = 0
    for step in range(STEPS):
        ids = torch.randint(0, VOCAB - 1, (8, 24), generator=gen)
        mask = torch.ones_like(ids, dtype=torch.int8)
        anchors = [build_anchor_candidates(row) for row in mask]  # every position: dense anchors
        batch = build_draft_batch(
            ids,
            mask,
            torch.full((8,), 24),
            anchors,
            block_size=BLOCK,
            mask_token_id=VOCAB - 1,
            gamma=4.0,
        )
        layout = layout_kind(batch.layout.anchors, batch.layout.context_len, BLOCK)
        hidden = drafter(target.embed(batch.block_ids), taps.features(ids), layout, backend="dense")
        parts = build_block_loss(
            hidden,
            target.lm_head_weight,
            batch.labels,
            batch.weights,
            block_size=BLOCK,
            normaliser=batch.weight_sum,
            chunk_tokens=4096,
        )
        optimizer.zero_grad()
        parts.scaled_loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        if step >= STEPS - 20:
            correct += int(parts.correct[1:].sum())
            count += int(parts.count[1:].sum())
    taps.remove()
    return correct / count


@pytest.fixture(scope="module")
def small_target(tmp_path_factory: pytest.TempPathFactory) -> TargetParts:
    return load_target(
        path=None,
        config=SMALL_TARGET,
        seed=0,
        dtype="float32",
        device=torch.device("cpu"),
        cache_dir=tmp_path_factory.mktemp("cache"),
    )


def test_a_drafter_with_the_real_mask_stays_at_chance_on_random_tokens(
    small_target: TargetParts,
) -> None:
    accuracy = train_on_random_tokens(small_target, BlockLayout)
    assert accuracy < 0.08, f"accuracy {accuracy:.3f} on random tokens means the mask leaks"


@pytest.mark.parametrize("leaky", [SeesLaterContext, SeesOtherBlocks])
def test_the_same_loop_with_a_leaky_mask_learns_to_copy_the_answer(
    small_target: TargetParts, leaky: type[BlockLayout]
) -> None:
    accuracy = train_on_random_tokens(small_target, leaky)
    assert accuracy > 0.3, f"control failed: a leaky mask only reached {accuracy:.3f}"
